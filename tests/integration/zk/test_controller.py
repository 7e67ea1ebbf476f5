"""The controller against real ZooKeeper, with brokers stood in for by their ZooKeeper
sessions and a sender that records what the controller would send them."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, TypeVar

import pytest

from tidelog.controller.controller import AlterPartitionResult, Controller
from tidelog.controller.messages import PartitionInfo
from tidelog.controller.topic_admin import create_partitions, create_topic
from tidelog.errors import ErrorCode
from tidelog.model import BrokerId, ControllerEpoch, TopicPartition
from tidelog.replication.partition import AlterPartitionProposal
from tidelog.zk import LiveBroker, ZkClient
from tidelog.zk.znodes import BrokerRegistration, EndPoint, PartitionState

from .conftest import TEST_SESSION_TIMEOUT_MS

pytestmark = pytest.mark.integration

T = TypeVar("T")


@dataclass(frozen=True)
class Sent:
    kind: str  # "leader_and_isr" | "update_metadata" | "stop_replica"
    to: BrokerId
    controller_epoch: int
    partitions: tuple[TopicPartition, ...]
    infos: tuple[PartitionInfo, ...] = ()
    delete: bool = False


@dataclass
class RecordingSender:
    sent: list[Sent] = field(default_factory=list)

    def leader_and_isr(
        self,
        broker: LiveBroker,
        controller_epoch: ControllerEpoch,
        partitions: Sequence[PartitionInfo],
        live_leaders: Sequence[LiveBroker],
    ) -> None:
        assert {i.state.leader for i in partitions} >= {b.broker_id for b in live_leaders}
        self.sent.append(
            Sent(
                "leader_and_isr",
                broker.broker_id,
                controller_epoch,
                tuple(i.topic_partition for i in partitions),
                tuple(partitions),
            )
        )

    def update_metadata(
        self,
        broker: LiveBroker,
        controller_epoch: ControllerEpoch,
        partitions: Sequence[PartitionInfo],
        live_brokers: Sequence[LiveBroker],
    ) -> None:
        self.sent.append(
            Sent(
                "update_metadata",
                broker.broker_id,
                controller_epoch,
                tuple(i.topic_partition for i in partitions),
                tuple(partitions),
            )
        )

    def stop_replica(
        self,
        broker: LiveBroker,
        controller_epoch: ControllerEpoch,
        partitions: Sequence[TopicPartition],
        *,
        delete: bool,
    ) -> None:
        self.sent.append(
            Sent(
                "stop_replica",
                broker.broker_id,
                controller_epoch,
                tuple(partitions),
                delete=delete,
            )
        )

    def since(self, mark: int, kind: str) -> list[Sent]:
        return [s for s in self.sent[mark:] if s.kind == kind]


@dataclass
class Node:
    """A broker as the controller sees it: a ZooKeeper session, a registration, a controller."""

    broker_id: BrokerId
    zk: ZkClient
    controller: Controller
    sender: RecordingSender

    async def kill(self) -> None:
        """The broker dies: its session ends (ephemeral nodes go at once)."""
        await self.controller.stop_without_resigning()
        await self.zk.close()


async def start_node(zk_connect: str, broker_id: int, **options: Any) -> Node:
    zk = await ZkClient.connect(zk_connect, session_timeout_ms=TEST_SESSION_TIMEOUT_MS)
    await zk.register_broker(
        BrokerRegistration(
            broker_id=BrokerId(broker_id),
            endpoints=(EndPoint("PLAINTEXT", "127.0.0.1", 9000 + broker_id),),
        )
    )
    sender = RecordingSender()
    controller = Controller(zk, BrokerId(broker_id), sender, **options)
    await controller.start()
    return Node(BrokerId(broker_id), zk, controller, sender)


@asynccontextmanager
async def cluster(zk_connect: str, ids: Sequence[int], **options: Any) -> AsyncIterator[list[Node]]:
    nodes = [await start_node(zk_connect, i, **options) for i in ids]
    try:
        yield nodes
    finally:
        for node in nodes:
            if node.zk.connected:
                await node.controller.stop()
                await node.zk.close()


async def wait_for(predicate: Callable[[], bool], timeout_s: float = 20.0) -> None:
    async with asyncio.timeout(timeout_s):
        while not predicate():
            await asyncio.sleep(0.02)


async def wait_for_async(predicate: Callable[[], Awaitable[bool]], timeout_s: float = 20.0) -> None:
    async with asyncio.timeout(timeout_s):
        while not await predicate():
            await asyncio.sleep(0.05)


def active(nodes: Sequence[Node]) -> Node | None:
    winners = [n for n in nodes if n.controller.is_active]
    assert len(winners) <= 1
    return winners[0] if winners else None


async def states(zk: ZkClient, topic: str, n: int) -> dict[TopicPartition, PartitionState]:
    return await zk.get_partition_states([TopicPartition(topic, p) for p in range(n)])


def run(body: Callable[[], Awaitable[T]]) -> T:
    async def main() -> T:
        return await body()

    return asyncio.run(main())


async def _add_to_isr(
    ctl: Node, tp: TopicPartition, state: PartitionState, replica: BrokerId
) -> AlterPartitionResult:
    """The AlterPartition ``tp``'s leader sends, from its current incarnation, to add
    ``replica`` to the ISR of ``state``."""
    live = await ctl.zk.get_live_brokers()
    return await ctl.controller.alter_partition(
        AlterPartitionProposal(
            topic_partition=tp,
            leader_id=state.leader,
            leader_epoch=state.leader_epoch,
            partition_epoch=state.partition_epoch,
            new_isr=(*state.isr, replica),
        ),
        broker_epoch=live[state.leader].broker_epoch,
    )


def test_topic_creation_and_broker_failure_batch(zk_connect: str) -> None:
    async def body() -> None:
        async with cluster(zk_connect, [1, 2, 3]) as nodes:
            await wait_for(lambda: active(nodes) is not None)
            ctl = active(nodes)
            assert ctl is not None
            assert ctl.controller.controller_epoch == 1
            result = await create_topic(
                ctl.zk, "orders", num_partitions=6, replication_factor=3, config={}
            )
            assert result.error is ErrorCode.NONE
            assert result.topic_id is not None
            tps = [TopicPartition("orders", p) for p in range(6)]
            await wait_for_async(lambda: _has_states(ctl.zk, "orders", 6))
            initial = await states(ctl.zk, "orders", 6)
            assignment = await ctl.zk.get_topic_assignment("orders")
            assert assignment is not None
            assert assignment.topic_id == result.topic_id
            for tp in tps:
                replicas = assignment.partitions[tp.partition]
                assert initial[tp].leader == replicas[0]  # the preferred replica leads
                assert initial[tp].isr == replicas
                assert (initial[tp].leader_epoch, initial[tp].partition_epoch) == (0, 0)
            await wait_for(
                lambda: {s.to for s in ctl.sender.since(0, "leader_and_isr")} == {1, 2, 3}
            )
            created = ctl.sender.since(0, "leader_and_isr")
            assert all(info.is_new for s in created for info in s.infos)

            # A follower-and-leader broker dies: one batch of new leaders for all it led.
            victim = next(n for n in nodes if n is not ctl)
            led = {tp for tp in tps if initial[tp].leader == victim.broker_id}
            assert led  # 6 partitions over 3 brokers: each leads some
            mark = len(ctl.sender.sent)
            await victim.kill()
            await wait_for(lambda: bool(ctl.sender.since(mark, "update_metadata")))
            after = await states(ctl.zk, "orders", 6)
            for tp in tps:
                assert victim.broker_id not in after[tp].isr
                assert after[tp].partition_epoch == 1  # one CAS write per partition
                if tp in led:
                    replicas = assignment.partitions[tp.partition]
                    survivors = [r for r in replicas if r != victim.broker_id]
                    assert after[tp].leader == survivors[0]
                    assert after[tp].leader_epoch == 1
                else:
                    assert after[tp].leader == initial[tp].leader
                    assert after[tp].leader_epoch == 0
                assert after[tp].controller_epoch == 1
            # One LeaderAndIsr per surviving broker, each with all of its changed partitions.
            batch = ctl.sender.since(mark, "leader_and_isr")
            survivors_ids = {n.broker_id for n in nodes if n is not victim}
            assert sorted(s.to for s in batch) == sorted(survivors_ids)
            for s in batch:
                assert set(s.partitions) == set(tps)  # RF 3: every broker hosts every one
                for info in s.infos:
                    assert info.state == after[info.topic_partition]
            metadata = ctl.sender.since(mark, "update_metadata")
            assert sorted(s.to for s in metadata) == sorted(survivors_ids)

    run(body)


async def _has_states(zk: ZkClient, topic: str, n: int) -> bool:
    return len(await states(zk, topic, n)) == n


def test_controller_failover_bumps_epoch_and_moves_leaders(zk_connect: str) -> None:
    async def body() -> None:
        async with cluster(zk_connect, [1, 2, 3]) as nodes:
            await wait_for(lambda: active(nodes) is not None)
            first = active(nodes)
            assert first is not None
            assert (
                await create_topic(first.zk, "t", num_partitions=3, replication_factor=2)
            ).error is ErrorCode.NONE
            await wait_for_async(lambda: _has_states(first.zk, "t", 3))
            before = await states(first.zk, "t", 3)

            await first.kill()  # the controller's broker dies
            rest = [n for n in nodes if n is not first]
            await wait_for(lambda: active(rest) is not None)
            second = active(rest)
            assert second is not None
            assert second.controller.controller_epoch == 2
            epoch = await second.zk.get_controller_epoch()
            assert epoch is not None
            assert epoch[0] == 2
            assert await second.zk.get_controller() == second.broker_id

            # The new controller found the dead broker's partitions and moved them.
            async def moved() -> bool:
                now = await states(second.zk, "t", 3)
                return all(first.broker_id not in s.isr for s in now.values())

            await wait_for_async(moved)
            after = await states(second.zk, "t", 3)
            for tp, state in after.items():
                if before[tp].leader == first.broker_id:
                    assert state.leader not in (first.broker_id, -1)
                    assert state.leader_epoch == before[tp].leader_epoch + 1
                    assert state.controller_epoch == 2
            # On failover everyone hears from the new controller, with its epoch.
            await wait_for(
                lambda: (
                    {s.to for s in second.sender.since(0, "update_metadata")}
                    == {n.broker_id for n in rest}
                )
            )
            assert {s.controller_epoch for s in second.sender.sent} == {2}

    run(body)


def test_offline_partition_comes_back_with_its_broker(zk_connect: str) -> None:
    async def body() -> None:
        async with cluster(zk_connect, [1, 2]) as nodes:
            await wait_for(lambda: active(nodes) is not None)
            ctl = active(nodes)
            assert ctl is not None
            other = next(n for n in nodes if n is not ctl)
            result = await create_topic(
                ctl.zk,
                "solo",
                num_partitions=1,
                replication_factor=1,
                assignment={0: [other.broker_id]},
            )
            assert result.error is ErrorCode.NONE
            tp = TopicPartition("solo", 0)
            await wait_for_async(lambda: _has_states(ctl.zk, "solo", 1))
            await other.kill()

            async def offline() -> bool:
                return (await states(ctl.zk, "solo", 1))[tp].leader == -1

            await wait_for_async(offline)
            state = (await states(ctl.zk, "solo", 1))[tp]
            # No live ISR member and unclean election off: offline, ISR kept, epoch bumped.
            assert (state.isr, state.leader_epoch) == ((other.broker_id,), 1)

            back = await start_node(zk_connect, other.broker_id)
            try:

                async def online() -> bool:
                    return (await states(ctl.zk, "solo", 1))[tp].leader == other.broker_id

                await wait_for_async(online)
                assert (await states(ctl.zk, "solo", 1))[tp].leader_epoch == 2
                await wait_for(
                    lambda: any(
                        s.to == other.broker_id and tp in s.partitions
                        for s in ctl.sender.since(0, "leader_and_isr")
                    )
                )
            finally:
                await back.controller.stop()
                await back.zk.close()

    run(body)


def test_alter_partition_compare_and_set(zk_connect: str) -> None:
    async def body() -> None:
        async with cluster(zk_connect, [1, 2, 3]) as nodes:
            await wait_for(lambda: active(nodes) is not None)
            ctl = active(nodes)
            assert ctl is not None
            bystander = next(n for n in nodes if n is not ctl)
            assert (
                await create_topic(
                    ctl.zk,
                    "isr",
                    num_partitions=1,
                    replication_factor=3,
                    assignment={0: [1, 2, 3]},
                )
            ).error is ErrorCode.NONE
            tp = TopicPartition("isr", 0)
            await wait_for_async(lambda: _has_states(ctl.zk, "isr", 1))
            await wait_for(lambda: ctl.controller.partition_state(tp) is not None)
            live = await ctl.zk.get_live_brokers()
            epoch1 = live[BrokerId(1)].broker_epoch

            def proposal(
                leader_epoch: int, partition_epoch: int, isr: tuple[int, ...]
            ) -> AlterPartitionProposal:
                return AlterPartitionProposal(
                    topic_partition=tp,
                    leader_id=BrokerId(1),
                    leader_epoch=leader_epoch,
                    partition_epoch=partition_epoch,
                    new_isr=tuple(BrokerId(b) for b in isr),
                )

            shrink = await ctl.controller.alter_partition(
                proposal(0, 0, (1, 2)), broker_epoch=epoch1
            )
            assert shrink.error is ErrorCode.NONE
            assert shrink.state is not None
            assert (shrink.state.isr, shrink.state.partition_epoch) == ((1, 2), 1)
            stored = (await states(ctl.zk, "isr", 1))[tp]
            assert (stored.isr, stored.partition_epoch) == ((1, 2), 1)

            # The same change sent again (its answer was lost, rule 5a): the state in force,
            # nothing written.
            again = await ctl.controller.alter_partition(
                proposal(0, 0, (1, 2)), broker_epoch=epoch1
            )
            assert again.error is ErrorCode.NONE
            assert again.state is not None
            assert (again.state.isr, again.state.partition_epoch) == ((1, 2), 1)
            assert (await states(ctl.zk, "isr", 1))[tp].partition_epoch == 1

            stale = await ctl.controller.alter_partition(proposal(0, 0, (1,)), broker_epoch=epoch1)
            assert stale.error is ErrorCode.INVALID_UPDATE_VERSION
            assert stale.state is not None
            assert stale.state.partition_epoch == 1

            fenced = await ctl.controller.alter_partition(
                proposal(-1, 1, (1,)), broker_epoch=epoch1
            )
            assert fenced.error is ErrorCode.FENCED_LEADER_EPOCH

            old_incarnation = await ctl.controller.alter_partition(
                proposal(0, 1, (1, 2, 3)), broker_epoch=epoch1 - 1
            )
            assert old_incarnation.error is ErrorCode.STALE_BROKER_EPOCH

            expand = await ctl.controller.alter_partition(
                proposal(0, 1, (1, 2, 3)), broker_epoch=epoch1
            )
            assert expand.error is ErrorCode.NONE
            assert expand.state is not None
            assert expand.state.partition_epoch == 2

            unknown = await ctl.controller.alter_partition(
                AlterPartitionProposal(
                    topic_partition=TopicPartition("nope", 0),
                    leader_id=BrokerId(1),
                    leader_epoch=0,
                    partition_epoch=0,
                    new_isr=(BrokerId(1),),
                )
            )
            assert unknown.error is ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            not_controller = await bystander.controller.alter_partition(proposal(0, 2, (1,)))
            assert not_controller.error is ErrorCode.NOT_CONTROLLER
            assert (await states(ctl.zk, "isr", 1))[tp].partition_epoch == 2

    run(body)


def test_create_topic_errors_are_kafkas(zk_connect: str) -> None:
    async def body() -> None:
        async with cluster(zk_connect, [1, 2]) as nodes:
            zk = nodes[0].zk
            bad_name = await create_topic(zk, "a/b", num_partitions=1, replication_factor=1)
            assert bad_name.error is ErrorCode.INVALID_TOPIC_EXCEPTION
            assert bad_name.message is not None
            assert "illegal" in bad_name.message
            too_many = await create_topic(zk, "t", num_partitions=1, replication_factor=3)
            assert too_many.error is ErrorCode.INVALID_REPLICATION_FACTOR
            assert too_many.message == "Replication factor: 3 larger than available brokers: 2."
            none = await create_topic(zk, "t", num_partitions=0, replication_factor=1)
            assert none.error is ErrorCode.INVALID_PARTITIONS
            unknown_broker = await create_topic(
                zk, "t", num_partitions=1, replication_factor=1, assignment={0: [9]}
            )
            assert unknown_broker.error is ErrorCode.INVALID_REPLICA_ASSIGNMENT
            ok = await create_topic(zk, "t", num_partitions=2, replication_factor=2)
            assert ok.error is ErrorCode.NONE
            again = await create_topic(zk, "t", num_partitions=2, replication_factor=2)
            assert again.error is ErrorCode.TOPIC_ALREADY_EXISTS
            assert again.message == "Topic 't' already exists."

    run(body)


def test_topic_deletion(zk_connect: str) -> None:
    async def body() -> None:
        async with cluster(zk_connect, [1, 2]) as nodes:
            await wait_for(lambda: active(nodes) is not None)
            ctl = active(nodes)
            assert ctl is not None
            assert (
                await create_topic(ctl.zk, "gone", num_partitions=2, replication_factor=2)
            ).error is ErrorCode.NONE
            await wait_for_async(lambda: _has_states(ctl.zk, "gone", 2))
            mark = len(ctl.sender.sent)
            assert await nodes[1].zk.mark_topic_for_deletion("gone")

            async def deleted() -> bool:
                # The marker goes last, after the topic's own nodes (as in Kafka).
                return "gone" not in (
                    await ctl.zk.get_topics() | await ctl.zk.get_topics_marked_for_deletion()
                )

            await wait_for_async(deleted)
            stops = ctl.sender.since(mark, "stop_replica")
            assert sorted(s.to for s in stops) == [1, 2]
            assert all(s.delete for s in stops)
            assert all(
                set(s.partitions) == {TopicPartition("gone", 0), TopicPartition("gone", 1)}
                for s in stops
            )
            assert await ctl.zk.get_topics_marked_for_deletion() == frozenset()
            assert ctl.controller.partition_state(TopicPartition("gone", 0)) is None

    run(body)


def test_controlled_shutdown_moves_leaderships_first(zk_connect: str) -> None:
    async def body() -> None:
        async with cluster(zk_connect, [1, 2, 3]) as nodes:
            await wait_for(lambda: active(nodes) is not None)
            ctl = active(nodes)
            assert ctl is not None
            leaving = next(n for n in nodes if n is not ctl)
            assignment = {
                p: [BrokerId(b) for b in rs]
                for p, rs in {0: [1, 2, 3], 1: [2, 3, 1], 2: [3, 1, 2]}.items()
            }
            assert (
                await create_topic(
                    ctl.zk, "roll", num_partitions=3, replication_factor=3, assignment=assignment
                )
            ).error is ErrorCode.NONE
            await wait_for_async(lambda: _has_states(ctl.zk, "roll", 3))
            await wait_for(
                lambda: ctl.controller.partition_state(TopicPartition("roll", 2)) is not None
            )
            before = await states(ctl.zk, "roll", 3)
            epoch = (await ctl.zk.get_live_brokers())[leaving.broker_id].broker_epoch

            stale = await ctl.controller.controlled_shutdown(leaving.broker_id, epoch - 1)
            assert stale.error is ErrorCode.STALE_BROKER_EPOCH
            assert (await states(ctl.zk, "roll", 3)) == before  # nothing moved

            mark = len(ctl.sender.sent)
            result = await ctl.controller.controlled_shutdown(leaving.broker_id, epoch)
            assert result.error is ErrorCode.NONE
            assert result.remaining == ()
            after = await states(ctl.zk, "roll", 3)
            for tp, state in after.items():
                assert leaving.broker_id not in state.isr
                assert state.leader != leaving.broker_id
                if before[tp].leader == leaving.broker_id:
                    assert state.leader_epoch == before[tp].leader_epoch + 1
                else:
                    assert state.leader == before[tp].leader
                    assert state.leader_epoch == before[tp].leader_epoch
            stops = ctl.sender.since(mark, "stop_replica")
            assert [(s.to, s.delete) for s in stops] == [(leaving.broker_id, False)]
            led = {tp for tp in after if before[tp].leader == leaving.broker_id}
            assert set(stops[0].partitions) == set(after) - led
            told = ctl.sender.since(mark, "leader_and_isr")
            assert {s.to for s in told} == {n.broker_id for n in nodes}
            # The leaving broker hears only of the leaderships it lost.
            assert {tp for s in told if s.to == leaving.broker_id for tp in s.partitions} == led

            # Its follower fetches may still reach a leader, which sees it caught up: it may
            # not join an ISR again (KIP-841), or acks=all would wait for it.
            for tp, state in after.items():
                rejoin = await _add_to_isr(ctl, tp, state, leaving.broker_id)
                assert rejoin.error is ErrorCode.INELIGIBLE_REPLICA
            assert (await states(ctl.zk, "roll", 3)) == after

            # Its session then ends: nothing left to move, and it is never elected meanwhile.
            mark = len(ctl.sender.sent)
            await leaving.kill()
            await wait_for_async(lambda: _broker_gone(ctl.zk, leaving.broker_id))
            # The controller learns it from its watch on /brokers/ids, a moment later.
            await wait_for_async(lambda: _async(leaving.broker_id not in ctl.controller.ctx.live))
            assert (await states(ctl.zk, "roll", 3)) == after

            gone = await ctl.controller.controlled_shutdown(leaving.broker_id, epoch)
            assert gone.error is ErrorCode.BROKER_NOT_AVAILABLE

    run(body)


async def _async(value: bool) -> bool:
    return value


async def _broker_gone(zk: ZkClient, broker_id: BrokerId) -> bool:
    return broker_id not in await zk.get_live_brokers()


def expire_session(zk_connect: str, zk: ZkClient) -> None:
    """Expire ``zk``'s session for real: attach to the same session elsewhere and close it."""
    from kazoo.client import KazooClient

    session_id, password = zk._kz.client_id
    twin = KazooClient(hosts=zk_connect, client_id=(session_id, password))
    twin.start(timeout=10)
    twin.stop()
    twin.close()


