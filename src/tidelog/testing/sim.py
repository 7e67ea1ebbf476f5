"""A seeded, deterministic simulator of tidelog's replication (after Kafka's
``RaftEventSimulationTest``): brokers running the real :class:`Partition` and truncation code,
the real controller decisions, a simulated clock and network, faults, producers and
consumers, and the :class:`InvariantChecker` after every event.

Model (what is real and what is simulated):

- **Real**: ``tidelog.replication`` (``Partition``, ``LeaderEpochCache``, truncation) and
  ``tidelog.controller.decisions`` (elections, AlterPartition compare-and-set).
- **Logs** are in memory: per offset a record id and the leader epoch that wrote it, plus the
  epoch cache; the HW checkpoint is written on every HW change. A crash keeps the log (the OS
  page cache survives a process crash) unless ``lose_unflushed`` asks to drop the tail past
  the last flush (power loss; Kafka then relies on other replicas — see KIP-966).
- **Controller** = ZooKeeper + the controller, never down. It learns of a crash when the
  broker's session expires (``session_expires=True``, at once) or not at all (a fast bounce,
  as in seed 002). Its messages are reliable and FIFO per broker but delayed; the leader's
  AlterPartition requests go through the same compare-and-set on ``partition_epoch``.
- **Network** between brokers and from clients: random delay (so reordering), drops, and
  partitions between any two brokers. Fetches time out and are retried.
- **Pauses** (a GC pause, seed 003/004): the broker processes nothing until it resumes. A
  pause longer than the ZooKeeper session may expire it (``session_expires``): the
  controller moves the leaderships, and the broker wakes as a zombie leader until it
  re-registers with a new broker epoch (KIP-380) and hears the new state.
- **Clients**: producers with acks 0/1/-1 send to the controller's current leader; a consumer
  per partition reads below the HW from the leader.
- **Reassignment** (KIP-455, ``tidelog.controller.reassignment``): ``reassign`` and
  ``cancel_reassignment`` run the controller's steps with the same pure rules
  (``decisions.plan_reassignment`` / ``complete_reassignment``): the assignment grows to
  RS = TRS + ORS, every live replica of RS hears the (unchanged) state with RS, the new ones
  create their logs and fetch; after every accepted AlterPartition, broker startup or
  failure and controller failover, ``complete_reassignment`` may end it: its state is
  written, the assignment becomes TRS, the target replicas get LeaderAndIsr and the removed
  ones StopReplica with delete (they drop the log and the partition). A removed broker that
  was down then drops the stray log when it restarts (the real broker does so at its first
  UpdateMetadata). LeaderAndIsr carries the replica set it was sent with.
- **Controller failover** is instant (``controller_failover``): the new controller resends
  every state and completes what it can. ``crash_controller_mid_completion`` scripts a
  controller death between completion's two writes (partition state written, assignment
  still RS): the next controller completes again.

Switches for the old, unsafe rules (the simulator only — tidelog never does this):
``truncate_to_hw_on_follow`` (pre-KIP-101: a new follower truncates to its HW, seed 002) and
``unclean_leader_election`` (seed 000/004).
"""

from __future__ import annotations

import heapq
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import NamedTuple

from tidelog.controller import decisions
from tidelog.controller.decisions import ReplicaAssignment
from tidelog.errors import ErrorCode
from tidelog.model import NO_BROKER, NO_EPOCH, BrokerId, TopicPartition
from tidelog.replication.epoch import LeaderEpochCache
from tidelog.replication.partition import (
    AlterFollowup,
    AlterPartitionProposal,
    LeaderAndIsr,
    Partition,
    alter_partition_followup,
)
from tidelog.replication.truncation import (
    EpochEndOffset,
    diverging_epoch,
    follower_truncation_offset,
    leader_end_offset_for_epoch,
)
from tidelog.testing.invariants import InvariantChecker

CONTROLLER = -1000  # node id of the controller in the network model
CLIENT = -2000


@dataclass(frozen=True, slots=True, kw_only=True)
class SimConfig:
    brokers: int = 3
    partitions: int = 1
    replication_factor: int = 3
    min_insync_replicas: int = 2
    replica_lag_time_max_ms: int = 300
    fetch_interval_ms: int = 25  # an idle follower polls this often (long-poll stand-in)
    fetch_timeout_ms: int = 120
    fetch_max_records: int = 20
    request_timeout_ms: int = 1500  # produce purgatory timeout (REQUEST_TIMED_OUT)
    net_delay_ms: tuple[int, int] = (1, 8)
    net_drop_rate: float = 0.0
    #: Chance that the controller applies an AlterPartition but its answer is lost (the
    #: leader's request times out after ``controller_request_timeout_ms``).
    alter_response_loss_rate: float = 0.0
    controller_request_timeout_ms: int = 200
    controller_delay_ms: tuple[int, int] = (1, 5)
    flush_interval_ms: int = 100
    zookeeper_session_timeout_ms: int = 150  # a longer pause may expire the session
    unclean_leader_election: bool = False
    truncate_to_hw_on_follow: bool = False  # the pre-KIP-101 rule (seed 002); sim only


@dataclass(slots=True)
class SimLog:
    """A replica's persistent state: records, their epochs, the epoch cache, checkpoints."""

    records: list[int] = field(default_factory=list)
    epochs: list[int] = field(default_factory=list)
    cache: LeaderEpochCache = field(default_factory=LeaderEpochCache)
    hw_checkpoint: int = 0
    flushed: int = 0

    @property
    def log_end_offset(self) -> int:
        return len(self.records)

    def last_epoch(self) -> int:
        return self.epochs[-1] if self.epochs else NO_EPOCH

    def append(self, epoch: int, record_id: int) -> int:
        offset = len(self.records)
        latest = self.cache.latest_epoch()
        if latest is None or epoch > latest:
            self.cache.assign(epoch, offset)
        self.records.append(record_id)
        self.epochs.append(epoch)
        return offset

    def truncate_to(self, offset: int) -> None:
        if offset < len(self.records):
            del self.records[offset:]
            del self.epochs[offset:]
        self.cache.truncate_from_end(offset)
        self.flushed = min(self.flushed, offset)
        self.hw_checkpoint = min(self.hw_checkpoint, offset)


@dataclass(slots=True)
class Fetcher:
    """A follower's fetcher for one partition (Kafka's ``ReplicaFetcherThread`` state)."""

    leader: BrokerId
    leader_epoch: int
    truncating: bool
    inflight: int = 0  # id of the outstanding request, 0 when none


@dataclass(frozen=True, slots=True)
class EpochRequest:
    """OffsetForLeaderEpoch (API 23) for one partition."""

    leader: BrokerId
    follower: BrokerId
    tp: TopicPartition
    current_leader_epoch: int
    requested_epoch: int
    rid: int


