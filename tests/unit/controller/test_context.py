"""The controller's shared cache (``ControllerContext``), its messages to brokers
(``BrokerMessages``) and the auto-rebalance choice (``LeaderMoves.rebalance_candidates``),
on plain values: no ZooKeeper, no event loop."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tidelog.controller.context import ControllerContext
from tidelog.controller.leader_moves import LeaderMoves
from tidelog.controller.messages import BrokerMessages, PartitionInfo
from tidelog.model import NO_BROKER, BrokerId, ControllerEpoch, LeaderEpoch, TopicPartition
from tidelog.zk import ControllerSeat, LiveBroker
from tidelog.zk.znodes import BrokerRegistration, EndPoint, PartitionState, TopicAssignment

T0, T1, T2 = (TopicPartition("t", p) for p in range(3))


def b(*ids: int) -> tuple[BrokerId, ...]:
    return tuple(BrokerId(i) for i in ids)


def live(*ids: int) -> dict[BrokerId, LiveBroker]:
    return {
        BrokerId(i): LiveBroker(
            BrokerRegistration(
                broker_id=BrokerId(i),
                endpoints=(EndPoint(listener_name="PLAINTEXT", host="127.0.0.1", port=9090 + i),),
            ),
            broker_epoch=100 + i,
        )
        for i in ids
    }


def st(leader: int, *isr: int) -> PartitionState:
    return PartitionState(
        leader=BrokerId(leader),
        leader_epoch=LeaderEpoch(1),
        isr=b(*isr),
        controller_epoch=ControllerEpoch(1),
    )


def active_context() -> ControllerContext:
    ctx = ControllerContext(BrokerId(1))
    ctx.seat = ControllerSeat(BrokerId(1), ControllerEpoch(7), epoch_zk_version=6)
    ctx.live = live(1, 2, 3)
    ctx.assignments["t"] = TopicAssignment(
        partitions={0: b(1, 2), 1: b(2, 3), 2: b(3, 1)}, topic_id=None
    )
    ctx.states.update({T0: st(1, 1, 2), T1: st(3, 2, 3), T2: st(1, 3, 1)})
    return ctx


def test_replicas_come_from_the_assignment_and_unknown_ones_are_empty() -> None:
    ctx = active_context()
    assert ctx.replicas(T1) == b(2, 3)
    assert ctx.replicas(TopicPartition("t", 9)) == ()
    assert ctx.replicas(TopicPartition("other", 0)) == ()


def test_electable_leaves_out_brokers_shutting_down_or_with_an_offline_log_dir() -> None:
    ctx = active_context()
    assert ctx.electable() == set(b(1, 2, 3))
    ctx.shutting_down.add(BrokerId(2))
    ctx.offline_dirs.add(BrokerId(3))
    assert ctx.electable() == {BrokerId(1)}


def test_clear_forgets_everything_and_keeps_the_same_collections() -> None:
    ctx = active_context()
    states = ctx.states
    ctx.deleting.add("t")
    assert ctx.is_active
    ctx.clear()
    assert not ctx.is_active
    assert (ctx.live, ctx.assignments, ctx.states, ctx.deleting) == ({}, {}, {}, set())
    assert ctx.states is states  # a part holding the context sees the cleared cache


class RecordingSender:
    def __init__(self) -> None:
        self.sent: list[tuple[str, int, int, list[TopicPartition]]] = []

    def leader_and_isr(
        self,
        broker: LiveBroker,
        controller_epoch: ControllerEpoch,
        partitions: Sequence[PartitionInfo],
        live_leaders: Sequence[LiveBroker],
    ) -> None:
        tps = [i.topic_partition for i in partitions]
        self.sent.append(("leader_and_isr", broker.broker_id, controller_epoch, tps))

    def update_metadata(
        self,
        broker: LiveBroker,
        controller_epoch: ControllerEpoch,
        partitions: Sequence[PartitionInfo],
        live_brokers: Sequence[LiveBroker],
    ) -> None:
        tps = [i.topic_partition for i in partitions]
        self.sent.append(("update_metadata", broker.broker_id, controller_epoch, tps))

    def stop_replica(self, *args: Any, **kwargs: Any) -> None:  # pragma: no cover - unused
        raise AssertionError("not expected")


def test_leader_and_isr_goes_once_to_each_live_replica_with_all_its_partitions() -> None:
    ctx = active_context()
    del ctx.live[BrokerId(3)]
    sender = RecordingSender()
    BrokerMessages(ctx, sender).leader_and_isr([T2, T0, T1])
    assert sender.sent == [
        ("leader_and_isr", 1, 7, [T0, T2]),
        ("leader_and_isr", 2, 7, [T0, T1]),
    ]
    sender.sent.clear()
    BrokerMessages(ctx, sender).leader_and_isr([T0, T1, T2], to=b(2))
    assert sender.sent == [("leader_and_isr", 2, 7, [T0, T1])]


def test_update_metadata_goes_to_every_live_broker_and_nothing_goes_while_inactive() -> None:
    ctx = active_context()
    sender = RecordingSender()
    messages = BrokerMessages(ctx, sender)
    messages.update_metadata([T1, TopicPartition("gone", 0)])
    assert sender.sent == [("update_metadata", i, 7, [T1]) for i in (1, 2, 3)]
    sender.sent.clear()
    ctx.seat = None
    messages.update_metadata([T1])
    messages.leader_and_isr([T1])
    assert sender.sent == []


def test_rebalance_picks_partitions_of_a_broker_over_the_imbalance_percentage() -> None:
    ctx = active_context()
    # Preferred leaders: t-0 -> 1 (leads it), t-1 -> 2 (3 leads, 2 in the ISR), t-2 -> 3
    # (1 leads, 3 in the ISR).
    moves = LeaderMoves(ctx, None, None)  # type: ignore[arg-type]
    assert moves.rebalance_candidates(10) == [T1, T2]
    # Exactly at the percentage is not over it: 1 of 1 partition is 100 %.
    assert moves.rebalance_candidates(100) == []
    # A preferred leader out of the ISR, or not electable, is not a candidate.
    ctx.states[T1] = st(3, 3)
    ctx.offline_dirs.add(BrokerId(3))
    assert moves.rebalance_candidates(10) == []
    # Topics being deleted are left alone.
    ctx.states[T1] = st(3, 2, 3)
    ctx.deleting.add("t")
    assert moves.rebalance_candidates(10) == []
    # An offline partition (no leader) counts as led elsewhere.
    ctx.deleting.clear()
    ctx.offline_dirs.clear()
    ctx.states[T0] = st(NO_BROKER, 1)
    assert moves.rebalance_candidates(10) == [T0, T1, T2]