def test_controller_session_expiry(zk_connect: str) -> None:
    # The controller's process lives but its session expires: another broker takes over with
    # a bumped epoch; the old one steps down, re-registers, and is treated as bounced.
    async def body() -> None:
        async with cluster(zk_connect, [1, 2]) as nodes:
            await wait_for(lambda: active(nodes) is not None)
            first = active(nodes)
            assert first is not None
            other = next(n for n in nodes if n is not first)
            old_epoch = first.zk.broker_epoch
            assert old_epoch is not None
            await asyncio.to_thread(expire_session, zk_connect, first.zk)

            await wait_for(lambda: other.controller.is_active)
            assert other.controller.controller_epoch == 2
            await wait_for(lambda: first.zk.broker_epoch != old_epoch)
            await wait_for(lambda: not first.controller.is_active)
            assert await other.zk.get_controller() == other.broker_id
            # The new controller sees the re-registered broker (new broker epoch) ...
            await wait_for(
                lambda: any(
                    s.to == first.broker_id and s.controller_epoch == 2
                    for s in other.sender.since(0, "update_metadata")
                )
            )
            live = await other.zk.get_live_brokers()
            assert live[first.broker_id].broker_epoch == first.zk.broker_epoch
            # ... and the old controller stays out.
            await asyncio.sleep(0.5)
            assert not first.controller.is_active

    run(body)


