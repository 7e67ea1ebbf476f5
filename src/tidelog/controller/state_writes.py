"""Writing partition states as the active controller: decide from the cached state, write
with compare-and-set on the partition epoch (fenced by the controller epoch), re-read and
decide again on a lost race; and create the initial states of new partitions.

A write answered CONTROLLER_MOVED means another controller took over: ``resign`` is called
and nothing more is written.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Sequence

from tidelog.controller.context import MAX_CAS_ROUNDS, ControllerContext
from tidelog.controller.history import Cause, ControllerHistory
from tidelog.histogram import Histogram
from tidelog.model import NO_BROKER, LeaderEpoch, PartitionEpoch, TopicPartition
from tidelog.replication.partition import LeaderAndIsr
from tidelog.zk import StateWriteOutcome, ZkClient
from tidelog.zk.znodes import PartitionState

log = logging.getLogger(__name__)

#: Decides a partition's next leader and ISR from its current state; None: leave it.
Decide = Callable[[TopicPartition, PartitionState], LeaderAndIsr | None]


class StateWriter:
    """The controller's partition-state writes, and its election counters (Kafka's
    ControllerStats; ``tidelog.server.metrics`` renders them)."""

    def __init__(
        self,
        ctx: ControllerContext,
        zk: ZkClient,
        history: ControllerHistory,
        resign: Callable[[str], None],
    ) -> None:
        self.ctx = ctx
        self.zk = zk
        self.history = history
        self.resign = resign
        #: Partition leaders written that changed the leader epoch, and those of them taken
        #: from outside the ISR.
        self.leader_elections = 0
        self.unclean_leader_elections = 0
        #: Kafka's LeaderElectionRateAndTimeMs timer: the time of each decide-and-write
        #: round that elected at least one leader.
        self.election_times = Histogram()

    async def write_decided(
        self, decide: Decide, candidates: Iterable[TopicPartition], cause: Cause | None = None
    ) -> set[TopicPartition]:
        """Decide each candidate from its cached state and CAS-write the decided ones.

        A lost CAS (the cache was stale) re-reads those partitions and decides again.
        Returns the partitions whose state changed.
        """
        changed: set[TopicPartition] = set()
        todo = [tp for tp in candidates if tp in self.ctx.states]
        started = time.monotonic()
        elections_before = self.leader_elections
        try:
            await self._write_rounds(decide, todo, changed, cause)
        finally:
            if self.leader_elections > elections_before:
                self.election_times.observe((time.monotonic() - started) * 1000.0)
        return changed

    async def _write_rounds(
        self,
        decide: Decide,
        todo: list[TopicPartition],
        changed: set[TopicPartition],
        cause: Cause | None,
    ) -> None:
        """``write_decided``'s rounds: decide, write, re-read the lost CASes; adds to
        ``changed``."""
        ctx = self.ctx
        for _ in range(MAX_CAS_ROUNDS):
            seat = ctx.seat
            if seat is None or not todo:
                break
            writes: dict[TopicPartition, PartitionState] = {}
            for tp in todo:
                current = ctx.states[tp]
                decided = decide(tp, current)
                if decided is None:
                    continue
                writes[tp] = PartitionState(
                    leader=decided.leader,
                    leader_epoch=LeaderEpoch(decided.leader_epoch),
                    isr=decided.isr,
                    controller_epoch=seat.controller_epoch,
                    # The CAS: the version we decided from.
                    partition_epoch=current.partition_epoch,
                )
            results = await self.zk.update_partition_states(writes, seat)
            retry: list[TopicPartition] = []
            for tp, result in results.items():
                if result.outcome is StateWriteOutcome.UPDATED and result.state is not None:
                    self.count_election(ctx.states[tp], result.state)
                    self.history.partition_changed(
                        tp, ctx.states[tp], result.state, cause or Cause("controller", "")
                    )
                    ctx.states[tp] = result.state
                    changed.add(tp)
                elif result.outcome is StateWriteOutcome.BAD_VERSION:
                    retry.append(tp)
                elif result.outcome is StateWriteOutcome.CONTROLLER_MOVED:
                    self.resign("controller epoch moved")
                    return
                else:
                    log.warning("state of %s vanished while writing (%s)", tp, result.outcome)
            fresh = await self.zk.get_partition_states(retry)
            ctx.states.update(fresh)
            todo = [tp for tp in retry if tp in fresh]

    def count_election(self, before: PartitionState, after: PartitionState) -> None:
        """A written state with a new leader epoch and a leader is an election; one whose
        leader was not in the ISR it replaced is unclean (rule 9)."""
        if after.leader == NO_BROKER or after.leader_epoch <= before.leader_epoch:
            return
        self.leader_elections += 1
        if after.leader not in before.isr:
            self.unclean_leader_elections += 1

    async def create_missing(self, topics: Sequence[str]) -> set[TopicPartition]:
        """Initial states for partitions without one: leader = first live replica in
        assignment order, ISR = the live replicas, leader epoch 0, partition epoch 0."""
        ctx = self.ctx
        seat = ctx.seat
        if seat is None:
            return set()
        initial: dict[TopicPartition, PartitionState] = {}
        for topic in topics:
            for partition, replicas in sorted(ctx.assignments[topic].partitions.items()):
                tp = TopicPartition(topic, partition)
                if tp in ctx.states:
                    continue
                live_replicas = tuple(r for r in replicas if r in ctx.live)
                initial[tp] = PartitionState(
                    leader=live_replicas[0] if live_replicas else NO_BROKER,
                    leader_epoch=LeaderEpoch(0),
                    isr=live_replicas,
                    controller_epoch=seat.controller_epoch,
                    partition_epoch=PartitionEpoch(0),
                )
        if not initial:
            return set()
        results = await self.zk.create_partition_states(initial, seat)
        created: set[TopicPartition] = set()
        exists: list[TopicPartition] = []
        for tp, result in results.items():
            if result.outcome is StateWriteOutcome.UPDATED and result.state is not None:
                ctx.states[tp] = result.state
                created.add(tp)
            elif result.outcome is StateWriteOutcome.NODE_EXISTS:
                exists.append(tp)
            elif result.outcome is StateWriteOutcome.CONTROLLER_MOVED:
                self.resign("controller epoch moved")
                return created
        ctx.states.update(await self.zk.get_partition_states(exists))
        return created | set(exists)
