"""producer.id.expiration.ms (producer_state rule 5): expiry on leaders and followers, in
snapshots, across restarts and truncation; what an expired producer's next batch gets."""

from __future__ import annotations

from pathlib import Path

import pytest

from tidelog.errors import ConfigError, ErrorCode
from tidelog.server.config.broker_config import load_broker_config
from tidelog.server.config.topic_config import effective_topic_config
from tidelog.server.replica.manager import log_config_for
from tidelog.storage.log import Log, LogConfig
from tidelog.storage.producer_state import (
    DEFAULT_PRODUCER_ID_EXPIRATION_MS,
    BatchMetadata,
    ProducerStateEntry,
    decode_snapshot,
    snapshot_file_name,
)

from .test_producer_state import TS, open_log, pbatch, plain, snapshots, stamped, state

EXPIRY_MS = 60_000


def config(**kwargs: int) -> LogConfig:
    return LogConfig(producer_id_expiration_ms=EXPIRY_MS, **kwargs)


def test_expired_means_newest_batch_at_least_expiration_old() -> None:
    entry = ProducerStateEntry(
        3, 0, (BatchMetadata(0, 0, 0, 0, TS - 5), BatchMetadata(1, 1, 1, 1, TS))
    )
    assert entry.last_timestamp == TS
    assert not entry.is_expired(TS + EXPIRY_MS - 1, EXPIRY_MS)
    assert entry.is_expired(TS + EXPIRY_MS, EXPIRY_MS)  # Kafka: >=


def test_leader_expires_old_producers_and_accepts_their_next_batch_at_any_sequence(
    tmp_path: Path,
) -> None:
    log = open_log(tmp_path, config())
    log.append_as_leader(pbatch(1, 0, 0, 2, ts=TS), leader_epoch=0, now_ms=TS)  # 0-1
    log.append_as_leader(pbatch(2, 0, 0, ts=TS + 10_000), leader_epoch=0, now_ms=TS)  # 2
    log.apply_retention(TS + EXPIRY_MS - 1)
    assert set(state(log)) == {1, 2}
    log.apply_retention(TS + EXPIRY_MS)
    assert set(state(log)) == {2}
    assert not log.producer_state.was_evicted(1)
    # Kafka >= 2.5 (ProducerAppendInfo.checkSequence): no current epoch -> any sequence is
    # accepted; neither UNKNOWN_PRODUCER_ID (59) nor OUT_OF_ORDER_SEQUENCE_NUMBER (45).
    info = log.append_as_leader(pbatch(1, 0, 7, ts=TS + EXPIRY_MS), leader_epoch=0, now_ms=TS)
    assert info.error == ErrorCode.NONE
    assert not info.duplicate
    assert info.first_offset == 3
    assert state(log)[1] == ProducerStateEntry(1, 0, (BatchMetadata(7, 7, 3, 3, TS + EXPIRY_MS),))
    # Producer 2 is still known: its retry is recognised, a gap is refused.
    assert log.append_as_leader(pbatch(2, 0, 0), leader_epoch=0, now_ms=TS).duplicate
    gap = log.append_as_leader(pbatch(2, 0, 5), leader_epoch=0, now_ms=TS)
    assert gap.error == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    log.close()


def test_a_retry_older_than_the_expiration_is_no_longer_recognised(tmp_path: Path) -> None:
    """The price of expiry, as in Kafka: the state that would recognise the retry is gone."""
    log = open_log(tmp_path, config())
    log.append_as_leader(pbatch(1, 0, 0, ts=TS), leader_epoch=0, now_ms=TS)
    log.apply_retention(TS + EXPIRY_MS)
    again = log.append_as_leader(pbatch(1, 0, 0, ts=TS), leader_epoch=0, now_ms=TS)
    assert again.error == ErrorCode.NONE
    assert not again.duplicate
    assert log.log_end_offset == 2
    log.close()


