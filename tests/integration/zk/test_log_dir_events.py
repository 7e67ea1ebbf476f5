"""Log dir failure and recovery events (KIP-112's ``/log_dir_event_notification``, plus
tidelog's recovery event) through a real ZooKeeper to the active controller."""

from __future__ import annotations

import uuid
from collections.abc import Awaitable

import pytest

from tidelog.controller.controller import AlterPartitionResult
from tidelog.controller.topic_admin import create_topic
from tidelog.errors import ErrorCode
from tidelog.model import BrokerId, TopicPartition
from tidelog.replication.partition import AlterPartitionProposal
from tidelog.zk import TopicCreateOutcome, ZkClient, znodes
from tidelog.zk.znodes import LogDirEvent, TopicAssignment

from .test_controller import Node, active, cluster, run, states, wait_for, wait_for_async

pytestmark = pytest.mark.integration

TOPIC = "disk"
#: p0 led by 3 with two successors, p1 followed by 3, p2 only on 3, p3 led by 1 without 3.
ASSIGNMENT = {0: [3, 1, 2], 1: [1, 2, 3], 2: [3], 3: [1, 2]}


async def _pending(zk: ZkClient) -> list[str]:
    return [name for name, _ in await zk.get_log_dir_events()]


def _expand(  # noqa: PLR0917
    node: Node, tp: TopicPartition, leader: int, le: int, pe: int, isr: tuple[int, ...]
) -> Awaitable[AlterPartitionResult]:
    return node.controller.alter_partition(
        AlterPartitionProposal(
            topic_partition=tp,
            leader_id=BrokerId(leader),
            leader_epoch=le,
            partition_epoch=pe,
            new_isr=tuple(BrokerId(b) for b in isr),
        )
    )


def test_log_dir_failure_moves_leaders_and_isrs_and_recovery_brings_the_broker_back(
    zk_connect: str,
) -> None:
    async def body() -> None:
        async with cluster(zk_connect, [1, 2, 3], auto_leader_rebalance_enable=False) as nodes:
            await wait_for(lambda: active(nodes) is not None)
            ctl = active(nodes)
            assert ctl is not None
            full = next(n for n in nodes if n.broker_id == 3)
            # Partitions of several replica counts: CreateTopics refuses them (as Kafka), so
            # the assignment is written to ZooKeeper directly, as any ZooKeeper writer may.
            replicas = {p: tuple(BrokerId(r) for r in rs) for p, rs in ASSIGNMENT.items()}
            outcome = await ctl.zk.create_topic(
                TOPIC, TopicAssignment(partitions=replicas, topic_id=uuid.uuid4()), {}
            )
            assert outcome is TopicCreateOutcome.CREATED
            tps = [TopicPartition(TOPIC, p) for p in range(4)]
            await wait_for_async(lambda: _has(ctl.zk, 4))
            before = await states(ctl.zk, TOPIC, 4)
            assert full.zk.broker_epoch is not None

            # Broker 3's log dir fills up: it posts Kafka's failure event.
            mark = len(ctl.sender.sent)
            name = await full.zk.post_log_dir_event(
                LogDirEvent(BrokerId(3), znodes.LOG_DIR_FAILURE_EVENT, full.zk.broker_epoch)
            )
            assert name.startswith("log_dir_event_")
            await wait_for_async(lambda: _leader_is(ctl.zk, tps[0], 1))
            await wait_for_async(lambda: _no_pending(ctl.zk))
            after = await states(ctl.zk, TOPIC, 4)
            # p0: led by 3 -> its first clean successor, new leader epoch; 3 out of the ISR.
            assert (after[tps[0]].leader, after[tps[0]].isr) == (1, (1, 2))
            assert after[tps[0]].leader_epoch == before[tps[0]].leader_epoch + 1
            # p1: 3 leaves the ISR, the leader and its epoch stay.
            assert (after[tps[1]].leader, after[tps[1]].isr) == (1, (1, 2))
            assert after[tps[1]].leader_epoch == before[tps[1]].leader_epoch
            # p2: no successor: broker 3 keeps it (readable), nothing offline, no new epoch.
            assert after[tps[2]] == before[tps[2]]
            # p3 does not involve broker 3.
            assert after[tps[3]] == before[tps[3]]
            # Every replica of a changed partition hears of it, broker 3 included.
            told = {s.to for s in ctl.sender.since(mark, "leader_and_isr")}
            assert told == {1, 2, 3}

            # While offline, broker 3 may not rejoin an ISR, nor be elected preferred leader.
            p1 = after[tps[1]]
            refused = await _expand(ctl, tps[1], 1, p1.leader_epoch, p1.partition_epoch, (1, 2, 3))
            assert refused.error is ErrorCode.INELIGIBLE_REPLICA
            elected = await ctl.controller.elect_preferred_leaders([tps[0]])
            assert elected == {tps[0]: ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE}

            # An event from an incarnation that is gone changes nothing.
            await ctl.zk.post_log_dir_event(
                LogDirEvent(BrokerId(2), znodes.LOG_DIR_FAILURE_EVENT, broker_epoch=1)
            )
            await wait_for_async(lambda: _no_pending(ctl.zk))
            assert await states(ctl.zk, TOPIC, 4) == after

            # Room again: broker 3 hears of all its partitions (it fetches again) and may
            # rejoin the ISR once its leader proposes it.
            mark = len(ctl.sender.sent)
            await full.zk.post_log_dir_event(
                LogDirEvent(BrokerId(3), znodes.LOG_DIR_RECOVERY_EVENT, full.zk.broker_epoch)
            )
            await wait_for(lambda: any(s.to == 3 for s in ctl.sender.since(mark, "leader_and_isr")))
            to_3 = [s for s in ctl.sender.since(mark, "leader_and_isr") if s.to == 3]
            assert {tp for s in to_3 for tp in s.partitions} == {tps[0], tps[1], tps[2]}
            await wait_for_async(lambda: _no_pending(ctl.zk))
            joined = await _expand(ctl, tps[1], 1, p1.leader_epoch, p1.partition_epoch, (1, 2, 3))
            assert joined.error is ErrorCode.NONE
            assert joined.state is not None
            assert joined.state.isr == (1, 2, 3)

    run(body)


