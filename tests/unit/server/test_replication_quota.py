"""KIP-73 replication throttles: the windowed rate, the throttled-replicas lists, the ISR
exemption, and the leader side of the replica manager's follower fetches."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import generate_latest

from tidelog.client.client import FetchRequestPartition as ClientFetchPartition
from tidelog.client.client import FetchResult as ClientFetchResult
from tidelog.client.records import Record, build_batch
from tidelog.errors import ErrorCode
from tidelog.model import BrokerId, TopicPartition
from tidelog.server.cluster.fetcher import FetchState, LeaderFetcher
from tidelog.server.config.broker_config import load_broker_config, validate_topic_configs
from tidelog.server.config.dynamic import check_alteration
from tidelog.server.config.throttles import (
    ALL_REPLICAS,
    parse_throttled_replicas,
    throttled_partitions,
)
from tidelog.server.config.topic_config import effective_topic_config
from tidelog.server.config.values import LONG_MAX
from tidelog.server.observability.metrics.broker_collector import broker_registry
from tidelog.server.replica.manager import ReplicaManager, log_config_for, now_ms
from tidelog.server.replica.quota import ReplicationQuota, ReplicationQuotas, WindowedRate
from tidelog.server.replica.reads import FetchResult, PartitionRead
from tidelog.storage.log_manager import LogManager

from .nodes import cluster_node
from .session_leader import SessionLeader

LEADER_LIST = "leader.replication.throttled.replicas"
FOLLOWER_LIST = "follower.replication.throttled.replicas"
FORMAT = (
    "must be the literal '*' or a list of replicas in the following format: "
    "[partitionId]:[brokerId],[partitionId]:[brokerId],..."
)


class Clock:
    def __init__(self) -> None:
        self.ms = 1_000_000

    def __call__(self) -> int:
        return self.ms


# --- the rate ------------------------------------------------------------------------------


def test_rate_divides_by_at_least_window_num_minus_one_windows() -> None:
    rate = WindowedRate(window_num=11, window_ms=1000)
    rate.record(10_000, 0)
    # Kafka's Rate.windowSize: a young stat still divides by (11 - 1) windows.
    assert rate.measure(0) == pytest.approx(1_000.0)
    assert rate.measure(5_000) == pytest.approx(1_000.0)


def test_rate_over_full_windows_and_expiry() -> None:
    rate = WindowedRate(window_num=3, window_ms=1000)
    for second in range(10):
        rate.record(3_000, second * 1000)
    # Three samples (t = 7, 8, 9 s) hold 9000 bytes, spanning 2.5 s at 9.5 s: 3600 B/s.
    assert rate.measure(9_500) == pytest.approx(9_000 / 2.5)
    # Quiet for longer than all windows: every sample expired.
    assert rate.measure(60_000) == 0.0


def test_rate_needs_a_window() -> None:
    with pytest.raises(ValueError, match="at least one window"):
        WindowedRate(window_num=0, window_ms=1000)


def test_quota_exceeded_only_above_the_bound() -> None:
    clock = Clock()
    quota = ReplicationQuota(rate=1000, window_num=2, window_size_s=1, clock=clock)
    assert not quota.is_exceeded()
    quota.record(1000)  # over >= 1 window: exactly the bound is acceptable (<=)
    assert quota.rate() == pytest.approx(1000.0)
    assert not quota.is_exceeded()
    quota.record(1)
    assert quota.is_exceeded()
    clock.ms += 2_500  # the samples expire: under the bound again
    assert not quota.is_exceeded()
    quota.update_rate(0)
    quota.record(1)
    assert quota.is_exceeded()
    assert quota.total_bytes == 1002


def test_default_rate_is_never_exceeded() -> None:
    clock = Clock()
    quota = ReplicationQuota(clock=clock)
    assert quota.bound == LONG_MAX
    quota.record(10**18)
    assert not quota.is_exceeded()


def test_throttled_rate_holds_over_time() -> None:
    """A follower that fetches whenever the quota allows moves about ``rate`` bytes a
    second in the long run (the burst allowance is ``window_num - 1`` windows)."""
    clock = Clock()
    quota = ReplicationQuota(rate=100_000, window_num=11, window_size_s=1, clock=clock)
    quota.mark_throttled("t", ALL_REPLICAS)
    tp = TopicPartition("t", 0)
    moved = 0
    for _ in range(60_000 // 10):  # 60 s in 10 ms steps, 10 kB a fetch
        if not quota.should_throttle(tp, in_sync=False):
            quota.record(10_000)
            moved += 10_000
        clock.ms += 10
    # 60 s at 100 kB/s, plus at most the burst of 10 windows and one fetch.
    assert 60 * 100_000 <= moved <= 70 * 100_000 + 10_000


# --- the lists ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "normalised"),
    [
        ("", ""),
        ("  ", ""),
        ("*", "*"),
        (" * ", "*"),
        ("0:1", "0:1"),
        ("0:1, 1:2 ,2:0", "0:1,1:2,2:0"),
        ("0:1,,1:2", "0:1,1:2"),  # Kafka's pattern allows empty items
    ],
)
def test_valid_lists(text: str, normalised: str) -> None:
    assert parse_throttled_replicas(LEADER_LIST, text) == normalised


@pytest.mark.parametrize("text", ["0", "0:a", "a:1", "0:1:2", "-1:0", "*,0:1", "**", "0;1"])
def test_bad_lists_name_the_key(text: str) -> None:
    with pytest.raises(ValueError, match=r"must be the literal '\*'"):
        parse_throttled_replicas(LEADER_LIST, text)
    parsed, problem = validate_topic_configs({FOLLOWER_LIST: text})
    assert parsed == {}
    assert (
        problem
        == f"Invalid value {text} for configuration {FOLLOWER_LIST}: {FOLLOWER_LIST} {FORMAT}"
    )


def test_topic_configs_accept_the_lists() -> None:
    parsed, problem = validate_topic_configs({LEADER_LIST: "*", FOLLOWER_LIST: "0:1, 1:1"})
    assert problem == ""
    assert parsed == {LEADER_LIST: "*", FOLLOWER_LIST: "0:1,1:1"}


def test_only_pairs_naming_this_broker() -> None:
    assert throttled_partitions("0:1,1:2,2:1", 1) == frozenset({0, 2})
    assert throttled_partitions("0:1,1:2,2:1", 3) == frozenset()
    assert throttled_partitions("*", 3) == ALL_REPLICAS
    assert throttled_partitions("", 3) == frozenset()


def test_apply_topic_config_marks_and_removes() -> None:
    quotas = ReplicationQuotas(1, clock=Clock())
    quotas.apply_topic_config("t", {LEADER_LIST: "0:1,1:2", FOLLOWER_LIST: "*"})
    assert quotas.leader.is_throttled(TopicPartition("t", 0))
    assert not quotas.leader.is_throttled(TopicPartition("t", 1))  # 1:2 is broker 2's
    assert quotas.follower.is_throttled(TopicPartition("t", 7))
    assert not quotas.follower.is_throttled(TopicPartition("u", 0))
    quotas.apply_topic_config("t", {LEADER_LIST: "", FOLLOWER_LIST: "1:2"})
    assert quotas.leader.throttled == {}
    assert quotas.follower.throttled == {}  # no pair names broker 1


def test_in_sync_replicas_are_never_throttled() -> None:
    clock = Clock()
    quota = ReplicationQuota(rate=0, clock=clock)
    quota.mark_throttled("t", frozenset({0}))
    quota.record(1)
    tp = TopicPartition("t", 0)
    assert quota.is_exceeded()
    assert quota.should_throttle(tp, in_sync=False)
    assert not quota.should_throttle(tp, in_sync=True)
    assert not quota.should_throttle(TopicPartition("t", 1), in_sync=False)  # not listed


# --- the broker configs ---------------------------------------------------------------------


def test_rates_are_dynamic_broker_configs() -> None:
    config = load_broker_config({"log.dirs": "/tmp/x"})
    assert config.get_int("leader.replication.throttled.rate") == LONG_MAX
    assert config.get_int("follower.replication.throttled.rate") == LONG_MAX
    assert config.get_int("replication.quota.window.num") == 11
    assert config.get_int("replication.quota.window.size.seconds") == 1
    assert check_alteration("1", {"leader.replication.throttled.rate": "2000000"}) == (
        ErrorCode.NONE,
        None,
    )
    error, message = check_alteration("1", {"follower.replication.throttled.rate": "-1"})
    assert error == ErrorCode.INVALID_CONFIG
    assert message is not None
    assert "follower.replication.throttled.rate" in message
    error, _ = check_alteration("1", {"replication.quota.window.num": "3"})
    assert error == ErrorCode.INVALID_REQUEST  # read-only, as in Kafka


# --- the leader side in the replica manager ----------------------------------------------------


TP = TopicPartition("t", 0)


def manager(tmp_path: Path, **overrides: str) -> ReplicaManager:
    config = load_broker_config({"log.dirs": str(tmp_path), **overrides})
    logs = LogManager(
        [tmp_path], log_config_for(effective_topic_config(config, {})), now_ms=now_ms()
    )
    return ReplicaManager(config, logs)


def follower_fetch(rm: ReplicaManager, replica: int, offset: int = 0) -> FetchResult:
    got: list[list[FetchResult]] = []
    rm.fetch(
        [PartitionRead(TP, offset, 1 << 20, current_leader_epoch=0)],
        max_bytes=1 << 20,
        min_bytes=0,
        max_wait_ms=0,
        respond=lambda _reads, results: got.append(results),
        replica_id=replica,
    )
    assert len(got) == 1
    return got[0][0]


def test_leader_leaves_throttled_data_out_for_followers_out_of_the_isr(tmp_path: Path) -> None:
    rm = manager(tmp_path, **{"leader.replication.throttled.rate": "1"})
    config = effective_topic_config(rm.config, {LEADER_LIST: "0:0"})
    ids = [BrokerId(0), BrokerId(1), BrokerId(2)]
    rm.make_leader(TP, uuid.uuid4(), config, leader_epoch=0, replicas=ids, isr=ids[:2])
    batch = build_batch([Record(value=b"x" * 1000)], base_timestamp_ms=1)
    assert rm.append_records({TP: batch}, acks=1)[TP][0].error == ErrorCode.NONE

    first = follower_fetch(rm, 2)  # quota not yet exceeded: data, and recorded
    assert first.error == ErrorCode.NONE
    assert first.records is not None
    assert rm.replication_quotas.leader.total_bytes == first.records.length
    held = follower_fetch(rm, 2)  # now over 1 B/s: no data, no error
    assert held.error == ErrorCode.NONE
    assert held.records is None
    in_isr = follower_fetch(rm, 1)  # broker 1 is in the ISR: never throttled
    assert in_isr.records is not None

    # The topic list changes (a config change notification): no longer throttled.
    rm.update_topic_config("t", effective_topic_config(rm.config, {LEADER_LIST: "0:1"}))
    assert follower_fetch(rm, 2).records is not None


def test_leader_rate_is_read_live(tmp_path: Path) -> None:
    rm = manager(tmp_path)
    config = effective_topic_config(rm.config, {LEADER_LIST: "*"})
    ids = [BrokerId(0), BrokerId(1)]
    rm.make_leader(TP, uuid.uuid4(), config, leader_epoch=0, replicas=ids, isr=ids[:1])
    batch = build_batch([Record(value=b"x" * 1000)], base_timestamp_ms=1)
    rm.append_records({TP: batch}, acks=1)
    assert follower_fetch(rm, 1).records is not None
    assert follower_fetch(rm, 1).records is not None  # unthrottled: Long.MAX
    # A dynamic config swaps the values (dynamic_config rule 2).
    values = {**rm.config.values, "leader.replication.throttled.rate": 1}
    object.__setattr__(rm.config, "values", values)
    assert follower_fetch(rm, 1).records is None
    # A consumer is never throttled.
    got: list[list[FetchResult]] = []
    rm.fetch(
        [PartitionRead(TP, 0, 1 << 20)],
        max_bytes=1 << 20,
        min_bytes=0,
        max_wait_ms=0,
        respond=lambda _reads, results: got.append(results),
    )
    assert got[0][0].error == ErrorCode.NONE


# --- the follower side in the cluster's fetcher --------------------------------------------------


class FakeLeader(SessionLeader):
    """The leader's side of a fetcher's Fetch session (``asked``: the partitions the
    session held), one record batch per partition at the asked offset, with a given high
    watermark."""

    def __init__(self) -> None:
        super().__init__(self._batch)
        self.high_watermark: dict[TopicPartition, int] = {}

    def _batch(self, tp: TopicPartition, request: ClientFetchPartition) -> ClientFetchResult:
        return ClientFetchResult(
            error_code=ErrorCode.NONE,
            high_watermark=self.high_watermark[tp],
            last_stable_offset=-1,
            log_start_offset=0,
            records=build_batch(
                [Record(value=b"y" * 500)],
                base_offset=request.fetch_offset,
                base_timestamp_ms=1,
                partition_leader_epoch=0,
            ),
        )


def test_follower_leaves_throttled_partitions_out_of_its_fetch(tmp_path: Path) -> None:
    node = cluster_node(tmp_path, follower_replication_throttled_rate="1")  # broker 1
    rm = node.replica_manager
    behind, caught_up, other = (
        TopicPartition("t", 0),
        TopicPartition("t", 1),
        TopicPartition("u", 0),
    )
    leader = FakeLeader()
    node.client = leader  # type: ignore[assignment]
    fetcher = LeaderFetcher(node, 2, "127.0.0.1", 1)
    for tp in (behind, caught_up, other):
        overrides = {FOLLOWER_LIST: "0:1,1:1,0:3"} if tp.topic == "t" else {}
        rm.make_follower(
            tp, uuid.uuid4(), effective_topic_config(rm.config, overrides),
            leader=BrokerId(2), leader_epoch=0, partition_epoch=0,
            replicas=[BrokerId(2), BrokerId(1)], isr=[BrokerId(2)],
        )  # fmt: skip
        fetcher.follow(tp, FetchState(0, truncating=False))
    leader.high_watermark = {behind: 100, caught_up: 1, other: 100}
    conn: Any = None

    async def rounds() -> None:
        # Under the rate: everything fetched; the throttled partitions' bytes recorded.
        assert await fetcher._round(conn)
        assert leader.asked[-1] == {behind, caught_up, other}
        quota = rm.replication_quotas.follower
        one_batch = len(build_batch([Record(value=b"y" * 500)], base_timestamp_ms=1))
        assert quota.total_bytes == 2 * one_batch  # t-0 and t-1; u-0 is not throttled
        assert quota.is_exceeded()
        # Over the rate: the partition behind the leader's HW is left out (forgotten by the
        # leader's session: it would go on fetching it as last asked); the caught-up one
        # (Kafka's isReplicaInSync) and the unlisted topic are fetched.
        await fetcher._round(conn)
        assert leader.asked[-1] == {caught_up, other}
        assert quota.total_bytes == 3 * one_batch  # t-1: throttled, recorded, not held
        # The list changes (a topic config change): fetched again.
        rm.update_topic_config("t", effective_topic_config(rm.config, {FOLLOWER_LIST: ""}))
        await fetcher._round(conn)
        assert leader.asked[-1] == {behind, caught_up, other}

    asyncio.run(rounds())


def test_byte_rates_are_exported(tmp_path: Path) -> None:
    clock = Clock()
    rm = manager(tmp_path)
    rm.replication_quotas = ReplicationQuotas(0, window_num=2, clock=clock)
    rm.replication_quotas.leader.record(3000)
    rm.replication_quotas.follower.record(500)
    text = generate_latest(broker_registry(rm, process=False)).decode()
    assert "kafka_server_leaderreplication_byte_rate 3000.0" in text
    assert "kafka_server_followerreplication_byte_rate 500.0" in text