def test_preferred_leader_election_after_a_restart(zk_connect: str) -> None:
    async def body() -> None:
        async with cluster(zk_connect, [1, 2, 3]) as nodes:
            await wait_for(lambda: active(nodes) is not None)
            ctl = active(nodes)
            assert ctl is not None
            other = next(n for n in nodes if n is not ctl)
            assignment = {0: [other.broker_id, ctl.broker_id], 1: [ctl.broker_id, other.broker_id]}
            assert (
                await create_topic(
                    ctl.zk, "pref", num_partitions=2, replication_factor=2, assignment=assignment
                )
            ).error is ErrorCode.NONE
            tp0, tp1 = TopicPartition("pref", 0), TopicPartition("pref", 1)
            await wait_for_async(lambda: _has_states(ctl.zk, "pref", 2))
            await wait_for(lambda: ctl.controller.partition_state(tp1) is not None)
            assert await ctl.controller.elect_preferred_leaders([tp0, tp1]) == {
                tp0: ErrorCode.ELECTION_NOT_NEEDED,
                tp1: ErrorCode.ELECTION_NOT_NEEDED,
            }

            await other.kill()

            async def failed_over() -> bool:
                return (await states(ctl.zk, "pref", 2))[tp0].leader == ctl.broker_id

            await wait_for_async(failed_over)
            moved = (await states(ctl.zk, "pref", 2))[tp0]
            assert moved.isr == (ctl.broker_id,)
            assert await ctl.controller.elect_preferred_leaders([tp0]) == {
                tp0: ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE
            }

            back = await start_node(zk_connect, other.broker_id)
            try:
                await wait_for(
                    lambda: other.broker_id in ctl.controller._live  # the controller saw it
                )
                # Back, but not in the ISR until it catches up (AlterPartition from the leader).
                assert await ctl.controller.elect_preferred_leaders([tp0]) == {
                    tp0: ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE
                }
                rejoined = await _add_to_isr(ctl, tp0, moved, other.broker_id)
                assert rejoined.error is ErrorCode.NONE
                mark = len(ctl.sender.sent)
                assert await ctl.controller.elect_preferred_leaders() == {
                    tp0: ErrorCode.NONE,
                    tp1: ErrorCode.ELECTION_NOT_NEEDED,
                }
                now = (await states(ctl.zk, "pref", 2))[tp0]
                assert now.leader == other.broker_id
                assert now.leader_epoch == moved.leader_epoch + 1
                told = ctl.sender.since(mark, "leader_and_isr")
                assert sorted(s.to for s in told) == sorted([ctl.broker_id, other.broker_id])
                unknown = TopicPartition("nope", 0)
                assert await ctl.controller.elect_preferred_leaders([unknown]) == {
                    unknown: ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                }
            finally:
                await back.controller.stop()
                await back.zk.close()

    run(body)


