"""LogManager: loading every log dir, checkpoints, topic ids, offline logs, deletion."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from tidelog.errors import ErrorCode
from tidelog.model import TopicPartition
from tidelog.storage.errors import CorruptLogError, InconsistentTopicIdError
from tidelog.storage.log import LogConfig
from tidelog.storage.log_manager import LogManager

from .batches import build_batch, read_all

TP_A = TopicPartition("orders", 0)
TP_B = TopicPartition("orders", 1)
TP_C = TopicPartition("audit-log", 0)


def test_logs_spread_over_dirs_and_survive_restart(tmp_path: Path) -> None:
    dirs = [tmp_path / "d1", tmp_path / "d2"]
    config = LogConfig(segment_bytes=1000)
    manager = LogManager(dirs, config, now_ms=0)
    topic_id = uuid.uuid4()
    contents = {}
    for tp in (TP_A, TP_B, TP_C):
        log = manager.get_or_create_log(tp, config, topic_id if tp.topic == "orders" else None)
        for i in range(5):
            log.append_as_leader(build_batch(2, seed=i), leader_epoch=1, now_ms=0)
        contents[tp] = read_all(log)
    assert {log.directory.parent for log in manager.all_logs().values()} == set(dirs)
    manager.get_log(TP_A).delete_records_before(3)  # type: ignore[union-attr]
    manager.checkpoint({TP_A: 8, TP_B: 10, TP_C: 4})
    manager.close()
    for d in dirs:
        assert (d / "replication-offset-checkpoint").read_text().startswith("0\n")
    restarted = LogManager(dirs, config, now_ms=1)
    assert restarted.high_watermarks() == {TP_A: 8, TP_B: 10, TP_C: 4}
    assert restarted.topic_id(TP_A) == topic_id
    assert restarted.topic_id(TP_C) is None
    for tp in (TP_B, TP_C):
        reloaded = restarted.get_log(tp)
        assert reloaded is not None
        assert read_all(reloaded) == contents[tp]
        assert reloaded.recovery_point == reloaded.log_end_offset == 10
    restarted_a = restarted.get_log(TP_A)
    assert restarted_a is not None
    assert restarted_a.log_start_offset == 3
    restarted.close()


def test_recovery_point_and_log_start_checkpoint_format(tmp_path: Path) -> None:
    manager = LogManager([tmp_path], LogConfig(), now_ms=0)
    log = manager.get_or_create_log(TP_A, LogConfig())
    log.append_as_leader(build_batch(4), leader_epoch=0, now_ms=0)
    log.flush()
    manager.checkpoint({TP_A: 2})
    assert (tmp_path / "recovery-point-offset-checkpoint").read_text() == "0\n1\norders 0 4\n"
    assert (tmp_path / "log-start-offset-checkpoint").read_text() == "0\n1\norders 0 0\n"
    assert (tmp_path / "replication-offset-checkpoint").read_text() == "0\n1\norders 0 2\n"
    manager.close()


def test_unchanged_checkpoints_are_not_rewritten(tmp_path: Path) -> None:
    manager = LogManager([tmp_path], LogConfig(), now_ms=0)
    log = manager.get_or_create_log(TP_A, LogConfig())
    log.append_as_leader(build_batch(4), leader_epoch=0, now_ms=0)
    manager.checkpoint({TP_A: 2})
    files = ("replication-offset-checkpoint", "recovery-point-offset-checkpoint")
    before = {name: (tmp_path / name).stat().st_ino for name in files}
    manager.checkpoint({TP_A: 2})  # nothing changed: the files stay as they are
    assert {name: (tmp_path / name).stat().st_ino for name in files} == before
    manager.checkpoint({TP_A: 4})  # a new HW: that file is replaced (temp + rename)
    assert (tmp_path / files[0]).stat().st_ino != before[files[0]]
    assert (tmp_path / files[0]).read_text() == "0\n1\norders 0 4\n"
    assert (tmp_path / files[1]).stat().st_ino == before[files[1]]
    manager.close()


def _checkpointed_recovery_point(log_dir: Path) -> str:
    return (log_dir / "recovery-point-offset-checkpoint").read_text()


def test_truncation_below_recovery_point_rewrites_checkpoint_before_new_appends(
    tmp_path: Path,
) -> None:
    """Log rule 8: after truncate_to below the recovery point, the lowered value is on disk
    at once, so a crash after re-appending makes recovery validate the re-appended range
    (here: a corrupt batch there is truncated instead of trusted and served)."""
    manager = LogManager([tmp_path], LogConfig(), now_ms=0)
    log = manager.get_or_create_log(TP_A, LogConfig())
    for seed in range(3):
        log.append_as_leader(build_batch(2, seed=seed), leader_epoch=0, now_ms=0)
    log.flush()
    manager.checkpoint({})
    assert _checkpointed_recovery_point(tmp_path) == "0\n1\norders 0 6\n"
    log.truncate_to(2)
    assert log.recovery_point == 2
    assert _checkpointed_recovery_point(tmp_path) == "0\n1\norders 0 2\n"
    kept = read_all(log)
    log.append_as_leader(build_batch(2, seed=7), leader_epoch=1, now_ms=0)
    tail = build_batch(2, seed=8)
    log.append_as_leader(tail, leader_epoch=1, now_ms=0)
    assert log.log_end_offset == 6
    good_prefix = read_all(log)[: -len(tail)]
    log.close_without_flush()  # crash: no flush, no checkpoint
    segment = tmp_path / "orders-0" / "00000000000000000000.log"
    raw = bytearray(segment.read_bytes())
    raw[-5] ^= 0xFF  # the re-appended tail batch never reached the disk intact
    segment.write_bytes(raw)
    restarted = LogManager([tmp_path], LogConfig(), now_ms=1)
    recovered = restarted.get_log(TP_A)
    assert recovered is not None
    assert recovered.log_end_offset == 4  # the corrupt batch was found and cut, not served
    assert read_all(recovered) == good_prefix
    assert good_prefix.startswith(kept)
    restarted.close()


def test_truncate_fully_below_recovery_point_rewrites_checkpoint(tmp_path: Path) -> None:
    manager = LogManager([tmp_path], LogConfig(), now_ms=0)
    log = manager.get_or_create_log(TP_A, LogConfig())
    log.append_as_leader(build_batch(5), leader_epoch=0, now_ms=0)
    log.flush()
    manager.checkpoint({})
    assert _checkpointed_recovery_point(tmp_path) == "0\n1\norders 0 5\n"
    log.truncate_fully_and_start_at(3)
    assert _checkpointed_recovery_point(tmp_path) == "0\n1\norders 0 3\n"
    log.truncate_fully_and_start_at(9)  # above: nothing below 9 is left; 3 stays safe
    assert log.recovery_point == 9
    assert _checkpointed_recovery_point(tmp_path) == "0\n1\norders 0 3\n"
    manager.close()
    assert _checkpointed_recovery_point(tmp_path) == "0\n1\norders 0 9\n"


def test_log_shorter_than_its_checkpoint_lowers_it_at_load(tmp_path: Path) -> None:
    manager = LogManager([tmp_path], LogConfig(), now_ms=0)
    log = manager.get_or_create_log(TP_A, LogConfig())
    log.append_as_leader(build_batch(3) + build_batch(3), leader_epoch=0, now_ms=0)
    manager.close()
    assert _checkpointed_recovery_point(tmp_path) == "0\n1\norders 0 6\n"
    segment = tmp_path / "orders-0" / "00000000000000000000.log"
    raw = segment.read_bytes()
    segment.write_bytes(raw[: len(raw) // 2])  # the second batch lost while the broker was down
    (tmp_path / "orders-0" / "00000000000000000000.index").unlink()
    (tmp_path / "orders-0" / "00000000000000000000.timeindex").unlink()
    restarted = LogManager([tmp_path], LogConfig(), now_ms=1)
    reloaded = restarted.get_log(TP_A)
    assert reloaded is not None
    assert reloaded.log_end_offset == reloaded.recovery_point == 3
    # Rewritten at load, before anything can be appended at offsets 3..5 again.
    assert _checkpointed_recovery_point(tmp_path) == "0\n1\norders 0 3\n"
    restarted.close()


def test_corrupt_flushed_log_is_offline_and_never_served(tmp_path: Path) -> None:
    manager = LogManager([tmp_path], LogConfig(), now_ms=0)
    bad = manager.get_or_create_log(TP_A, LogConfig())
    good = manager.get_or_create_log(TP_B, LogConfig())
    for log in (bad, good):
        log.append_as_leader(build_batch(3) + build_batch(3), leader_epoch=0, now_ms=0)
    manager.close()
    segment = tmp_path / "orders-0" / "00000000000000000000.log"
    raw = bytearray(segment.read_bytes())
    raw[16] = 9  # magic of the first (flushed, below the recovery point) batch
    segment.write_bytes(raw)
    (tmp_path / "orders-0" / "00000000000000000000.index").unlink()
    restarted = LogManager([tmp_path], LogConfig(), now_ms=0)
    assert restarted.get_log(TP_A) is None
    assert TP_A in restarted.offline_logs
    assert restarted.get_log(TP_B) is not None
    with pytest.raises(CorruptLogError) as info:
        restarted.get_or_create_log(TP_A, LogConfig())
    assert info.value.code is ErrorCode.KAFKA_STORAGE_ERROR
    assert str(segment) in str(info.value)
    assert "offset 0" in str(info.value)
    restarted.close()
    assert segment.read_bytes() == raw  # left for the operator, not truncated
    again = LogManager([tmp_path], LogConfig(), now_ms=0)  # and still refused next time
    assert again.get_log(TP_A) is None
    assert TP_A in again.offline_logs
    again.close()


def test_topic_id_mismatch_and_config_update(tmp_path: Path) -> None:
    manager = LogManager([tmp_path], LogConfig(), now_ms=0)
    first = uuid.uuid4()
    log = manager.get_or_create_log(TP_A, LogConfig(), first)
    assert (tmp_path / "orders-0" / "partition.metadata").read_text().startswith("version: 0\n")
    with pytest.raises(InconsistentTopicIdError) as info:
        manager.get_or_create_log(TP_A, LogConfig(), uuid.uuid4())
    assert info.value.code is ErrorCode.INCONSISTENT_TOPIC_ID
    same = manager.get_or_create_log(TP_A, LogConfig(retention_ms=5), first)
    assert same is log
    assert log.config.retention_ms == 5
    manager.close()


def test_delete_log_removes_directory_and_checkpoint_entries(tmp_path: Path) -> None:
    manager = LogManager([tmp_path], LogConfig(), now_ms=0)
    manager.get_or_create_log(TP_A, LogConfig())
    manager.get_or_create_log(TP_B, LogConfig())
    manager.checkpoint({TP_A: 0, TP_B: 0})
    manager.delete_log(TP_A)
    assert manager.get_log(TP_A) is None
    assert not (tmp_path / "orders-0").exists()
    manager.close()
    assert "orders 0" not in (tmp_path / "replication-offset-checkpoint").read_text()
    reloaded = LogManager([tmp_path], LogConfig(), now_ms=0)
    assert reloaded.all_logs().keys() == {TP_B}
    reloaded.close()