def test_followers_expire_the_same_producers(tmp_path: Path) -> None:
    leader = open_log(tmp_path / "leader", config())
    leader.append_as_leader(pbatch(1, 0, 0, ts=TS), leader_epoch=0, now_ms=TS)
    leader.append_as_leader(pbatch(2, 0, 0, ts=TS + 30_000), leader_epoch=0, now_ms=TS)
    follower = open_log(tmp_path / "follower", config())
    follower.append_as_follower(
        stamped(pbatch(1, 0, 0, ts=TS), 0, 0) + stamped(pbatch(2, 0, 0, ts=TS + 30_000), 1, 0),
        now_ms=TS,
    )
    assert state(follower) == state(leader)
    for log in (leader, follower):
        log.apply_retention(TS + EXPIRY_MS)
    assert set(state(follower)) == {2}
    assert state(follower) == state(leader)
    leader.close()
    follower.close()


def test_snapshots_reflect_expiry_and_a_restart_does_not_bring_producers_back(
    tmp_path: Path,
) -> None:
    cfg = config(segment_bytes=300)
    log = open_log(tmp_path, cfg)
    for k in range(6):
        log.append_as_leader(pbatch(1, 0, k, ts=TS), leader_epoch=0, now_ms=TS)
    log.append_as_leader(pbatch(2, 0, 0, ts=TS + 30_000), leader_epoch=0, now_ms=TS)
    rolled = snapshots(log)
    assert rolled, "the roll snapshots still hold producer 1"
    _, held = decode_snapshot((log.directory / snapshot_file_name(rolled[-1])).read_bytes())
    assert 1 in held
    log.apply_retention(TS + EXPIRY_MS)
    leo = log.log_end_offset
    log.close()
    _, at_close = decode_snapshot((log.directory / snapshot_file_name(leo)).read_bytes())
    assert set(at_close) == {2}
    # A crash after expiry: the state is rebuilt from an older snapshot (still holding
    # producer 1) plus a replay; what had expired is expired again at open.
    (log.directory / snapshot_file_name(leo)).unlink()
    reopened = Log.open(tmp_path / "t-0", cfg, now_ms=TS + EXPIRY_MS, recovery_point=leo)
    assert set(state(reopened)) == {2}
    reopened.close()
    # With the clock before the expiry, both are back (the state is a function of the log
    # and of the time).
    (reopened.directory / snapshot_file_name(leo)).unlink()
    early = Log.open(tmp_path / "t-0", cfg, now_ms=TS, recovery_point=leo)
    assert set(state(early)) == {1, 2}
    early.close()


def test_truncation_rebuild_keeps_expired_producers_expired(tmp_path: Path) -> None:
    log = open_log(tmp_path, config(segment_bytes=300))
    for k in range(6):
        log.append_as_leader(pbatch(1, 0, k, ts=TS), leader_epoch=0, now_ms=TS)
    log.append_as_leader(plain(), leader_epoch=0, now_ms=TS)
    log.append_as_leader(pbatch(2, 0, 0, ts=TS + 30_000), leader_epoch=0, now_ms=TS)
    log.append_as_leader(pbatch(2, 0, 1, ts=TS + 30_000), leader_epoch=0, now_ms=TS)
    log.apply_retention(TS + EXPIRY_MS)
    assert set(state(log)) == {2}
    log.truncate_to(log.log_end_offset - 1)  # cuts producer 2's last batch: a rebuild
    assert state(log) == {
        2: ProducerStateEntry(2, 0, (BatchMetadata(0, 0, 7, 7, TS + 30_000),)),
    }
    log.close()


def test_broker_key_default_validation_and_log_config() -> None:
    default = load_broker_config({})
    assert default.get_int("producer.id.expiration.ms") == DEFAULT_PRODUCER_ID_EXPIRATION_MS
    assert DEFAULT_PRODUCER_ID_EXPIRATION_MS == 86_400_000  # Kafka's default
    custom = load_broker_config({"producer.id.expiration.ms": "5000"})
    topic_config = effective_topic_config(custom, {})
    assert log_config_for(topic_config, custom).producer_id_expiration_ms == 5000
    # Broker-level only, as in Kafka: no topic-level key appears.
    assert not any("producer" in key for key in topic_config)
    with pytest.raises(ConfigError) as info:
        load_broker_config({"producer.id.expiration.ms": "0"})
    assert str(info.value) == "producer.id.expiration.ms: invalid value '0': must be at least 1"