def test_create_partitions(zk_connect: str) -> None:
    async def body() -> None:
        async with cluster(zk_connect, [1, 2, 3]) as nodes:
            await wait_for(lambda: active(nodes) is not None)
            ctl = active(nodes)
            assert ctl is not None
            created = await create_topic(ctl.zk, "grow", num_partitions=2, replication_factor=2)
            assert created.error is ErrorCode.NONE
            await wait_for_async(lambda: _has_states(ctl.zk, "grow", 2))
            await wait_for(
                lambda: ctl.controller.partition_state(TopicPartition("grow", 1)) is not None
            )
            mark = len(ctl.sender.sent)
            grown = await create_partitions(nodes[0].zk, "grow", count=4)
            assert grown.error is ErrorCode.NONE
            assert grown.topic_id == created.topic_id
            await wait_for_async(lambda: _has_states(ctl.zk, "grow", 4))
            assignment = await ctl.zk.get_topic_assignment("grow")
            assert assignment is not None
            assert assignment.topic_id == created.topic_id
            assert sorted(assignment.partitions) == [0, 1, 2, 3]
            assert all(len(set(rs)) == 2 for rs in assignment.partitions.values())
            now = await states(ctl.zk, "grow", 4)
            for p in (2, 3):
                state = now[TopicPartition("grow", p)]
                assert state.leader == assignment.partitions[p][0]
                assert state.isr == assignment.partitions[p]
            new = {TopicPartition("grow", 2), TopicPartition("grow", 3)}
            await wait_for(
                lambda: (
                    {
                        i.topic_partition
                        for s in ctl.sender.since(mark, "leader_and_isr")
                        for i in s.infos
                        if i.is_new
                    }
                    == new
                )
            )

            shrink = await create_partitions(ctl.zk, "grow", count=3)
            assert shrink.error is ErrorCode.INVALID_PARTITIONS
            assert shrink.message == (
                "Topic currently has 4 partitions, which is higher than the requested 3."
            )
            same = await create_partitions(ctl.zk, "grow", count=4)
            assert same.error is ErrorCode.INVALID_PARTITIONS
            assert same.message == "Topic already has 4 partitions."
            missing = await create_partitions(ctl.zk, "nope", count=4)
            assert missing.error is ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            wrong = await create_partitions(
                ctl.zk, "grow", count=6, assignment=[[BrokerId(1), BrokerId(2)]]
            )
            assert wrong.error is ErrorCode.INVALID_REPLICA_ASSIGNMENT
            assert wrong.message == (
                "Increasing the number of partitions by 2 but 1 assignments provided."
            )
            explicit = await create_partitions(
                ctl.zk, "grow", count=5, assignment=[[BrokerId(3), BrokerId(1)]]
            )
            assert explicit.error is ErrorCode.NONE
            await wait_for_async(lambda: _has_states(ctl.zk, "grow", 5))
            last = (await states(ctl.zk, "grow", 5))[TopicPartition("grow", 4)]
            assert (last.leader, last.isr) == (3, (3, 1))

    run(body)


