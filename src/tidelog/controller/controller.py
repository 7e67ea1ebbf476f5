"""The active controller: Kafka's ZooKeeper-era ``KafkaController``, on asyncio.

Every broker runs a ``Controller``; the one that wins ``/controller`` is *active*. The rules
(DESIGN.md 5, 9-12) are the pure functions of ``tidelog.controller.decisions``; this module
only feeds them state from ZooKeeper (``tidelog.zk``), writes their results back
with compare-and-set, and tells brokers through an injected ``ControllerSender``.

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
5. New topics (a child of ``/brokers/topics`` appears; ``create_topic`` below writes it, from
   any broker, like Kafka's AdminZkClient): a topic id is added if missing; each partition
   starts with leader = first live replica in assignment order, ISR = the live replicas,
   leader epoch 0, partition epoch 0.
6. AlterPartition (rule 5): checked by ``decisions.alter_partition`` against the cached
   state (stale leader epoch -> FENCED_LEADER_EPOCH, stale partition epoch ->
   INVALID_UPDATE_VERSION, old broker incarnation -> STALE_BROKER_EPOCH), written with CAS;
   the answer carries the new partition epoch.
7. Deletion: a ``/admin/delete_topics/<t>`` marker -> StopReplica(delete) to its replicas,
   the topic's znodes removed, UpdateMetadata to all. (Kafka waits for StopReplica
   responses; here the sender is fire-and-forget, see ``ControllerSender``.)
8. Log dir failure (KIP-112): a broker that cannot write its log dir (full disk, IO error)
   posts ``/log_dir_event_notification/log_dir_event_<seq>`` (event 1); the controller
   deletes the notifications, marks the broker's replicas offline (never electable, never
   added to an ISR) and applies ``decisions.on_log_dir_failure`` to every partition it leads
   or is in the ISR of. Unlike Kafka (offline until restart), the broker posts event 2 once
   the dir has room again: its replicas become electable, offline partitions it can lead
   come back, and it gets LeaderAndIsr for all its partitions (it fetches and catches up;
   each leader adds it back to the ISR). The granularity is the broker (one log dir in
   practice). A new controller does not know of earlier events: the broker posts its
   failure again when it hears from a new controller epoch. An event of an incarnation
   that is no longer registered is ignored.

A ``ZkError`` inside a handler (ZooKeeper unreachable past the retry deadline) is logged
and the controller resigns; it competes again when ``/controller`` next changes.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
import uuid
from collections.abc import Awaitable, Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Final, Protocol, TypeVar

from tidelog.aio import cancel_and_wait
from tidelog.controller import decisions
from tidelog.controller.decisions import ReplicaAssignment
from tidelog.controller.history import Cause, ControllerHistory, after_failover, dead_brokers
from tidelog.controller.reassignment import ReassignmentResult, Reassignments
from tidelog.errors import ErrorCode
from tidelog.histogram import Histogram
from tidelog.model import (
    NO_BROKER,
    BrokerId,
    ControllerEpoch,
    LeaderEpoch,
    PartitionEpoch,
    TopicPartition,
)
from tidelog.replication.partition import AlterPartitionProposal, LeaderAndIsr
from tidelog.zk import (
    ControllerSeat,
    LiveBroker,
    SessionEvent,
    StateWriteOutcome,
    TopicCreateOutcome,
    Watch,
    ZkClient,
    ZkError,
    znodes,
)
from tidelog.zk import reassign as zk_reassign
from tidelog.zk.znodes import PartitionState, TopicAssignment

log = logging.getLogger(__name__)

T = TypeVar("T")

UNCLEAN_CONFIG: Final = "unclean.leader.election.enable"
#: The leader UpdateMetadata names for a partition of a deleted topic (Kafka's).
LEADER_DURING_DELETE: Final = BrokerId(-2)
#: How often a lost partition-state CAS is re-read and decided again before giving up.
MAX_CAS_ROUNDS: Final = 5
#: After a failed handler, when to look at ``/controller`` again.
RECHECK_AFTER_ERROR_S: Final = 1.0


# -- what the controller tells brokers -----------------------------------------------------------


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


# -- topic creation (any broker; Kafka's AdminZkClient) ------------------------------------------


@dataclass(frozen=True, slots=True)
class CreateTopicResult:
    error: ErrorCode
    message: str | None = None
    topic_id: uuid.UUID | None = None


async def create_topic(
    zk: ZkClient,
    topic: str,
    *,
    num_partitions: int,
    replication_factor: int,
    config: Mapping[str, str] | None = None,
    assignment: Mapping[int, Sequence[BrokerId]] | None = None,
    validate_only: bool = False,
) -> CreateTopicResult:
    """Validate and write a new topic's assignment (rule 11), topic id and config.

    The active controller sees the new topic and creates its partition states. Errors are
    Kafka's, with the message CreateTopics returns: INVALID_TOPIC_EXCEPTION (17),
    INVALID_PARTITIONS (37), INVALID_REPLICATION_FACTOR (38), INVALID_REPLICA_ASSIGNMENT (39),
    TOPIC_ALREADY_EXISTS (36).
    """
    if (reason := znodes.topic_name_error(topic)) is not None:
        return CreateTopicResult(ErrorCode.INVALID_TOPIC_EXCEPTION, reason)
    live = sorted((await zk.get_live_brokers()).keys())
    if assignment is not None:
        replicas = {p: tuple(r) for p, r in assignment.items()}
        if sorted(replicas) != list(range(len(replicas))) or not replicas:
            return CreateTopicResult(
                ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                "Partitions should be consecutive and start from 0",
            )
        for p, rs in replicas.items():
            if not rs or len(set(rs)) != len(rs):
                return CreateTopicResult(
                    ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                    f"Duplicate or empty replica assignment for partition {p}: {list(rs)}",
                )
            if any(r not in live for r in rs):
                return CreateTopicResult(
                    ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                    f"Unknown broker in the assignment of partition {p}: {list(rs)}",
                )
    else:
        if num_partitions <= 0:
            return CreateTopicResult(
                ErrorCode.INVALID_PARTITIONS, "Number of partitions must be larger than 0."
            )
        if replication_factor <= 0:
            return CreateTopicResult(
                ErrorCode.INVALID_REPLICATION_FACTOR, "Replication factor must be larger than 0."
            )
        if replication_factor > len(live):
            return CreateTopicResult(
                ErrorCode.INVALID_REPLICATION_FACTOR,
                f"Replication factor: {replication_factor} larger than available brokers: "
                f"{len(live)}.",
            )
        planned = decisions.assign_replicas(
            num_partitions,
            replication_factor,
            live,
            # Kafka picks a random start index (and shift) so topics spread their leaders.
            start_index=random.randrange(len(live)),
            replica_shift=random.randrange(len(live)),
        )
        if isinstance(planned, ErrorCode):
            return CreateTopicResult(planned)
        replicas = {p: tuple(rs) for p, rs in enumerate(planned)}
    if validate_only:
        exists = topic in await zk.get_topics()
        return CreateTopicResult(
            ErrorCode.TOPIC_ALREADY_EXISTS if exists else ErrorCode.NONE,
            f"Topic '{topic}' already exists." if exists else None,
        )
    topic_id = uuid.uuid4()
    outcome = await zk.create_topic(
        topic, TopicAssignment(partitions=replicas, topic_id=topic_id), config or {}
    )
    if outcome is TopicCreateOutcome.ALREADY_EXISTS:
        return CreateTopicResult(ErrorCode.TOPIC_ALREADY_EXISTS, f"Topic '{topic}' already exists.")
    return CreateTopicResult(ErrorCode.NONE, None, topic_id)


def replica_assignment_error(
    assignment: Mapping[int, Sequence[BrokerId]], rf: int, live: Collection[BrokerId]
) -> str | None:
    """Kafka's ``AdminZkClient.validateReplicaAssignment`` for new partitions: no broker
    twice in a partition, every partition with the topic's replication factor, every
    broker live; None when the assignment is valid, else Kafka's message."""
    duplicated = {p: rs for p, rs in sorted(assignment.items()) if len(set(rs)) != len(rs)}
    if duplicated:
        listed = ", ".join(f"{p} -> {','.join(map(str, rs))}" for p, rs in duplicated.items())
        return f"Duplicate brokers not allowed in replica assignment: {listed}"
    odd = {p: len(rs) for p, rs in sorted(assignment.items()) if len(rs) != rf}
    if odd:
        return (
            f"Inconsistent replication factor between partitions, partition 0 has {rf} while "
            f"partitions [{', '.join(map(str, odd))}] have replication factors "
            f"[{', '.join(map(str, odd.values()))}], respectively."
        )
    unknown = sorted({r for rs in assignment.values() for r in rs} - set(live))
    if unknown:
        return f"Unknown broker(s) in replica assignment: {', '.join(map(str, unknown))}."
    return None


