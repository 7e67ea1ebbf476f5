"""Partition reassignment on the active controller (KIP-455, ZooKeeper mode).

The seeds' replication, applied online: a partition moves from its original replicas ORS to
a target TRS by first growing to RS = TRS + ORS (the new replicas fetch from the leader like
any follower and join the ISR when caught up, rule 4), then shrinking to TRS. Kafka's
``KafkaController.onPartitionReassignment``, step by step:

1. Start (``alter``: AlterPartitionReassignments, or ``/admin/reassign_partitions``): the
   topic znode gets RS with ``adding_replicas`` (TRS - ORS) and ``removing_replicas``
   (ORS - TRS), a compare-and-set on the znode version fenced by the controller epoch. The
   partition state is written again (``decisions.on_replicas_changed``: a new partition
   epoch, so an AlterPartition built on the old replica set is refused). Every live replica
   of RS gets a LeaderAndIsr naming RS (same leader epoch: adding followers disturbs
   nobody; the new ones create their logs and start fetching), every broker an
   UpdateMetadata (Metadata shows RS while it runs, as in Kafka).
2. Complete (after every ISR change of the partition, broker change and failover): once
   every target replica is in the ISR, ``decisions.complete_reassignment`` gives the final
   state (ISR ∩ TRS; the leader stays if it is a live target replica, else the first live
   target replica in the ISR; a new leader epoch when the leader changes or replicas leave,
   which fences the removed ones). It is written to the partition state first, then the
   topic znode gets TRS with no adding/removing. The target replicas get LeaderAndIsr, the
   removed ones StopReplica with delete, every broker UpdateMetadata; the partition leaves
   ``/admin/reassign_partitions``.
3. Replace: a new target for a partition being reassigned starts from the first one's
   origin (Kafka). Replicas that the first one was adding and the new one does not want
   leave the ISR at once (the leader moves first if it is one of them) and get StopReplica
   with delete.
4. Cancel (target null): a reassignment back to ORS; NO_REASSIGNMENT_IN_PROGRESS when none
   runs. Since ORS is normally all in the ISR, it completes at once.

Invariant (docs/design.md, the seeds): no acknowledged record is lost. Only ISR members are ever
elected; the ISR only shrinks by removing replicas, never to nothing, and a target replica
is only counted once the leader put it in the ISR (it had every committed record).

A crash between the two writes of step 2 leaves RS in the topic znode with a partition state
that already completed; the next controller finds every target replica in the ISR and
completes again (one more leader epoch). A dead target replica holds the reassignment until
it returns (or until it is cancelled); a removed replica that was down when its StopReplica
went out deletes its log when it returns (``tidelog.server.replica.stray_replicas``).

The deterministic simulator (``Simulation.reassign``, ``tests/sim/test_reassignment.py``,
``python -m tidelog.testing.soak --reassign-share 1``) runs the same rules with crashes,
pauses, lost answers and controller failovers. A start's LeaderAndIsr (same epochs, new
replica list) must not reset a leader's in-flight ISR change (``Partition.make_leader``,
docs/replication.md).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Collection, Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Protocol

from tidelog.controller import decisions
from tidelog.controller.context import ControllerContext
from tidelog.controller.decisions import ReplicaAssignment
from tidelog.controller.history import Cause, ControllerHistory
from tidelog.controller.messages import BrokerMessages
from tidelog.controller.state_writes import Decide
from tidelog.errors import ErrorCode
from tidelog.model import NO_BROKER, BrokerId, TopicPartition
from tidelog.replication.partition import LeaderAndIsr
from tidelog.zk import ZkClient
from tidelog.zk import reassign as zk_reassign
from tidelog.zk.znodes import PartitionState, TopicAssignment

log = logging.getLogger(__name__)

#: Lost compare-and-sets on a topic znode before the request is answered with an error.
MAX_TOPIC_ROUNDS = 5


@dataclass(frozen=True, slots=True)
class ReassignmentResult:
    """One partition's answer to AlterPartitionReassignments."""

    error: ErrorCode
    message: str | None = None


def replica_assignment(assignment: TopicAssignment, partition: int) -> ReplicaAssignment:
    """The partition's RS, adding and removing as the topic znode holds them."""
    return ReplicaAssignment(
        replicas=tuple(assignment.partitions.get(partition, ())),
        adding=tuple(assignment.adding_replicas.get(partition, ())),
        removing=tuple(assignment.removing_replicas.get(partition, ())),
    )


