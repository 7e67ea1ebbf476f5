"""Offset expiry (KIP-211, Kafka's ``cleanupGroupMetadata``): rules 6-11 of
``tidelog.coordinator.group`` on the pure ``GroupManager`` with a moved clock, and the
records an expiry round asks the coordinator to tombstone."""

from __future__ import annotations

import struct

import pytest

from tidelog.coordinator.group import (
    ExpiredOffsets,
    GroupConfig,
    GroupManager,
    GroupState,
    JoinRequest,
)
from tidelog.coordinator.records import (
    GroupRecord,
    MemberRecord,
    OffsetAndMetadata,
    decode_offset_value,
    offset_value,
)
from tidelog.errors import ErrorCode
from tidelog.model import TopicPartition

RETENTION_MS = 60_000
SESSION_MS = 10_000
G = "g"
T0 = 1_000_000
ORDERS = TopicPartition("orders", 0)
AUDIT = TopicPartition("audit", 0)


def subscription(*topics: str) -> bytes:
    """A ConsumerProtocolSubscription v0: version, topics, user data (null)."""
    out = struct.pack(">hi", 0, len(topics))
    for t in topics:
        raw = t.encode()
        out += struct.pack(">h", len(raw)) + raw
    return out + struct.pack(">i", -1)


def stable_consumer(m: GroupManager, now: int, *topics: str) -> str:
    """One member of ``G`` subscribed to ``topics``, the group Stable; its member id."""
    request = JoinRequest(
        group_id=G,
        member_id="",
        group_instance_id=None,
        client_id="c",
        client_host="/127.0.0.1",
        session_timeout_ms=SESSION_MS,
        rebalance_timeout_ms=SESSION_MS,
        protocol_type="consumer",
        protocols=(("range", subscription(*topics)),),
        require_known_member_id=False,
    )
    result, member_id, effects = m.join_group(request, now)
    if result is None:
        result = effects.joins[member_id]
    assert result.error == ErrorCode.NONE
    sync, _ = m.sync_group(
        G,
        generation_id=result.generation_id,
        member_id=member_id,
        group_instance_id=None,
        protocol_type="consumer",
        protocol_name="range",
        assignments={member_id: b""},
        now_ms=now,
    )
    assert sync is not None
    assert sync.error == ErrorCode.NONE
    assert m.groups[G].state == GroupState.STABLE
    return member_id


def commit(m: GroupManager, now: int, *tps: TopicPartition, expire_ms: int = -1) -> None:
    m.apply_offsets(G, {tp: OffsetAndMetadata(7, -1, "", now, expire_ms) for tp in tps})


def manager() -> GroupManager:
    return GroupManager(GroupConfig(initial_rebalance_delay_ms=0))


def expire(m: GroupManager, now: int) -> ExpiredOffsets:
    return m.remove_expired_offsets(now, RETENTION_MS)


def test_empty_group_expires_after_retention_counted_from_when_it_became_empty() -> None:
    m = manager()
    member = stable_consumer(m, T0, "orders")
    commit(m, T0, ORDERS)
    left_at = T0 + 5 * RETENTION_MS  # the commit is long past retention by then
    error, _, _ = m.leave_group(G, [(member, None)], left_at)
    assert error == ErrorCode.NONE
    assert m.groups[G].state == GroupState.EMPTY
    assert m.groups[G].state_timestamp_ms == left_at
    # Just under the retention since it became Empty: kept, the group stays.
    assert expire(m, left_at + RETENTION_MS - 1) == ExpiredOffsets({}, {})
    assert m.committed(G) == {ORDERS: OffsetAndMetadata(7, -1, "", T0)}
    # At the retention: the offset goes, and the group (now without offsets) is Dead; it
    # had a generation, so the caller writes its tombstone.
    gone = expire(m, left_at + RETENTION_MS)
    assert gone.offsets == {G: [ORDERS]}
    assert gone.dead_groups == {G: 2}
    assert gone.count == 1
    assert G not in m.groups
    assert m.committed(G) == {}


def test_stable_consumer_group_keeps_subscribed_topics_and_expires_the_others() -> None:
    m = manager()
    stable_consumer(m, T0, "orders")
    commit(m, T0, ORDERS, AUDIT)  # audit: a topic the group no longer subscribes to
    assert expire(m, T0 + RETENTION_MS - 1) == ExpiredOffsets({}, {})
    gone = expire(m, T0 + 10 * RETENTION_MS)
    assert gone == ExpiredOffsets({G: [AUDIT]}, {})
    assert set(m.committed(G)) == {ORDERS}
    assert m.groups[G].state == GroupState.STABLE


def test_group_mid_rebalance_keeps_everything() -> None:
    m = manager()
    stable_consumer(m, T0, "orders")
    commit(m, T0, ORDERS, AUDIT)
    m.groups[G].transition(GroupState.PREPARING_REBALANCE, T0)
    assert expire(m, T0 + 10 * RETENTION_MS) == ExpiredOffsets({}, {})
    assert set(m.committed(G)) == {ORDERS, AUDIT}


def test_standalone_commits_expire_each_by_its_commit_time() -> None:
    """``assign()`` consumers (generation -1, no protocol type): per-offset commit time."""
    m = manager()
    assert m.validate_commit(G, -1, "", None, T0) == ErrorCode.NONE
    commit(m, T0, ORDERS)
    commit(m, T0 + 30_000, AUDIT)
    assert m.groups[G].protocol_type is None
    gone = expire(m, T0 + RETENTION_MS)
    assert gone == ExpiredOffsets({G: [ORDERS]}, {})
    assert set(m.committed(G)) == {AUDIT}
    gone = expire(m, T0 + 30_000 + RETENTION_MS)
    # The last offset went: the group is removed, but it never had a generation, so Kafka
    # writes no group tombstone (generation 0: the caller skips it).
    assert gone == ExpiredOffsets({G: [AUDIT]}, {G: 0})
    assert G not in m.groups


