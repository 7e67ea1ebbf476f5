"""One replica's view of one partition: Kafka's ``Partition`` + ``ReplicaState``, pure.

Theory of operation (docs/design.md "Replication rules"; the numbers cite those rules):

1. The leader keeps a :class:`ReplicaState` per follower. A follower's fetch offset *is* its
   log end offset (rule 2). ``last_caught_up_time_ms`` follows Kafka's two-fetch rule: a
   fetch that reaches the leader's LEO as of *this* fetch makes the follower caught up now;
   one that reaches the leader's LEO as of the *previous* fetch makes it caught up as of the
   previous fetch's time.
2. The ISR is modelled with its in-flight change (rule 5): :class:`CommittedPartitionState`,
   :class:`PendingExpandIsr` or :class:`PendingShrinkIsr`. At most one change is in flight.
   ``maximal_isr`` is the committed ISR plus a member being added (a member being removed
   stays), so the HW only ever waits for *more* replicas while the controller decides.
3. HW = min LEO over the maximal ISR, leader included; it never goes backwards (rule 3).
   A follower whose LEO is unknown (no fetch yet in this leader epoch) holds the HW back.
4. Shrink (rule 4): an ISR follower not caught up for ``replica.lag.time.max.ms`` is
   proposed out. Expand: a follower joins when its LEO >= HW and >= the start offset of the
   current leader epoch (so it holds every record of this epoch — KIP-101).
5. ISR changes leave as :class:`AlterPartitionProposal` values; the caller sends them to the
   controller, which applies them with compare-and-set on ``partition_epoch`` and answers
   with the committed :class:`LeaderAndIsr` or an error (``on_alter_partition_response``).
   5a. A change stays in flight until the controller's answer settles it: an answer that
   never came (a timeout) may hide an applied change, so the same proposal is sent again
   (the controller answers a change already in force with that state); a stale-epoch answer
   makes the caller read the controller's state (``on_state_resync``) or await its
   LeaderAndIsr. Only an explicit "not applied" drops it (``alter_partition_followup``).
   STALE_BROKER_EPOCH is a stale answer too: it says this request was not applied, not
   that an earlier attempt of it (whose answer was lost) was not (Kafka retries it).
   5b. A refused join backs off (KIP-841 / KIP-903): after the controller refused to add
   replica R (INELIGIBLE_REPLICA) R is not proposed again for a backoff
   that doubles per refusal (:class:`IsrJoinBackoff`); it resets when a LeaderAndIsr arrives
   or R joins. Other replicas' expansions are not held back.
6. acks=all (rule 6): refused before append when |committed ISR| < ``min.insync.replicas``
   (NOT_ENOUGH_REPLICAS, 19); after the HW passes the batch, answered with NONE or, if the
   committed ISR shrank below the minimum meanwhile, NOT_ENOUGH_REPLICAS_AFTER_APPEND (20).
7. make_leader records ``(leader_epoch, log_end_offset)`` in the epoch cache before any
   write (rule 7, seed 002); fencing answers 74 / 75 / 6 (rule 8).

Nothing here reads a clock or does IO: time enters as ``now_ms``; effects leave as values.
Misuse (e.g. a follower method called on a leader) raises :class:`ReplicationStateError`,
a bug in the caller, never an expected outcome.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Protocol

from tidelog.errors import ErrorCode, TidelogError
from tidelog.model import NO_BROKER, NO_EPOCH, BrokerId, TopicPartition

#: A follower's LEO before its first fetch in the current leader epoch (Kafka's UnknownOffset).
UNKNOWN_OFFSET = -1

#: After the controller refuses to add a replica to the ISR, the leader waits this long before
#: proposing it again (5b). Long enough that a broker in controlled shutdown, whose follower
#: fetches go on for about a second after the controller took it out of every ISR (KIP-841),
#: costs each of its partitions a few refused AlterPartitions instead of one per fetch; short
#: next to ``replica.lag.time.max.ms`` (30 s by default), so a replica that became eligible
#: meanwhile joins soon after its first refusal.
ISR_JOIN_BACKOFF_INITIAL_MS = 500
#: The backoff doubles per refusal up to this (and never beyond ``replica.lag.time.max.ms``):
#: the longest a restarted broker (eligible again) waits to rejoin - follower fetches carry
#: no broker epoch here, so the leader cannot see the restart - while a broker that stays
#: ineligible costs one proposal per partition per 4 s.
ISR_JOIN_BACKOFF_MAX_MS = 4000


class ReplicationStateError(TidelogError):
    """A replication method was called in a state where it makes no sense (a caller bug)."""


class EpochCacheWriter(Protocol):
    """What make_leader needs from a leader epoch cache (LeaderEpochCache or storage's)."""

    def assign(self, epoch: int, start_offset: int) -> bool: ...


@dataclass(frozen=True, slots=True, kw_only=True)
class LeaderAndIsr:
    """The partition state the controller owns (Kafka's ``LeaderAndIsr``, the znode's body).

    ``partition_epoch`` (Kafka's zkVersion / partitionEpoch) grows on every change, leader or
    ISR; ``leader_epoch`` grows on every leader change (rule 7).
    """

    leader: BrokerId
    leader_epoch: int
    isr: tuple[BrokerId, ...]
    partition_epoch: int


@dataclass(frozen=True, slots=True, kw_only=True)
class CommittedPartitionState:
    """No ISR change in flight."""

    isr: frozenset[BrokerId]

    @property
    def maximal_isr(self) -> frozenset[BrokerId]:
        return self.isr

    @property
    def is_inflight(self) -> bool:
        return False


@dataclass(frozen=True, slots=True, kw_only=True)
class PendingExpandIsr:
    """``new_in_sync_replica_id`` was proposed in; the HW already waits for it."""

    isr: frozenset[BrokerId]
    new_in_sync_replica_id: BrokerId
    proposal: AlterPartitionProposal

    @property
    def maximal_isr(self) -> frozenset[BrokerId]:
        return self.isr | {self.new_in_sync_replica_id}

    @property
    def is_inflight(self) -> bool:
        return True


@dataclass(frozen=True, slots=True, kw_only=True)
class PendingShrinkIsr:
    """``out_of_sync_replica_ids`` were proposed out; the HW still waits for them."""

    isr: frozenset[BrokerId]
    out_of_sync_replica_ids: frozenset[BrokerId]
    proposal: AlterPartitionProposal

    @property
    def maximal_isr(self) -> frozenset[BrokerId]:
        return self.isr

    @property
    def is_inflight(self) -> bool:
        return True


PartitionState = CommittedPartitionState | PendingExpandIsr | PendingShrinkIsr


@dataclass(frozen=True, slots=True, kw_only=True)
class AlterPartitionProposal:
    """An AlterPartition (API 56) request for one partition: compare-and-set on the epochs."""

    topic_partition: TopicPartition
    leader_id: BrokerId
    leader_epoch: int
    partition_epoch: int
    new_isr: tuple[BrokerId, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class IsrJoinBackoff:
    """The controller refused to add a replica (5b): the leader does not propose it again
    before ``not_before_ms``, ``delay_ms`` after the last refusal (doubled per refusal)."""

    delay_ms: int
    not_before_ms: int


@dataclass(frozen=True, slots=True, kw_only=True)
class FollowerFetchResult:
    """What a follower fetch changed on the leader."""

    high_watermark_moved: bool
    proposal: AlterPartitionProposal | None


@dataclass(slots=True)
class ReplicaState:
    """The leader's view of one follower (Kafka's ``Replica`` / ``ReplicaState``)."""

    broker_id: BrokerId
    log_end_offset: int = UNKNOWN_OFFSET
    #: The follower's log start offset as its last fetch said (-1 unknown; KIP-392).
    log_start_offset: int = UNKNOWN_OFFSET
    last_fetch_time_ms: int = 0
    last_fetch_leader_log_end_offset: int = 0
    last_caught_up_time_ms: int = 0

    def update_fetch_state(
        self, *, fetch_offset: int, leader_log_end_offset: int, now_ms: int
    ) -> None:
        # The two-fetch rule (KIP-16 as refined in Kafka 2.x): caught up now if this fetch
        # reached the leader's current LEO; caught up as of the previous fetch if it reached
        # the LEO the leader had then.
        if fetch_offset >= leader_log_end_offset:
            self.last_caught_up_time_ms = max(self.last_caught_up_time_ms, now_ms)
        elif fetch_offset >= self.last_fetch_leader_log_end_offset:
            self.last_caught_up_time_ms = max(self.last_caught_up_time_ms, self.last_fetch_time_ms)
        self.log_end_offset = fetch_offset
        self.last_fetch_leader_log_end_offset = leader_log_end_offset
        self.last_fetch_time_ms = now_ms

    def is_caught_up(
        self, *, leader_log_end_offset: int, now_ms: int, replica_lag_time_max_ms: int
    ) -> bool:
        return (
            self.log_end_offset == leader_log_end_offset
            or now_ms - self.last_caught_up_time_ms <= replica_lag_time_max_ms
        )

    def reset(self, *, now_ms: int, in_sync: bool) -> None:
        """A new leader epoch (Kafka's resetReplicaState): the LEO is unknown until the
        follower fetches again; an ISR member counts as caught up now (so it gets a full
        ``replica.lag.time.max.ms`` to fetch), any other follower as never."""
        self.log_end_offset = UNKNOWN_OFFSET
        self.log_start_offset = UNKNOWN_OFFSET
        self.last_fetch_leader_log_end_offset = UNKNOWN_OFFSET
        self.last_fetch_time_ms = 0
        self.last_caught_up_time_ms = now_ms if in_sync else 0


@dataclass(slots=True)
class Partition:
    """One local replica of one partition, leader or follower.

    Leader-side state (``replica_states``, ``state``, ``high_watermark``) is meaningful only
    while ``is_leader``; a follower uses ``high_watermark`` for its own (leader-capped) HW.
    """

    topic_partition: TopicPartition
    local_broker_id: BrokerId
    replica_lag_time_max_ms: int
    min_insync_replicas: int
    leader_id: BrokerId = NO_BROKER
    leader_epoch: int = NO_EPOCH
    partition_epoch: int = -1
    leader_epoch_start_offset: int | None = None
    replicas: tuple[BrokerId, ...] = ()
    state: PartitionState = field(default_factory=lambda: CommittedPartitionState(isr=frozenset()))
    high_watermark: int = 0
    log_end_offset: int = 0
    replica_states: dict[BrokerId, ReplicaState] = field(default_factory=dict)
    #: Leader side, 5b: replicas whose join the controller refused, keyed by broker id.
    isr_join_backoffs: dict[BrokerId, IsrJoinBackoff] = field(default_factory=dict)

    # ---- state -------------------------------------------------------------------------

    @property
    def is_leader(self) -> bool:
        return self.leader_id == self.local_broker_id

    @property
    def isr(self) -> frozenset[BrokerId]:
        """The committed ISR (what the controller has written)."""
        return self.state.isr

    @property
    def maximal_isr(self) -> frozenset[BrokerId]:
        return self.state.maximal_isr

    # ---- transitions driven by the controller -----------------------------------------

    def make_leader(
        self,
        *,
        leader_epoch: int,
        partition_epoch: int,
        replicas: Iterable[BrokerId],
        isr: Iterable[BrokerId],
        log_end_offset: int,
        high_watermark: int,
        now_ms: int,
        epoch_cache: EpochCacheWriter,
    ) -> bool:
        """Become (or stay) leader; return whether this is a new leader epoch.

        On a new epoch the start offset is recorded in ``epoch_cache`` *before* any write is
        accepted (rule 7; seed 002) and every follower's state is reset: its LEO is unknown
        until it fetches, so the HW cannot move on stale knowledge. ``high_watermark`` is the
        local log's HW (a new leader's HW may lag the old leader's; it only moves forward).
        """
        replicas = tuple(replicas)
        isr_set = frozenset(isr)
        if self.local_broker_id not in isr_set:
            raise ReplicationStateError(f"{self.topic_partition}: leader not in ISR {isr_set}")
        is_new_epoch = not self.is_leader or leader_epoch > self.leader_epoch
        if not is_new_epoch and partition_epoch < self.partition_epoch:
            # An older state of this leader epoch (a resend overtaken by a newer one; the
            # partition epoch only grows, rule 5): what is in force here is newer.
            return False
        # The same state again (a new controller resends what it read): an ISR change in
        # flight stays in flight. Dropping it would leave this leader's ISR behind the
        # controller's once the controller accepts it (the answer then finds nothing in
        # flight): an expansion lost that way lets the controller elect a replica this
        # leader never waited for (found by the simulator, docs/replication.md).
        keep_inflight = (
            not is_new_epoch
            and partition_epoch == self.partition_epoch
            and self.state.is_inflight
            and self.state.isr == isr_set
        )
        self.leader_id = self.local_broker_id
        self.replicas = replicas
        self.partition_epoch = partition_epoch
        if not keep_inflight:
            self.state = CommittedPartitionState(isr=isr_set)
        self.log_end_offset = log_end_offset
        # 5b: the controller's state moved (a new leader epoch, or a broker fenced, shut down
        # or back), so a replica refused before may be eligible now.
        self.isr_join_backoffs = {}
        if is_new_epoch:
            self.leader_epoch = leader_epoch
            epoch_cache.assign(leader_epoch, log_end_offset)
            self.leader_epoch_start_offset = log_end_offset
            self.high_watermark = min(high_watermark, log_end_offset)
            self.replica_states = {
                r: ReplicaState(broker_id=r) for r in replicas if r != self.local_broker_id
            }
            for r, rs in self.replica_states.items():
                rs.reset(now_ms=now_ms, in_sync=r in isr_set)
        else:
            # Same epoch, newer partition state (e.g. the controller removed a dead follower,
            # or a reassignment added replicas): keep follower progress; a smaller ISR may
            # let the HW move. Replicas no longer assigned are forgotten.
            for r in replicas:
                if r != self.local_broker_id and r not in self.replica_states:
                    self.replica_states[r] = ReplicaState(broker_id=r)
            for r in [r for r in self.replica_states if r not in replicas]:
                del self.replica_states[r]
            self.maybe_increment_high_watermark(now_ms)
        return is_new_epoch

    def make_follower(
        self,
        *,
        leader_id: BrokerId,
        leader_epoch: int,
        partition_epoch: int,
        replicas: Iterable[BrokerId],
        isr: Iterable[BrokerId],
        log_end_offset: int,
    ) -> bool:
        """Become (or stay) follower of ``leader_id``; return whether the follower must
        (re)start truncation (leader or leader epoch changed)."""
        if leader_id == self.local_broker_id:
            raise ReplicationStateError(f"{self.topic_partition}: make_follower of itself")
        changed = leader_id != self.leader_id or leader_epoch != self.leader_epoch
        self.leader_id = leader_id
        self.leader_epoch = leader_epoch
        self.partition_epoch = partition_epoch
        self.replicas = tuple(replicas)
        self.state = CommittedPartitionState(isr=frozenset(isr))
        self.leader_epoch_start_offset = None
        self.replica_states = {}
        self.isr_join_backoffs = {}
        self.log_end_offset = log_end_offset
        self.high_watermark = min(self.high_watermark, log_end_offset)
        return changed

    # ---- fencing (rule 8) -------------------------------------------------------------

    def validate_leader_epoch(
        self, current_leader_epoch: int, *, require_leader: bool = True
    ) -> ErrorCode:
        """Kafka's order: epoch first (74 stale / 75 newer; -1 means 'unknown, skip'), then
        leadership (6)."""
        if current_leader_epoch != NO_EPOCH:
            if current_leader_epoch < self.leader_epoch:
                return ErrorCode.FENCED_LEADER_EPOCH
            if current_leader_epoch > self.leader_epoch:
                return ErrorCode.UNKNOWN_LEADER_EPOCH
        if require_leader and not self.is_leader:
            return ErrorCode.NOT_LEADER_OR_FOLLOWER
        return ErrorCode.NONE

    # ---- the leader's produce path (rule 6) -------------------------------------------

    def check_append(self, acks: int) -> ErrorCode:
        """Before appending a produce: NOT_LEADER_OR_FOLLOWER, or NOT_ENOUGH_REPLICAS for
        acks=-1 when the committed ISR is below ``min.insync.replicas``."""
        if not self.is_leader:
            return ErrorCode.NOT_LEADER_OR_FOLLOWER
        if acks == -1 and len(self.state.isr) < self.min_insync_replicas:
            return ErrorCode.NOT_ENOUGH_REPLICAS
        return ErrorCode.NONE

    def on_leader_append(self, log_end_offset: int, now_ms: int) -> bool:
        """The local log grew to ``log_end_offset``; return whether the HW moved (it can with
        an ISR of one)."""
        self._require_leader()
        self.log_end_offset = log_end_offset
        return self.maybe_increment_high_watermark(now_ms)

    def check_enough_replicas_reach_offset(self, required_offset: int) -> tuple[bool, ErrorCode]:
        """Kafka's checkEnoughReplicasReachOffset: (done, error) for a parked acks=-1 produce
        whose last offset + 1 is ``required_offset``."""
        if not self.is_leader:
            return False, ErrorCode.NOT_LEADER_OR_FOLLOWER
        if self.high_watermark >= required_offset:
            if len(self.state.isr) >= self.min_insync_replicas:
                return True, ErrorCode.NONE
            return True, ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND
        return False, ErrorCode.NONE

    # ---- follower fetches, HW and ISR (rules 2-5) --------------------------------------

    def update_follower_fetch_state(
        self,
        replica_id: BrokerId,
        *,
        fetch_offset: int,
        leader_log_end_offset: int,
        now_ms: int,
        log_start_offset: int = UNKNOWN_OFFSET,
    ) -> FollowerFetchResult:
        """Record a follower's fetch (and the log start offset it says it has); maybe expand
        the ISR; maybe move the HW."""
        self._require_leader()
        rs = self.replica_states.get(replica_id)
        if rs is None:
            # Not an assigned replica (e.g. removed by reassignment): nothing to track.
            return FollowerFetchResult(high_watermark_moved=False, proposal=None)
        self.log_end_offset = leader_log_end_offset
        rs.update_fetch_state(
            fetch_offset=fetch_offset, leader_log_end_offset=leader_log_end_offset, now_ms=now_ms
        )
        rs.log_start_offset = log_start_offset
        proposal = self.maybe_expand_isr(replica_id, now_ms)
        moved = self.maybe_increment_high_watermark(now_ms)
        return FollowerFetchResult(high_watermark_moved=moved, proposal=proposal)

    def note_quiet_follower_fetch(
        self, replica_id: BrokerId, *, fetch_offset: int, leader_log_end_offset: int, now_ms: int
    ) -> bool:
        """A follower's fetch of a partition that is quiet for it: the follower is in the
        committed ISR, stands at the leader's log end, and the HW is there too. Such a fetch
        can change nothing but the follower's fetch times, so this records them (as
        ``update_follower_fetch_state`` would: caught up now) and says True; any other case
        says False and the caller takes the full path. Rule 2 and rule 4's ISR timing hold
        unchanged: a live idle follower stays caught up (KIP-227 sessions skip such
        partitions' reads, not their fetch times)."""
        if self.leader_id != self.local_broker_id or self.state.is_inflight:
            return False
        rs = self.replica_states.get(replica_id)
        if (
            rs is None
            or fetch_offset != leader_log_end_offset
            or rs.log_end_offset != fetch_offset
            or self.high_watermark != fetch_offset
            or replica_id not in self.state.isr
        ):
            return False
        self.log_end_offset = leader_log_end_offset
        rs.update_fetch_state(
            fetch_offset=fetch_offset, leader_log_end_offset=leader_log_end_offset, now_ms=now_ms
        )
        return True

    def note_parked_fetch(self, replica_id: BrokerId, fetch_offset: int, fetch_ms: int) -> None:
        """A follower's fetch at ``fetch_ms`` of a partition parked quiet in its session
        (KIP-227; ``fetch_session`` rule 7), recorded once the partition changes: the
        follower stood at ``fetch_offset``, the leader's log end then (a change would have
        woken it earlier). Rule 4's ISR timing so holds as if every fetch had been recorded
        (``note_quiet_follower_fetch``); a fetch older than the last one recorded, or at an
        offset the follower no longer holds, changes nothing."""
        rs = self.replica_states.get(replica_id)
        if rs is None or rs.log_end_offset != fetch_offset or fetch_ms <= rs.last_fetch_time_ms:
            return
        rs.update_fetch_state(
            fetch_offset=fetch_offset, leader_log_end_offset=fetch_offset, now_ms=fetch_ms
        )

    def is_follower_in_sync(self, replica_id: BrokerId) -> bool:
        """Rule 4's expand condition: LEO >= HW and >= this epoch's start offset (KIP-101)."""
        rs = self.replica_states.get(replica_id)
        if rs is None or self.leader_epoch_start_offset is None:
            return False
        return (
            rs.log_end_offset >= self.high_watermark
            and rs.log_end_offset >= self.leader_epoch_start_offset
        )

    def maybe_expand_isr(self, replica_id: BrokerId, now_ms: int) -> AlterPartitionProposal | None:
        """Propose ``replica_id`` into the ISR if it is in sync (rule 4) and not backed off.

        Invariant (5b; Kafka only proposes a replica its own view holds eligible, KIP-841,
        KIP-903): once the controller has refused to add R (INELIGIBLE_REPLICA: R is dead,
        in a controlled shutdown or has its log dir offline), R is not proposed again before
        ``isr_join_backoffs[R].not_before_ms``. Without it every fetch of R re-proposed it:
        hundreds of refused AlterPartitions a second (issue 18)."""
        self._require_leader()
        if self.state.is_inflight or replica_id in self.state.isr:
            return None
        if not self.is_follower_in_sync(replica_id):
            return None
        backoff = self.isr_join_backoffs.get(replica_id)
        if backoff is not None and now_ms < backoff.not_before_ms:
            return None
        proposal = self._proposal(sorted(self.state.isr | {replica_id}))
        self.state = PendingExpandIsr(
            isr=self.state.isr, new_in_sync_replica_id=replica_id, proposal=proposal
        )
        return proposal

    def out_of_sync_replicas(self, now_ms: int) -> frozenset[BrokerId]:
        return frozenset(
            r
            for r in self.state.isr
            if r != self.local_broker_id
            and (
                (rs := self.replica_states.get(r)) is None
                or not rs.is_caught_up(
                    leader_log_end_offset=self.log_end_offset,
                    now_ms=now_ms,
                    replica_lag_time_max_ms=self.replica_lag_time_max_ms,
                )
            )
        )

    def maybe_shrink_isr(self, now_ms: int) -> AlterPartitionProposal | None:
        """Propose the followers lagging more than ``replica.lag.time.max.ms`` out (call every
        lag/2). The HW keeps waiting for them until the controller commits the change."""
        if not self.is_leader or self.state.is_inflight:
            return None
        out = self.out_of_sync_replicas(now_ms)
        if not out:
            return None
        proposal = self._proposal(sorted(self.state.isr - out))
        self.state = PendingShrinkIsr(
            isr=self.state.isr, out_of_sync_replica_ids=out, proposal=proposal
        )
        return proposal

    def maybe_increment_high_watermark(self, now_ms: int) -> bool:
        """HW = min LEO over the maximal ISR (leader included); forward only (rule 3)."""
        del now_ms  # kept for Kafka's signature; the rule needs no clock
        self._require_leader()
        new_hw = self.log_end_offset
        for r in self.state.maximal_isr:
            if r == self.local_broker_id:
                continue
            rs = self.replica_states.get(r)
            leo = UNKNOWN_OFFSET if rs is None else rs.log_end_offset
            new_hw = min(new_hw, leo)
        if new_hw > self.high_watermark:
            self.high_watermark = new_hw
            return True
        return False

    def on_alter_partition_response(
        self,
        proposal: AlterPartitionProposal,
        error: ErrorCode,
        committed: LeaderAndIsr | None,
        now_ms: int,
    ) -> bool:
        """Apply the controller's answer to ``proposal``; return whether the HW moved.

        A stale answer (not for the change in flight, or a newer state already known) is
        ignored. On success the committed ISR and partition epoch are taken. On an error the
        change stays in flight (rule 5a) unless the controller said it was NOT applied
        (``alter_partition_followup`` is ``REVERT``); the caller retries or resyncs.
        """
        if not self.is_leader or not self.state.is_inflight:
            return False
        pending = self.state
        assert isinstance(pending, PendingExpandIsr | PendingShrinkIsr)
        if pending.proposal != proposal:
            return False
        if error is not ErrorCode.NONE or committed is None:
            if alter_partition_followup(error) is AlterFollowup.REVERT:
                self.state = CommittedPartitionState(isr=pending.isr)
                if isinstance(pending, PendingExpandIsr) and error in _JOIN_REFUSED:
                    self._back_off_isr_join(pending.new_in_sync_replica_id, now_ms)
                return self.maybe_increment_high_watermark(now_ms)
            return False
        if committed.leader_epoch != self.leader_epoch or committed.leader != self.local_broker_id:
            return False  # we were deposed: the controller's LeaderAndIsr brings the truth
        if committed.partition_epoch <= self.partition_epoch:
            return False
        self._take_committed(committed)
        return self.maybe_increment_high_watermark(now_ms)

    @property
    def in_flight_proposal(self) -> AlterPartitionProposal | None:
        """The ISR change awaiting the controller, if any."""
        state = self.state
        return state.proposal if isinstance(state, PendingExpandIsr | PendingShrinkIsr) else None

    def on_state_resync(self, current: LeaderAndIsr, now_ms: int) -> bool:
        """Rule 5a: take the partition state read from the controller's store (ZooKeeper)
        after an AlterPartition answer left the change in doubt; return whether the HW moved.

        Taken only if it is still our leadership (same leader, same leader epoch) and not
        older than what we know; otherwise the controller's LeaderAndIsr will settle it and
        the change stays in flight (the HW keeps waiting for the maximal ISR)."""
        if not self.is_leader:
            return False
        if current.leader != self.local_broker_id or current.leader_epoch != self.leader_epoch:
            return False
        if current.partition_epoch < self.partition_epoch:
            return False
        self._take_committed(current)
        return self.maybe_increment_high_watermark(now_ms)

    # ---- the follower side ------------------------------------------------------------

    def update_follower_high_watermark(
        self, *, log_end_offset: int, leader_high_watermark: int
    ) -> bool:
        """A follower's HW = min(own LEO, leader HW) (rule 3); return whether it changed."""
        if self.is_leader:
            raise ReplicationStateError(f"{self.topic_partition}: follower HW on the leader")
        self.log_end_offset = log_end_offset
        new_hw = follower_high_watermark(log_end_offset, leader_high_watermark)
        changed = new_hw != self.high_watermark
        self.high_watermark = new_hw
        return changed

    def on_follower_truncate(self, log_end_offset: int) -> None:
        """The local log was truncated to ``log_end_offset``: the HW cannot exceed it."""
        self.log_end_offset = log_end_offset
        self.high_watermark = min(self.high_watermark, log_end_offset)

    # ---- helpers ----------------------------------------------------------------------

    def _take_committed(self, committed: LeaderAndIsr) -> None:
        self.partition_epoch = committed.partition_epoch
        self.state = CommittedPartitionState(isr=frozenset(committed.isr))
        # 5b: a replica that joined starts afresh if it is ever refused again.
        for r in committed.isr:
            self.isr_join_backoffs.pop(r, None)

    def _back_off_isr_join(self, replica_id: BrokerId, now_ms: int) -> None:
        """5b: the controller refused to add ``replica_id``: wait before proposing it again,
        twice as long as after the previous refusal, up to the cap."""
        previous = self.isr_join_backoffs.get(replica_id)
        delay = ISR_JOIN_BACKOFF_INITIAL_MS if previous is None else 2 * previous.delay_ms
        delay = min(delay, ISR_JOIN_BACKOFF_MAX_MS, self.replica_lag_time_max_ms)
        self.isr_join_backoffs[replica_id] = IsrJoinBackoff(
            delay_ms=delay, not_before_ms=now_ms + delay
        )

    def _proposal(self, new_isr: Iterable[BrokerId]) -> AlterPartitionProposal:
        return AlterPartitionProposal(
            topic_partition=self.topic_partition,
            leader_id=self.local_broker_id,
            leader_epoch=self.leader_epoch,
            partition_epoch=self.partition_epoch,
            new_isr=tuple(new_isr),
        )

    def _require_leader(self) -> None:
        if not self.is_leader:
            raise ReplicationStateError(f"{self.topic_partition}: not the leader")


class AlterFollowup(enum.Enum):
    """What a leader does after an AlterPartition answer that is not a success (rule 5a)."""

    #: The controller said the change was NOT applied: drop it (a later check may propose).
    REVERT = "revert"
    #: The answer never came or the controller was unavailable: send the same proposal again
    #: (the controller answers a change it already applied with the state in force).
    RETRY = "retry"
    #: Our partition epoch or leader epoch is stale: read the state the controller wrote.
    RESYNC = "resync"


_NOT_APPLIED = frozenset(
    {
        ErrorCode.OPERATION_NOT_ATTEMPTED,
        ErrorCode.INELIGIBLE_REPLICA,
        ErrorCode.INVALID_REQUEST,
    }
)
#: The refusals of a join that back the joining replica off (5b). In this controller
#: (``decisions.alter_partition``) INELIGIBLE_REPLICA means the replica added is not assigned,
#: not live, in a controlled shutdown or with its log dir offline (KIP-841).
_JOIN_REFUSED = frozenset({ErrorCode.INELIGIBLE_REPLICA})
#: STALE_BROKER_EPOCH: the leader's own broker epoch is not the registered one (KIP-380), e.g.
#: it re-registered after its session expired and the controller has not seen it yet. It is a
#: stale answer, not "not applied": an earlier attempt of the same proposal, whose answer was
#: lost, may have been applied, and reverting an applied expansion let a zombie leader's HW
#: pass records the controller's ISR lacked (simulator seed 1234, docs/replication.md).
_STALE = frozenset(
    {
        ErrorCode.STALE_BROKER_EPOCH,
        ErrorCode.INVALID_UPDATE_VERSION,
        ErrorCode.FENCED_LEADER_EPOCH,
        ErrorCode.NOT_LEADER_OR_FOLLOWER,
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
    }
)


def alter_partition_followup(error: ErrorCode) -> AlterFollowup:
    """Rule 5a. Kafka's ``Partition.handleAlterPartitionError``: only an explicit "not
    applied" answer may drop the in-flight change. After a timeout the controller may well
    have applied it (found by ``tidelog bench``: a shrink applied after the leader's 10 s
    timeout left the leader and the controller disagreeing about the ISR for good); dropping
    an applied EXPAND would let the HW pass records a controller-side ISR member lacks, and
    that member could be elected (tests/sim/test_scenarios.py, lost AlterPartition answer)."""
    if error in _NOT_APPLIED:
        return AlterFollowup.REVERT
    if error in _STALE:
        return AlterFollowup.RESYNC
    return AlterFollowup.RETRY


def follower_high_watermark(log_end_offset: int, leader_high_watermark: int) -> int:
    """Rule 3: a follower never exposes more than it holds nor more than the leader commits."""
    return min(log_end_offset, leader_high_watermark)
