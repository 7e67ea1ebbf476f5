"""What the active controller tells brokers: LeaderAndIsr, UpdateMetadata and StopReplica,
built from the ``ControllerContext`` and handed to an injected ``ControllerSender``."""

from __future__ import annotations

import uuid
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol

from tidelog.controller.context import ControllerContext
from tidelog.model import BrokerId, ControllerEpoch, TopicPartition
from tidelog.zk import LiveBroker
from tidelog.zk.znodes import PartitionState


@dataclass(frozen=True, slots=True, kw_only=True)
class PartitionInfo:
    """One partition as LeaderAndIsr / UpdateMetadata carry it (Kafka's partition states)."""

    topic_partition: TopicPartition
    topic_id: uuid.UUID | None
    replicas: tuple[BrokerId, ...]
    #: leader, leader_epoch, isr, controller_epoch and partition_epoch (the znode version).
    state: PartitionState
    #: True in the LeaderAndIsr that creates the partition (Kafka's ``isNew``).
    is_new: bool = False


class ControllerSender(Protocol):
    """How the active controller reaches brokers (the broker wires these to RPCs).

    Called on the event loop, in order, from the controller's single consumer task; an
    implementation queues the request per broker and must not block. Each carries the
    controller epoch (brokers ignore a stale one, rule 8) and the target's broker epoch.
    """

    def leader_and_isr(
        self,
        broker: LiveBroker,
        controller_epoch: ControllerEpoch,
        partitions: Sequence[PartitionInfo],
        live_leaders: Sequence[LiveBroker],
    ) -> None: ...

    def update_metadata(
        self,
        broker: LiveBroker,
        controller_epoch: ControllerEpoch,
        partitions: Sequence[PartitionInfo],
        live_brokers: Sequence[LiveBroker],
    ) -> None: ...

    def stop_replica(
        self,
        broker: LiveBroker,
        controller_epoch: ControllerEpoch,
        partitions: Sequence[TopicPartition],
        *,
        delete: bool,
    ) -> None: ...


class BrokerMessages:
    """Builds the controller's requests from ``ctx`` and sends them through ``sender``;
    sends nothing while the controller is not active."""

    def __init__(self, ctx: ControllerContext, sender: ControllerSender) -> None:
        self.ctx = ctx
        self.sender = sender

    def info(self, tp: TopicPartition, *, is_new: bool = False) -> PartitionInfo:
        assignment = self.ctx.assignments[tp.topic]
        return PartitionInfo(
            topic_partition=tp,
            topic_id=assignment.topic_id,
            replicas=assignment.partitions.get(tp.partition, ()),
            state=self.ctx.states[tp],
            is_new=is_new,
        )

    def leader_and_isr(
        self,
        partitions: Iterable[TopicPartition],
        *,
        to: Collection[BrokerId] | None = None,
        new: Collection[TopicPartition] = (),
    ) -> None:
        """One LeaderAndIsr per live replica broker, with all of its partitions."""
        ctx = self.ctx
        seat = ctx.seat
        if seat is None:
            return
        per_broker: dict[BrokerId, list[PartitionInfo]] = {}
        for tp in sorted(partitions):
            if tp not in ctx.states or tp.topic not in ctx.assignments:
                continue
            info = self.info(tp, is_new=tp in new)
            for replica in info.replicas:
                if replica in ctx.live and (to is None or replica in to):
                    per_broker.setdefault(replica, []).append(info)
        for broker_id, infos in sorted(per_broker.items()):
            leaders = {i.state.leader for i in infos}
            live_leaders = [ctx.live[b] for b in sorted(leaders) if b in ctx.live]
            self.sender.leader_and_isr(
                ctx.live[broker_id], seat.controller_epoch, infos, live_leaders
            )

    def update_metadata(
        self, partitions: Iterable[TopicPartition], *, to: Collection[BrokerId] | None = None
    ) -> None:
        """UpdateMetadata with ``partitions`` and the live brokers, to every live broker."""
        ctx = self.ctx
        seat = ctx.seat
        if seat is None:
            return
        infos = [
            self.info(tp)
            for tp in sorted(partitions)
            if tp in ctx.states and tp.topic in ctx.assignments
        ]
        brokers = [ctx.live[b] for b in sorted(ctx.live)]
        for broker in brokers:
            if to is None or broker.broker_id in to:
                self.sender.update_metadata(broker, seat.controller_epoch, infos, brokers)
