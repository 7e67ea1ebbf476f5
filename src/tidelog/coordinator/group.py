"""The classic consumer group protocol as a pure state machine (Kafka's GroupCoordinator).

Theory of operation. One ``GroupManager`` holds the groups and committed offsets of one
``__consumer_offsets`` partition. Requests come in as method calls with the time as
``now_ms``; answers come out as values. JoinGroup and SyncGroup answers are often *delayed*
(until every member has rejoined, until the leader has sent the assignment): such a call
returns ``None`` for the caller and the answer appears later in an ``Effects`` (``joins`` /
``syncs``, keyed by member id) returned by some other call or by ``tick``. What must be
persisted appears as ``Effects.group_records``; offsets are validated here
(``validate_commit``) and applied by the caller once they are replicated
(``apply_offsets``), so a commit is visible only after the high watermark passed it.
Transactional offset commits (KIP-98/KIP-447) stay pending per producer id until their
transaction's marker (``tidelog.coordinator.txn_offsets``): ``validate_txn_commit``,
``add_txn_offsets`` once appended, ``complete_txn`` once the marker is written.

Group states and their rules (KIP-62/KIP-345/KIP-394 behaviour of Kafka 2.x-3.x):

1. Empty: no members (a group may exist only for its committed offsets). A join moves it to
   PreparingRebalance, with ``group.initial.rebalance.delay.ms`` for the very first one.
2. PreparingRebalance: joins park. The join phase completes when every known member has
   rejoined (and no member awaits its id), else at the rebalance deadline (the largest
   ``rebalance_timeout_ms``), dropping members that did not rejoin. Completion bumps the
   generation, elects a protocol every member supports (by votes, in member preference),
   keeps or picks the leader, and answers every parked join; the leader's answer carries
   every member's metadata. No members left: the group becomes Empty (generation bumped).
3. CompletingRebalance: syncs park until the leader's SyncGroup brings the assignment; then
   Stable, every parked sync answered with its member's assignment. Assignors run in the
   clients: protocols are opaque bytes here.
4. Stable: heartbeats answer NONE; a join by the leader or with changed protocols, a leave,
   or an expired session starts a new rebalance (PreparingRebalance).
5. Dead: the group was deleted (or its partition unloaded); requests get
   COORDINATOR_NOT_AVAILABLE (the client looks the coordinator up again).

Sessions: each member must heartbeat (or join/sync/commit) within its ``session_timeout_ms``;
a member parked in JoinGroup or SyncGroup is kept alive by the parked request. A new member that got
MEMBER_ID_REQUIRED (JoinGroup v4+, KIP-394) must rejoin with that id within its session
timeout. Static members (``group.instance.id``, KIP-345) keep their identity across
restarts: a join with a known instance id and no member id replaces the old member id (the
old one is fenced: FENCED_INSTANCE_ID) and, when nothing else changed in a Stable group,
gets the current assignment without a rebalance.

Offset expiry (Kafka's ``GroupMetadata.removeExpiredOffsets`` and
``GroupMetadataManager.cleanupGroupMetadata``, KIP-211), ``remove_expired_offsets`` run by
the coordinator every ``offsets.retention.check.interval.ms``:

6. An offset committed with an explicit expire timestamp (OffsetCommit v2-v4
   ``retention_time_ms``) expires at that time, whatever the group does. Otherwise:
7. Empty group that used the group protocol (protocol type set): every offset expires once
   the retention has passed since the group became Empty (its ``state_timestamp_ms``, kept
   in the group metadata record; unknown, e.g. an old record: since the offset's commit).
8. Group that never used the group protocol (no protocol type: a standalone consumer with
   ``assign()``, or known only from its offsets): each offset expires once the retention
   has passed since its commit.
9. Stable ``consumer`` group whose subscriptions can be read: only offsets of topics no
   member subscribes to expire, retention counted from their commit. Any other group with
   members keeps everything.
10. Never expired: an offset with an OffsetCommit in flight (appended, not yet replicated:
    Kafka's ``pendingOffsetCommits``) and transactional offsets still pending.
11. A group left Empty with no offsets (committed, in flight or pending) is Dead and
    removed; the caller writes its group tombstone when it had a generation (Kafka skips
    generation 0: such a group only stored offsets).
"""

from __future__ import annotations

import enum
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from tidelog.coordinator.records import (
    GroupRecord,
    MemberRecord,
    OffsetAndMetadata,
    subscribed_topics,
)
from tidelog.coordinator.txn_offsets import LoggedOffset, PendingTxnOffsets, commit_pending
from tidelog.errors import ErrorCode
from tidelog.model import TopicPartition

#: Kafka's ``offset.metadata.max.bytes``.
OFFSET_METADATA_MAX_BYTES = 4096


class GroupState(enum.Enum):
    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


@dataclass(frozen=True, slots=True)
class GroupConfig:
    """Kafka's broker settings for groups (defaults as Kafka's)."""

    min_session_timeout_ms: int = 6000
    max_session_timeout_ms: int = 1_800_000
    initial_rebalance_delay_ms: int = 3000
    max_size: int = 2**31 - 1