@dataclass(frozen=True, slots=True)
class FetchRequest:
    """A follower's Fetch for one partition (fetch offset = its LEO, rule 2)."""

    leader: BrokerId
    follower: BrokerId
    tp: TopicPartition
    current_leader_epoch: int
    fetch_offset: int
    last_fetched_epoch: int
    rid: int


@dataclass(frozen=True, slots=True, kw_only=True)
class FetchResponse:
    error: ErrorCode = ErrorCode.NONE
    diverging: EpochEndOffset | None = None
    records: tuple[int, ...] = ()
    epochs: tuple[int, ...] = ()
    leader_hw: int = 0
    leader_leo: int = 0


@dataclass(slots=True)
class PendingProduce:
    record_id: int
    offset: int
    deadline_ms: int


@dataclass(slots=True)
class SimBroker:
    broker_id: BrokerId
    alive: bool = True
    incarnation: int = 0  # bumps on crash and restart: messages to an old one are lost
    broker_epoch: int = 0  # KIP-380: bumps on every registration (restart, re-registration)
    session_expired: bool = False
    paused_until: int = 0
    backlog: list[tuple[Callable[..., None], tuple[object, ...]]] = field(default_factory=list)
    logs: dict[TopicPartition, SimLog] = field(default_factory=dict)
    partitions: dict[TopicPartition, Partition] = field(default_factory=dict)
    fetchers: dict[TopicPartition, Fetcher] = field(default_factory=dict)
    purgatory: dict[TopicPartition, list[PendingProduce]] = field(default_factory=dict)


class ReassignOutcome(NamedTuple):
    """AlterPartitionReassignments' answer for one partition."""

    error: ErrorCode
    message: str | None = None


@dataclass(slots=True)
class Stats:
    events: int = 0
    produced: dict[int, int] = field(default_factory=lambda: {0: 0, 1: 0, -1: 0})
    acked_all: int = 0
    errors: dict[str, int] = field(default_factory=dict)
    unclean_elections: int = 0
    consumed: int = 0
    lost_alter_responses: int = 0
    reassignments_started: int = 0
    reassignments_completed: int = 0
    reassignments_refused: int = 0
    replicas_deleted: int = 0
    controller_failovers: int = 0

    def error(self, code: ErrorCode) -> None:
        self.errors[code.name] = self.errors.get(code.name, 0) + 1


