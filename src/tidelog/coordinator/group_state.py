"""The values the group state machine (``tidelog.coordinator.group``) works on: a group
and its members, the requests and answers of the classic group protocol, and the
``Effects`` one call leaves for its caller. Nothing here reads a clock or does IO.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass, field

from tidelog.coordinator.records import GroupRecord, MemberRecord, subscribed_topics
from tidelog.errors import ErrorCode


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


__all__ = [
    "Effects",
    "Group",
    "GroupConfig",
    "GroupState",
    "JoinRequest",
    "JoinResult",
    "JoinedMember",
    "Member",
    "SyncResult",
]