def with_partition(
    assignment: TopicAssignment, partition: int, planned: ReplicaAssignment
) -> TopicAssignment:
    """``assignment`` with one partition's RS, adding and removing replaced."""
    adding = {p: rs for p, rs in assignment.adding_replicas.items() if p != partition}
    removing = {p: rs for p, rs in assignment.removing_replicas.items() if p != partition}
    if planned.adding:
        adding[partition] = planned.adding
    if planned.removing:
        removing[partition] = planned.removing
    return replace(
        assignment,
        partitions={**assignment.partitions, partition: planned.replicas},
        adding_replicas=adding,
        removing_replicas=removing,
    )


class WriteDecided(Protocol):
    """``StateWriter.write_decided``: decide and CAS-write; returns the changed partitions."""

    def __call__(
        self, decide: Decide, candidates: Iterable[TopicPartition], cause: Cause | None = None
    ) -> Awaitable[set[TopicPartition]]: ...


@dataclass(frozen=True, slots=True, kw_only=True)
class ReassignmentContext:
    """What the reassignment steps use of the controller: its cache, its ZooKeeper session,
    its history, its compare-and-set state writes and its messages to brokers."""

    ctx: ControllerContext
    zk: ZkClient
    history: ControllerHistory
    write_decided: WriteDecided
    messages: BrokerMessages


