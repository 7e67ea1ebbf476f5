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

Offsets, their expiry (rules 6-11) and pending transactional offsets are kept by
``tidelog.coordinator.group_offsets.GroupOffsets``; ``GroupManager`` creates the groups they
belong to and removes the groups that die.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence

from tidelog.coordinator.group_offsets import (
    OFFSET_METADATA_MAX_BYTES,
    ExpiredOffsets,
    GroupOffsets,
)
from tidelog.coordinator.group_state import (
    Effects,
    Group,
    GroupConfig,
    GroupState,
    JoinedMember,
    JoinRequest,
    JoinResult,
    Member,
    SyncResult,
)
from tidelog.coordinator.records import GroupRecord, OffsetAndMetadata
from tidelog.coordinator.txn_offsets import LoggedOffset, PendingTxnOffsets
from tidelog.errors import ErrorCode
from tidelog.model import TopicPartition


class GroupManager:
    """Groups and offsets of one ``__consumer_offsets`` partition; see the module docstring."""

    def __init__(
        self, config: GroupConfig, new_member_id: Callable[[str], str] | None = None
    ) -> None:
        self.config = config
        #: client id -> a fresh member id (Kafka: ``<client id>-<uuid>``); tests inject theirs.
        self.new_member_id = new_member_id or (lambda client_id: f"{client_id}-{uuid.uuid4()}")
        self.groups: dict[str, Group] = {}
        self.offset_store = GroupOffsets()

    @property
    def offsets(self) -> dict[str, dict[TopicPartition, LoggedOffset]]:
        """Committed offsets with the log offset of their batch (txn_offsets rule 3)."""
        return self.offset_store.offsets

    @property
    def pending_txn(self) -> PendingTxnOffsets:
        """Transactional offsets awaiting their marker (txn_offsets rule 1)."""
        return self.offset_store.pending_txn

    @property
    def pending_commits(self) -> dict[str, dict[TopicPartition, int]]:
        """Plain commits appended but not yet replicated (group_offsets rule 10)."""
        return self.offset_store.pending_commits

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
        self.offset_store.load(offsets, pending_txn)
        for group_id in offsets:
            self.groups.setdefault(group_id, Group(group_id, state_timestamp_ms=now_ms))
        if pending_txn is not None:
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
        self.offset_store.clear()
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
            group.protocol_type = (
                group.protocol_type if self.offset_store.has_committed(group.group_id) else None
            )
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
        unknown) become visible (``GroupOffsets.apply``); a group with offsets exists."""
        if self.offset_store.apply(group_id, offsets, log_offset):
            self.groups.setdefault(group_id, Group(group_id))

    def committed(self, group_id: str) -> dict[TopicPartition, OffsetAndMetadata]:
        return self.offset_store.committed(group_id)

    def prepare_offset_commit(self, group_id: str, tps: Iterable[TopicPartition]) -> None:
        """A plain OffsetCommit of ``tps`` was appended; until ``offset_commit_done`` they
        are not expired (group_offsets rule 10)."""
        self.offset_store.prepare_commit(group_id, tps)

    def offset_commit_done(self, group_id: str, tps: Iterable[TopicPartition]) -> None:
        """The commit ``prepare_offset_commit`` announced is replicated or failed."""
        self.offset_store.commit_done(group_id, tps)

    # --- offset expiry (group_offsets rules 6-11) ------------------------------------------

    def remove_expired_offsets(self, now_ms: int, retention_ms: int) -> ExpiredOffsets:
        """One expiry round: expired offsets leave memory, Empty groups without offsets
        die (rule 11); what went is returned for the caller to tombstone."""
        expired: dict[str, list[TopicPartition]] = {}
        dead: dict[str, int] = {}
        for group_id, group in list(self.groups.items()):
            gone = self.offset_store.remove_expired(group, now_ms, retention_ms)
            if gone:
                expired[group_id] = gone
            if (
                group.state == GroupState.EMPTY
                and not group.pending_members
                and not self.offset_store.has_any(group_id)
            ):
                group.transition(GroupState.DEAD, now_ms)
                del self.groups[group_id]
                dead[group_id] = group.generation_id
        return ExpiredOffsets(expired, dead)

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
        self.offset_store.add_txn(group_id, producer_id, offsets, log_offset)
        self.groups.setdefault(group_id, Group(group_id))

    def fail_txn_offsets(self, group_id: str, producer_id: int, log_offset: int) -> None:
        """The batch at ``log_offset`` was not replicated: its pending offsets go."""
        self.offset_store.fail_txn(group_id, producer_id, log_offset)

    def complete_txn(self, producer_id: int, commit: bool) -> None:
        """The producer's COMMIT (offsets become committed, each unless a later one is
        already there: txn_offsets rule 2) or ABORT marker (dropped). Unknown producer:
        nothing happens."""
        for group_id in self.offset_store.complete_txn(producer_id, commit):
            self.groups.setdefault(group_id, Group(group_id))

    def has_pending_txn(self, group_id: str, tp: TopicPartition) -> bool:
        """Does a transaction hold an offset of ``tp`` for the group (OffsetFetch v7+ with
        ``require_stable`` answers UNSTABLE_OFFSET_COMMIT, KIP-447)?"""
        return self.offset_store.has_pending_txn(group_id, tp)

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
        return ErrorCode.NONE, self.offset_store.drop_group(group_id)

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
    "OFFSET_METADATA_MAX_BYTES",
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