def test_explicit_expire_timestamp_is_honoured() -> None:
    """OffsetCommit v2-v4 ``retention_time_ms``: the offset's own expire time decides, in
    both directions (earlier and later than the broker's retention)."""
    m = manager()
    commit(m, T0, ORDERS, expire_ms=T0 + 1_000)
    commit(m, T0, AUDIT, expire_ms=T0 + 10 * RETENTION_MS)
    assert expire(m, T0 + 999) == ExpiredOffsets({}, {})
    assert expire(m, T0 + 1_000) == ExpiredOffsets({G: [ORDERS]}, {})
    assert expire(m, T0 + RETENTION_MS) == ExpiredOffsets({}, {})  # retention passed: kept
    assert set(m.committed(G)) == {AUDIT}
    gone = expire(m, T0 + 10 * RETENTION_MS)
    assert gone.offsets == {G: [AUDIT]}


def test_explicit_expire_timestamp_survives_the_record_format() -> None:
    value = OffsetAndMetadata(42, 3, "meta", T0, T0 + 5)
    raw = offset_value(value)
    assert struct.unpack_from(">h", raw)[0] == 1  # value version 1 carries expire_timestamp
    # Version 1 has no leader epoch (Kafka's schema); the rest round-trips.
    assert decode_offset_value(raw) == OffsetAndMetadata(42, -1, "meta", T0, T0 + 5)
    plain = OffsetAndMetadata(42, 3, "meta", T0)
    assert struct.unpack_from(">h", offset_value(plain))[0] == 3
    assert decode_offset_value(offset_value(plain)) == plain


def test_pending_transactional_offsets_are_never_expired_and_keep_the_group() -> None:
    m = manager()
    m.add_txn_offsets(G, 5000, {ORDERS: OffsetAndMetadata(9, -1, "", T0)}, log_offset=10)
    gone = expire(m, T0 + 100 * RETENTION_MS)
    assert gone == ExpiredOffsets({}, {})
    assert G in m.groups
    assert m.has_pending_txn(G, ORDERS)
    # The transaction commits: now a plain (standalone) offset, expired by its commit time.
    m.complete_txn(5000, commit=True)
    assert m.committed(G) == {ORDERS: OffsetAndMetadata(9, -1, "", T0)}
    gone = expire(m, T0 + 100 * RETENTION_MS)
    assert gone == ExpiredOffsets({G: [ORDERS]}, {G: 0})


def test_offsets_with_a_commit_in_flight_are_not_expired() -> None:
    m = manager()
    commit(m, T0, ORDERS)
    m.prepare_offset_commit(G, [ORDERS])
    assert expire(m, T0 + RETENTION_MS) == ExpiredOffsets({}, {})
    m.offset_commit_done(G, [ORDERS])
    assert expire(m, T0 + RETENTION_MS) == ExpiredOffsets({G: [ORDERS]}, {G: 0})


def test_empty_group_without_offsets_is_removed_at_the_next_round() -> None:
    m = manager()
    member = stable_consumer(m, T0, "orders")
    m.leave_group(G, [(member, None)], T0 + 1)
    assert m.groups[G].state == GroupState.EMPTY
    # No offsets at all: Kafka removes it at once, whatever the retention.
    assert expire(m, T0 + 2) == ExpiredOffsets({}, {G: 2})
    assert G not in m.groups


def test_groups_with_members_are_never_removed() -> None:
    m = manager()
    stable_consumer(m, T0, "orders")
    assert expire(m, T0 + 100 * RETENTION_MS) == ExpiredOffsets({}, {})
    assert m.groups[G].state == GroupState.STABLE


@pytest.mark.parametrize(
    ("state_ts", "expired_at"), [(T0 + 50_000, T0 + 110_000), (-1, T0 + RETENTION_MS)]
)
def test_loaded_empty_group_counts_from_its_recorded_state_timestamp(
    state_ts: int, expired_at: int
) -> None:
    """After a failover the Empty time comes from the group record (``current_state_
    timestamp``), not from the load; an old record without one: from each commit."""
    m = manager()
    record = GroupRecord("consumer", 3, None, None, state_ts, ())
    m.load({G: record}, {G: {ORDERS: OffsetAndMetadata(1, -1, "", T0)}}, T0 + 100_000)
    assert m.groups[G].state == GroupState.EMPTY
    assert expire(m, expired_at - 1) == ExpiredOffsets({}, {})
    assert expire(m, expired_at) == ExpiredOffsets({G: [ORDERS]}, {G: 3})


def test_loaded_stable_group_keeps_its_subscribed_offsets() -> None:
    m = manager()
    member = MemberRecord(
        "m-1", None, "c", "/h", SESSION_MS, SESSION_MS, subscription("orders"), b""
    )
    record = GroupRecord("consumer", 4, "range", "m-1", T0, (member,))
    offsets = {ORDERS: OffsetAndMetadata(1, -1, "", T0), AUDIT: OffsetAndMetadata(1, -1, "", T0)}
    m.load({G: record}, {G: offsets}, T0)
    assert m.groups[G].state == GroupState.STABLE
    assert expire(m, T0 + RETENTION_MS) == ExpiredOffsets({G: [AUDIT]}, {})