def test_auto_leader_rebalance(zk_connect: str) -> None:
    options = {"leader_imbalance_check_interval_ms": 200}

    async def body() -> None:
        async with cluster(zk_connect, [1, 2], **options) as nodes:
            await wait_for(lambda: active(nodes) is not None)
            ctl = active(nodes)
            assert ctl is not None
            other = next(n for n in nodes if n is not ctl)
            assert (
                await create_topic(
                    ctl.zk,
                    "auto",
                    num_partitions=1,
                    replication_factor=2,
                    assignment={0: [other.broker_id, ctl.broker_id]},
                )
            ).error is ErrorCode.NONE
            tp = TopicPartition("auto", 0)
            await wait_for_async(lambda: _has_states(ctl.zk, "auto", 1))
            await other.kill()

            async def led_by(broker: BrokerId) -> bool:
                return (await states(ctl.zk, "auto", 1))[tp].leader == broker

            await wait_for_async(lambda: led_by(ctl.broker_id))
            moved = (await states(ctl.zk, "auto", 1))[tp]
            back = await start_node(zk_connect, other.broker_id, **options)
            try:
                await wait_for(lambda: other.broker_id in ctl.controller._live)
                # Not in the ISR yet: the rebalance must leave the leadership alone.
                await asyncio.sleep(0.6)
                assert await led_by(ctl.broker_id)
                live = await ctl.zk.get_live_brokers()
                rejoined = await ctl.controller.alter_partition(
                    AlterPartitionProposal(
                        topic_partition=tp,
                        leader_id=ctl.broker_id,
                        leader_epoch=moved.leader_epoch,
                        partition_epoch=moved.partition_epoch,
                        new_isr=(ctl.broker_id, other.broker_id),
                    ),
                    broker_epoch=live[ctl.broker_id].broker_epoch,
                )
                assert rejoined.error is ErrorCode.NONE
                # Back in the ISR: the periodic check hands leadership back by itself.
                await wait_for_async(lambda: led_by(other.broker_id))
                assert (await states(ctl.zk, "auto", 1))[tp].leader_epoch == (
                    moved.leader_epoch + 1
                )
            finally:
                await back.controller.stop()
                await back.zk.close()

    run(body)