class Simulation:
    """One deterministic run; drive it with the fault methods and ``run_until``/``run_for``."""

    def __init__(self, config: SimConfig, seed: int) -> None:
        self.config = config
        self.seed = seed
        self.rng = random.Random(seed)
        self.now_ms = 0
        self._queue: list[tuple[int, int, Callable[..., object], tuple[object, ...]]] = []
        self._seq = 0
        self._request_ids = 0
        self._link_clock: dict[int, int] = {}
        self.blocked: set[tuple[int, int]] = set()
        #: Scripted faults: the next N AlterPartition answers are lost (applied, never heard).
        self.lose_alter_responses = 0
        self.checker = InvariantChecker()
        self.stats = Stats()
        self.trace: list[str] = []
        self.tracing = False
        self.brokers = {
            BrokerId(i): SimBroker(broker_id=BrokerId(i)) for i in range(config.brokers)
        }
        # --- controller state (ZooKeeper's znodes) ---
        self.live: set[BrokerId] = set(self.brokers)
        # broker -> broker epoch of its current registration (KIP-380)
        self.broker_epochs: dict[BrokerId, int] = dict.fromkeys(self.brokers, 0)
        self._registrations = 0
        #: The replica set RS (during a reassignment TRS + ORS, target first).
        self.assignment: dict[TopicPartition, tuple[BrokerId, ...]] = {}
        #: Reassignments in progress: RS with its adding and removing replicas.
        self.reassignments: dict[TopicPartition, ReplicaAssignment] = {}
        #: The last target each partition was given (initially its assignment): what the
        #: assignment must equal once the run settles.
        self.targets: dict[TopicPartition, tuple[BrokerId, ...]] = {}
        #: Brokers in a controlled shutdown (rule 12): live but not electable.
        self.shutting_down: set[BrokerId] = set()
        #: Scripted fault: the next N completions lose the controller between their two
        #: writes (partition state written, assignment not); a failover follows.
        self.crash_controller_mid_completion = 0
        #: Scripted fault: the next N completions lose the controller after both writes,
        #: before any LeaderAndIsr or StopReplica went out (seen in CI, session 12); a
        #: failover follows.
        self.crash_controller_after_assignment = 0
        self.states: dict[TopicPartition, LeaderAndIsr] = {}
        self.next_record_id = 1
        self.outcomes: dict[int, ErrorCode] = {}  # record id -> the producer's answer
        self.consumer_positions: dict[TopicPartition, int] = {}
        self._create_topic()

    # ---- infrastructure -------------------------------------------------------------

    def log(self, message: str) -> None:
        if self.tracing:
            self.trace.append(f"{self.now_ms:>6} {message}")

    def schedule(self, at_ms: int, fn: Callable[..., object], *args: object) -> None:
        self._seq += 1
        heapq.heappush(self._queue, (at_ms, self._seq, fn, args))

    def to_broker(
        self, at_ms: int, broker: BrokerId, fn: Callable[..., None], *args: object
    ) -> None:
        """Schedule ``fn(*args)`` on ``broker``'s current incarnation only."""
        b = self.brokers[broker]
        self.schedule(at_ms, self._on_broker, broker, b.incarnation, fn, args)

    def _on_broker(
        self,
        broker: BrokerId,
        incarnation: int,
        fn: Callable[..., None],
        args: tuple[object, ...],
    ) -> None:
        b = self.brokers[broker]
        if not b.alive or b.incarnation != incarnation:
            return
        if b.paused_until > self.now_ms:
            b.backlog.append((fn, args))
            return
        fn(*args)

    def send(self, src: int, dst: BrokerId, fn: Callable[..., None], *args: object) -> None:
        """Broker-to-broker or client-to-broker message: delay, drops, partitions."""
        if (src, dst) in self.blocked:
            return
        c = self.config
        if c.net_drop_rate and self.rng.random() < c.net_drop_rate:
            return
        lo, hi = c.net_delay_ms
        self.to_broker(self.now_ms + self.rng.randint(lo, hi), dst, fn, *args)

    def from_controller(self, dst: BrokerId, fn: Callable[..., None], *args: object) -> None:
        """Controller-to-broker: reliable, FIFO per broker, delayed."""
        lo, hi = self.config.controller_delay_ms
        at = max(self.now_ms + self.rng.randint(lo, hi), self._link_clock.get(dst, 0))
        self._link_clock[dst] = at
        self.to_broker(at, dst, fn, *args)

    def to_controller(self, fn: Callable[..., None], *args: object) -> None:
        lo, hi = self.config.controller_delay_ms
        self.schedule(self.now_ms + self.rng.randint(lo, hi), fn, *args)

    def step(self) -> bool:
        if not self._queue:
            return False
        at, _, fn, args = heapq.heappop(self._queue)
        self.now_ms = max(self.now_ms, at)
        fn(*args)
        self.stats.events += 1
        return True

    def run_until(self, t_ms: int) -> None:
        while self._queue and self._queue[0][0] <= t_ms:
            self.step()
        self.now_ms = max(self.now_ms, t_ms)

    def run_for(self, ms: int) -> None:
        self.run_until(self.now_ms + ms)

    def run_until_true(self, predicate: Callable[[], bool], limit_ms: int) -> bool:
        end = self.now_ms + limit_ms
        while not predicate():
            if not self._queue or self._queue[0][0] > end:
                self.now_ms = max(self.now_ms, end)
                return predicate()
            self.step()
        return True

    # ---- topic creation & controller ------------------------------------------------

    def _create_topic(self) -> None:
        c = self.config
        assignment = decisions.assign_replicas(
            c.partitions, c.replication_factor, list(self.brokers), start_index=0
        )
        if isinstance(assignment, ErrorCode):
            raise ValueError(f"bad simulation config: {assignment.name}")
        for i, replicas in enumerate(assignment):
            tp = TopicPartition("sim", i)
            self.assignment[tp] = tuple(replicas)
            self.targets[tp] = tuple(replicas)
            state = LeaderAndIsr(
                leader=replicas[0], leader_epoch=0, isr=tuple(replicas), partition_epoch=0
            )
            self.states[tp] = state
            self.consumer_positions[tp] = 0
            for r in replicas:
                self.brokers[r].logs[tp] = SimLog()
            self._broadcast(tp)
        for b in self.brokers.values():
            self._start_timers(b)

    def _write_state(self, tp: TopicPartition, new: LeaderAndIsr, *, unclean: bool) -> None:
        old = self.states[tp]
        if new.leader_epoch < old.leader_epoch or new.partition_epoch <= old.partition_epoch:
            self.checker.fail(self.now_ms, "epoch-regressed", f"controller {tp}: {old} -> {new}")
        self.states[tp] = new
        if unclean:
            self.stats.unclean_elections += 1
        self.log(
            f"controller {tp} -> leader {new.leader} e{new.leader_epoch} isr {new.isr}"
            f"{' UNCLEAN' if unclean else ''}"
        )
        self._broadcast(tp)

    def _broadcast(self, tp: TopicPartition) -> None:
        state = self.states[tp]
        replicas = self.assignment[tp]
        for r in replicas:
            if r in self.live:
                self.from_controller(r, self._on_leader_and_isr, r, tp, state, replicas)

    def _controller_broker_failure(self, dead: BrokerId) -> None:
        if dead not in self.live:
            return
        self.live.discard(dead)
        self.shutting_down.discard(dead)
        for tp, replicas in self.assignment.items():
            if dead not in replicas:
                continue
            res = decisions.on_broker_failure(
                replicas,
                self.states[tp],
                dead,
                self.live,
                unclean_allowed=self.config.unclean_leader_election,
            )
            if res is not None:
                new, election = res
                self._write_state(tp, new, unclean=election is not None and election.unclean)
        # A reassignment waiting for a leader (its old one died) may end now.
        self._maybe_complete_reassignments()

    def _controller_broker_startup(self, broker: BrokerId) -> None:
        self.live.add(broker)
        self.shutting_down.discard(broker)
        self.broker_epochs[broker] = self.brokers[broker].broker_epoch
        for tp, replicas in self.assignment.items():
            if broker not in replicas:
                continue
            res = decisions.on_broker_startup(
                replicas,
                self.states[tp],
                self.live,
                unclean_allowed=self.config.unclean_leader_election,
            )
            if res is not None:
                new, election = res
                self._write_state(tp, new, unclean=election.unclean)
            else:
                # Kafka's onBrokerStartup: the returning broker learns every partition it hosts.
                self.from_controller(
                    broker, self._on_leader_and_isr, broker, tp, self.states[tp], replicas
                )
        # onBrokerStartup's UpdateMetadata: the stray logs of partitions moved off it while
        # it was away go.
        self._update_metadata_of_strays(broker)
        self._maybe_complete_reassignments()

    def _controller_alter_partition(
        self, broker: BrokerId, broker_epoch: int, proposal: AlterPartitionProposal
    ) -> None:
        tp = proposal.topic_partition
        error, state = decisions.alter_partition(
            self.states[tp],
            proposal,
            self.assignment[tp],
            self.live,
            broker_epoch=broker_epoch,
            registered_broker_epoch=self.broker_epochs[broker],
        )
        changed = error is ErrorCode.NONE and state != self.states[tp]
        if error is ErrorCode.NONE:
            self.states[tp] = state
            self.log(f"controller {tp} AlterPartition isr {state.isr} pe{state.partition_epoch}")
        rate = self.config.alter_response_loss_rate
        if self.lose_alter_responses > 0 or (rate and self.rng.random() < rate):
            self.lose_alter_responses = max(0, self.lose_alter_responses - 1)
            self.stats.lost_alter_responses += 1
            self.log(f"controller {tp} AlterPartition answer LOST ({error.name})")
            at = self.now_ms + self.config.controller_request_timeout_ms
            self.to_broker(
                at,
                broker,
                self._on_alter_partition_response,
                broker,
                proposal,
                ErrorCode.REQUEST_TIMED_OUT,
                state,
            )
        else:
            self.from_controller(
                broker, self._on_alter_partition_response, broker, proposal, error, state
            )
        if changed and tp in self.reassignments:
            # Its target replicas may all be in sync now (reassignment step 2).
            self._maybe_complete_reassignments([tp])

    def controlled_shutdown(self, broker: BrokerId, *, stop_after_ms: int = 30) -> None:
        """Rule 12: move the broker's leaderships and ISR memberships away, then stop it
        (a clean stop: its session ends; its log is intact)."""
        if broker not in self.live or not self.brokers[broker].alive:
            return
        self.log(f"b{broker} CONTROLLED SHUTDOWN")
        self.shutting_down.add(broker)
        for tp, replicas in self.assignment.items():
            if broker not in replicas:
                continue
            res = decisions.on_controlled_shutdown(
                replicas, self.states[tp], broker, self.live, {broker}
            )
            if res is not None:
                self._write_state(tp, res[0], unclean=False)
        self.schedule(self.now_ms + stop_after_ms, self.crash, broker)

    def elect_preferred_leader(self, tp: TopicPartition) -> ErrorCode:
        res = decisions.elect_preferred_leader(self.assignment[tp], self.states[tp], self.live)
        if isinstance(res, ErrorCode):
            return res
        self._write_state(tp, decisions.apply_election(self.states[tp], res), unclean=False)
        return ErrorCode.NONE

    # ---- controller: partition reassignment (KIP-455) -------------------------------

    def _electable(self) -> set[BrokerId]:
        """Live brokers that may lead: not in a controlled shutdown (rule 12)."""
        return self.live - self.shutting_down

    def replica_assignment(self, tp: TopicPartition) -> ReplicaAssignment:
        """The partition's RS with its adding and removing replicas."""
        running = self.reassignments.get(tp)
        return running if running is not None else ReplicaAssignment(replicas=self.assignment[tp])

    def reassign(self, tp: TopicPartition, target: tuple[BrokerId, ...]) -> ReassignOutcome:
        """AlterPartitionReassignments for one partition (``tidelog.controller.reassignment``
        steps 1 and 3): validate, plan from the origin, write RS, let the replicas a replaced
        reassignment was adding leave at once, tell RS, and complete if already in sync."""
        target = tuple(target)
        problem = decisions.reassignment_target_error(target, self.live)
        if problem is not None:
            return self._refuse(tp, ErrorCode.INVALID_REPLICA_ASSIGNMENT, problem)
        return self._start(tp, target)

    def cancel_reassignment(self, tp: TopicPartition) -> ReassignOutcome:
        """Cancel (step 4): a reassignment back to the origin ORS."""
        running = self.reassignments.get(tp)
        if running is None:
            return self._refuse(
                tp,
                ErrorCode.NO_REASSIGNMENT_IN_PROGRESS,
                f"There is no ongoing reassignment for partition {tp}.",
            )
        return self._start(tp, running.origin)

    def _refuse(self, tp: TopicPartition, error: ErrorCode, message: str) -> ReassignOutcome:
        self.stats.reassignments_refused += 1
        self.log(f"controller {tp} reassignment refused: {error.name} {message}")
        return ReassignOutcome(error, message)

    def _start(self, tp: TopicPartition, target: tuple[BrokerId, ...]) -> ReassignOutcome:
        current = self.replica_assignment(tp)
        planned = decisions.plan_reassignment(current, target)
        dropped = [r for r in current.replicas if r not in planned.replicas]
        state = self.states[tp]
        electable = self._electable()
        problem = decisions.replica_removal_problem(tp, state, dropped, planned.replicas, electable)
        if problem is not None:
            return self._refuse(tp, ErrorCode.INVALID_REPLICA_ASSIGNMENT, problem)
        self.assignment[tp] = planned.replicas
        if planned.is_reassigning:
            self.reassignments[tp] = planned
        else:
            self.reassignments.pop(tp, None)
        self.targets[tp] = target
        self.stats.reassignments_started += 1
        self.log(
            f"controller {tp} reassign {current.replicas} -> {target} (RS {planned.replicas}, "
            f"adding {planned.adding}, removing {planned.removing}, dropped now {dropped})"
        )
        # The state is written whatever changed: the partition epoch moves, so a proposal
        # built on the old replica set is refused (``decisions.on_replicas_changed``).
        written = decisions.on_replicas_changed(state, planned.replicas, dropped, electable)
        assert written is not None  # the leader-leaves-alone case was refused above
        self._write_state(tp, written, unclean=False)  # tells RS: new replicas start fetching
        self._stop_and_delete(tp, dropped)
        self._maybe_complete_reassignments([tp])
        return ReassignOutcome(ErrorCode.NONE)

    def _stop_and_delete(self, tp: TopicPartition, brokers: list[BrokerId]) -> None:
        for broker in sorted(brokers):
            if broker in self.live:
                self.from_controller(broker, self._on_stop_replica, broker, tp)

    def _maybe_complete_reassignments(self, tps: list[TopicPartition] | None = None) -> None:
        """Step 2: end every reassignment among ``tps`` (None: all) whose targets are in
        sync: write ``complete_reassignment``'s state, then the assignment TRS; tell TRS and
        delete the removed replicas."""
        for tp in sorted(self.reassignments) if tps is None else tps:
            plan = self.reassignments.get(tp)
            if plan is None:
                continue
            new = decisions.complete_reassignment(plan, self.states[tp], self._electable())
            if new is None:
                continue
            if self.crash_controller_mid_completion > 0:
                # The controller dies between the two writes: the partition state has the
                # final ISR and leader, the topic znode still RS; nobody was told.
                self.crash_controller_mid_completion -= 1
                self._write_state_untold(tp, new, "before the assignment")
                continue
            del self.reassignments[tp]
            self.assignment[tp] = plan.target
            self.stats.reassignments_completed += 1
            if self.crash_controller_after_assignment > 0:
                # Both writes made, nobody told: the removed replicas never get their
                # StopReplica; the next controller has no reassignment to resume, and its
                # UpdateMetadata (``tidelog.server.replica.stray_replicas`` rule 1) removes them.
                self.crash_controller_after_assignment -= 1
                self._write_state_untold(tp, new, "after the assignment, telling nobody")
                continue
            self.log(f"controller {tp} reassignment to {plan.target} completes")
            self._write_state(tp, new, unclean=False)  # tells the target replicas
            self._stop_and_delete(tp, list(plan.removing))

    def _write_state_untold(self, tp: TopicPartition, new: LeaderAndIsr, when: str) -> None:
        """A completion's state written by a controller that dies at once (a failover
        follows after the controller delay)."""
        old = self.states[tp]
        if new.leader_epoch < old.leader_epoch or new.partition_epoch <= old.partition_epoch:
            self.checker.fail(self.now_ms, "epoch-regressed", f"controller {tp}: {old} -> {new}")
        self.states[tp] = new
        self.log(
            f"controller {tp} completion state written (leader {new.leader} "
            f"e{new.leader_epoch} isr {new.isr}); CONTROLLER DIES {when}"
        )
        lo, hi = self.config.controller_delay_ms
        self.schedule(self.now_ms + self.rng.randint(lo, hi), self.controller_failover)

    def controller_failover(self) -> None:
        """A new controller takes over at once: it re-reads the znodes, sends every live
        replica its partitions' state (``onControllerFailover``) and every live broker the
        metadata, and completes the reassignments whose targets are in sync (a completion
        cut short included)."""
        self.stats.controller_failovers += 1
        self.log("controller FAILOVER")
        for tp, replicas in self.assignment.items():
            for r in replicas:
                if r in self.live:
                    self.from_controller(
                        r, self._on_leader_and_isr, r, tp, self.states[tp], replicas
                    )
        for broker in sorted(self.live):
            self._update_metadata_of_strays(broker)
        self._maybe_complete_reassignments()

    def _update_metadata_of_strays(self, broker: BrokerId) -> None:
        """The controller's UpdateMetadata of every partition, after its LeaderAndIsr (FIFO),
        from which the broker deletes its stray logs. Sent only when the broker has such a
        log now (it can delete no other), so runs without reassignments draw the same
        random numbers as before reassignment was modelled."""
        logs = self.brokers[broker].logs
        if any(broker not in self.assignment.get(tp, (broker,)) for tp in logs):
            self.from_controller(broker, self._on_update_metadata, broker, dict(self.assignment))

    # ---- broker: control plane ------------------------------------------------------

    def _partition(self, b: SimBroker, tp: TopicPartition) -> Partition:
        p = b.partitions.get(tp)
        if p is None:
            p = Partition(
                topic_partition=tp,
                local_broker_id=b.broker_id,
                replica_lag_time_max_ms=self.config.replica_lag_time_max_ms,
                min_insync_replicas=self.config.min_insync_replicas,
            )
            p.high_watermark = b.logs[tp].hw_checkpoint
            b.partitions[tp] = p
        return p

    def _on_leader_and_isr(
        self,
        broker: BrokerId,
        tp: TopicPartition,
        state: LeaderAndIsr,
        replicas: tuple[BrokerId, ...],
    ) -> None:
        b = self.brokers[broker]
        fresh = tp not in b.partitions
        if tp not in b.logs:
            b.logs[tp] = SimLog()  # a replica new to this broker (reassignment): empty log
            self.log(f"b{broker} {tp} creates its log (replicas {replicas})")
        p = self._partition(b, tp)
        request = (state.leader_epoch, state.partition_epoch)
        known = (p.leader_epoch, p.partition_epoch)
        if not fresh and (request < known or (request == known and replicas == p.replicas)):
            # Stale (rule 8: a request from an older state is ignored). The same state with
            # another replica set is newer (the controller's link is FIFO): a reassignment
            # started or replaced without a new leader epoch (KIP-455).
            return
        if state.leader_epoch < p.leader_epoch:
            return
        log = b.logs[tp]
        if state.leader == broker:
            new_epoch = p.make_leader(
                leader_epoch=state.leader_epoch,
                partition_epoch=state.partition_epoch,
                replicas=replicas,
                isr=state.isr,
                log_end_offset=log.log_end_offset,
                high_watermark=p.high_watermark,
                now_ms=self.now_ms,
                epoch_cache=log.cache,
            )
            b.fetchers.pop(tp, None)
            if new_epoch:
                self._fail_purgatory(b, tp, ErrorCode.NOT_LEADER_OR_FOLLOWER)
                current = self.states[tp]
                self.checker.on_make_leader(
                    self.now_ms,
                    broker,
                    tp,
                    state.leader_epoch,
                    log.records,
                    authoritative=current.leader == broker
                    and current.leader_epoch == state.leader_epoch,
                )
                self.log(f"b{broker} {tp} leader e{state.leader_epoch} leo {log.log_end_offset}")
            self._after_hw(b, tp)
            return
        was_leader = p.is_leader
        changed = p.make_follower(
            leader_id=state.leader,
            leader_epoch=state.leader_epoch,
            partition_epoch=state.partition_epoch,
            replicas=replicas,
            isr=state.isr,
            log_end_offset=log.log_end_offset,
        )
        if was_leader:
            self._fail_purgatory(b, tp, ErrorCode.NOT_LEADER_OR_FOLLOWER)
        if state.leader == NO_BROKER:
            b.fetchers.pop(tp, None)
            return
        if changed or fresh or tp not in b.fetchers:
            truncating = True
            if self.config.truncate_to_hw_on_follow:
                # Pre-KIP-101: cut everything above the HW, then fetch (seed 002's m2 loss).
                self._truncate(b, tp, p.high_watermark)
                truncating = False
            b.fetchers[tp] = Fetcher(
                leader=state.leader, leader_epoch=state.leader_epoch, truncating=truncating
            )
            self.log(f"b{broker} {tp} follows b{state.leader} e{state.leader_epoch}")
            self.to_broker(self.now_ms, broker, self._fetch_tick, broker, tp)

    def _on_stop_replica(self, broker: BrokerId, tp: TopicPartition) -> None:
        """StopReplica with delete (reassignment removed this replica): stop fetching or
        leading, fail parked produces, delete the log."""
        b = self.brokers[broker]
        if tp in b.partitions and b.partitions[tp].is_leader:
            self._fail_purgatory(b, tp, ErrorCode.NOT_LEADER_OR_FOLLOWER)
        self._delete_replica(b, tp, why="StopReplica(delete)")

    def _on_update_metadata(
        self, broker: BrokerId, assignment: dict[TopicPartition, tuple[BrokerId, ...]]
    ) -> None:
        """An UpdateMetadata listing every partition (``tidelog.server.replica.stray_replicas`` rule
        1): a log of a partition whose replicas exclude this broker, hosted or not, is a stray
        (its StopReplica never reached it: the broker was down, its session had expired, or
        the controller died after writing the assignment) and is deleted."""
        b = self.brokers[broker]
        for tp in sorted(b.logs):
            if broker not in assignment.get(tp, (broker,)):
                self._delete_replica(b, tp, why="stray at UpdateMetadata")

    def _delete_replica(self, b: SimBroker, tp: TopicPartition, *, why: str) -> None:
        b.partitions.pop(tp, None)
        b.fetchers.pop(tp, None)
        b.purgatory.pop(tp, None)
        if b.logs.pop(tp, None) is not None:
            self.stats.replicas_deleted += 1
            self.checker.on_replica_deleted(b.broker_id, tp)
            self.log(f"b{b.broker_id} {tp} log deleted ({why})")

    def _on_alter_partition_response(
        self,
        broker: BrokerId,
        proposal: AlterPartitionProposal,
        error: ErrorCode,
        state: LeaderAndIsr,
    ) -> None:
        b = self.brokers[broker]
        p = b.partitions.get(proposal.topic_partition)
        if p is None:
            return
        committed = state if error is ErrorCode.NONE else None
        tp = proposal.topic_partition
        if p.on_alter_partition_response(proposal, error, committed, self.now_ms):
            self._after_hw(b, tp)
        if error is ErrorCode.NONE or p.in_flight_proposal != proposal:
            return
        followup = alter_partition_followup(error)
        if followup is AlterFollowup.RETRY:  # the same proposal again (rule 5a)
            self.to_controller(self._controller_alter_partition, broker, b.broker_epoch, proposal)
        elif followup is AlterFollowup.RESYNC:  # read the state znode (rule 5a)
            lo, hi = self.config.controller_delay_ms
            self.to_broker(self.now_ms + self.rng.randint(lo, hi), broker, self._resync, broker, tp)

    def _resync(self, broker: BrokerId, tp: TopicPartition) -> None:
        b = self.brokers[broker]
        p = b.partitions.get(tp)
        if p is not None and p.on_state_resync(self.states[tp], self.now_ms):
            self._after_hw(b, tp)

    def _truncate(self, b: SimBroker, tp: TopicPartition, offset: int) -> None:
        log = b.logs[tp]
        if offset >= log.log_end_offset:
            # Nothing to cut, but epochs starting at the end go, as the real
            # ``Log.truncate_to`` does: a leader epoch this broker opened at its LEO and
            # never wrote in (it led briefly) otherwise stays its latest, and it asked the
            # new leader about it for ever (soak seed 18014 with --reassign-share 1).
            log.cache.truncate_from_end(log.log_end_offset)
            return
        p = b.partitions.get(tp)
        hw = p.high_watermark if p is not None else log.hw_checkpoint
        self.checker.on_truncate(self.now_ms, b.broker_id, tp, offset, hw)
        log.truncate_to(offset)
        if p is not None:
            p.on_follower_truncate(offset)
        self.log(f"b{b.broker_id} {tp} truncated to {offset}")

    # ---- broker: timers ----------------------------------------------------------------

    def _start_timers(self, b: SimBroker) -> None:
        half = self.config.replica_lag_time_max_ms // 2
        self.to_broker(self.now_ms + half, b.broker_id, self._isr_tick, b.broker_id)
        self.to_broker(
            self.now_ms + self.config.flush_interval_ms, b.broker_id, self._flush_tick, b.broker_id
        )

    def _isr_tick(self, broker: BrokerId) -> None:
        b = self.brokers[broker]
        for tp, p in b.partitions.items():
            if p.is_leader:
                proposal = p.maybe_shrink_isr(self.now_ms)
                if proposal is not None:
                    self.to_controller(
                        self._controller_alter_partition, broker, b.broker_epoch, proposal
                    )
            self._expire_purgatory(b, tp)
        half = self.config.replica_lag_time_max_ms // 2
        self.to_broker(self.now_ms + half, broker, self._isr_tick, broker)

    def _flush_tick(self, broker: BrokerId) -> None:
        b = self.brokers[broker]
        for log in b.logs.values():
            log.flushed = log.log_end_offset
        self.to_broker(
            self.now_ms + self.config.flush_interval_ms, broker, self._flush_tick, broker
        )

    # ---- broker: HW bookkeeping and purgatory ---------------------------------------

    def _after_hw(self, b: SimBroker, tp: TopicPartition) -> None:
        p = b.partitions[tp]
        log = b.logs[tp]
        log.hw_checkpoint = p.high_watermark
        term = (b.incarnation, p.leader_epoch) if p.is_leader else None
        self.checker.on_high_watermark(
            self.now_ms, b.broker_id, tp, p.high_watermark, log.records, leader_term=term
        )
        if p.is_leader:
            self._complete_purgatory(b, tp)

    def _complete_purgatory(self, b: SimBroker, tp: TopicPartition) -> None:
        pending = b.purgatory.get(tp)
        if not pending:
            return
        p = b.partitions[tp]
        keep: list[PendingProduce] = []
        for req in pending:
            done, error = p.check_enough_replicas_reach_offset(req.offset + 1)
            if not done:
                keep.append(req)
            else:
                if error is ErrorCode.NONE:
                    self.stats.acked_all += 1
                    self.checker.on_acked(self.now_ms, tp, req.offset, req.record_id)
                self._respond(req.record_id, error)
        b.purgatory[tp] = keep

    def _expire_purgatory(self, b: SimBroker, tp: TopicPartition) -> None:
        pending = b.purgatory.get(tp)
        if not pending:
            return
        keep = [r for r in pending if r.deadline_ms > self.now_ms]
        for r in pending:
            if r.deadline_ms <= self.now_ms:
                self._respond(r.record_id, ErrorCode.REQUEST_TIMED_OUT)
        b.purgatory[tp] = keep

    def _fail_purgatory(self, b: SimBroker, tp: TopicPartition, error: ErrorCode) -> None:
        for r in b.purgatory.pop(tp, []):
            self._respond(r.record_id, error)

    # ---- follower fetching -------------------------------------------------------------

    def _fetch_tick(self, broker: BrokerId, tp: TopicPartition) -> None:
        b = self.brokers[broker]
        f = b.fetchers.get(tp)
        if f is None or f.inflight:
            return
        self._request_ids += 1
        f.inflight = rid = self._request_ids
        log = b.logs[tp]
        if f.truncating:
            latest = log.cache.latest_epoch()
            if latest is None:
                f.truncating = False
                f.inflight = 0
                self.to_broker(self.now_ms, broker, self._fetch_tick, broker, tp)
                return
            request = EpochRequest(f.leader, broker, tp, f.leader_epoch, latest, rid)
            self.send(broker, f.leader, self._leader_offset_for_epoch, request)
        else:
            fetch = FetchRequest(
                f.leader, broker, tp, f.leader_epoch, log.log_end_offset, log.last_epoch(), rid
            )
            self.send(broker, f.leader, self._leader_fetch, fetch)
        timeout_at = self.now_ms + self.config.fetch_timeout_ms
        self.to_broker(timeout_at, broker, self._fetch_timeout, broker, tp, rid)

    def _fetch_timeout(self, broker: BrokerId, tp: TopicPartition, rid: int) -> None:
        f = self.brokers[broker].fetchers.get(tp)
        if f is not None and f.inflight == rid:
            f.inflight = 0
            self._fetch_tick(broker, tp)

    def _fetcher_for(self, broker: BrokerId, tp: TopicPartition, rid: int) -> Fetcher | None:
        f = self.brokers[broker].fetchers.get(tp)
        if f is None or f.inflight != rid:
            return None
        f.inflight = 0
        return f

    def _fetch_again(self, broker: BrokerId, tp: TopicPartition, *, backoff: bool) -> None:
        delay = self.config.fetch_interval_ms if backoff else 0
        self.to_broker(self.now_ms + delay, broker, self._fetch_tick, broker, tp)

    def _leader_offset_for_epoch(self, req: EpochRequest) -> None:
        b = self.brokers[req.leader]
        p = b.partitions.get(req.tp)
        error = (
            ErrorCode.NOT_LEADER_OR_FOLLOWER
            if p is None
            else p.validate_leader_epoch(req.current_leader_epoch)
        )
        answer = EpochEndOffset(NO_EPOCH, -1)
        if error is ErrorCode.NONE:
            log = b.logs[req.tp]
            answer = leader_end_offset_for_epoch(log.cache, log.log_end_offset, req.requested_epoch)
        self.send(req.leader, req.follower, self._follower_on_epoch_answer, req, error, answer)

    def _follower_on_epoch_answer(
        self, req: EpochRequest, error: ErrorCode, answer: EpochEndOffset
    ) -> None:
        f = self._fetcher_for(req.follower, req.tp, req.rid)
        if f is None:
            return
        if error is ErrorCode.NONE:
            self._apply_divergence(self.brokers[req.follower], req.tp, f, answer)
        self._fetch_again(req.follower, req.tp, backoff=error is not ErrorCode.NONE)

    def _apply_divergence(
        self, b: SimBroker, tp: TopicPartition, f: Fetcher, answer: EpochEndOffset
    ) -> None:
        log = b.logs[tp]
        p = b.partitions[tp]
        state = follower_truncation_offset(
            log.cache,
            log_end_offset=log.log_end_offset,
            high_watermark=p.high_watermark,
            leader_answer=answer,
        )
        self._truncate(b, tp, state.offset)
        f.truncating = not state.truncation_completed

    def _leader_fetch(self, req: FetchRequest) -> None:
        b = self.brokers[req.leader]
        p = b.partitions.get(req.tp)
        if p is None:
            error = ErrorCode.NOT_LEADER_OR_FOLLOWER
        else:
            error = p.validate_leader_epoch(req.current_leader_epoch)
        if error is not ErrorCode.NONE or p is None:
            self._reply(req, FetchResponse(error=error))
            return
        log = b.logs[req.tp]
        leo = log.log_end_offset
        if not self.config.truncate_to_hw_on_follow:
            diverging = diverging_epoch(
                log.cache,
                leo,
                fetch_offset=req.fetch_offset,
                last_fetched_epoch=req.last_fetched_epoch,
            )
            if diverging is not None:
                self._reply(req, FetchResponse(diverging=diverging, leader_leo=leo))
                return
        if req.fetch_offset > leo:
            self._reply(req, FetchResponse(error=ErrorCode.OFFSET_OUT_OF_RANGE, leader_leo=leo))
            return
        result = p.update_follower_fetch_state(
            req.follower, fetch_offset=req.fetch_offset, leader_log_end_offset=leo,
            now_ms=self.now_ms,
        )  # fmt: skip
        if result.proposal is not None:
            self.to_controller(
                self._controller_alter_partition, req.leader, b.broker_epoch, result.proposal
            )
        if result.high_watermark_moved:
            self._after_hw(b, req.tp)
        end = min(leo, req.fetch_offset + self.config.fetch_max_records)
        response = FetchResponse(
            records=tuple(log.records[req.fetch_offset : end]),
            epochs=tuple(log.epochs[req.fetch_offset : end]),
            leader_hw=p.high_watermark,
            leader_leo=leo,
        )
        self._reply(req, response)

    def _reply(self, req: FetchRequest, response: FetchResponse) -> None:
        self.send(req.leader, req.follower, self._follower_on_fetch, req, response)

    def _follower_on_fetch(self, req: FetchRequest, resp: FetchResponse) -> None:
        broker, tp = req.follower, req.tp
        f = self._fetcher_for(broker, tp, req.rid)
        if f is None:
            return
        b = self.brokers[broker]
        if resp.error is ErrorCode.OFFSET_OUT_OF_RANGE:
            # Our log is longer than the leader's (only after unclean election or the old
            # rules): Kafka truncates to the leader's end.
            self._truncate(b, tp, resp.leader_leo)
            self._fetch_again(broker, tp, backoff=False)
            return
        if resp.error is not ErrorCode.NONE:
            self._fetch_again(broker, tp, backoff=True)
            return
        if resp.diverging is not None:
            self._apply_divergence(b, tp, f, resp.diverging)
            self._fetch_again(broker, tp, backoff=False)
            return
        log = b.logs[tp]
        for record_id, epoch in zip(resp.records, resp.epochs, strict=True):
            log.append(epoch, record_id)
        p = b.partitions[tp]
        p.update_follower_high_watermark(
            log_end_offset=log.log_end_offset, leader_high_watermark=resp.leader_hw
        )
        self._after_hw(b, tp)  # checks below the HW even when it did not move
        self._fetch_again(broker, tp, backoff=not resp.records)

    # ---- clients -----------------------------------------------------------------------

    def produce(self, tp: TopicPartition, acks: int) -> int:
        """Send one record to the controller's current leader; return its id."""
        record_id = self.next_record_id
        self.next_record_id += 1
        self.stats.produced[acks] += 1
        leader = self.states[tp].leader
        if leader == NO_BROKER:
            self._respond(record_id, ErrorCode.LEADER_NOT_AVAILABLE)
            return record_id
        self.send(CLIENT, leader, self._broker_produce, leader, tp, acks, record_id)
        return record_id

    def _broker_produce(
        self, broker: BrokerId, tp: TopicPartition, acks: int, record_id: int
    ) -> None:
        b = self.brokers[broker]
        p = b.partitions.get(tp)
        if p is None:
            self._respond(record_id, ErrorCode.NOT_LEADER_OR_FOLLOWER)
            return
        error = p.check_append(acks)
        if error is not ErrorCode.NONE:
            self._respond(record_id, error)
            return
        log = b.logs[tp]
        offset = log.append(p.leader_epoch, record_id)
        state = self.states[tp]
        if state.leader == broker and state.leader_epoch == p.leader_epoch:
            self.checker.on_leader_append(self.now_ms, broker, tp, offset, record_id)
        if acks == 1:
            self._respond(record_id, ErrorCode.NONE)
        elif acks == -1:
            b.purgatory.setdefault(tp, []).append(
                PendingProduce(record_id, offset, self.now_ms + self.config.request_timeout_ms)
            )
        if p.on_leader_append(log.log_end_offset, self.now_ms):
            self._after_hw(b, tp)

    def _respond(self, record_id: int, error: ErrorCode) -> None:
        """The broker answers a produce (acks 1/-1): the producer sees ``error``."""
        self.outcomes[record_id] = error
        if error is not ErrorCode.NONE:
            self.stats.error(error)

    def consume(self, tp: TopicPartition) -> None:
        """One consumer fetch from the controller's current leader, below its HW."""
        leader = self.states[tp].leader
        if leader != NO_BROKER:
            self.send(CLIENT, leader, self._broker_consume, leader, tp)

    def _broker_consume(self, broker: BrokerId, tp: TopicPartition) -> None:
        b = self.brokers[broker]
        p = b.partitions.get(tp)
        if p is None or p.validate_leader_epoch(NO_EPOCH) is not ErrorCode.NONE:
            return
        log = b.logs[tp]
        position = self.consumer_positions[tp]
        if position > log.log_end_offset:
            if self.states[tp].leader == broker and self.states[tp].leader_epoch == p.leader_epoch:
                self.checker.on_consumer_out_of_range(
                    self.now_ms, tp, position, broker, log.log_end_offset
                )
                self.consumer_positions[tp] = log.log_end_offset  # auto.offset.reset=latest
            return
        end = min(p.high_watermark, position + 50)
        for offset in range(position, end):
            self.checker.on_consumed(self.now_ms, tp, offset, log.records[offset])
            self.stats.consumed += 1
        if end > position:
            self.consumer_positions[tp] = end

    # ---- faults ------------------------------------------------------------------------

    def crash(
        self, broker: BrokerId, *, session_expires: bool = True, lose_unflushed: bool = False
    ) -> None:
        """Kill the process. The log survives (page cache) unless ``lose_unflushed``."""
        b = self.brokers[broker]
        if not b.alive:
            return
        b.alive = False
        b.incarnation += 1
        b.partitions.clear()
        b.fetchers.clear()
        b.purgatory.clear()
        b.backlog.clear()
        b.paused_until = 0
        b.session_expired = False
        if lose_unflushed:
            for tp, log in b.logs.items():
                if log.flushed < log.log_end_offset:
                    # A torn tail is not a truncation the checker should blame on the rules.
                    log.truncate_to(log.flushed)
                    self.log(f"b{broker} {tp} lost unflushed tail -> {log.flushed}")
        self.log(f"b{broker} CRASH session_expires={session_expires}")
        if session_expires:
            self._controller_broker_failure(broker)

    def restart(self, broker: BrokerId) -> None:
        b = self.brokers[broker]
        if b.alive:
            return
        b.alive = True
        b.incarnation += 1
        b.broker_epoch = self._register()
        for log in b.logs.values():
            # Recovery: the epoch cache never runs past the log (Kafka truncates it on load).
            log.cache.truncate_from_end(log.log_end_offset)
            log.hw_checkpoint = min(log.hw_checkpoint, log.log_end_offset)
        self._link_clock[broker] = self.now_ms
        self.log(f"b{broker} RESTART")
        self._start_timers(b)
        self._controller_broker_startup(broker)

    def _register(self) -> int:
        self._registrations += 1
        return self._registrations

    def pause(self, broker: BrokerId, duration_ms: int, *, session_expires: bool = False) -> None:
        """A process pause (GC). With ``session_expires`` a pause longer than
        ``zookeeper.session.timeout.ms`` expires the broker's session: the controller treats it
        as dead and moves its leaderships while it is frozen; on waking it is a *zombie* — it
        still believes it leads — until it re-registers and hears the new state."""
        b = self.brokers[broker]
        if not b.alive:
            return
        until = self.now_ms + duration_ms
        if until <= b.paused_until:
            return
        b.paused_until = until
        self.log(f"b{broker} PAUSE until {until}")
        self.to_broker(until, broker, self._resume, broker)
        if session_expires and duration_ms > self.config.zookeeper_session_timeout_ms:
            at = self.now_ms + self.config.zookeeper_session_timeout_ms
            self.schedule(at, self._session_expiry, broker, b.incarnation)

    def _session_expiry(self, broker: BrokerId, incarnation: int) -> None:
        b = self.brokers[broker]
        if b.alive and b.incarnation == incarnation and b.paused_until > self.now_ms:
            b.session_expired = True
            self.log(f"b{broker} SESSION EXPIRED (paused)")
            self._controller_broker_failure(broker)

    def _resume(self, broker: BrokerId) -> None:
        b = self.brokers[broker]
        if b.paused_until > self.now_ms:
            return  # a longer pause superseded this one (this event was re-queued)
        backlog, b.backlog = b.backlog, []
        self.log(f"b{broker} RESUME ({len(backlog)} queued)")
        # What queued while it was stopped is handled now, in order, before anything that
        # arrives at this same instant (a socket's FIFO). Rescheduled at now, it used to run
        # after messages already due now: a StopReplica sent after a LeaderAndIsr jumped it
        # (soak seed 18219 with --reassign-share 1, session 12).
        for fn, args in backlog:
            fn(*args)
        if b.session_expired:
            # The ZooKeeper client reconnects with a new session and re-registers.
            b.session_expired = False
            b.broker_epoch = self._register()
            self.log(f"b{broker} RE-REGISTERS")
            self.to_controller(self._controller_broker_startup, broker)

    def block(self, a: int, b: int) -> None:
        """Partition the network between two nodes, both directions (brokers by id, or
        ``CLIENT`` for the producers and consumers)."""
        self.blocked.add((a, b))
        self.blocked.add((b, a))
        self.log(f"net b{a} X b{b}")

    def heal(self, a: int, b: int) -> None:
        self.blocked.discard((a, b))
        self.blocked.discard((b, a))
        self.log(f"net b{a} <-> b{b}")

    def heal_all(self) -> None:
        self.blocked.clear()

    # ---- end of run ----------------------------------------------------------------------

    def settle(self, duration_ms: int) -> None:
        """Heal everything, restart every broker, let replication converge, check the end."""
        self.heal_all()
        for broker, b in self.brokers.items():
            if not b.alive:
                self.restart(broker)
        # A process pause cannot be cut short: settle from when the last one ends.
        self.run_until(max([self.now_ms, *(b.paused_until for b in self.brokers.values())]))
        self.run_for(duration_ms)
        for tp in self.assignment:
            state = self.states[tp]
            if state.leader == NO_BROKER:
                self.checker.fail(self.now_ms, "offline", f"{tp} has no leader after settling")
                continue
            leader_log = self.brokers[state.leader].logs[tp].records
            self.checker.final_check(self.now_ms, tp, state.leader, leader_log)
            # Liveness: with every fault healed and producers stopped, every replica has
            # converged on the leader's log and is back in the ISR.
            for r in self.assignment[tp]:
                replica_log = self.brokers[r].logs.get(tp)
                if replica_log is None or replica_log.records != leader_log or r not in state.isr:
                    leo = "none" if replica_log is None else replica_log.log_end_offset
                    self.checker.fail(
                        self.now_ms,
                        "not-converged",
                        f"{tp} replica {r} (LEO {leo}) "
                        f"did not converge on leader {state.leader} (LEO {len(leader_log)}) "
                        f"or is not in the ISR {state.isr}",
                    )
        self.check_reassignments_settled()

    def check_reassignments_settled(self) -> None:
        """Once faults are healed: no reassignment is still running unless one of its target
        brokers is down, each assignment is the last target it was given, and no broker
        outside it still holds the partition (StopReplica or the restart deleted it)."""
        for tp, replicas in self.assignment.items():
            running = self.reassignments.get(tp)
            if running is not None:
                down = [r for r in running.target if not self.brokers[r].alive]
                if not down:
                    self.checker.fail(
                        self.now_ms,
                        "reassignment-stuck",
                        f"{tp} reassignment to {running.target} still running (RS {replicas}, "
                        f"ISR {self.states[tp].isr}, leader {self.states[tp].leader})",
                    )
                continue
            if replicas != self.targets[tp]:
                self.checker.fail(
                    self.now_ms,
                    "reassignment-target",
                    f"{tp} assignment {replicas} is not the last target {self.targets[tp]}",
                )
            for broker, b in self.brokers.items():
                if broker in replicas or not b.alive or tp not in b.logs:
                    continue
                self.checker.fail(
                    self.now_ms,
                    "stray-replica",
                    f"broker {broker} still hosts {tp}, assigned to {replicas}",
                )
