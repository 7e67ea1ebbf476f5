"""A follower's session fetch with quiet partitions (``delayed_ops``, KIP-227): on a real
replica manager, real storage and the real replication core. A quiet partition is parked in
the follower's session, not read; an append to it wakes the parked fetch and is answered,
and the follower's fetch times are kept."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path

from tests.unit.server.test_replica_manager import batch, manager
from tidelog.errors import ErrorCode
from tidelog.model import BrokerId, TopicPartition
from tidelog.server.apis.data_apis import DataApis
from tidelog.server.apis.fetch_parts import FetchPlan
from tidelog.server.config.topic_config import effective_topic_config
from tidelog.server.replica.fetch_session import (
    FetchContext,
    FetchSession,
    PartitionNews,
    SessionPartition,
)
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


def park_b(rm: ReplicaManager, now: int) -> FetchSession:
    """Follower 1's session over A and B, B parked as quiet at ``now`` (``fetch_session``
    rule 7, as ``DataApis._fetch_plan`` parks it)."""
    sessions = rm.fetch_sessions
    parts = [SessionPartition("t", None, tp.partition, 1, 1 << 20, 3, 1, 1, 0) for tp in (A, B)]
    context = sessions.new_context(0, 0, False, True, parts, [], now)
    session_id, _chosen = sessions.respond(
        context, [PartitionNews(0, 0, 1, 1, 0) for _ in parts], now
    )
    session = sessions.get(session_id)
    assert session is not None
    parts[1].tp = B
    assert rm.quiet_for_follower(BrokerId(1), B, 1, 3, 1, 0, now)
    sessions.park(session, parts[1], replica_id=1, now_ms=now)
    return session


def fetch_parked(
    rm: ReplicaManager,
    session: FetchSession,
    respond: Callable[[Sequence[PartitionRead], list[FetchResult]], None],
) -> None:
    """Follower 1's fetch of A, parked, woken through ``session`` as the Fetch handler
    wires it (``DataApis._wake_source``)."""
    context = FetchContext(partitions=list(session.partitions.values()), session=session)
    rm.fetch(
        [PartitionRead(A, 1, 1 << 20, 3)],
        max_bytes=1 << 20,
        min_bytes=1,
        max_wait_ms=30_000,
        respond=respond,
        replica_id=1,
        woken=DataApis._wake_source(context, FetchPlan(1, read=[0])),
    )


def test_an_append_to_a_parked_partition_wakes_the_parked_fetch_and_is_answered(
    tmp_path: Path,
) -> None:
    async def scenario() -> None:
        rm = led_and_replicated(tmp_path)
        session = park_b(rm, now_ms())
        answered: list[tuple[list[TopicPartition], list[FetchResult]]] = []

        def respond(reads: Sequence[PartitionRead], results: list[FetchResult]) -> None:
            answered.append(([r.tp for r in reads], results))

        fetch_parked(rm, session, respond)
        assert answered == []  # nothing anywhere: parked
        rm.append_records({B: batch(b"b")}, acks=1)
        assert len(answered) == 1
        tps, results = answered[0]
        assert tps == [A, B]
        assert [r.error for r in results] == [ErrorCode.NONE, ErrorCode.NONE]
        assert results[0].records is None
        assert results[1].records is not None
        assert results[1].records.length > 0
        assert list(session.partitions) == [("t", 0), ("t", 1)]  # B is read again
        rm.shutdown()
        rm.log_manager.close()

    asyncio.run(scenario())


def test_a_parked_partition_that_leaves_the_broker_is_answered_with_its_error(
    tmp_path: Path,
) -> None:
    async def scenario() -> None:
        rm = led_and_replicated(tmp_path)
        session = park_b(rm, now_ms())
        answered: list[list[FetchResult]] = []
        fetch_parked(rm, session, lambda _reads, results: answered.append(results))
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


def test_a_woken_partition_keeps_the_follower_caught_up_as_of_its_last_session_fetch(
    tmp_path: Path,
) -> None:
    """B parked; the follower's session fetched since (without listing B), then an append
    to B: the follower counts as caught up at that last fetch, not at the parking (else,
    parked for longer than replica.lag.time.max.ms, the leader's next shrink pass would
    drop a live follower from the ISR)."""
    rm = led_and_replicated(tmp_path)
    state = rm.partitions[B].partition.replica_states[BrokerId(1)]
    state.last_caught_up_time_ms = state.last_fetch_time_ms = 5
    parked_at = now_ms() - 5_000  # within PARKED_RECHECK_MS of the session's last fetch
    session = park_b(rm, parked_at)
    assert state.last_caught_up_time_ms == parked_at
    last_fetch = now_ms() - 1_000
    rm.fetch_sessions.new_context(session.id, session.epoch, False, True, [], [], last_fetch)
    rm.append_records({B: batch(b"b")}, acks=1)
    assert state.last_caught_up_time_ms == last_fetch
    assert list(session.parked) == []
    partition = rm.partitions[B].partition
    assert BrokerId(1) not in partition.out_of_sync_replicas(now_ms())
    rm.log_manager.close()