def test_a_leader_kept_for_want_of_a_successor_hands_over_once_one_joins(
    zk_connect: str,
) -> None:

    async def body() -> None:
        async with cluster(zk_connect, [1, 2], auto_leader_rebalance_enable=False) as nodes:
            await wait_for(lambda: active(nodes) is not None)
            first = active(nodes)
            assert first is not None
            other = next(n for n in nodes if n is not first)
            tp = TopicPartition(TOPIC, 0)
            created = await create_topic(
                first.zk,
                TOPIC,
                num_partitions=1,
                replication_factor=2,
                assignment={0: [other.broker_id, first.broker_id]},
            )
            assert created.error is ErrorCode.NONE
            await wait_for_async(lambda: _has(first.zk, 1))
            # The controller's own broker loses a follower on the way: ISR = {other} alone.
            state = (await states(first.zk, TOPIC, 1))[tp]
            shrunk = await _expand(
                first,
                tp,
                other.broker_id,
                state.leader_epoch,
                state.partition_epoch,
                (other.broker_id,),
            )
            assert shrunk.error is ErrorCode.NONE
            assert other.zk.broker_epoch is not None
            await other.zk.post_log_dir_event(
                LogDirEvent(other.broker_id, znodes.LOG_DIR_FAILURE_EVENT, other.zk.broker_epoch)
            )
            await wait_for_async(lambda: _no_pending(first.zk))
            kept = (await states(first.zk, TOPIC, 1))[tp]
            assert kept.leader == other.broker_id  # no clean successor: it keeps leading
            # The follower catches up and the (offline) leader proposes it: the controller
            # accepts and then moves the leadership to it.
            joined = await _expand(
                first,
                tp,
                other.broker_id,
                kept.leader_epoch,
                kept.partition_epoch,
                (other.broker_id, first.broker_id),
            )
            assert joined.error is ErrorCode.NONE
            await wait_for_async(lambda: _leader_is(first.zk, tp, first.broker_id))
            moved = (await states(first.zk, TOPIC, 1))[tp]
            assert moved.isr == (first.broker_id,)
            assert moved.leader_epoch == kept.leader_epoch + 1

    run(body)


async def _has(zk: ZkClient, n: int) -> bool:
    return len(await states(zk, TOPIC, n)) == n


async def _leader_is(zk: ZkClient, tp: TopicPartition, leader: int) -> bool:
    return (await zk.get_partition_states([tp]))[tp].leader == leader


async def _no_pending(zk: ZkClient) -> bool:
    return not await _pending(zk)