async def create_partitions(
    zk: ZkClient,
    topic: str,
    *,
    count: int,
    assignment: Sequence[Sequence[BrokerId]] | None = None,
    validate_only: bool = False,
) -> CreateTopicResult:
    """CreatePartitions (API 37): grow ``topic`` to ``count`` partitions (any broker).

    New replicas are placed like Kafka's AdminUtils (rule 11, starting from the index of
    partition 0's leader); ``assignment`` gives them explicitly. The write is a CAS on the
    topic znode; the controller's per-topic watch then creates the new partitions' states.
    Errors: UNKNOWN_TOPIC_OR_PARTITION, INVALID_PARTITIONS, INVALID_REPLICATION_FACTOR,
    INVALID_REPLICA_ASSIGNMENT (a lost CAS is retried with the fresh assignment).
    """
    for _ in range(MAX_CAS_ROUNDS):
        found = await zk.get_topic_assignments([topic])
        if topic not in found:
            return CreateTopicResult(
                ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"The topic '{topic}' does not exist."
            )
        current, version = found[topic]
        existing = len(current.partitions)
        if count <= existing:
            message = (
                f"Topic currently has {existing} partitions, which is higher than the requested "
                f"{count}."
                if count < existing
                else f"Topic already has {existing} partitions."
            )
            return CreateTopicResult(ErrorCode.INVALID_PARTITIONS, message)
        live = sorted((await zk.get_live_brokers()).keys())
        rf = len(current.partitions[0])
        if assignment is not None:
            if len(assignment) != count - existing:
                return CreateTopicResult(
                    ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                    f"Increasing the number of partitions by {count - existing} but "
                    f"{len(assignment)} assignments provided.",
                )
            new = {existing + i: tuple(rs) for i, rs in enumerate(assignment)}
            problem = replica_assignment_error(new, rf, live)
            if problem is not None:
                return CreateTopicResult(ErrorCode.INVALID_REPLICA_ASSIGNMENT, problem)
        else:
            if rf > len(live):
                return CreateTopicResult(
                    ErrorCode.INVALID_REPLICATION_FACTOR,
                    f"Replication factor: {rf} larger than available brokers: {len(live)}.",
                )
            leader0 = current.partitions[0][0]
            start = live.index(leader0) if leader0 in live else random.randrange(len(live))
            planned = decisions.assign_replicas(
                count, rf, live, start_index=start, replica_shift=start
            )
            if isinstance(planned, ErrorCode):
                return CreateTopicResult(planned)
            new = {p: tuple(planned[p]) for p in range(existing, count)}
        if validate_only:
            return CreateTopicResult(ErrorCode.NONE, None, current.topic_id)
        grown = replace(current, partitions={**current.partitions, **new})
        if await zk.set_topic_assignment(topic, grown, version):
            return CreateTopicResult(ErrorCode.NONE, None, current.topic_id)
    return CreateTopicResult(
        ErrorCode.REASSIGNMENT_IN_PROGRESS, f"The topic '{topic}' kept changing; try again."
    )


