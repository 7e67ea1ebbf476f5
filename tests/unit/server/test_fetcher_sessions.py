"""The follower fetcher's KIP-227 session with its leader (``LeaderFetcher`` over
``tidelog.client.fetch_session``): full first, then only what changed; paused and removed
partitions forgotten, added ones listed; a session error starts over with a full fetch."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path
from typing import Any

from tidelog.client.client import FetchRequestPartition as ClientFetchPartition
from tidelog.client.client import FetchResult as ClientFetchResult
from tidelog.client.records import Record, build_batch
from tidelog.errors import ErrorCode
from tidelog.model import BrokerId, TopicPartition
from tidelog.server.cluster.fetcher import FULL_BUILD_S, FetchState, LeaderFetcher
from tidelog.server.cluster.node import ClusterNode
from tidelog.server.config.topic_config import effective_topic_config

from .nodes import cluster_node
from .session_leader import SessionLeader

A, B, C = TopicPartition("t", 0), TopicPartition("t", 1), TopicPartition("u", 0)


class Leader(SessionLeader):
    """Answers ``pending[tp]`` one-record batches at the asked offset, then nothing new;
    ``errors[tp]`` answers that partition with an error instead."""

    def __init__(self) -> None:
        super().__init__(self._answer)
        self.pending: dict[TopicPartition, int] = {}
        self.errors: dict[TopicPartition, ErrorCode] = {}

    def _answer(self, tp: TopicPartition, request: ClientFetchPartition) -> ClientFetchResult:
        error = self.errors.get(tp, ErrorCode.NONE)
        records = b""
        if error == ErrorCode.NONE and self.pending.get(tp, 0) > 0:
            self.pending[tp] -= 1
            records = build_batch(
                [Record(value=b"v")],
                base_offset=request.fetch_offset,
                base_timestamp_ms=1,
                partition_leader_epoch=0,
            )
        return ClientFetchResult(
            error_code=error,
            high_watermark=request.fetch_offset + (1 if records else 0),
            last_stable_offset=-1,
            log_start_offset=0,
            records=records,
        )


def follower(tmp_path: Path, *tps: TopicPartition) -> tuple[ClusterNode, LeaderFetcher, Leader]:
    node = cluster_node(tmp_path)  # broker 1, following broker 2
    leader = Leader()
    node.client = leader  # type: ignore[assignment]
    fetcher = LeaderFetcher(node, 2, "127.0.0.1", 1)
    for tp in tps:
        follow(node, fetcher, tp)
    return node, fetcher, leader


def follow(node: ClusterNode, fetcher: LeaderFetcher, tp: TopicPartition, epoch: int = 0) -> None:
    rm = node.replica_manager
    rm.make_follower(
        tp, uuid.uuid5(uuid.NAMESPACE_DNS, tp.topic), effective_topic_config(rm.config, {}),
        leader=BrokerId(2), leader_epoch=epoch, partition_epoch=epoch,
        replicas=[BrokerId(2), BrokerId(1)], isr=[BrokerId(2), BrokerId(1)],
    )  # fmt: skip
    fetcher.follow(tp, FetchState(epoch, truncating=False))


CONN: Any = None


def test_idle_rounds_send_and_get_nothing_after_the_full_fetch(tmp_path: Path) -> None:
    _node, fetcher, leader = follower(tmp_path, A, B)

    async def rounds() -> None:
        assert await fetcher._round(CONN)
        assert leader.steps[-1].full
        assert set(leader.steps[-1].to_send) == {A, B}
        # Idle: an empty incremental request, answered with nothing; a finished long poll
        # all the same (progress: no backoff).
        for epoch in (1, 2, 3):
            assert await fetcher._round(CONN)
            step = leader.steps[-1]
            assert (step.full, step.epoch, step.to_send, step.to_forget) == (False, epoch, {}, [])
        assert leader.asked[-1] == {A, B}

    asyncio.run(rounds())


def test_appended_records_move_the_fetch_offset_and_only_that_partition_is_listed(
    tmp_path: Path,
) -> None:
    node, fetcher, leader = follower(tmp_path, A, B)
    rm = node.replica_manager

    async def rounds() -> None:
        await fetcher._round(CONN)
        leader.pending[B] = 2
        assert await fetcher._round(CONN)  # B's first batch appended
        assert rm.partitions[B].log.log_end_offset == 1
        assert leader.steps[-1].to_send == {}
        await fetcher._round(CONN)
        step = leader.steps[-1]
        assert list(step.to_send) == [B]
        assert step.to_send[B].fetch_offset == 1
        assert rm.partitions[B].log.log_end_offset == 2
        assert rm.partitions[A].log.log_end_offset == 0

    asyncio.run(rounds())


def test_a_paused_partition_is_forgotten_and_added_back(tmp_path: Path) -> None:
    node, fetcher, leader = follower(tmp_path, A, B)

    async def rounds() -> None:
        await fetcher._round(CONN)
        leader.errors[B] = ErrorCode.NOT_LEADER_OR_FOLLOWER
        leader.pending[B] = 1
        assert not await fetcher._round(CONN)  # B answered with an error: paused
        assert fetcher.partitions[B].delayed_until > 0
        await fetcher._round(CONN)
        # Left out while paused: forgotten, so the leader stops answering its error.
        assert leader.steps[-1].to_forget == [B]
        assert leader.asked[-1] == {A}
        del leader.errors[B]
        fetcher.partitions[B].delayed_until = 0.0  # the pause is over
        await fetcher._round(CONN)
        assert list(leader.steps[-1].to_send) == [B]
        assert leader.asked[-1] == {A, B}
        assert node.replica_manager.partitions[B].log.log_end_offset == 1

    asyncio.run(rounds())


def test_removed_partitions_are_forgotten_and_added_ones_listed(tmp_path: Path) -> None:
    node, fetcher, leader = follower(tmp_path, A, B)

    async def rounds() -> None:
        await fetcher._round(CONN)
        fetcher.unfollow(A)  # StopReplica, or A's leader moved to another broker
        follow(node, fetcher, C)
        await fetcher._round(CONN)
        step = leader.steps[-1]
        assert (list(step.to_send), step.to_forget) == ([C], [A])
        assert leader.asked[-1] == {B, C}
        # A back with a new leader epoch: listed again, with that epoch.
        follow(node, fetcher, A, epoch=1)
        await fetcher._round(CONN)
        assert list(leader.steps[-1].to_send) == [A]
        assert leader.steps[-1].to_send[A].current_leader_epoch == 1

    asyncio.run(rounds())


def test_a_session_error_starts_over_at_once_with_a_full_fetch(tmp_path: Path) -> None:
    _node, fetcher, leader = follower(tmp_path, A, B)

    async def rounds() -> None:
        await fetcher._round(CONN)
        await fetcher._round(CONN)
        leader.fail_next = ErrorCode.FETCH_SESSION_ID_NOT_FOUND  # e.g. evicted
        assert await fetcher._round(CONN)  # progress: the full fetch goes without backoff
        await fetcher._round(CONN)
        step = leader.steps[-1]
        assert (step.full, step.session_id) == (True, 0)
        assert set(step.to_send) == {A, B}
        await fetcher._round(CONN)
        assert (leader.steps[-1].full, leader.steps[-1].session_id) == (False, 2)

    asyncio.run(rounds())


def test_a_lost_connection_makes_the_next_fetch_full(tmp_path: Path) -> None:
    _node, fetcher, leader = follower(tmp_path, A)

    async def rounds() -> None:
        await fetcher._round(CONN)
        await fetcher._round(CONN)
        assert not leader.steps[-1].full
        fetcher.session.handle_error()  # what _run does when the connection fails
        await fetcher._round(CONN)
        step = leader.steps[-1]
        assert (step.full, step.session_id, list(step.to_send)) == (True, 1, [A])

    asyncio.run(rounds())


def test_idle_rounds_build_no_request_again_until_the_full_build_is_due(tmp_path: Path) -> None:
    """Only the fetcher appends to its logs: after a full build a round rebuilds the
    requests of the partitions the last answer carried, and every FULL_BUILD_S all."""
    node, fetcher, leader = follower(tmp_path, A, B)

    async def rounds() -> None:
        clock = asyncio.get_running_loop().time
        await fetcher._round(CONN)  # a full build and a full fetch, answering A and B
        assert fetcher._fetch_requests(clock())[2] == {A, B}
        due, requests, changed = fetcher._fetch_requests(clock())
        assert (set(due), set(requests), changed) == ({A, B}, {A, B}, set())
        leader.pending[B] = 1
        await fetcher._round(CONN)  # B's record comes back
        assert node.replica_manager.partitions[B].log.log_end_offset == 1
        _due, requests, changed = fetcher._fetch_requests(clock())
        assert changed == {B}
        assert requests[B].fetch_offset == 1
        assert fetcher._fetch_requests(clock() + FULL_BUILD_S)[2] is None

    asyncio.run(rounds())


def test_a_partition_added_removed_or_paused_makes_the_next_build_a_full_one(
    tmp_path: Path,
) -> None:
    node, fetcher, _leader = follower(tmp_path, A)
    fetcher._fetch_requests(1.0)
    assert fetcher._fetch_requests(1.0)[2] == set()
    follow(node, fetcher, B)
    due, _requests, changed = fetcher._fetch_requests(1.0)
    assert (set(due), changed) == ({A, B}, None)
    fetcher.unfollow(A)
    due, _requests, changed = fetcher._fetch_requests(1.0)
    assert (set(due), changed) == ({B}, None)
    # B paused after an error answer: full builds while it waits, then it is back.
    state = fetcher.partitions[B]
    state.delayed_until = 1.5
    fetcher._stale.add(B)
    due, requests, changed = fetcher._fetch_requests(1.0)
    assert (set(due), set(requests), changed) == (set(), set(), {B})
    assert fetcher._fetch_requests(1.2)[2] is None
    due, _requests, changed = fetcher._fetch_requests(1.6)
    assert (set(due), changed) == ({B}, None)
    assert fetcher._fetch_requests(1.7)[2] == set()
