"""A follower's session fetch with quiet partitions (``delayed_ops``, KIP-227): on a real
replica manager, real storage and the real replication core. A quiet partition is not read
but its fetch times are kept, and an append to it wakes the parked fetch and is answered."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Sequence
from pathlib import Path

from tests.unit.server.test_replica_manager import batch, manager
from tidelog.errors import ErrorCode
from tidelog.model import BrokerId, TopicPartition
from tidelog.server.config.topic_config import effective_topic_config
from tidelog.server.replica.manager import ReplicaManager, now_ms
from tidelog.server.replica.reads import FetchResult, PartitionRead

A = TopicPartition("t", 0)
B = TopicPartition("t", 1)
IDS = [BrokerId(0), BrokerId(1), BrokerId(2)]


def fetch_now(rm: ReplicaManager, replica: int, reads: list[PartitionRead]) -> None:
    got: list[list[FetchResult]] = []
    rm.fetch(
        reads,
        max_bytes=1 << 20,
        min_bytes=0,
        max_wait_ms=0,
        respond=lambda _reads, results: got.append(results),
        replica_id=replica,
    )
    assert len(got) == 1


def led_and_replicated(tmp_path: Path) -> ReplicaManager:
    """Broker 0 leads A and B; each holds one record that both followers have fetched past
    (the HW is at the log end, 1)."""
    rm = manager(tmp_path)
    config = effective_topic_config(rm.config, {"min.insync.replicas": 2})
    for tp in (A, B):
        rm.make_leader(tp, uuid.uuid4(), config, leader_epoch=3, replicas=IDS, isr=IDS)
        rm.append_records({tp: batch(b"a")}, acks=1)
    for replica in (1, 2):
        fetch_now(rm, replica, [PartitionRead(A, 1, 1 << 20, 3), PartitionRead(B, 1, 1 << 20, 3)])
    assert [rm.partitions[tp].partition.high_watermark for tp in (A, B)] == [1, 1]
    return rm


def test_a_caught_up_isr_follower_at_the_log_end_is_quiet_and_its_fetch_times_move(
    tmp_path: Path,
) -> None:
    rm = led_and_replicated(tmp_path)
    partition = rm.partitions[A].partition
    state = partition.replica_states[BrokerId(1)]
    state.last_caught_up_time_ms = state.last_fetch_time_ms = 5
    now = now_ms()
    assert rm.quiet_for_follower(BrokerId(1), A, 1, 3, 1, 0, now)
    assert (state.last_caught_up_time_ms, state.last_fetch_time_ms) == (now, now)
    assert state.log_end_offset == 1
    rm.shutdown()
    rm.log_manager.close()


def test_anything_to_read_or_learn_is_not_quiet(tmp_path: Path) -> None:
    rm = led_and_replicated(tmp_path)
    now = now_ms()

    def quiet(
        offset: int, *, hw: int = 1, log_start: int = 0, epoch: int = 3, tp: TopicPartition = A
    ) -> bool:
        return rm.quiet_for_follower(BrokerId(1), tp, offset, epoch, hw, log_start, now)

    assert quiet(1)
    assert not quiet(0)  # behind the log end
    assert not quiet(1, hw=0)  # last told another HW
    assert not quiet(1, log_start=-1)  # another log start
    assert not quiet(1, epoch=2)  # a fenced epoch: answer the error
    assert not quiet(1, tp=TopicPartition("t", 9))  # not hosted
    assert not rm.quiet_for_follower(BrokerId(7), A, 1, 3, 1, 0, now)  # not a replica
    rm.append_records({A: batch(b"b")}, acks=1)  # the HW (1) is below the log end (2)
    assert not quiet(2)
    rm.shutdown()
    rm.log_manager.close()


def test_an_append_to_a_quiet_partition_wakes_the_parked_fetch_and_is_answered(
    tmp_path: Path,
) -> None:
    async def scenario() -> None:
        rm = led_and_replicated(tmp_path)
        answered: list[tuple[list[TopicPartition], list[FetchResult]]] = []

        def respond(reads: Sequence[PartitionRead], results: list[FetchResult]) -> None:
            answered.append(([r.tp for r in reads], results))

        rm.fetch(
            [PartitionRead(A, 1, 1 << 20, 3)],
            max_bytes=1 << 20,
            min_bytes=1,
            max_wait_ms=30_000,
            respond=respond,
            replica_id=1,
            quiet={B: PartitionRead(B, 1, 1 << 20, 3)},
        )
        assert answered == []  # nothing anywhere: parked
        rm.append_records({B: batch(b"b")}, acks=1)
        assert len(answered) == 1
        tps, results = answered[0]
        assert tps == [A, B]
        assert [r.error for r in results] == [ErrorCode.NONE, ErrorCode.NONE]
        assert results[0].records is None
        assert results[1].records is not None
        assert results[1].records.length > 0
        rm.shutdown()
        rm.log_manager.close()

    asyncio.run(scenario())


def test_a_quiet_partition_that_leaves_the_broker_is_answered_with_its_error(
    tmp_path: Path,
) -> None:
    async def scenario() -> None:
        rm = led_and_replicated(tmp_path)
        answered: list[list[FetchResult]] = []
        rm.fetch(
            [PartitionRead(A, 1, 1 << 20, 3)],
            max_bytes=1 << 20,
            min_bytes=1,
            max_wait_ms=30_000,
            respond=lambda _reads, results: answered.append(results),
            replica_id=1,
            quiet={B: PartitionRead(B, 1, 1 << 20, 3)},
        )
        rm.delete_partitions([B])
        rm.fetch_purgatory.check_and_complete_all([B])
        assert len(answered) == 1
        assert [r.error for r in answered[0]] == [
            ErrorCode.NONE,
            ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        ]
        rm.shutdown()
        rm.log_manager.close()

    asyncio.run(scenario())