# -- the controller ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class AlterPartitionResult:
    """The answer to one partition of an AlterPartition request."""

    error: ErrorCode
    #: On NONE: the committed state (new ISR and partition epoch); on a fencing error: the
    #: state in force, so the leader can catch up.
    state: PartitionState | None = None


@dataclass(frozen=True, slots=True)
class ControlledShutdownResult:
    """The answer to ControlledShutdown: the partitions the broker still leads."""

    error: ErrorCode
    remaining: tuple[TopicPartition, ...] = ()


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
        # Controller context (Kafka's ControllerContext), valid only while active.
        self._seat: ControllerSeat | None = None
        self._live: dict[BrokerId, LiveBroker] = {}
        self._assignments: dict[str, TopicAssignment] = {}
        self._states: dict[TopicPartition, PartitionState] = {}
        self._deleting: set[str] = set()
        #: One data watch per topic while active (Kafka's PartitionModificationsHandler).
        self._topic_watches: dict[str, Watch] = {}
        #: Brokers in a controlled shutdown: live, but never elected (rule 12).
        self._shutting_down: set[BrokerId] = set()
        #: Live brokers whose log dir is offline (module docstring, 8): never elected, never
        #: added to an ISR, until they report the dir back (or restart).
        self._offline_dirs: set[BrokerId] = set()
        #: Partition leaders this controller wrote that changed the leader epoch, and those of
        #: them taken from outside the ISR (Kafka's ControllerStats; tidelog.server.metrics).
        self.leader_elections = 0
        self.unclean_leader_elections = 0
        #: Kafka's LeaderElectionRateAndTimeMs timer: the time of each decide-and-write
        #: round that elected at least one leader (tidelog.server.metrics renders it).
        self.election_times = Histogram()
        #: Partition reassignments (KIP-455; ``tidelog.controller.reassignment``).
        self.reassignments = Reassignments(self)
        #: Its decisions and their reasons (``tidelog.controller.history``, issue 22).
        self.history = ControllerHistory(zk, broker_id)

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
                lambda names: self._enqueue(self._on_log_dir_events) if names else None
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
        seat = self._seat
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
        return self._seat is not None

    @property
    def controller_epoch(self) -> ControllerEpoch | None:
        return None if self._seat is None else self._seat.controller_epoch

    def offline_partition_count(self) -> int:
        """Partitions with no leader, topics being deleted aside (Kafka's
        OfflinePartitionsCount); 0 unless active."""
        if self._seat is None:
            return 0
        return sum(
            1
            for tp, state in self._states.items()
            if state.leader == NO_BROKER and tp.topic not in self._deleting
        )

    def preferred_replica_imbalance_count(self) -> int:
        """Partitions led by a broker other than their first replica (Kafka's
        PreferredReplicaImbalanceCount); 0 unless active."""
        if self._seat is None:
            return 0
        count = 0
        for tp, state in self._states.items():
            replicas = self._replicas(tp)
            if replicas and state.leader != replicas[0] and tp.topic not in self._deleting:
                count += 1
        return count

    def global_counts(self) -> tuple[int, int]:
        """(topics, partitions) of the cluster (Kafka's GlobalTopicCount and
        GlobalPartitionCount); (0, 0) unless active."""
        if self._seat is None:
            return 0, 0
        return len(self._assignments), len(self._states)

    def partition_state(self, tp: TopicPartition) -> PartitionState | None:
        """The cached state of ``tp`` (active controller only)."""
        return self._states.get(tp) if self._seat is not None else None

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
        seat = self._seat
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
        if self._seat is not None:
            log.info("controller %s resigns (%s)", self.broker_id, why)
        self._seat = None
        self.history.resign()
        self._live.clear()
        self._assignments.clear()
        self._states.clear()
        self._deleting.clear()
        self._shutting_down.clear()
        self._offline_dirs.clear()
        for watch in self._topic_watches.values():
            watch.cancel()
        self._topic_watches.clear()

    # -- election and failover ----------------------------------------------------------------

    async def _on_controller_change(self) -> None:
        current = await self.zk.get_controller()
        if current is not None and current != self.broker_id:
            self._resign(f"broker {current} is the controller")
            return
        if current == self.broker_id and self._seat is not None:
            return
        if current is None or self._seat is None:
            result = await self.zk.try_become_controller(self.broker_id)
            if result.seat is None:
                self._resign(f"broker {result.current_controller} won")
                return
            self._seat = result.seat
            log.info(
                "broker %s is the controller (epoch %s)",
                self.broker_id,
                result.seat.controller_epoch,
            )
            await self._on_failover()

    async def _on_failover(self) -> None:
        """Kafka's onControllerFailover: load everything, repair, tell everyone."""
        if self._seat is not None:
            await self.history.take_over(self._seat.controller_epoch)
        self._live = await self.zk.get_live_brokers()
        topics = await self.zk.get_topics()
        await self._load_topics(topics)
        # Topics that were created while there was no controller.
        await self._create_missing_states(sorted(self._assignments))
        # Brokers that died while there was no controller: their partitions. A broker that
        # died and registered again in that gap is alive now but bounced all the same: it
        # lost its in-memory state, and after a crash of its machine maybe the unflushed
        # tail of its logs. Its registration (broker epoch = czxid) is newer than the last
        # write of the partition's state, which a controller that saw it go would have
        # made. Keeping it as leader or ISR member at the old leader epoch would let it
        # serve, or be elected with, a log missing acknowledged records (seen by the fault
        # harness: a torn tail on the controller's own broker). So it is failed and
        # started like any bounce (Kafka's KIP-380 bounce handling; KIP-966 motivates it).
        restarted = {
            tp: bounced
            for tp, state in self._states.items()
            if (bounced := self._restarted_since_written(state))
        }
        if restarted:
            log.info(
                "controller %s: replicas restarted while there was no controller: %s",
                self.broker_id,
                {str(tp): sorted(b) for tp, b in sorted(restarted.items())[:10]},
            )
        self.history.brokers_gone(self._live.keys(), self._states)
        changed = await self._handle_dead_replicas(
            restarted, after_failover(self._live.keys(), restarted)
        )
        changed |= await self._elect_offline(self._live.keys())
        self._send_leader_and_isr(self._states.keys(), to=self._live.keys())
        self._send_update_metadata(self._states.keys(), to=self._live.keys())
        self._deleting.clear()
        await self._on_topic_deletions()
        await self._on_log_dir_events()
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
                if await self.zk.set_topic_assignment(topic, with_id, version, self._seat):
                    assignment = with_id
                else:
                    again = await self.zk.get_topic_assignment(topic)
                    assignment = again if again is not None else stored
            self._assignments[topic] = assignment
            if topic not in self._topic_watches:
                self._topic_watches[topic] = await self.zk.watch_topic(
                    topic, self._partition_modifications_handler(topic)
                )
        tps = [TopicPartition(t, p) for t, a in self._assignments.items() for p in a.partitions]
        self._states.update(await self.zk.get_partition_states(tps))

    def _partition_modifications_handler(
        self, topic: str
    ) -> Callable[[TopicAssignment | None], None]:
        async def handle() -> None:
            await self._on_partition_modifications(topic)

        return lambda _assignment: self._enqueue(handle)

    async def _on_partition_modifications(self, topic: str) -> None:
        """Partitions added to an existing topic: states for the new ones, then tell brokers."""
        if self._seat is None or topic not in self._assignments or topic in self._deleting:
            return
        found = await self.zk.get_topic_assignments([topic])
        if topic not in found:
            return  # being deleted; the topics watch handles it
        assignment = found[topic][0]
        known = self._assignments[topic]
        if assignment.topic_id != known.topic_id and known.topic_id is not None:
            log.error("topic id of %s changed in ZooKeeper; keeping %s", topic, known.topic_id)
            return
        added = set(assignment.partitions) - set(known.partitions)
        if not added:
            return
        self._assignments[topic] = replace(assignment, topic_id=known.topic_id)
        created = await self._create_missing_states([topic])
        self._send_leader_and_isr(created, new=created)
        self._send_update_metadata(created)

    def _replicas(self, tp: TopicPartition) -> tuple[BrokerId, ...]:
        assignment = self._assignments.get(tp.topic)
        return () if assignment is None else assignment.partitions.get(tp.partition, ())

    async def _unclean_allowed(self, topics: Iterable[str]) -> dict[str, bool]:
        out: dict[str, bool] = {}
        for topic in set(topics):
            value = (await self.zk.get_topic_config(topic)).get(UNCLEAN_CONFIG)
            out[topic] = self.default_unclean if value is None else value.strip() == "true"
        return out

    # -- writing states -----------------------------------------------------------------------

    async def _write_decided(
        self,
        decide: Callable[[TopicPartition, PartitionState], LeaderAndIsr | None],
        candidates: Iterable[TopicPartition],
        cause: Cause | None = None,
    ) -> set[TopicPartition]:
        """Decide each candidate from its cached state and CAS-write the decided ones.

        A lost CAS (the cache was stale) re-reads those partitions and decides again.
        Returns the partitions whose state changed.
        """
        changed: set[TopicPartition] = set()
        todo = [tp for tp in candidates if tp in self._states]
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
        decide: Callable[[TopicPartition, PartitionState], LeaderAndIsr | None],
        todo: list[TopicPartition],
        changed: set[TopicPartition],
        cause: Cause | None,
    ) -> None:
        """``_write_decided``'s rounds: decide, write, re-read the lost CASes; adds to
        ``changed``."""
        for _ in range(MAX_CAS_ROUNDS):
            seat = self._seat
            if seat is None or not todo:
                break
            writes: dict[TopicPartition, PartitionState] = {}
            for tp in todo:
                current = self._states[tp]
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
                    self._count_election(self._states[tp], result.state)
                    self.history.partition_changed(
                        tp, self._states[tp], result.state, cause or Cause("controller", "")
                    )
                    self._states[tp] = result.state
                    changed.add(tp)
                elif result.outcome is StateWriteOutcome.BAD_VERSION:
                    retry.append(tp)
                elif result.outcome is StateWriteOutcome.CONTROLLER_MOVED:
                    self._resign("controller epoch moved")
                    return
                else:
                    log.warning("state of %s vanished while writing (%s)", tp, result.outcome)
            fresh = await self.zk.get_partition_states(retry)
            self._states.update(fresh)
            todo = [tp for tp in retry if tp in fresh]

    def _count_election(self, before: PartitionState, after: PartitionState) -> None:
        """A written state with a new leader epoch and a leader is an election; one whose
        leader was not in the ISR it replaced is unclean (rule 9)."""
        if after.leader == NO_BROKER or after.leader_epoch <= before.leader_epoch:
            return
        self.leader_elections += 1
        if after.leader not in before.isr:
            self.unclean_leader_elections += 1

    def _restarted_since_written(self, state: PartitionState) -> frozenset[BrokerId]:
        """Live leader/ISR members registered after ``state`` was last written."""
        if state.modified_zxid <= 0:
            return frozenset()
        return frozenset(
            r
            for r in (state.leader, *state.isr)
            if r != NO_BROKER
            and r in self._live
            and self._live[r].broker_epoch > state.modified_zxid
        )

    async def _handle_dead_replicas(
        self,
        restarted: Mapping[TopicPartition, frozenset[BrokerId]] | None = None,
        cause: Cause | None = None,
    ) -> set[TopicPartition]:
        """Every partition with a dead leader or a dead ISR member: rule 10, one batch.

        ``restarted``: per partition, live brokers to treat as dead for it (bounced while
        there was no controller); they are not electable for that partition here.
        """
        restarted = restarted or {}
        live = set(self._live)
        electable = self._electable()
        affected = [
            tp
            for tp, state in self._states.items()
            if (state.leader != NO_BROKER and state.leader not in live)
            or any(r not in live for r in state.isr)
            or tp in restarted
        ]
        if not affected:
            return set()
        unclean = await self._unclean_allowed(tp.topic for tp in affected)

        def decide(tp: TopicPartition, state: PartitionState) -> LeaderAndIsr | None:
            current = state.leader_and_isr()
            outcome: LeaderAndIsr | None = None
            gone = restarted.get(tp, frozenset())
            usable = electable - gone
            # Apply each dead replica in turn (leader first, so the election sees the rest).
            dead = sorted(
                {
                    r
                    for r in (state.leader, *state.isr)
                    if r != NO_BROKER and (r not in live or r in gone)
                },
                key=lambda r: r != state.leader,
            )
            for broker in dead:
                step = decisions.on_broker_failure(
                    self._replicas(tp),
                    current,
                    broker,
                    usable,
                    unclean_allowed=unclean[tp.topic],
                )
                if step is not None:
                    current, _ = step
                    outcome = current
            if outcome is not None and outcome.leader_epoch > state.leader_epoch + 1:
                # Several failure steps each bumped the epoch; one leader change is one epoch.
                outcome = replace(outcome, leader_epoch=state.leader_epoch + 1)
            return outcome

        return await self._write_decided(decide, affected, cause)

    async def _elect_offline(self, started: Collection[BrokerId]) -> set[TopicPartition]:
        """Offline partitions (leader -1) that a live broker can now lead (rule 9)."""
        live = self._electable()
        offline = [
            tp
            for tp, state in self._states.items()
            if state.leader == NO_BROKER and any(r in started for r in self._replicas(tp))
        ]
        if not offline:
            return set()
        unclean = await self._unclean_allowed(tp.topic for tp in offline)

        def decide(tp: TopicPartition, state: PartitionState) -> LeaderAndIsr | None:
            step = decisions.on_broker_startup(
                self._replicas(tp),
                state.leader_and_isr(),
                live,
                unclean_allowed=unclean[tp.topic],
            )
            return None if step is None else step[0]

        started_ids = ", ".join(map(str, sorted(started)))
        return await self._write_decided(
            decide, offline, Cause("broker_startup", f"replica on broker {started_ids} is back")
        )

    def electable_besides(self, broker_id: BrokerId) -> bool:
        """Whether a live broker other than ``broker_id`` may take leaderships (active
        controller only): when every other one is in a controlled shutdown too, a stopping
        broker's remaining leaderships cannot move, however often it asks."""
        return self._seat is not None and bool(self._electable() - {broker_id})

    def _electable(self) -> set[BrokerId]:
        """Live brokers that may lead or join an ISR: not shutting down (rule 12), log dir
        online (module docstring, 8)."""
        return set(self._live) - self._shutting_down - self._offline_dirs

    # -- log dir events (module docstring, 8) -------------------------------------------------

    async def _on_log_dir_events(self) -> None:
        """Kafka's processLogDirEventNotification: read every pending notification, delete
        them, act on the last event of each broker's current incarnation."""
        if self._seat is None:
            return
        events = await self.zk.get_log_dir_events()
        if not events:
            return
        if any(
            e is not None
            and (
                e.broker_id not in self._live
                or e.broker_epoch > self._live[e.broker_id].broker_epoch
            )
            for _, e in events
        ):
            # From an incarnation we have not seen yet (its registration's watch is still on
            # its way): take the broker change first, or its event would look stale.
            await self._on_brokers_change()
            if not self.is_active:
                return
        latest: dict[BrokerId, int] = {}
        for name, event in events:
            if event is None:
                continue
            broker = self._live.get(event.broker_id)
            if broker is None or event.broker_epoch not in (-1, broker.broker_epoch):
                log.info("controller %s: ignoring %s of a gone incarnation", self.broker_id, name)
                continue
            latest[event.broker_id] = event.event
        await self.zk.delete_log_dir_events(name for name, _ in events)
        failed = {b for b, e in latest.items() if e == znodes.LOG_DIR_FAILURE_EVENT}
        recovered = {b for b, e in latest.items() if e == znodes.LOG_DIR_RECOVERY_EVENT}
        if failed:
            await self._on_log_dir_failure(failed)
        if recovered and self.is_active:
            await self._on_log_dir_recovery(recovered)

    async def _on_log_dir_failure(self, brokers: set[BrokerId]) -> None:
        log.info("controller %s: log dir offline on brokers %s", self.broker_id, sorted(brokers))
        self._offline_dirs |= brokers
        affected = [
            tp
            for tp, state in sorted(self._states.items())
            if state.leader in brokers or any(r in brokers for r in state.isr)
        ]
        changed = await self._move_from_offline(affected)
        if not self.is_active:
            return
        self._send_leader_and_isr(changed)
        self._send_update_metadata(changed)

    async def _move_from_offline(self, tps: Iterable[TopicPartition]) -> set[TopicPartition]:
        """``decisions.on_log_dir_failure`` for every offline-dir broker of each partition."""
        electable = self._electable()

        def decide(tp: TopicPartition, state: PartitionState) -> LeaderAndIsr | None:
            current = state.leader_and_isr()
            outcome: LeaderAndIsr | None = None
            # The leader first, so its successor is chosen from the ISR as it stands.
            offline = sorted(
                {r for r in (state.leader, *state.isr) if r in self._offline_dirs},
                key=lambda r: r != state.leader,
            )
            for broker in offline:
                step = decisions.on_log_dir_failure(self._replicas(tp), current, broker, electable)
                if step is not None:
                    current, _ = step
                    outcome = current
            if outcome is not None and outcome.leader_epoch > state.leader_epoch + 1:
                outcome = replace(outcome, leader_epoch=state.leader_epoch + 1)
            return outcome

        offline_ids = ", ".join(map(str, sorted(self._offline_dirs)))
        return await self._write_decided(
            decide, tps, Cause("log_dir_failure", f"log dir offline on broker {offline_ids}")
        )

    async def _move_from_offline_leaders(self, tps: Sequence[TopicPartition]) -> None:
        if self._seat is None:
            return
        changed = await self._move_from_offline(
            [
                tp
                for tp in tps
                if tp in self._states and self._states[tp].leader in self._offline_dirs
            ]
        )
        if self.is_active:
            self._send_leader_and_isr(changed)
            self._send_update_metadata(changed)

    async def _on_log_dir_recovery(self, brokers: set[BrokerId]) -> None:
        log.info("controller %s: log dir back on brokers %s", self.broker_id, sorted(brokers))
        self._offline_dirs -= brokers
        changed = await self._elect_offline(brokers)
        if not self.is_active:
            return
        # Every partition they host, to them: they follow (and fetch) again.
        hosted = {tp for tp in self._states if any(b in self._replicas(tp) for b in brokers)}
        self._send_leader_and_isr(hosted, to=brokers)
        self._send_leader_and_isr(changed, to=set(self._live) - brokers)
        self._send_update_metadata(changed)

    # -- telling brokers ----------------------------------------------------------------------

    def _info(self, tp: TopicPartition, *, is_new: bool = False) -> PartitionInfo:
        assignment = self._assignments[tp.topic]
        return PartitionInfo(
            topic_partition=tp,
            topic_id=assignment.topic_id,
            replicas=assignment.partitions.get(tp.partition, ()),
            state=self._states[tp],
            is_new=is_new,
        )

    def _send_leader_and_isr(
        self,
        partitions: Iterable[TopicPartition],
        *,
        to: Collection[BrokerId] | None = None,
        new: Collection[TopicPartition] = (),
    ) -> None:
        """One LeaderAndIsr per live replica broker, with all of its partitions."""
        seat = self._seat
        if seat is None:
            return
        per_broker: dict[BrokerId, list[PartitionInfo]] = {}
        for tp in sorted(partitions):
            if tp not in self._states or tp.topic not in self._assignments:
                continue
            info = self._info(tp, is_new=tp in new)
            for replica in info.replicas:
                if replica in self._live and (to is None or replica in to):
                    per_broker.setdefault(replica, []).append(info)
        for broker_id, infos in sorted(per_broker.items()):
            leaders = {i.state.leader for i in infos}
            live_leaders = [self._live[b] for b in sorted(leaders) if b in self._live]
            self.sender.leader_and_isr(
                self._live[broker_id], seat.controller_epoch, infos, live_leaders
            )

    def _send_update_metadata(
        self, partitions: Iterable[TopicPartition], *, to: Collection[BrokerId] | None = None
    ) -> None:
        """UpdateMetadata with ``partitions`` and the live brokers, to every live broker."""
        seat = self._seat
        if seat is None:
            return
        infos = [
            self._info(tp)
            for tp in sorted(partitions)
            if tp in self._states and tp.topic in self._assignments
        ]
        brokers = [self._live[b] for b in sorted(self._live)]
        for broker in brokers:
            if to is None or broker.broker_id in to:
                self.sender.update_metadata(broker, seat.controller_epoch, infos, brokers)

    # -- broker changes -----------------------------------------------------------------------

    async def _on_brokers_change(self) -> None:
        if self._seat is None:
            return
        old = self._live
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
        self._shutting_down -= dead | bounced
        # A new incarnation reports its log dirs afresh (it probes them at start).
        self._offline_dirs -= dead | bounced
        changed: set[TopicPartition] = set()
        if dead or bounced:
            # A bounced broker lost its in-memory state: a failure, then a start (Kafka).
            self._live = {b: v for b, v in new.items() if b not in bounced}
            changed |= await self._handle_dead_replicas(cause=dead_brokers(dead | bounced))
        self._live = dict(new)
        if not self.is_active:  # a write found the controller epoch moved
            return
        changed |= await self._elect_offline(started)
        # Started brokers learn everything; the rest learn the new broker list and changes.
        if started:
            self._send_update_metadata(self._states.keys(), to=started)
            self._send_leader_and_isr(self._states.keys(), to=started)
        others = set(self._live) - started
        self._send_leader_and_isr(changed, to=others)
        self._send_update_metadata(changed, to=others)
        # A reassignment waiting for a leader (its old one died) may end now.
        await self.reassignments.maybe_complete()

    # -- topics -------------------------------------------------------------------------------

    async def _on_topics_change(self) -> None:
        if self._seat is None:
            return
        topics = await self.zk.get_topics()
        new_topics = sorted(topics - self._assignments.keys())
        gone = set(self._assignments) - topics
        for topic in gone:
            self._forget_topic(topic)
        if not new_topics:
            return
        await self._load_topics(new_topics)
        created = await self._create_missing_states(new_topics)
        self._send_leader_and_isr(created, new=created)
        self._send_update_metadata(created)

    async def _create_missing_states(self, topics: Sequence[str]) -> set[TopicPartition]:
        """Initial states for partitions without one (rule 5 of the module docstring)."""
        seat = self._seat
        if seat is None:
            return set()
        initial: dict[TopicPartition, PartitionState] = {}
        for topic in topics:
            for partition, replicas in sorted(self._assignments[topic].partitions.items()):
                tp = TopicPartition(topic, partition)
                if tp in self._states:
                    continue
                live_replicas = tuple(r for r in replicas if r in self._live)
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
                self._states[tp] = result.state
                created.add(tp)
            elif result.outcome is StateWriteOutcome.NODE_EXISTS:
                exists.append(tp)
            elif result.outcome is StateWriteOutcome.CONTROLLER_MOVED:
                self._resign("controller epoch moved")
                return created
        self._states.update(await self.zk.get_partition_states(exists))
        return created | set(exists)

    def _forget_topic(self, topic: str) -> None:
        self._assignments.pop(topic, None)
        watch = self._topic_watches.pop(topic, None)
        if watch is not None:
            watch.cancel()
        for tp in [tp for tp in self._states if tp.topic == topic]:
            del self._states[tp]

    async def _on_topic_deletions(self) -> None:
        seat = self._seat
        if seat is None:
            return
        marked = await self.zk.get_topics_marked_for_deletion()
        for topic in sorted(marked - self._deleting):
            self._deleting.add(topic)
            assignment = self._assignments.get(topic)
            if assignment is not None:
                per_broker: dict[BrokerId, list[TopicPartition]] = {}
                for partition, replicas in sorted(assignment.partitions.items()):
                    for replica in replicas:
                        per_broker.setdefault(replica, []).append(TopicPartition(topic, partition))
                for broker_id, tps in sorted(per_broker.items()):
                    if broker_id in self._live:
                        self.sender.stop_replica(
                            self._live[broker_id], seat.controller_epoch, tps, delete=True
                        )
            # Kafka's LeaderDuringDelete (-2) in UpdateMetadata tells every broker, also
            # those without a replica, to drop the topic from its metadata.
            deleted = [
                replace(
                    self._info(tp), state=replace(self._states[tp], leader=LEADER_DURING_DELETE)
                )
                for tp in sorted(self._states)
                if tp.topic == topic and topic in self._assignments
            ]
            await self.zk.delete_topic_znodes(topic, seat)
            self._forget_topic(topic)
            brokers = [self._live[b] for b in sorted(self._live)]
            for broker in brokers:
                self.sender.update_metadata(broker, seat.controller_epoch, deleted, brokers)
        self._deleting &= marked

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
            seat = self._seat
            if seat is None:
                return AlterPartitionResult(ErrorCode.NOT_CONTROLLER)
            current = self._states.get(tp)
            if current is None:
                return AlterPartitionResult(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
            leader = self._live.get(proposal.leader_id)
            error, decided = decisions.alter_partition(
                current.leader_and_isr(),
                proposal,
                self._replicas(tp),
                # KIP-841: a replica joins only if it is live, not in a controlled shutdown
                # and its log dir is online. A stopping broker's follower fetches go on for
                # a moment after its shutdown succeeded; its leaders, seeing it caught up,
                # asked to add it back, and acks=all produces then waited for a broker that
                # would never fetch again until its death was noticed (1.1 s, seen in a loop
                # of the bench's controlled shutdown of a broker with 1,000 partitions).
                self._electable(),
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
                self._states[tp] = result.state
                # Kafka (ZK mode) tells everyone about the new ISR.
                self._send_update_metadata([tp])
                if self._is_reassigning(tp):
                    # Its target replicas may all be in sync now (reassignment step 2).
                    self._enqueue(lambda: self.reassignments.maybe_complete([tp]))
                if decided.leader in self._offline_dirs:
                    # A leader kept for want of a clean successor (its log dir is offline)
                    # may now hand over to the replica that just joined. After our answer:
                    # the leader applies it before it learns of the move.
                    self._enqueue(lambda: self._move_from_offline_leaders([tp]))
                return AlterPartitionResult(ErrorCode.NONE, result.state)
            if result.outcome is StateWriteOutcome.CONTROLLER_MOVED:
                self._resign("controller epoch moved")
                return AlterPartitionResult(ErrorCode.NOT_CONTROLLER)
            if result.outcome is not StateWriteOutcome.BAD_VERSION:
                return AlterPartitionResult(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
            # The cache was stale: read and decide again.
            self._states.update(await self.zk.get_partition_states([tp]))
        return AlterPartitionResult(ErrorCode.INVALID_UPDATE_VERSION, self._states.get(tp))

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
        return await self._in_queue(lambda: self._controlled_shutdown(broker_id, broker_epoch))

    async def _controlled_shutdown(
        self, broker_id: BrokerId, broker_epoch: int
    ) -> ControlledShutdownResult:
        seat = self._seat
        if seat is None:
            return ControlledShutdownResult(ErrorCode.NOT_CONTROLLER)
        broker = self._live.get(broker_id)
        if broker is None:
            return ControlledShutdownResult(ErrorCode.BROKER_NOT_AVAILABLE)
        if broker_epoch not in (-1, broker.broker_epoch):
            return ControlledShutdownResult(ErrorCode.STALE_BROKER_EPOCH)
        self._shutting_down.add(broker_id)
        live = set(self._live) - self._offline_dirs
        hosted = [
            tp
            for tp in sorted(self._states)
            if broker_id in self._replicas(tp) and len(self._replicas(tp)) > 1
        ]

        def decide(tp: TopicPartition, state: PartitionState) -> LeaderAndIsr | None:
            step = decisions.on_controlled_shutdown(
                self._replicas(tp), state.leader_and_isr(), broker_id, live, self._shutting_down
            )
            return None if step is None else step[0]

        led_before = {tp for tp in hosted if self._states[tp].leader == broker_id}
        changed = await self._write_decided(
            decide,
            hosted,
            Cause("controlled_shutdown", f"controlled shutdown of broker {broker_id}"),
        )
        if not self.is_active:
            return ControlledShutdownResult(ErrorCode.NOT_CONTROLLER)
        # Kafka: the new leaderships go to every live replica, the leaving broker included
        # (it must stop acting as leader now); for what it only followed, it gets
        # StopReplica without deletion (Kafka's OfflineReplica transition).
        self._send_leader_and_isr(changed & led_before)
        self._send_leader_and_isr(changed - led_before, to=set(self._live) - {broker_id})
        followed = [tp for tp in hosted if tp not in led_before and tp in changed]
        if followed:
            self.sender.stop_replica(broker, seat.controller_epoch, followed, delete=False)
        self._send_update_metadata(changed)
        remaining = tuple(tp for tp in hosted if self._states[tp].leader == broker_id)
        return ControlledShutdownResult(ErrorCode.NONE, remaining)

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
        return await self._in_queue(lambda: self._elect_preferred(wanted))

    async def _elect_preferred(
        self, wanted: list[TopicPartition] | None
    ) -> dict[TopicPartition, ErrorCode]:
        if self._seat is None:
            return dict.fromkeys(wanted or (), ErrorCode.NOT_CONTROLLER)
        tps = sorted(self._states) if wanted is None else wanted
        live = self._electable()
        errors: dict[TopicPartition, ErrorCode] = {}
        movable: list[TopicPartition] = []
        for tp in tps:
            state = self._states.get(tp)
            if state is None:
                errors[tp] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                continue
            decided = decisions.elect_preferred_leader(
                self._replicas(tp), state.leader_and_isr(), live
            )
            if isinstance(decided, ErrorCode):
                errors[tp] = decided
            else:
                movable.append(tp)

        def decide(tp: TopicPartition, state: PartitionState) -> LeaderAndIsr | None:
            current = state.leader_and_isr()
            decided = decisions.elect_preferred_leader(self._replicas(tp), current, live)
            return (
                None
                if isinstance(decided, ErrorCode)
                else decisions.apply_election(current, decided)
            )

        changed = await self._write_decided(
            decide, movable, Cause("preferred", "preferred leader election")
        )
        if not self.is_active:
            return {tp: errors.get(tp, ErrorCode.NOT_CONTROLLER) for tp in tps}
        self._send_leader_and_isr(changed)
        self._send_update_metadata(changed)
        for tp in movable:
            # Lost every CAS round, or the state changed under us so that it was not needed.
            errors[tp] = ErrorCode.NONE if tp in changed else ErrorCode.ELECTION_NOT_NEEDED
        return {tp: errors[tp] for tp in tps}

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
        if self._seat is None:
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
        """Kafka's checkAndTriggerAutoLeaderRebalance: per preferred broker, when more than
        ``leader.imbalance.per.broker.percentage`` of the partitions it should lead are led
        elsewhere, elect it back where it is live and in the ISR."""
        if self._seat is None:
            return
        live = self._electable()
        by_preferred: dict[BrokerId, list[TopicPartition]] = {}
        for tp in self._states:
            replicas = self._replicas(tp)
            if replicas and tp.topic not in self._deleting:
                by_preferred.setdefault(replicas[0], []).append(tp)
        candidates: list[TopicPartition] = []
        for broker, tps in sorted(by_preferred.items()):
            if broker not in live:
                continue
            imbalanced = [tp for tp in tps if self._states[tp].leader != broker]
            ratio = len(imbalanced) / len(tps)
            if ratio * 100 > self.leader_imbalance_per_broker_percentage:
                candidates += [tp for tp in imbalanced if broker in self._states[tp].isr]
        if candidates:
            log.info(
                "controller %s: preferred leader rebalance of %d partitions",
                self.broker_id,
                len(candidates),
            )
            await self._elect_preferred(sorted(candidates))