@dataclass(slots=True)
class Member:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    protocol_type: str
    #: (name, metadata) in the member's order of preference.
    protocols: list[tuple[str, bytes]]
    last_heartbeat_ms: int
    assignment: bytes = b""
    awaiting_join: bool = False
    awaiting_sync: bool = False

    def metadata_for(self, protocol: str) -> bytes:
        for name, metadata in self.protocols:
            if name == protocol:
                return metadata
        return b""


@dataclass(frozen=True, slots=True)
class JoinedMember:
    member_id: str
    group_instance_id: str | None
    metadata: bytes


@dataclass(frozen=True, slots=True)
class JoinResult:
    error: ErrorCode
    member_id: str
    generation_id: int = -1
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader: str = ""
    #: Every member with its metadata: for the leader only.
    members: tuple[JoinedMember, ...] = ()
    skip_assignment: bool = False


@dataclass(frozen=True, slots=True)
class SyncResult:
    error: ErrorCode
    protocol_type: str | None = None
    protocol_name: str | None = None
    assignment: bytes = b""


@dataclass(slots=True)
class Effects:
    """Answers due to parked requests and what to persist, from one call."""

    joins: dict[str, JoinResult] = field(default_factory=dict)
    syncs: dict[str, SyncResult] = field(default_factory=dict)
    #: group id -> its metadata record to append (None: a tombstone).
    group_records: dict[str, GroupRecord | None] = field(default_factory=dict)

    def merge(self, other: Effects) -> None:
        self.joins.update(other.joins)
        self.syncs.update(other.syncs)
        self.group_records.update(other.group_records)

    def __bool__(self) -> bool:
        return bool(self.joins or self.syncs or self.group_records)


@dataclass(frozen=True, slots=True)
class ExpiredOffsets:
    """What one expiry round removed from memory, for the caller to tombstone."""

    #: group id -> partitions whose offsets expired.
    offsets: dict[str, list[TopicPartition]]
    #: Groups that became Dead and were removed, with their generation then.
    dead_groups: dict[str, int]

    @property
    def count(self) -> int:
        return sum(len(tps) for tps in self.offsets.values())


@dataclass(slots=True)
class Group:
    group_id: str
    state: GroupState = GroupState.EMPTY
    generation_id: int = 0
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader_id: str | None = None
    members: dict[str, Member] = field(default_factory=dict)
    #: Member ids handed out with MEMBER_ID_REQUIRED -> deadline to rejoin by.
    pending_members: dict[str, int] = field(default_factory=dict)
    #: group.instance.id -> member id.
    static_members: dict[str, str] = field(default_factory=dict)
    #: When the join phase ends at the latest (PreparingRebalance only).
    join_deadline_ms: int = -1
    #: End of the initial delay (KIP-134), extended as members arrive, capped by the deadline.
    initial_delay_until_ms: int = -1
    state_timestamp_ms: int = -1

    def transition(self, state: GroupState, now_ms: int) -> None:
        self.state = state
        self.state_timestamp_ms = now_ms

    def supports_protocols(self, protocol_type: str, names: Sequence[str]) -> bool:
        if not self.members:
            return bool(protocol_type) and bool(names)
        if protocol_type != self.protocol_type:
            return False
        return bool(self.candidate_protocols() & set(names))

    def candidate_protocols(self) -> set[str]:
        sets = [{name for name, _ in m.protocols} for m in self.members.values()]
        return set.intersection(*sets) if sets else set()

    def select_protocol(self) -> str:
        candidates = self.candidate_protocols()
        votes: dict[str, int] = {}
        order: list[str] = []
        for m in self.members.values():
            choice = next(name for name, _ in m.protocols if name in candidates)
            if choice not in votes:
                order.append(choice)
            votes[choice] = votes.get(choice, 0) + 1
        return max(order, key=lambda name: votes[name])

    def all_members_joined(self) -> bool:
        return not self.pending_members and all(m.awaiting_join for m in self.members.values())

    def record(self) -> GroupRecord:
        protocol = self.protocol_name or ""
        return GroupRecord(
            protocol_type=self.protocol_type or "",
            generation_id=self.generation_id,
            protocol_name=self.protocol_name,
            leader_id=self.leader_id,
            current_state_timestamp_ms=self.state_timestamp_ms,
            members=tuple(
                MemberRecord(
                    m.member_id,
                    m.group_instance_id,
                    m.client_id,
                    m.client_host,
                    m.rebalance_timeout_ms,
                    m.session_timeout_ms,
                    m.metadata_for(protocol),
                    m.assignment,
                )
                for m in self.members.values()
            ),
        )

    def subscribed_topics(self) -> set[str] | None:
        """Topics the members subscribe to (None: not readable, treat as all)."""
        topics: set[str] = set()
        for m in self.members.values():
            got = subscribed_topics(
                self.protocol_type or "", m.metadata_for(self.protocol_name or "")
            )
            if got is None:
                return None
            topics.update(got)
        return topics


@dataclass(frozen=True, slots=True)
class JoinRequest:
    group_id: str
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocol_type: str
    protocols: tuple[tuple[str, bytes], ...]
    #: JoinGroup v4+: a new member must first learn its id (MEMBER_ID_REQUIRED).
    require_known_member_id: bool


