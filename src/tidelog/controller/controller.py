"""The active controller: Kafka's ZooKeeper-era ``KafkaController``, on asyncio.

Every broker runs a ``Controller``; the one that wins ``/controller`` is *active*. The rules
(docs/design.md 5, 9-12) are the pure functions of ``tidelog.controller.decisions``; this module
only feeds them state from ZooKeeper (``tidelog.zk``), writes their results back
with compare-and-set (``state_writes``), and tells brokers through an injected
``ControllerSender`` (``messages``). This module is the event loop, failover, broker and
topic changes, and the requests the controller answers.

Theory of operation:

1. One event queue, one consumer task (Kafka's ControllerEventManager). Watches, session
   events and requests (AlterPartition) only *enqueue*; the consumer reads current state from
   ZooKeeper and acts, so a burst of watch fires costs one re-read, and no two handlers ever
   interleave.
2. Election: whenever ``/controller`` is empty, try to take it (``ZkClient.try_become_controller``
   bumps ``/controller_epoch`` atomically). The winner loads every broker, topic, assignment
   and partition state, repairs what happened while there was no controller (brokers that
   died, topics without states), then sends LeaderAndIsr and UpdateMetadata to every live
   broker. Losing the seat (another id in ``/controller``, our session expired, or a write
   answered CONTROLLER_MOVED) drops all controller state at once.
3. Broker death (rule 10): for every partition the dead broker led or was in the ISR of,
   ``decisions.on_broker_failure`` gives the new state; all are written in one pipelined
   batch, each as a CAS on its partition epoch, fenced by the controller epoch. A lost CAS
   re-reads that partition and decides again. Then ONE LeaderAndIsr per affected live broker
   and one UpdateMetadata per live broker. A bounced broker (same id, new broker epoch) is a
   death followed by a start.
4. Broker start: offline partitions it can lead come back (``on_broker_startup``); it gets
   UpdateMetadata for everything and LeaderAndIsr for the partitions it hosts.
5. New topics (a child of ``/brokers/topics`` appears; ``topic_admin.create_topic`` writes it,
   from any broker, like Kafka's AdminZkClient): a topic id is added if missing; each
   partition starts with leader = first live replica in assignment order, ISR = the live
   replicas, leader epoch 0, partition epoch 0 (``state_writes``).
6. AlterPartition (rule 5): checked by ``decisions.alter_partition`` against the cached
   state (stale leader epoch -> FENCED_LEADER_EPOCH, stale partition epoch ->
   INVALID_UPDATE_VERSION, old broker incarnation -> STALE_BROKER_EPOCH), written with CAS;
   the answer carries the new partition epoch.
7. Deletion: a ``/admin/delete_topics/<t>`` marker (``deletion``).
8. Log dir failure and recovery (KIP-112; ``log_dirs``): a broker whose log dir is offline is
   never elected nor added to an ISR until it reports the dir back.
9. Partition reassignment (KIP-455; ``reassignment``), on a narrow ``ReassignmentContext``.

A ``ZkError`` inside a handler (ZooKeeper unreachable past the retry deadline) is logged
and the controller resigns; it competes again when ``/controller`` next changes.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Final, TypeVar

from tidelog.aio import cancel_and_wait
from tidelog.controller import decisions
from tidelog.controller.context import MAX_CAS_ROUNDS, ControllerContext
from tidelog.controller.decisions import ReplicaAssignment
from tidelog.controller.deletion import delete_marked_topics
from tidelog.controller.failures import BrokerFailures
from tidelog.controller.history import Cause, ControllerHistory, after_failover, dead_brokers
from tidelog.controller.leader_moves import ControlledShutdownResult, LeaderMoves
from tidelog.controller.log_dirs import LogDirs
from tidelog.controller.messages import BrokerMessages, ControllerSender
from tidelog.controller.reassignment import (
    ReassignmentContext,
    ReassignmentResult,
    Reassignments,
)
from tidelog.controller.state_writes import StateWriter
from tidelog.errors import ErrorCode
from tidelog.histogram import Histogram
from tidelog.model import NO_BROKER, BrokerId, ControllerEpoch, LeaderEpoch, TopicPartition
from tidelog.replication.partition import AlterPartitionProposal
from tidelog.zk import (
    ControllerSeat,
    LiveBroker,
    SessionEvent,
    StateWriteOutcome,
    Watch,
    ZkClient,
    ZkError,
)
from tidelog.zk import reassign as zk_reassign
from tidelog.zk.znodes import PartitionState, TopicAssignment

log = logging.getLogger(__name__)

T = TypeVar("T")

#: After a failed handler, when to look at ``/controller`` again.
RECHECK_AFTER_ERROR_S: Final = 1.0


# -- the controller ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class AlterPartitionResult:
    """The answer to one partition of an AlterPartition request."""

    error: ErrorCode
    #: On NONE: the committed state (new ISR and partition epoch); on a fencing error: the
    #: state in force, so the leader can catch up.
    state: PartitionState | None = None


class Controller:
    """One broker's controller component: competes for ``/controller``, acts when active."""

    def __init__(
        self,
        zk: ZkClient,
        broker_id: BrokerId,
        sender: ControllerSender,
        *,
        unclean_leader_election_enable: bool = False,
        auto_leader_rebalance_enable: bool = True,
        leader_imbalance_check_interval_ms: int = 300_000,
        leader_imbalance_per_broker_percentage: int = 10,
    ) -> None:
        """Settings are Kafka's broker configs of the same names, with Kafka's defaults."""
        self.zk = zk
        self.broker_id = broker_id
        self.sender = sender
        self.default_unclean = unclean_leader_election_enable
        self.auto_leader_rebalance_enable = auto_leader_rebalance_enable
        self.leader_imbalance_check_interval_ms = leader_imbalance_check_interval_ms
        self.leader_imbalance_per_broker_percentage = leader_imbalance_per_broker_percentage
        self._queue: asyncio.Queue[Callable[[], Awaitable[None]]] = asyncio.Queue()
        self._task: asyncio.Task[None] | None = None
        self._rebalance_task: asyncio.Task[None] | None = None
        self._watches: list[Watch] = []
        #: Kafka's ControllerContext, valid only while active.
        self.ctx = ControllerContext(broker_id)
        #: One data watch per topic while active (Kafka's PartitionModificationsHandler).
        self._topic_watches: dict[str, Watch] = {}
        #: Its decisions and their reasons (``tidelog.controller.history``).
        self.history = ControllerHistory(zk, broker_id)
        self.messages = BrokerMessages(self.ctx, sender)
        self.writer = StateWriter(self.ctx, zk, self.history, self._resign)
        self.failures = BrokerFailures(self.ctx, zk, self.writer, lambda: self.default_unclean)
        self.log_dirs = LogDirs(
            self.ctx,
            zk,
            self.writer,
            self.messages,
            on_brokers_change=self._on_brokers_change,
            elect_offline=self.failures.elect_offline,
        )
        self.leader_moves = LeaderMoves(self.ctx, self.writer, self.messages)
        #: Partition reassignments (KIP-455; ``tidelog.controller.reassignment``).
        self.reassignments = Reassignments(
            ReassignmentContext(
                ctx=self.ctx,
                zk=zk,
                history=self.history,
                write_decided=self.writer.write_decided,
                messages=self.messages,
            )
        )

    # -- election counters (Kafka's ControllerStats; tidelog.server.metrics) ------------------

    @property
    def leader_elections(self) -> int:
        """Partition leaders this controller wrote that changed the leader epoch."""
        return self.writer.leader_elections

    @property
    def unclean_leader_elections(self) -> int:
        """Those of ``leader_elections`` taken from outside the ISR."""
        return self.writer.unclean_leader_elections

    @property
    def election_times(self) -> Histogram:
        """Kafka's LeaderElectionRateAndTimeMs timer: the time of each decide-and-write round
        that elected at least one leader."""
        return self.writer.election_times

    def _count_election(self, before: PartitionState, after: PartitionState) -> None:
        self.writer.count_election(before, after)

    # -- the cache under the controller's names (tidelog.server.metrics' tests set them) -----

    @property
    def _seat(self) -> ControllerSeat | None:
        return self.ctx.seat

    @_seat.setter
    def _seat(self, seat: ControllerSeat | None) -> None:
        self.ctx.seat = seat

    @property
    def _live(self) -> dict[BrokerId, LiveBroker]:
        return self.ctx.live

    @property
    def _assignments(self) -> dict[str, TopicAssignment]:
        return self.ctx.assignments

    @property
    def _states(self) -> dict[TopicPartition, PartitionState]:
        return self.ctx.states

    @property
    def _deleting(self) -> set[str]:
        return self.ctx.deleting

    # -- lifecycle ----------------------------------------------------------------------------

    async def start(self) -> None:
        """Start competing; returns once the watches are set (election runs in the task)."""
        loop = asyncio.get_running_loop()
        self._task = loop.create_task(self._run(), name="controller")
        if self.auto_leader_rebalance_enable:
            self._rebalance_task = loop.create_task(
                self._rebalance_timer(), name="controller-rebalance"
            )
        self.zk.add_session_listener(self._on_session_event)
        self._watches.append(
            await self.zk.watch_controller(lambda _id: self._enqueue(self._on_controller_change))
        )
        self._watches.append(
            await self.zk.watch_brokers(lambda _ids: self._enqueue(self._on_brokers_change))
        )
        self._watches.append(
            await self.zk.watch_topics(lambda _names: self._enqueue(self._on_topics_change))
        )
        self._watches.append(
            await self.zk.watch_topic_deletions(
                lambda _names: self._enqueue(self._on_topic_deletions)
            )
        )
        self._watches.append(
            await self.zk.watch_log_dir_events(
                lambda names: self._enqueue(self.log_dirs.on_events) if names else None
            )
        )
        self._watches.append(
            await zk_reassign.watch_reassignment(
                self.zk, lambda: self._enqueue(self.reassignments.on_zk_request)
            )
        )

    async def stop(self) -> None:
        """Stop the consumer; give up ``/controller`` if we hold it (a clean handover)."""
        for watch in self._watches:
            watch.cancel()
        seat = self.ctx.seat
        self._resign("stopping")
        for task in (self._task, self._rebalance_task):
            if task is not None:
                await cancel_and_wait(task)
        if seat is not None:
            with contextlib.suppress(ZkError):
                await self.zk.resign_controller(seat)

    async def stop_without_resigning(self) -> None:
        """Stop the consumer only, as if the process died (tests, fault injection)."""
        for watch in self._watches:
            watch.cancel()
        self._resign("stopped")
        for task in (self._task, self._rebalance_task):
            if task is not None:
                await cancel_and_wait(task)

    @property
    def is_active(self) -> bool:
        return self.ctx.is_active

    @property
    def controller_epoch(self) -> ControllerEpoch | None:
        return None if self.ctx.seat is None else self.ctx.seat.controller_epoch

    def offline_partition_count(self) -> int:
        """Partitions with no leader, topics being deleted aside (Kafka's
        OfflinePartitionsCount); 0 unless active."""
        if self.ctx.seat is None:
            return 0
        return sum(
            1
            for tp, state in self.ctx.states.items()
            if state.leader == NO_BROKER and tp.topic not in self.ctx.deleting
        )

    def preferred_replica_imbalance_count(self) -> int:
        """Partitions led by a broker other than their first replica (Kafka's
        PreferredReplicaImbalanceCount); 0 unless active."""
        if self.ctx.seat is None:
            return 0
        count = 0
        for tp, state in self.ctx.states.items():
            replicas = self.ctx.replicas(tp)
            if replicas and state.leader != replicas[0] and tp.topic not in self.ctx.deleting:
                count += 1
        return count

    def global_counts(self) -> tuple[int, int]:
        """(topics, partitions) of the cluster (Kafka's GlobalTopicCount and
        GlobalPartitionCount); (0, 0) unless active."""
        if self.ctx.seat is None:
            return 0, 0
        return len(self.ctx.assignments), len(self.ctx.states)

    def partition_state(self, tp: TopicPartition) -> PartitionState | None:
        """The cached state of ``tp`` (active controller only)."""
        return self.ctx.states.get(tp) if self.ctx.seat is not None else None

    # -- the event queue ----------------------------------------------------------------------

    def _enqueue(self, handler: Callable[[], Awaitable[None]]) -> None:
        self._queue.put_nowait(handler)

    async def _in_queue(self, work: Callable[[], Awaitable[T]]) -> T:
        """Run ``work`` in the controller's queue (after what is queued, never beside another
        handler) and return its result to the caller (a request handler); its exception
        reaches both the caller and the queue's consumer (which then resigns, rule 2)."""
        future: asyncio.Future[T] = asyncio.get_running_loop().create_future()

        async def handle() -> None:
            try:
                result = await work()
            except BaseException as exc:
                if not future.done():
                    future.set_exception(exc)
                raise
            if not future.done():
                future.set_result(result)

        self._enqueue(handle)
        return await future

    async def _run(self) -> None:
        while True:
            handler = await self._queue.get()
            try:
                await handler()
            except ZkError:
                log.exception("controller %s: ZooKeeper failed", self.broker_id)
                await self._move_controller("ZooKeeper error")
            except Exception:
                log.exception("controller %s: handler failed", self.broker_id)
                await self._move_controller("handler error")

    async def _move_controller(self, why: str) -> None:
        """Kafka's triggerControllerMove: give the seat up in ZooKeeper, not just locally.

        Only dropping local state would leave ``/controller`` held by a controller that no
        longer acts. If ZooKeeper cannot be reached to delete it, we look again shortly: the
        node is then either gone (an election follows) or still ours (we take it back and
        reload everything, ``_on_controller_change``).
        """
        seat = self.ctx.seat
        self._resign(why)
        if seat is not None:
            with contextlib.suppress(ZkError):
                await self.zk.resign_controller(seat)
        asyncio.get_running_loop().call_later(
            RECHECK_AFTER_ERROR_S, self._enqueue, self._on_controller_change
        )

    def _on_session_event(self, event: SessionEvent, _broker_epoch: int | None) -> None:
        if event is SessionEvent.EXPIRED:
            # Our ephemeral /controller went with the session.
            self._resign("session expired")
        elif event is SessionEvent.REESTABLISHED:
            self._enqueue(self._on_controller_change)

    def _resign(self, why: str) -> None:
        if self.ctx.seat is not None:
            log.info("controller %s resigns (%s)", self.broker_id, why)
        self.ctx.clear()
        self.history.resign()
        for watch in self._topic_watches.values():
            watch.cancel()
        self._topic_watches.clear()

    # -- election and failover ----------------------------------------------------------------

    async def _on_controller_change(self) -> None:
        current = await self.zk.get_controller()
        if current is not None and current != self.broker_id:
            self._resign(f"broker {current} is the controller")
            return
        if current == self.broker_id and self.ctx.seat is not None:
            return
        if current is None or self.ctx.seat is None:
            result = await self.zk.try_become_controller(self.broker_id)
            if result.seat is None:
                self._resign(f"broker {result.current_controller} won")
                return
            self.ctx.seat = result.seat
            log.info(
                "broker %s is the controller (epoch %s)",
                self.broker_id,
                result.seat.controller_epoch,
            )
            await self._on_failover()

    async def _on_failover(self) -> None:
        """Kafka's onControllerFailover: load everything, repair, tell everyone."""
        if self.ctx.seat is not None:
            await self.history.take_over(self.ctx.seat.controller_epoch)
        self.ctx.live = await self.zk.get_live_brokers()
        topics = await self.zk.get_topics()
        await self._load_topics(topics)
        # Topics that were created while there was no controller.
        await self.writer.create_missing(sorted(self.ctx.assignments))
        # Brokers that died while there was no controller: their partitions. A broker that
        # died and registered again in that gap is alive now but bounced all the same: it
        # lost its in-memory state, and after a crash of its machine maybe the unflushed
        # tail of its logs. Its registration (broker epoch = czxid) is newer than the last
        # write of the partition's state, which a controller that saw it go would have
        # made. Keeping it as leader or ISR member at the old leader epoch would let it
        # serve, or be elected with, a log missing acknowledged records (a torn tail). So
        # it is failed and started like any bounce (Kafka's KIP-380 bounce handling;
        # KIP-966 motivates it).
        restarted = {
            tp: bounced
            for tp, state in self.ctx.states.items()
            if (bounced := self.failures.restarted_since_written(state))
        }
        if restarted:
            log.info(
                "controller %s: replicas restarted while there was no controller: %s",
                self.broker_id,
                {str(tp): sorted(b) for tp, b in sorted(restarted.items())[:10]},
            )
        self.history.brokers_gone(self.ctx.live.keys(), self.ctx.states)
        changed = await self.failures.handle_dead_replicas(
            restarted, after_failover(self.ctx.live.keys(), restarted)
        )
        changed |= await self.failures.elect_offline(self.ctx.live.keys())
        self.messages.leader_and_isr(self.ctx.states.keys(), to=self.ctx.live.keys())
        self.messages.update_metadata(self.ctx.states.keys(), to=self.ctx.live.keys())
        self.ctx.deleting.clear()
        await self._on_topic_deletions()
        await self.log_dirs.on_events()
        # Reassignments that were running (topic znodes) and asked for (the admin znode).
        await self.reassignments.maybe_complete()
        await self.reassignments.on_zk_request()

    async def _load_topics(self, topics: Iterable[str]) -> None:
        found = await self.zk.get_topic_assignments(topics)
        for topic, (stored, version) in found.items():
            assignment = stored
            if stored.topic_id is None:
                # A topic from before topic ids: give it one (Kafka 2.8+ does the same).
                with_id = replace(stored, topic_id=uuid.uuid4())
                if await self.zk.set_topic_assignment(topic, with_id, version, self.ctx.seat):
                    assignment = with_id
                else:
                    again = await self.zk.get_topic_assignment(topic)
                    assignment = again if again is not None else stored
            self.ctx.assignments[topic] = assignment
            if topic not in self._topic_watches:
                self._topic_watches[topic] = await self.zk.watch_topic(
                    topic, self._partition_modifications_handler(topic)
                )
        tps = [TopicPartition(t, p) for t, a in self.ctx.assignments.items() for p in a.partitions]
        self.ctx.states.update(await self.zk.get_partition_states(tps))

    def _partition_modifications_handler(
        self, topic: str
    ) -> Callable[[TopicAssignment | None], None]:
        async def handle() -> None:
            await self._on_partition_modifications(topic)

        return lambda _assignment: self._enqueue(handle)

    async def _on_partition_modifications(self, topic: str) -> None:
        """Partitions added to an existing topic: states for the new ones, then tell brokers."""
        if self.ctx.seat is None or topic not in self.ctx.assignments or topic in self.ctx.deleting:
            return
        found = await self.zk.get_topic_assignments([topic])
        if topic not in found:
            return  # being deleted; the topics watch handles it
        assignment = found[topic][0]
        known = self.ctx.assignments[topic]
        if assignment.topic_id != known.topic_id and known.topic_id is not None:
            log.error("topic id of %s changed in ZooKeeper; keeping %s", topic, known.topic_id)
            return
        added = set(assignment.partitions) - set(known.partitions)
        if not added:
            return
        self.ctx.assignments[topic] = replace(assignment, topic_id=known.topic_id)
        created = await self.writer.create_missing([topic])
        self.messages.leader_and_isr(created, new=created)
        self.messages.update_metadata(created)

    def electable_besides(self, broker_id: BrokerId) -> bool:
        """Whether a live broker other than ``broker_id`` may take leaderships (active
        controller only): when every other one is in a controlled shutdown too, a stopping
        broker's remaining leaderships cannot move, however often it asks."""
        return self.ctx.seat is not None and bool(self.ctx.electable() - {broker_id})

    # -- broker changes -----------------------------------------------------------------------

    async def _on_brokers_change(self) -> None:
        if self.ctx.seat is None:
            return
        old = self.ctx.live
        new = await self.zk.get_live_brokers()
        dead = {b for b in old if b not in new}
        bounced = {b for b in old if b in new and new[b].broker_epoch != old[b].broker_epoch}
        started = {b for b in new if b not in old} | bounced
        if not dead and not started:
            return
        log.info(
            "controller %s: brokers dead %s, started %s (bounced %s)",
            self.broker_id,
            sorted(dead),
            sorted(started),
            sorted(bounced),
        )
        for b in sorted(dead):
            self.history.record("broker_death", f"broker {b} died", broker=int(b))
        for b in sorted(started):
            why = "restarted (new registration)" if b in bounced else "started"
            self.history.record("broker_start", f"broker {b} {why}", broker=int(b))
        self.ctx.shutting_down -= dead | bounced
        # A new incarnation reports its log dirs afresh (it probes them at start).
        self.ctx.offline_dirs -= dead | bounced
        changed: set[TopicPartition] = set()
        if dead or bounced:
            # A bounced broker lost its in-memory state: a failure, then a start (Kafka).
            self.ctx.live = {b: v for b, v in new.items() if b not in bounced}
            changed |= await self.failures.handle_dead_replicas(cause=dead_brokers(dead | bounced))
        self.ctx.live = dict(new)
        if not self.is_active:  # a write found the controller epoch moved
            return
        changed |= await self.failures.elect_offline(started)
        # Started brokers learn everything; the rest learn the new broker list and changes.
        if started:
            self.messages.update_metadata(self.ctx.states.keys(), to=started)
            self.messages.leader_and_isr(self.ctx.states.keys(), to=started)
        others = set(self.ctx.live) - started
        self.messages.leader_and_isr(changed, to=others)
        self.messages.update_metadata(changed, to=others)
        # A reassignment waiting for a leader (its old one died) may end now.
        await self.reassignments.maybe_complete()

    # -- topics -------------------------------------------------------------------------------

    async def _on_topics_change(self) -> None:
        if self.ctx.seat is None:
            return
        topics = await self.zk.get_topics()
        new_topics = sorted(topics - self.ctx.assignments.keys())
        gone = set(self.ctx.assignments) - topics
        for topic in gone:
            self._forget_topic(topic)
        if not new_topics:
            return
        await self._load_topics(new_topics)
        created = await self.writer.create_missing(new_topics)
        self.messages.leader_and_isr(created, new=created)
        self.messages.update_metadata(created)

    def _forget_topic(self, topic: str) -> None:
        self.ctx.assignments.pop(topic, None)
        watch = self._topic_watches.pop(topic, None)
        if watch is not None:
            watch.cancel()
        for tp in [tp for tp in self.ctx.states if tp.topic == topic]:
            del self.ctx.states[tp]

    async def _on_topic_deletions(self) -> None:
        await delete_marked_topics(self.ctx, self.zk, self.messages, self._forget_topic)

    # -- AlterPartition -----------------------------------------------------------------------

    async def alter_partition(
        self,
        proposal: AlterPartitionProposal,
        *,
        broker_epoch: int = -1,
    ) -> AlterPartitionResult:
        """AlterPartition (API 56) for one partition, processed in the controller's queue."""
        return await self._in_queue(lambda: self._alter_partition(proposal, broker_epoch))

    async def _alter_partition(
        self, proposal: AlterPartitionProposal, broker_epoch: int
    ) -> AlterPartitionResult:
        tp = proposal.topic_partition
        for _ in range(MAX_CAS_ROUNDS):
            seat = self.ctx.seat
            if seat is None:
                return AlterPartitionResult(ErrorCode.NOT_CONTROLLER)
            current = self.ctx.states.get(tp)
            if current is None:
                return AlterPartitionResult(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
            leader = self.ctx.live.get(proposal.leader_id)
            error, decided = decisions.alter_partition(
                current.leader_and_isr(),
                proposal,
                self.ctx.replicas(tp),
                # KIP-841: a replica joins only if it is live, not in a controlled shutdown
                # and its log dir is online. A stopping broker's follower fetches go on for
                # a moment after its shutdown succeeded; its leaders, seeing it caught up,
                # would ask to add it back, and acks=all produces would then wait for a
                # broker that never fetches again until its death is noticed.
                self.ctx.electable(),
                broker_epoch=broker_epoch,
                registered_broker_epoch=-1 if leader is None else leader.broker_epoch,
            )
            if error is not ErrorCode.NONE:
                return AlterPartitionResult(error, current)
            if decided == current.leader_and_isr():
                return AlterPartitionResult(ErrorCode.NONE, current)  # already in force
            write = PartitionState(
                leader=decided.leader,
                leader_epoch=LeaderEpoch(decided.leader_epoch),
                isr=decided.isr,
                controller_epoch=seat.controller_epoch,
                partition_epoch=current.partition_epoch,
            )
            result = (await self.zk.update_partition_states({tp: write}, seat))[tp]
            if result.outcome is StateWriteOutcome.UPDATED and result.state is not None:
                self.history.partition_changed(
                    tp,
                    current,
                    result.state,
                    Cause("alter_partition", f"AlterPartition from leader {proposal.leader_id}"),
                )
                self.ctx.states[tp] = result.state
                # Kafka (ZK mode) tells everyone about the new ISR.
                self.messages.update_metadata([tp])
                if self._is_reassigning(tp):
                    # Its target replicas may all be in sync now (reassignment step 2).
                    self._enqueue(lambda: self.reassignments.maybe_complete([tp]))
                if decided.leader in self.ctx.offline_dirs:
                    # A leader kept for want of a clean successor (its log dir is offline)
                    # may now hand over to the replica that just joined. After our answer:
                    # the leader applies it before it learns of the move.
                    self._enqueue(lambda: self.log_dirs.move_from_offline_leaders([tp]))
                return AlterPartitionResult(ErrorCode.NONE, result.state)
            if result.outcome is StateWriteOutcome.CONTROLLER_MOVED:
                self._resign("controller epoch moved")
                return AlterPartitionResult(ErrorCode.NOT_CONTROLLER)
            if result.outcome is not StateWriteOutcome.BAD_VERSION:
                return AlterPartitionResult(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
            # The cache was stale: read and decide again.
            self.ctx.states.update(await self.zk.get_partition_states([tp]))
        return AlterPartitionResult(ErrorCode.INVALID_UPDATE_VERSION, self.ctx.states.get(tp))

    # -- controlled shutdown (rule 12) --------------------------------------------------------

    async def controlled_shutdown(
        self, broker_id: BrokerId, broker_epoch: int = -1
    ) -> ControlledShutdownResult:
        """ControlledShutdown (API 7): move ``broker_id``'s leaderships away before it stops.

        Its leaderships go to another live ISR member (new leader epoch; it hears of that in
        a LeaderAndIsr like every replica); as a follower it leaves the ISR (never emptying
        one) and gets StopReplica (no delete) for those partitions. ``remaining`` lists the
        partitions it still leads (no other ISR member): the broker retries, then stops
        anyway (Kafka's behaviour).
        """
        return await self._in_queue(
            lambda: self.leader_moves.controlled_shutdown(broker_id, broker_epoch)
        )

    # -- preferred leader election (rule 9, last sentence) ----------------------------------

    async def elect_preferred_leaders(
        self, partitions: Iterable[TopicPartition] | None = None
    ) -> dict[TopicPartition, ErrorCode]:
        """ElectLeaders (API 43, PREFERRED): leadership back to each partition's first replica.

        ``None`` means every partition (what ``auto.leader.rebalance.enable`` does). Per
        partition: NONE (moved), ELECTION_NOT_NEEDED (already there),
        PREFERRED_LEADER_NOT_AVAILABLE (it is not live or not in the ISR),
        UNKNOWN_TOPIC_OR_PARTITION, or NOT_CONTROLLER.
        """
        wanted = None if partitions is None else list(partitions)
        return await self._in_queue(lambda: self.leader_moves.elect_preferred(wanted))

    # -- partition reassignment (KIP-455; tidelog.controller.reassignment) -----------------

    async def alter_partition_reassignments(
        self, wanted: Mapping[TopicPartition, tuple[BrokerId, ...] | None]
    ) -> dict[TopicPartition, ReassignmentResult]:
        """AlterPartitionReassignments (API 45): per partition, a target (start or replace)
        or None (cancel), processed in the controller's queue."""
        return await self._in_queue(lambda: self.reassignments.alter(dict(wanted)))

    def list_partition_reassignments(
        self, partitions: Iterable[TopicPartition] | None = None
    ) -> dict[TopicPartition, ReplicaAssignment] | None:
        """ListPartitionReassignments (API 46): the partitions being reassigned among
        ``partitions`` (None: all); None when this controller is not active."""
        if self.ctx.seat is None:
            return None
        ongoing = self.reassignments.ongoing()
        if partitions is None:
            return ongoing
        return {tp: ongoing[tp] for tp in partitions if tp in ongoing}

    def _is_reassigning(self, tp: TopicPartition) -> bool:
        current = self.reassignments.of(tp)
        return current is not None and current.is_reassigning

    # -- auto.leader.rebalance.enable -------------------------------------------------------

    async def _rebalance_timer(self) -> None:
        while True:
            await asyncio.sleep(self.leader_imbalance_check_interval_ms / 1000.0)
            self._enqueue(self._auto_rebalance)

    async def _auto_rebalance(self) -> None:
        """Kafka's checkAndTriggerAutoLeaderRebalance (``LeaderMoves.rebalance_candidates``)."""
        if self.ctx.seat is None:
            return
        candidates = self.leader_moves.rebalance_candidates(
            self.leader_imbalance_per_broker_percentage
        )
        if candidates:
            log.info(
                "controller %s: preferred leader rebalance of %d partitions",
                self.broker_id,
                len(candidates),
            )
            await self.leader_moves.elect_preferred(sorted(candidates))