class Reassignments:
    """The reassignment steps of one controller (module docstring); every method runs in
    the controller's event queue, on its cached context."""

    def __init__(self, context: ReassignmentContext) -> None:
        self.c = context

    # -- reading --------------------------------------------------------------------------

    def of(self, tp: TopicPartition) -> ReplicaAssignment | None:
        assignment = self.c.ctx.assignments.get(tp.topic)
        if assignment is None or tp.partition not in assignment.partitions:
            return None
        return replica_assignment(assignment, tp.partition)

    def ongoing(self) -> dict[TopicPartition, ReplicaAssignment]:
        """Every partition being reassigned (ListPartitionReassignments with null topics)."""
        out: dict[TopicPartition, ReplicaAssignment] = {}
        for topic, assignment in self.c.ctx.assignments.items():
            if topic in self.c.ctx.deleting:
                continue
            for p in sorted({*assignment.adding_replicas, *assignment.removing_replicas}):
                ra = replica_assignment(assignment, p)
                if ra.is_reassigning:
                    out[TopicPartition(topic, p)] = ra
        return out

    # -- step 1 and 3: start or replace; step 4: cancel -------------------------------------

    async def alter(
        self, wanted: Mapping[TopicPartition, tuple[BrokerId, ...] | None]
    ) -> dict[TopicPartition, ReassignmentResult]:
        c = self.c
        results: dict[TopicPartition, ReassignmentResult] = {}
        if c.ctx.seat is None:
            return dict.fromkeys(wanted, ReassignmentResult(ErrorCode.NOT_CONTROLLER))
        registered = set(c.ctx.live)
        by_topic: dict[str, dict[int, tuple[BrokerId, ...] | None]] = {}
        for tp, target in wanted.items():
            current = self.of(tp)
            if current is None or tp.topic in c.ctx.deleting:
                results[tp] = ReassignmentResult(
                    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                    f"The partition {tp} does not exist.",
                )
                continue
            if target is None:
                if not current.is_reassigning:
                    results[tp] = ReassignmentResult(
                        ErrorCode.NO_REASSIGNMENT_IN_PROGRESS,
                        f"There is no ongoing reassignment for partition {tp}.",
                    )
                    continue
            else:
                problem = decisions.reassignment_target_error(target, registered)
                if problem is not None:
                    results[tp] = ReassignmentResult(ErrorCode.INVALID_REPLICA_ASSIGNMENT, problem)
                    continue
            by_topic.setdefault(tp.topic, {})[tp.partition] = target
        started: dict[TopicPartition, tuple[ReplicaAssignment, ReplicaAssignment]] = {}
        for topic, targets in sorted(by_topic.items()):
            outcome = await self._write_plans(topic, targets)
            if not c.ctx.is_active:
                break
            for p, (result, before_after) in outcome.items():
                results[TopicPartition(topic, p)] = result
                if before_after is not None:
                    started[TopicPartition(topic, p)] = before_after
        if not c.ctx.is_active:
            return {
                tp: results.get(tp, ReassignmentResult(ErrorCode.NOT_CONTROLLER)) for tp in wanted
            }
        await self._after_start(started)
        return {tp: results[tp] for tp in wanted}

    async def _write_plans(
        self, topic: str, targets: Mapping[int, tuple[BrokerId, ...] | None]
    ) -> dict[int, tuple[ReassignmentResult, tuple[ReplicaAssignment, ReplicaAssignment] | None]]:
        """Plan every partition of ``topic`` from its znode and write them in one CAS."""
        c = self.c
        for _ in range(MAX_TOPIC_ROUNDS):
            seat = c.ctx.seat
            if seat is None:
                return {}
            found = await c.zk.get_topic_assignments([topic])
            if topic not in found:
                return {
                    p: (ReassignmentResult(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION), None)
                    for p in targets
                }
            stored, version = found[topic]
            known = c.ctx.assignments.get(topic)
            topic_id = known.topic_id if known is not None else stored.topic_id
            updated = replace(stored, topic_id=topic_id)
            out: dict[
                int,
                tuple[ReassignmentResult, tuple[ReplicaAssignment, ReplicaAssignment] | None],
            ] = {}
            for p, target in sorted(targets.items()):
                current = replica_assignment(updated, p)
                if target is None and not current.is_reassigning:
                    out[p] = (ReassignmentResult(ErrorCode.NO_REASSIGNMENT_IN_PROGRESS), None)
                    continue
                planned = decisions.plan_reassignment(
                    current, current.origin if target is None else target
                )
                problem = self._removal_problem(TopicPartition(topic, p), current, planned)
                if problem is not None:
                    out[p] = (
                        ReassignmentResult(ErrorCode.INVALID_REPLICA_ASSIGNMENT, problem),
                        None,
                    )
                    continue
                updated = with_partition(updated, p, planned)
                out[p] = (ReassignmentResult(ErrorCode.NONE), (current, planned))
            if not any(ba is not None for _, ba in out.values()):
                return out
            if await c.zk.set_topic_assignment(topic, updated, version, seat):
                c.ctx.assignments[topic] = updated
                for p, (_, ba) in out.items():
                    if ba is not None:
                        cancel = targets[p] is None
                        c.history.record(
                            "reassignment_cancel" if cancel else "reassignment_start",
                            f"reassignment {'cancelled' if cancel else 'started'}: "
                            f"{list(ba[0].replicas)} -> {list(ba[1].target)}",
                            tp=TopicPartition(topic, p),
                            replicas=list(ba[0].replicas),
                            target=list(ba[1].target),
                        )
                        log.info(
                            "controller %s: reassigning %s-%d: %s -> %s (adding %s, removing %s)",
                            c.ctx.broker_id,
                            topic,
                            p,
                            list(ba[0].replicas),
                            list(ba[1].target),
                            list(ba[1].adding),
                            list(ba[1].removing),
                        )
                return out
        return {
            p: (
                ReassignmentResult(
                    ErrorCode.REASSIGNMENT_IN_PROGRESS,
                    f"The topic '{topic}' kept changing; try again.",
                ),
                None,
            )
            for p in targets
        }

    def _removal_problem(
        self, tp: TopicPartition, before: ReplicaAssignment, after: ReplicaAssignment
    ) -> str | None:
        """Step 3: replicas leaving at once (``decisions.replica_removal_problem``)."""
        state = self.c.ctx.states.get(tp)
        if state is None:
            return None
        dropped = set(before.replicas) - set(after.replicas)
        return decisions.replica_removal_problem(
            tp, state.leader_and_isr(), dropped, after.replicas, self.c.ctx.electable()
        )

    async def _after_start(
        self, started: Mapping[TopicPartition, tuple[ReplicaAssignment, ReplicaAssignment]]
    ) -> None:
        c = self.c
        seat = c.ctx.seat
        if seat is None or not started:
            return
        dropped = {
            tp: set(before.replicas) - set(after.replicas)
            for tp, (before, after) in started.items()
            if set(before.replicas) - set(after.replicas)
        }
        # Every changed replica set writes the state: the partition epoch moves, so an
        # AlterPartition built on the old set is refused (``decisions.on_replicas_changed``).
        electable = c.ctx.electable()
        changed = await c.write_decided(
            lambda tp, state: decisions.on_replicas_changed(
                state.leader_and_isr(), started[tp][1].replicas, dropped.get(tp, ()), electable
            ),
            started,
            Cause("reassignment", "reassignment removes replicas"),
        )
        if c.ctx.seat is None:
            return
        c.messages.leader_and_isr(started)
        for tp, gone in sorted(dropped.items()):
            self._stop_and_delete(tp, gone)
        c.messages.update_metadata(started.keys() | changed)
        await self.maybe_complete(started)

    # -- step 2: completion -----------------------------------------------------------------

    async def maybe_complete(self, tps: Iterable[TopicPartition] | None = None) -> None:
        """Complete every reassignment among ``tps`` (None: all) whose target is in sync."""
        c = self.c
        if c.ctx.seat is None:
            return
        ongoing = self.ongoing()
        candidates = [tp for tp in (ongoing if tps is None else tps) if tp in ongoing]
        if not candidates:
            return
        electable = c.ctx.electable()
        plans = {tp: ongoing[tp] for tp in candidates}

        def decide(tp: TopicPartition, state: PartitionState) -> LeaderAndIsr | None:
            return decisions.complete_reassignment(plans[tp], state.leader_and_isr(), electable)

        done = await c.write_decided(
            decide, candidates, Cause("reassignment", "reassignment target in sync")
        )
        if c.ctx.seat is None or not done:
            return
        finished: set[TopicPartition] = set()
        for topic in sorted({tp.topic for tp in done}):
            finished |= await self._write_targets(
                topic, {tp.partition: plans[tp] for tp in done if tp.topic == topic}
            )
            if not c.ctx.is_active:
                return
        for tp in sorted(finished):
            c.history.record(
                "reassignment_complete",
                f"reassignment complete: replicas {list(plans[tp].target)}",
                tp=tp,
                replicas=list(plans[tp].target),
            )
            log.info(
                "controller %s: reassignment of %s completed: replicas %s, leader %s, ISR %s",
                c.ctx.broker_id,
                tp,
                list(plans[tp].target),
                c.ctx.states[tp].leader,
                list(c.ctx.states[tp].isr),
            )
        c.messages.leader_and_isr(done)
        for tp in sorted(finished):
            self._stop_and_delete(tp, set(plans[tp].removing))
        c.messages.update_metadata(done)
        await zk_reassign.remove_from_reassignment(c.zk, finished)

    async def _write_targets(
        self, topic: str, plans: Mapping[int, ReplicaAssignment]
    ) -> set[TopicPartition]:
        """The topic znode: each completed partition gets its target, no adding/removing."""
        c = self.c
        for _ in range(MAX_TOPIC_ROUNDS):
            seat = c.ctx.seat
            if seat is None:
                return set()
            found = await c.zk.get_topic_assignments([topic])
            if topic not in found:
                return set()
            stored, version = found[topic]
            known = c.ctx.assignments.get(topic)
            updated = replace(stored, topic_id=known.topic_id if known else stored.topic_id)
            for p, plan in plans.items():
                updated = with_partition(updated, p, ReplicaAssignment(replicas=plan.target))
            if await c.zk.set_topic_assignment(topic, updated, version, seat):
                c.ctx.assignments[topic] = updated
                return {TopicPartition(topic, p) for p in plans}
        log.warning("controller %s: could not finish reassignments of %s", c.ctx.broker_id, topic)
        return set()

    def _stop_and_delete(self, tp: TopicPartition, brokers: Collection[BrokerId]) -> None:
        c = self.c
        seat = c.ctx.seat
        if seat is None:
            return
        for broker in sorted(brokers):
            if broker in c.ctx.live and broker != NO_BROKER:
                c.messages.sender.stop_replica(
                    c.ctx.live[broker], seat.controller_epoch, [tp], delete=True
                )

    # -- /admin/reassign_partitions ------------------------------------------------------------

    async def on_zk_request(self) -> None:
        """The znode appeared or changed (or we just became the controller): start what it
        asks that is not already running with that target; drop what cannot start."""
        c = self.c
        if c.ctx.seat is None:
            return
        asked = await zk_reassign.read_reassignment(c.zk)
        if not asked:
            return
        todo: dict[TopicPartition, tuple[BrokerId, ...] | None] = {}
        unknown: list[TopicPartition] = []
        for tp, target in asked.items():
            current = self.of(tp)
            if current is None:
                unknown.append(tp)
            elif not (current.is_reassigning and current.target == target) and not (
                not current.is_reassigning and current.replicas == target
            ):
                todo[tp] = target
        refused: list[TopicPartition] = []
        if todo:
            results = await self.alter(todo)
            refused = [tp for tp, r in results.items() if r.error is not ErrorCode.NONE]
            for tp in refused:
                log.warning(
                    "controller %s: %s asks an impossible reassignment of %s: %s",
                    c.ctx.broker_id,
                    zk_reassign.REASSIGN_PARTITIONS_PATH,
                    tp,
                    results[tp].message or results[tp].error.name,
                )
        done = [tp for tp in asked if (ra := self.of(tp)) is not None and not ra.is_reassigning]
        if c.ctx.seat is not None:
            await zk_reassign.remove_from_reassignment(c.zk, [*unknown, *refused, *done])
