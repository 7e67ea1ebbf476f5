"""Moving leaderships on request: a controlled shutdown (rule 12; Kafka's
``ControlledShutdown``) and preferred leader elections (rule 9, last sentence; ElectLeaders
and ``auto.leader.rebalance.enable``)."""

from __future__ import annotations

from dataclasses import dataclass

from tidelog.controller import decisions
from tidelog.controller.context import ControllerContext
from tidelog.controller.history import Cause
from tidelog.controller.messages import BrokerMessages
from tidelog.controller.state_writes import StateWriter
from tidelog.errors import ErrorCode
from tidelog.model import BrokerId, TopicPartition
from tidelog.replication.partition import LeaderAndIsr
from tidelog.zk.znodes import PartitionState


@dataclass(frozen=True, slots=True)
class ControlledShutdownResult:
    """The answer to ControlledShutdown: the partitions the broker still leads."""

    error: ErrorCode
    remaining: tuple[TopicPartition, ...] = ()


class LeaderMoves:
    """Leadership moves of the active controller; every method runs in its event queue."""

    def __init__(
        self, ctx: ControllerContext, writer: StateWriter, messages: BrokerMessages
    ) -> None:
        self.ctx = ctx
        self.writer = writer
        self.messages = messages

    async def controlled_shutdown(
        self, broker_id: BrokerId, broker_epoch: int
    ) -> ControlledShutdownResult:
        """Move ``broker_id``'s leaderships away (``Controller.controlled_shutdown``)."""
        seat = self.ctx.seat
        if seat is None:
            return ControlledShutdownResult(ErrorCode.NOT_CONTROLLER)
        broker = self.ctx.live.get(broker_id)
        if broker is None:
            return ControlledShutdownResult(ErrorCode.BROKER_NOT_AVAILABLE)
        if broker_epoch not in (-1, broker.broker_epoch):
            return ControlledShutdownResult(ErrorCode.STALE_BROKER_EPOCH)
        self.ctx.shutting_down.add(broker_id)
        live = set(self.ctx.live) - self.ctx.offline_dirs
        hosted = [
            tp
            for tp in sorted(self.ctx.states)
            if broker_id in self.ctx.replicas(tp) and len(self.ctx.replicas(tp)) > 1
        ]

        def decide(tp: TopicPartition, state: PartitionState) -> LeaderAndIsr | None:
            step = decisions.on_controlled_shutdown(
                self.ctx.replicas(tp),
                state.leader_and_isr(),
                broker_id,
                live,
                self.ctx.shutting_down,
            )
            return None if step is None else step[0]

        led_before = {tp for tp in hosted if self.ctx.states[tp].leader == broker_id}
        changed = await self.writer.write_decided(
            decide,
            hosted,
            Cause("controlled_shutdown", f"controlled shutdown of broker {broker_id}"),
        )
        if not self.ctx.is_active:
            return ControlledShutdownResult(ErrorCode.NOT_CONTROLLER)
        # Kafka: the new leaderships go to every live replica, the leaving broker included
        # (it must stop acting as leader now); for what it only followed, it gets
        # StopReplica without deletion (Kafka's OfflineReplica transition).
        self.messages.leader_and_isr(changed & led_before)
        self.messages.leader_and_isr(changed - led_before, to=set(self.ctx.live) - {broker_id})
        followed = [tp for tp in hosted if tp not in led_before and tp in changed]
        if followed:
            self.messages.sender.stop_replica(broker, seat.controller_epoch, followed, delete=False)
        self.messages.update_metadata(changed)
        remaining = tuple(tp for tp in hosted if self.ctx.states[tp].leader == broker_id)
        return ControlledShutdownResult(ErrorCode.NONE, remaining)

    async def elect_preferred(
        self, wanted: list[TopicPartition] | None
    ) -> dict[TopicPartition, ErrorCode]:
        """Leadership back to each partition's first replica where it may lead
        (``Controller.elect_preferred_leaders``); ``wanted`` None: every partition."""
        if self.ctx.seat is None:
            return dict.fromkeys(wanted or (), ErrorCode.NOT_CONTROLLER)
        tps = sorted(self.ctx.states) if wanted is None else wanted
        live = self.ctx.electable()
        errors: dict[TopicPartition, ErrorCode] = {}
        movable: list[TopicPartition] = []
        for tp in tps:
            state = self.ctx.states.get(tp)
            if state is None:
                errors[tp] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                continue
            decided = decisions.elect_preferred_leader(
                self.ctx.replicas(tp), state.leader_and_isr(), live
            )
            if isinstance(decided, ErrorCode):
                errors[tp] = decided
            else:
                movable.append(tp)

        def decide(tp: TopicPartition, state: PartitionState) -> LeaderAndIsr | None:
            current = state.leader_and_isr()
            decided = decisions.elect_preferred_leader(self.ctx.replicas(tp), current, live)
            return (
                None
                if isinstance(decided, ErrorCode)
                else decisions.apply_election(current, decided)
            )

        changed = await self.writer.write_decided(
            decide, movable, Cause("preferred", "preferred leader election")
        )
        if not self.ctx.is_active:
            return {tp: errors.get(tp, ErrorCode.NOT_CONTROLLER) for tp in tps}
        self.messages.leader_and_isr(changed)
        self.messages.update_metadata(changed)
        for tp in movable:
            # Lost every CAS round, or the state changed under us so that it was not needed.
            errors[tp] = ErrorCode.NONE if tp in changed else ErrorCode.ELECTION_NOT_NEEDED
        return {tp: errors[tp] for tp in tps}

    def rebalance_candidates(self, imbalance_percentage: int) -> list[TopicPartition]:
        """Kafka's checkAndTriggerAutoLeaderRebalance: per preferred broker, when more than
        ``imbalance_percentage`` of the partitions it should lead are led elsewhere, the
        ones where it is live and in the ISR."""
        ctx = self.ctx
        live = ctx.electable()
        by_preferred: dict[BrokerId, list[TopicPartition]] = {}
        for tp in ctx.states:
            replicas = ctx.replicas(tp)
            if replicas and tp.topic not in ctx.deleting:
                by_preferred.setdefault(replicas[0], []).append(tp)
        candidates: list[TopicPartition] = []
        for broker, tps in sorted(by_preferred.items()):
            if broker not in live:
                continue
            imbalanced = [tp for tp in tps if ctx.states[tp].leader != broker]
            ratio = len(imbalanced) / len(tps)
            if ratio * 100 > imbalance_percentage:
                candidates += [tp for tp in imbalanced if broker in ctx.states[tp].isr]
        return candidates