def test_broker_restarted_while_no_controller_is_failed_then_started(zk_connect: str) -> None:
    """Broker 2 (the controller) dies and registers again before any controller saw it go,
    as after a crash that cost it the unflushed tail of its logs. The next controller (its
    own restarted one) must not keep it as leader or ISR member at the old leader epoch: it
    is failed, then started (found by the fault harness, issue 7)."""

    async def body() -> None:
        # Broker 1 only registers: it never contends for the seat, so no controller is
        # there while broker 2 is down.
        zk1 = await ZkClient.connect(zk_connect, session_timeout_ms=TEST_SESSION_TIMEOUT_MS)
        await zk1.register_broker(
            BrokerRegistration(
                broker_id=BrokerId(1), endpoints=(EndPoint("PLAINTEXT", "127.0.0.1", 9001),)
            )
        )
        try:
            node2 = await start_node(zk_connect, 2)
            await wait_for(lambda: node2.controller.is_active)
            assert (
                await create_topic(node2.zk, "b", num_partitions=4, replication_factor=2)
            ).error is ErrorCode.NONE
            await wait_for_async(lambda: _has_states(node2.zk, "b", 4))
            before = await states(node2.zk, "b", 4)
            assert all(set(s.isr) == {1, 2} for s in before.values())
            led_by_2 = {tp for tp, s in before.items() if s.leader == 2}
            assert led_by_2  # replica assignment spreads leaders over both brokers

            await node2.kill()
            again = await start_node(zk_connect, 2)
            try:
                await wait_for(lambda: again.controller.is_active)

                async def repaired() -> bool:
                    now = await states(zk1, "b", 4)
                    return all(2 not in s.isr for s in now.values())

                await wait_for_async(repaired)
                after = await states(zk1, "b", 4)
                for tp, state in after.items():
                    assert state.leader == 1, (tp, state)
                    assert state.isr == (1,), (tp, state)
                    assert state.leader_epoch == before[tp].leader_epoch + (tp in led_by_2)
            finally:
                await again.controller.stop()
                await again.zk.close()
        finally:
            await zk1.close()

    run(body)