class GroupManager:
    """Groups and offsets of one ``__consumer_offsets`` partition; see the module docstring."""

    def __init__(
        self, config: GroupConfig, new_member_id: Callable[[str], str] | None = None
    ) -> None:
        self.config = config
        #: client id -> a fresh member id (Kafka: ``<client id>-<uuid>``); tests inject theirs.
        self.new_member_id = new_member_id or (lambda client_id: f"{client_id}-{uuid.uuid4()}")
        self.groups: dict[str, Group] = {}
        #: Committed offsets with the log offset of their batch (txn_offsets rule 3).
        self.offsets: dict[str, dict[TopicPartition, LoggedOffset]] = {}
        #: Transactional offsets awaiting their marker (txn_offsets rule 1).
        self.pending_txn = PendingTxnOffsets()
        #: Plain commits appended but not yet replicated, per group and partition (rule 10).
        self.pending_commits: dict[str, dict[TopicPartition, int]] = {}

    # --- loading ---------------------------------------------------------------------------

    def load(
        self,
        groups: Mapping[str, GroupRecord],
        offsets: Mapping[str, Mapping[TopicPartition, OffsetAndMetadata | LoggedOffset]],
        now_ms: int,
        pending_txn: PendingTxnOffsets | None = None,
    ) -> None:
        """State replayed from the partition: groups with members come back Stable, their
        sessions restarted at ``now_ms`` (Kafka schedules every heartbeat afresh on load).
        A group known only from its (committed or pending) offsets comes back Empty."""
        for group_id, rec in groups.items():
            # The record's state timestamp (when an Empty group became empty: rule 7).
            group = Group(
                group_id,
                generation_id=rec.generation_id,
                state_timestamp_ms=rec.current_state_timestamp_ms,
            )
            group.protocol_type = rec.protocol_type or None
            group.protocol_name = rec.protocol_name
            group.leader_id = rec.leader_id
            for m in rec.members:
                group.members[m.member_id] = Member(
                    m.member_id,
                    m.group_instance_id,
                    m.client_id,
                    m.client_host,
                    m.rebalance_timeout_ms,
                    m.session_timeout_ms,
                    rec.protocol_type,
                    [(rec.protocol_name or "", m.subscription)],
                    now_ms,
                    m.assignment,
                )
                if m.group_instance_id is not None:
                    group.static_members[m.group_instance_id] = m.member_id
            group.state = GroupState.STABLE if group.members else GroupState.EMPTY
            self.groups[group_id] = group
        for group_id, by_tp in offsets.items():
            self.offsets[group_id] = {
                tp: o if isinstance(o, LoggedOffset) else LoggedOffset(o) for tp, o in by_tp.items()
            }
            self.groups.setdefault(group_id, Group(group_id, state_timestamp_ms=now_ms))
        if pending_txn is not None:
            self.pending_txn = pending_txn
            for group_id in pending_txn.groups():
                self.groups.setdefault(group_id, Group(group_id, state_timestamp_ms=now_ms))

    def unload(self) -> Effects:
        """The partition moved away: every parked request answers NOT_COORDINATOR."""
        effects = Effects()
        for group in self.groups.values():
            for m in group.members.values():
                if m.awaiting_join:
                    effects.joins[m.member_id] = JoinResult(ErrorCode.NOT_COORDINATOR, m.member_id)
                if m.awaiting_sync:
                    effects.syncs[m.member_id] = SyncResult(ErrorCode.NOT_COORDINATOR)
            group.transition(GroupState.DEAD, -1)
        self.groups.clear()
        self.offsets.clear()
        self.pending_txn = PendingTxnOffsets()
        self.pending_commits.clear()
        return effects

    # --- JoinGroup -------------------------------------------------------------------------

    def join_group(self, req: JoinRequest, now_ms: int) -> tuple[JoinResult | None, str, Effects]:
        """A JoinGroup: its answer now, or None when parked (the answer comes in a later
        ``Effects`` under the returned member id, new for a first join of v0-v3)."""
        effects = Effects()
        member_id = req.member_id
        if not req.group_id:
            return JoinResult(ErrorCode.INVALID_GROUP_ID, member_id), member_id, effects
        if not (
            self.config.min_session_timeout_ms
            <= req.session_timeout_ms
            <= self.config.max_session_timeout_ms
        ):
            return JoinResult(ErrorCode.INVALID_SESSION_TIMEOUT, member_id), member_id, effects
        group = self.groups.get(req.group_id)
        if group is None:
            if member_id:
                return JoinResult(ErrorCode.UNKNOWN_MEMBER_ID, member_id), member_id, effects
            group = self.groups[req.group_id] = Group(req.group_id, state_timestamp_ms=now_ms)
        if group.state == GroupState.DEAD:
            error = ErrorCode.COORDINATOR_NOT_AVAILABLE
            return JoinResult(error, member_id), member_id, effects
        if not group.supports_protocols(req.protocol_type, [n for n, _ in req.protocols]):
            error = ErrorCode.INCONSISTENT_GROUP_PROTOCOL
            return JoinResult(error, member_id), member_id, effects
        if not member_id:
            member_id = self.new_member_id(req.client_id)
            result, effects = self._join_unknown_member(group, req, member_id, now_ms, effects)
            return result, member_id, effects
        result, effects = self._join_known_member(group, req, now_ms, effects)
        return result, member_id, effects

    def _join_unknown_member(
        self, group: Group, req: JoinRequest, new_id: str, now_ms: int, effects: Effects
    ) -> tuple[JoinResult | None, Effects]:
        instance = req.group_instance_id
        if instance is not None and instance in group.static_members:
            return self._replace_static_member(group, req, new_id, now_ms, effects)
        if len(group.members) + len(group.pending_members) >= self.config.max_size:
            return JoinResult(ErrorCode.GROUP_MAX_SIZE_REACHED, ""), effects
        if req.require_known_member_id and instance is None:
            # KIP-394: hand out the id; the member must come back with it.
            group.pending_members[new_id] = now_ms + req.session_timeout_ms
            return JoinResult(ErrorCode.MEMBER_ID_REQUIRED, new_id), effects
        self._add_member_and_rebalance(group, req, new_id, now_ms, effects)
        return None, effects

    def _replace_static_member(
        self, group: Group, req: JoinRequest, new_id: str, now_ms: int, effects: Effects
    ) -> tuple[JoinResult | None, Effects]:
        assert req.group_instance_id is not None
        old_id = group.static_members[req.group_instance_id]
        old = group.members.pop(old_id)
        if old.awaiting_join:
            effects.joins[old_id] = JoinResult(ErrorCode.FENCED_INSTANCE_ID, old_id)
        if old.awaiting_sync:
            effects.syncs[old_id] = SyncResult(ErrorCode.FENCED_INSTANCE_ID)
        unchanged = old.protocols == list(req.protocols)
        old.member_id = new_id
        old.client_id, old.client_host = req.client_id, req.client_host
        old.session_timeout_ms = req.session_timeout_ms
        old.rebalance_timeout_ms = req.rebalance_timeout_ms
        old.protocols = list(req.protocols)
        old.last_heartbeat_ms = now_ms
        old.awaiting_join = old.awaiting_sync = False
        group.members[new_id] = old
        group.static_members[req.group_instance_id] = new_id
        if group.leader_id == old_id:
            group.leader_id = new_id
        if group.state == GroupState.STABLE and unchanged:
            # KIP-345: a static member that restarted gets its assignment back, no rebalance.
            effects.group_records[group.group_id] = group.record()
            return (
                JoinResult(
                    ErrorCode.NONE,
                    new_id,
                    group.generation_id,
                    group.protocol_type,
                    group.protocol_name,
                    group.leader_id or "",
                    skip_assignment=False,
                ),
                effects,
            )
        old.awaiting_join = True
        self._after_join(group, now_ms, effects)
        return None, effects

    def _join_known_member(
        self, group: Group, req: JoinRequest, now_ms: int, effects: Effects
    ) -> tuple[JoinResult | None, Effects]:
        member_id = req.member_id
        if member_id in group.pending_members:
            del group.pending_members[member_id]
            self._add_member_and_rebalance(group, req, member_id, now_ms, effects)
            return None, effects
        member = group.members.get(member_id)
        if member is None or group.state == GroupState.EMPTY:
            return JoinResult(ErrorCode.UNKNOWN_MEMBER_ID, member_id), effects
        if req.group_instance_id is not None and (
            group.static_members.get(req.group_instance_id) != member_id
        ):
            return JoinResult(ErrorCode.FENCED_INSTANCE_ID, member_id), effects
        member.last_heartbeat_ms = now_ms
        same = member.protocols == list(req.protocols)
        if group.state == GroupState.COMPLETING_REBALANCE and same:
            # A retried join of the current generation: the same answer again.
            return self._join_result(group, member), effects
        if group.state == GroupState.STABLE and same and member_id != group.leader_id:
            return self._join_result(group, member), effects
        # A retry while parked replaces the parked request (the caller answers the old one).
        self._update_member(member, req, now_ms)
        member.awaiting_join = True
        if group.state != GroupState.PREPARING_REBALANCE:
            self._prepare_rebalance(group, now_ms, effects)
        self._after_join(group, now_ms, effects)
        return None, effects

    @staticmethod
    def _update_member(member: Member, req: JoinRequest, now_ms: int) -> None:
        member.client_id, member.client_host = req.client_id, req.client_host
        member.session_timeout_ms = req.session_timeout_ms
        member.rebalance_timeout_ms = req.rebalance_timeout_ms
        member.protocols = list(req.protocols)
        member.last_heartbeat_ms = now_ms

    def _add_member_and_rebalance(
        self, group: Group, req: JoinRequest, member_id: str, now_ms: int, effects: Effects
    ) -> None:
        if not group.members:
            group.protocol_type = req.protocol_type
        member = Member(
            member_id,
            req.group_instance_id,
            req.client_id,
            req.client_host,
            req.rebalance_timeout_ms,
            req.session_timeout_ms,
            req.protocol_type,
            list(req.protocols),
            now_ms,
            awaiting_join=True,
        )
        group.members[member_id] = member
        if req.group_instance_id is not None:
            group.static_members[req.group_instance_id] = member_id
        if group.state == GroupState.EMPTY:
            delay = min(self.config.initial_rebalance_delay_ms, req.rebalance_timeout_ms)
            self._prepare_rebalance(group, now_ms, effects)
            if delay > 0:
                group.initial_delay_until_ms = now_ms + delay
        elif group.state != GroupState.PREPARING_REBALANCE:
            self._prepare_rebalance(group, now_ms, effects)
        elif group.initial_delay_until_ms >= 0:
            # KIP-134: each new member during the initial delay extends it, up to the deadline.
            delay = min(self.config.initial_rebalance_delay_ms, req.rebalance_timeout_ms)
            group.initial_delay_until_ms = min(now_ms + delay, group.join_deadline_ms)
        self._after_join(group, now_ms, effects)

    def _prepare_rebalance(self, group: Group, now_ms: int, effects: Effects) -> None:
        if group.state == GroupState.COMPLETING_REBALANCE:
            # The assignment of this generation will never come: parked syncs must rejoin.
            for m in group.members.values():
                m.assignment = b""
                if m.awaiting_sync:
                    m.awaiting_sync = False
                    effects.syncs[m.member_id] = SyncResult(ErrorCode.REBALANCE_IN_PROGRESS)
        timeout = max((m.rebalance_timeout_ms for m in group.members.values()), default=0)
        group.join_deadline_ms = now_ms + timeout
        group.initial_delay_until_ms = -1
        group.transition(GroupState.PREPARING_REBALANCE, now_ms)

    def _after_join(self, group: Group, now_ms: int, effects: Effects) -> None:
        if group.state != GroupState.PREPARING_REBALANCE:
            return
        if now_ms >= group.join_deadline_ms:
            self._complete_join(group, now_ms, effects)
        elif group.initial_delay_until_ms >= 0:
            if now_ms >= group.initial_delay_until_ms and group.all_members_joined():
                self._complete_join(group, now_ms, effects)
        elif group.all_members_joined():
            self._complete_join(group, now_ms, effects)

    def _join_result(self, group: Group, member: Member) -> JoinResult:
        is_leader = member.member_id == group.leader_id
        members: tuple[JoinedMember, ...] = ()
        if is_leader:
            members = tuple(
                JoinedMember(
                    m.member_id, m.group_instance_id, m.metadata_for(group.protocol_name or "")
                )
                for m in group.members.values()
            )
        return JoinResult(
            ErrorCode.NONE,
            member.member_id,
            group.generation_id,
            group.protocol_type,
            group.protocol_name,
            group.leader_id or "",
            members,
        )

    def _complete_join(self, group: Group, now_ms: int, effects: Effects) -> None:
        # Members that did not rejoin in time leave the group (Kafka: notYetRejoinedMembers).
        for m in [m for m in group.members.values() if not m.awaiting_join]:
            self._remove_member(group, m.member_id)
        group.pending_members.clear()
        group.initial_delay_until_ms = -1
        group.join_deadline_ms = -1
        group.generation_id += 1
        if not group.members:
            group.protocol_name = None
            group.protocol_type = group.protocol_type if group.group_id in self.offsets else None
            group.leader_id = None
            group.transition(GroupState.EMPTY, now_ms)
            effects.group_records[group.group_id] = group.record()
            return
        group.protocol_name = group.select_protocol()
        if group.leader_id not in group.members:
            group.leader_id = next(iter(group.members))
        group.transition(GroupState.COMPLETING_REBALANCE, now_ms)
        for m in group.members.values():
            m.awaiting_join = False
            m.last_heartbeat_ms = now_ms
            effects.joins[m.member_id] = self._join_result(group, m)

    def _remove_member(self, group: Group, member_id: str) -> Member | None:
        member = group.members.pop(member_id, None)
        if (
            member is not None
            and member.group_instance_id is not None
            and group.static_members.get(member.group_instance_id) == member_id
        ):
            del group.static_members[member.group_instance_id]
        if group.leader_id == member_id:
            group.leader_id = next(iter(group.members), None)
        return member

    def _member_gone(self, group: Group, member_id: str, now_ms: int, effects: Effects) -> None:
        """A member left or expired: answer what it had parked and rebalance the rest."""
        member = self._remove_member(group, member_id)
        if member is None:
            return
        if member.awaiting_join:
            effects.joins[member_id] = JoinResult(ErrorCode.UNKNOWN_MEMBER_ID, member_id)
        if member.awaiting_sync:
            effects.syncs[member_id] = SyncResult(ErrorCode.UNKNOWN_MEMBER_ID)
        if group.state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
            self._prepare_rebalance(group, now_ms, effects)
        self._after_join(group, now_ms, effects)

    # --- SyncGroup -------------------------------------------------------------------------

    def sync_group(
        self,
        group_id: str,
        *,
        generation_id: int,
        member_id: str,
        group_instance_id: str | None,
        protocol_type: str | None,
        protocol_name: str | None,
        assignments: Mapping[str, bytes],
        now_ms: int,
    ) -> tuple[SyncResult | None, Effects]:
        effects = Effects()
        if not group_id:
            return SyncResult(ErrorCode.INVALID_GROUP_ID), effects
        group = self.groups.get(group_id)
        error = self._check_member(group, member_id, group_instance_id, generation_id)
        if error != ErrorCode.NONE:
            return SyncResult(error), effects
        assert group is not None
        if (protocol_type is not None and protocol_type != group.protocol_type) or (
            protocol_name is not None and protocol_name != group.protocol_name
        ):
            return SyncResult(ErrorCode.INCONSISTENT_GROUP_PROTOCOL), effects
        member = group.members[member_id]
        member.last_heartbeat_ms = now_ms
        if group.state == GroupState.PREPARING_REBALANCE:
            return SyncResult(ErrorCode.REBALANCE_IN_PROGRESS), effects
        if group.state == GroupState.STABLE:
            return self._sync_result(group, member), effects
        # CompletingRebalance: park until the leader's assignment.
        member.awaiting_sync = True
        if member_id == group.leader_id:
            for m in group.members.values():
                m.assignment = assignments.get(m.member_id, b"")
            group.transition(GroupState.STABLE, now_ms)
            effects.group_records[group.group_id] = group.record()
            for m in group.members.values():
                if m.awaiting_sync:
                    m.awaiting_sync = False
                    effects.syncs[m.member_id] = self._sync_result(group, m)
            result = effects.syncs.pop(member_id)
            return result, effects
        return None, effects

    @staticmethod
    def _sync_result(group: Group, member: Member) -> SyncResult:
        return SyncResult(
            ErrorCode.NONE, group.protocol_type, group.protocol_name, member.assignment
        )

    def _check_member(
        self, group: Group | None, member_id: str, instance_id: str | None, generation_id: int
    ) -> ErrorCode:
        """The checks every member request shares (Kafka's order)."""
        if group is None:
            return ErrorCode.UNKNOWN_MEMBER_ID
        if group.state == GroupState.DEAD:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        if member_id not in group.members:
            return ErrorCode.UNKNOWN_MEMBER_ID
        if instance_id is not None and group.static_members.get(instance_id) != member_id:
            return ErrorCode.FENCED_INSTANCE_ID
        if generation_id != group.generation_id:
            return ErrorCode.ILLEGAL_GENERATION
        return ErrorCode.NONE

    # --- Heartbeat and LeaveGroup ----------------------------------------------------------

    def heartbeat(
        self,
        group_id: str,
        generation_id: int,
        member_id: str,
        group_instance_id: str | None,
        now_ms: int,
    ) -> ErrorCode:
        if not group_id:
            return ErrorCode.INVALID_GROUP_ID
        group = self.groups.get(group_id)
        error = self._check_member(group, member_id, group_instance_id, generation_id)
        if error != ErrorCode.NONE:
            return error
        assert group is not None
        group.members[member_id].last_heartbeat_ms = now_ms
        if group.state == GroupState.PREPARING_REBALANCE:
            return ErrorCode.REBALANCE_IN_PROGRESS
        return ErrorCode.NONE

    def leave_group(
        self,
        group_id: str,
        members: Sequence[tuple[str, str | None]],
        now_ms: int,
    ) -> tuple[ErrorCode, list[ErrorCode], Effects]:
        """Members (member id, instance id) leave; the top-level and per-member errors."""
        effects = Effects()
        if not group_id:
            return ErrorCode.INVALID_GROUP_ID, [], effects
        group = self.groups.get(group_id)
        if group is None:
            return ErrorCode.NONE, [ErrorCode.UNKNOWN_MEMBER_ID] * len(members), effects
        if group.state == GroupState.DEAD:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE, [], effects
        errors = []
        for given_id, instance_id in members:
            member_id = given_id
            if instance_id is not None:
                known = group.static_members.get(instance_id)
                if known is None:
                    errors.append(ErrorCode.UNKNOWN_MEMBER_ID)
                    continue
                if member_id and member_id != known:
                    errors.append(ErrorCode.FENCED_INSTANCE_ID)
                    continue
                member_id = known
            if member_id in group.pending_members:
                del group.pending_members[member_id]
                self._after_join(group, now_ms, effects)
                errors.append(ErrorCode.NONE)
                continue
            if member_id not in group.members:
                errors.append(ErrorCode.UNKNOWN_MEMBER_ID)
                continue
            self._member_gone(group, member_id, now_ms, effects)
            errors.append(ErrorCode.NONE)
        return ErrorCode.NONE, errors, effects

    # --- timers ----------------------------------------------------------------------------

    def tick(self, now_ms: int) -> Effects:
        """Expire sessions and pending members, end join phases whose time is up."""
        effects = Effects()
        for group in list(self.groups.values()):
            for member_id, deadline in list(group.pending_members.items()):
                if now_ms >= deadline:
                    del group.pending_members[member_id]
            for m in list(group.members.values()):
                if m.awaiting_join or m.awaiting_sync:
                    # A parked join or sync keeps its member alive: the join phase ends at its
                    # deadline, a sync when the leader assigns or the leader's session expires.
                    continue
                if now_ms - m.last_heartbeat_ms > m.session_timeout_ms:
                    self._member_gone(group, m.member_id, now_ms, effects)
            self._after_join(group, now_ms, effects)
        return effects

    # --- offsets ---------------------------------------------------------------------------

    def validate_commit(
        self,
        group_id: str,
        generation_id: int,
        member_id: str,
        group_instance_id: str | None,
        now_ms: int,
    ) -> ErrorCode:
        """May this OffsetCommit write? (Kafka's doCommitOffsets checks.) A commit with
        generation -1 into an empty or unknown group is a "simple" consumer's (``assign()``)."""
        if not group_id:
            return ErrorCode.INVALID_GROUP_ID
        group = self.groups.get(group_id)
        if group is None:
            return ErrorCode.NONE if generation_id < 0 else ErrorCode.ILLEGAL_GENERATION
        if group.state == GroupState.DEAD:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        if generation_id < 0 and group.state == GroupState.EMPTY:
            return ErrorCode.NONE
        if group.state == GroupState.COMPLETING_REBALANCE:
            return ErrorCode.REBALANCE_IN_PROGRESS
        error = self._check_member(group, member_id, group_instance_id, generation_id)
        if error == ErrorCode.NONE:
            group.members[member_id].last_heartbeat_ms = now_ms  # a commit is a heartbeat too
        return error

    def apply_offsets(
        self,
        group_id: str,
        offsets: Mapping[TopicPartition, OffsetAndMetadata | None],
        log_offset: int = -1,
    ) -> None:
        """Replicated commits (or tombstones: None) of the batch at ``log_offset`` (-1:
        unknown) become visible; an offset already there from later in the log stays. A
        tombstone also drops the pending transactional offsets written before it
        (txn_offsets rule 4)."""
        by_tp = self.offsets.setdefault(group_id, {})
        for tp, value in offsets.items():
            current = by_tp.get(tp)
            if value is None:
                if current is not None and (log_offset < 0 or current.log_offset <= log_offset):
                    del by_tp[tp]
            else:
                logged = LoggedOffset(value, log_offset)
                if logged.supersedes(current):
                    by_tp[tp] = logged
        tombstoned = [tp for tp, value in offsets.items() if value is None]
        if tombstoned:
            self.pending_txn.drop(group_id, tombstoned, log_offset)
        if not by_tp:
            del self.offsets[group_id]
        else:
            self.groups.setdefault(group_id, Group(group_id))

    def committed(self, group_id: str) -> dict[TopicPartition, OffsetAndMetadata]:
        return {tp: o.value for tp, o in self.offsets.get(group_id, {}).items()}

    def prepare_offset_commit(self, group_id: str, tps: Iterable[TopicPartition]) -> None:
        """A plain OffsetCommit of ``tps`` was appended; until ``offset_commit_done`` they
        are not expired (rule 10, Kafka's ``prepareOffsetCommit``)."""
        by_tp = self.pending_commits.setdefault(group_id, {})
        for tp in tps:
            by_tp[tp] = by_tp.get(tp, 0) + 1

    def offset_commit_done(self, group_id: str, tps: Iterable[TopicPartition]) -> None:
        """The commit ``prepare_offset_commit`` announced is replicated or failed."""
        by_tp = self.pending_commits.get(group_id)
        if by_tp is None:
            return
        for tp in tps:
            left = by_tp.get(tp, 0) - 1
            if left > 0:
                by_tp[tp] = left
            else:
                by_tp.pop(tp, None)
        if not by_tp:
            del self.pending_commits[group_id]

    # --- offset expiry (rules 6-11) --------------------------------------------------------

    def remove_expired_offsets(self, now_ms: int, retention_ms: int) -> ExpiredOffsets:
        """One expiry round: expired offsets leave memory, Empty groups without offsets
        die; what went is returned for the caller to tombstone."""
        expired: dict[str, list[TopicPartition]] = {}
        dead: dict[str, int] = {}
        for group_id, group in list(self.groups.items()):
            gone = self._expired_offsets(group, now_ms, retention_ms)
            if gone:
                by_tp = self.offsets[group_id]
                for tp in gone:
                    del by_tp[tp]
                if not by_tp:
                    del self.offsets[group_id]
                expired[group_id] = gone
            if (
                group.state == GroupState.EMPTY
                and not group.pending_members
                and not self._has_offsets(group_id)
            ):
                group.transition(GroupState.DEAD, now_ms)
                del self.groups[group_id]
                dead[group_id] = group.generation_id
        return ExpiredOffsets(expired, dead)

    def _has_offsets(self, group_id: str) -> bool:
        return (
            bool(self.offsets.get(group_id))
            or group_id in self.pending_commits
            or group_id in self.pending_txn.groups()
        )

    def _expired_offsets(
        self, group: Group, now_ms: int, retention_ms: int
    ) -> list[TopicPartition]:
        by_tp = self.offsets.get(group.group_id)
        if not by_tp:
            return []
        since_empty = -1
        subscribed: set[str] = set()
        if group.state == GroupState.EMPTY and group.protocol_type:
            since_empty = group.state_timestamp_ms  # rule 7
        elif group.state == GroupState.STABLE and group.protocol_type == "consumer":
            topics = group.subscribed_topics()  # rule 9
            if topics is None:
                return []
            subscribed = topics
        elif group.protocol_type or group.members:
            return []  # a group with members mid-rebalance, or of another protocol
        in_flight = self.pending_commits.get(group.group_id, {})
        gone = []
        for tp, logged in by_tp.items():
            if tp.topic in subscribed or tp in in_flight:
                continue
            value = logged.value
            if value.expire_timestamp_ms >= 0:  # rule 6
                if now_ms >= value.expire_timestamp_ms:
                    gone.append(tp)
                continue
            base = since_empty if since_empty >= 0 else value.commit_timestamp_ms
            if now_ms - base >= retention_ms:
                gone.append(tp)
        return gone

    # --- transactional offsets (KIP-98, KIP-447; see tidelog.coordinator.txn_offsets) ----

    def validate_txn_commit(
        self, group_id: str, generation_id: int, member_id: str, group_instance_id: str | None
    ) -> ErrorCode:
        """May this TxnOffsetCommit write? Kafka's ``validateOffsetCommit`` for a transaction:
        a request naming a member, instance or generation (v3+, KIP-447) must come from a
        current member of the current generation; one naming none (v0-v2, or a producer
        whose consumer uses ``assign()``) is accepted in any state. An unknown group is an
        Empty one (Kafka creates it: ``add_txn_offsets`` does once written)."""
        if not group_id:
            return ErrorCode.INVALID_GROUP_ID
        group = self.groups.get(group_id)
        if group is not None and group.state == GroupState.DEAD:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        if generation_id < 0 and not member_id and group_instance_id is None:
            return ErrorCode.NONE
        return self._check_member(group, member_id, group_instance_id, generation_id)

    def add_txn_offsets(
        self,
        group_id: str,
        producer_id: int,
        offsets: Mapping[TopicPartition, OffsetAndMetadata],
        log_offset: int,
    ) -> None:
        """Offsets of a transactional batch the leader appended at ``log_offset``: pending
        (invisible to OffsetFetch) until ``complete_txn`` for ``producer_id``."""
        self.pending_txn.add(producer_id, group_id, offsets, log_offset)
        self.groups.setdefault(group_id, Group(group_id))

    def fail_txn_offsets(self, group_id: str, producer_id: int, log_offset: int) -> None:
        """The batch at ``log_offset`` was not replicated: its pending offsets go."""
        self.pending_txn.discard_batch(producer_id, group_id, log_offset)

    def complete_txn(self, producer_id: int, commit: bool) -> None:
        """The producer's COMMIT (offsets become committed, each unless a later one is
        already there: txn_offsets rule 2) or ABORT marker (dropped). Unknown producer:
        nothing happens."""
        taken = self.pending_txn.take(producer_id)
        if commit:
            commit_pending(self.offsets, taken)
            for group_id in taken:
                self.groups.setdefault(group_id, Group(group_id))

    def has_pending_txn(self, group_id: str, tp: TopicPartition) -> bool:
        """Does a transaction hold an offset of ``tp`` for the group (OffsetFetch v7+ with
        ``require_stable`` answers UNSTABLE_OFFSET_COMMIT, KIP-447)?"""
        return self.pending_txn.is_pending(group_id, tp)

    # --- admin -----------------------------------------------------------------------------

    def delete_group(self, group_id: str, now_ms: int) -> tuple[ErrorCode, list[TopicPartition]]:
        """DeleteGroups: only an Empty group; the offsets to tombstone. The group is Dead and
        gone at once (the caller persists the tombstones)."""
        if not group_id:
            return ErrorCode.INVALID_GROUP_ID, []
        group = self.groups.get(group_id)
        if group is None or group.state == GroupState.DEAD:
            return ErrorCode.GROUP_ID_NOT_FOUND, []
        if group.state != GroupState.EMPTY:
            return ErrorCode.NON_EMPTY_GROUP, []
        group.transition(GroupState.DEAD, now_ms)
        del self.groups[group_id]
        tps = list(self.offsets.pop(group_id, {}))
        # Kafka still deletes a group with open transactions; their offsets die with it.
        self.pending_txn.drop(group_id, None, -1)
        return ErrorCode.NONE, tps

    def offset_delete_check(
        self, group_id: str, tps: Iterable[TopicPartition]
    ) -> tuple[ErrorCode, dict[TopicPartition, ErrorCode]]:
        """OffsetDelete (KIP-496): a group's offsets of topics it does not subscribe to."""
        if not group_id:
            return ErrorCode.INVALID_GROUP_ID, {}
        group = self.groups.get(group_id)
        if group is None or group.state == GroupState.DEAD:
            return ErrorCode.GROUP_ID_NOT_FOUND, {}
        if group.state != GroupState.EMPTY and group.protocol_type != "consumer":
            return ErrorCode.NON_EMPTY_GROUP, {}
        subscribed = group.subscribed_topics() if group.state != GroupState.EMPTY else set()
        result = {}
        for tp in tps:
            if subscribed is None or tp.topic in subscribed:
                result[tp] = ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC
            else:
                result[tp] = ErrorCode.NONE
        return ErrorCode.NONE, result


__all__ = [
    "Effects",
    "ExpiredOffsets",
    "Group",
    "GroupConfig",
    "GroupManager",
    "GroupState",
    "JoinRequest",
    "JoinResult",
    "JoinedMember",
    "Member",
    "SyncResult",
]
