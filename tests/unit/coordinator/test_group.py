"""The classic rebalance protocol as a pure state machine: join/sync/heartbeat/leave, session
expiry, rebalances, and the errors a wrong member or generation gets."""

from __future__ import annotations

import itertools

import pytest

from tidelog.coordinator import partition_for
from tidelog.coordinator.group import (
    Effects,
    GroupConfig,
    GroupManager,
    GroupState,
    JoinRequest,
    JoinResult,
    SyncResult,
)
from tidelog.coordinator.records import OffsetAndMetadata
from tidelog.errors import ErrorCode
from tidelog.model import TopicPartition

SESSION_MS = 10_000
REBALANCE_MS = 30_000
G = "g"


def manager(initial_delay_ms: int = 0) -> GroupManager:
    counter = itertools.count(1)
    return GroupManager(
        GroupConfig(initial_rebalance_delay_ms=initial_delay_ms),
        new_member_id=lambda client_id: f"{client_id}-{next(counter)}",
    )


def join_request(
    member_id: str = "",
    *,
    client_id: str = "c",
    group_id: str = G,
    protocols: tuple[tuple[str, bytes], ...] = (("range", b"m"),),
    session_ms: int = SESSION_MS,
    instance_id: str | None = None,
    v4: bool = True,
) -> JoinRequest:
    return JoinRequest(
        group_id=group_id,
        member_id=member_id,
        group_instance_id=instance_id,
        client_id=client_id,
        client_host="/127.0.0.1",
        session_timeout_ms=session_ms,
        rebalance_timeout_ms=REBALANCE_MS,
        protocol_type="consumer",
        protocols=protocols,
        require_known_member_id=v4,
    )


def join_new(
    m: GroupManager, now: int, client_id: str = "c"
) -> tuple[str, JoinResult | None, Effects]:
    """First join (MEMBER_ID_REQUIRED), then the join with the given id."""
    first, member_id, _ = m.join_group(join_request(client_id=client_id), now)
    assert first is not None
    assert first.error == ErrorCode.MEMBER_ID_REQUIRED
    assert member_id == first.member_id
    result, parked, effects = m.join_group(join_request(member_id, client_id=client_id), now)
    assert parked == member_id
    return member_id, result, effects


def sync(
    m: GroupManager,
    member_id: str,
    generation: int,
    now: int,
    assignments: dict[str, bytes] | None = None,
) -> tuple[SyncResult | None, Effects]:
    return m.sync_group(
        G,
        generation_id=generation,
        member_id=member_id,
        group_instance_id=None,
        protocol_type="consumer",
        protocol_name="range",
        assignments=assignments or {},
        now_ms=now,
    )


def stable_pair(m: GroupManager) -> tuple[str, str, int]:
    """Two members in a Stable group: (leader, follower, generation)."""
    a, result, effects = join_new(m, 0, "a")
    assert result is None
    assert effects.joins[a].error == ErrorCode.NONE
    sync(m, a, 1, 0, {a: b"A"})
    b, result, _ = join_new(m, 1, "b")
    assert result is None
    assert m.groups[G].state == GroupState.PREPARING_REBALANCE
    # The leader learns of the rebalance from its heartbeat and rejoins.
    assert m.heartbeat(G, 1, a, None, 2) == ErrorCode.REBALANCE_IN_PROGRESS
    result, _, effects = m.join_group(join_request(a, client_id="a"), 3)
    assert result is None
    assert set(effects.joins) == {a, b}
    generation = effects.joins[a].generation_id
    assert generation == 2
    assert effects.joins[a].leader == a
    assert {x.member_id for x in effects.joins[a].members} == {
        a,
        b,
    }
    assert effects.joins[b].members == ()  # only the leader gets the member list
    follower, _parked = sync(m, b, generation, 4)
    assert follower is None  # parked until the leader's assignment
    leader, effects = sync(m, a, generation, 5, {a: b"A2", b: b"B2"})
    assert leader == SyncResult(ErrorCode.NONE, "consumer", "range", b"A2")
    assert effects.syncs[b].assignment == b"B2"
    assert G in effects.group_records  # the Stable generation is persisted
    assert m.groups[G].state == GroupState.STABLE
    return a, b, generation


def test_member_id_required_then_single_member_group_is_stable() -> None:
    m = manager()
    a, result, effects = join_new(m, 0)
    assert result is None
    assert effects.joins[a] == JoinResult(
        ErrorCode.NONE,
        a,
        1,
        "consumer",
        "range",
        a,
        effects.joins[a].members,
    )
    assert m.groups[G].state == GroupState.COMPLETING_REBALANCE
    leader, _ = sync(m, a, 1, 1, {a: b"x"})
    assert leader is not None
    assert leader.assignment == b"x"
    assert m.groups[G].state == GroupState.STABLE
    assert m.heartbeat(G, 1, a, None, 2) == ErrorCode.NONE


def test_v3_join_without_member_id_parks_under_a_new_id() -> None:
    m = manager()
    result, member_id, effects = m.join_group(join_request(v4=False), 0)
    assert result is None
    assert member_id == "c-1"
    assert effects.joins[member_id].error == ErrorCode.NONE


def test_second_member_triggers_rebalance_and_split() -> None:
    m = manager()
    stable_pair(m)


def test_leave_moves_partitions_by_rebalance() -> None:
    m = manager()
    a, b, generation = stable_pair(m)
    top, errors, effects = m.leave_group(G, [(b, None)], 10)
    assert (top, errors) == (ErrorCode.NONE, [ErrorCode.NONE])
    assert m.groups[G].state == GroupState.PREPARING_REBALANCE
    assert m.heartbeat(G, generation, a, None, 11) == ErrorCode.REBALANCE_IN_PROGRESS
    result, _, effects = m.join_group(join_request(a, client_id="a"), 12)
    assert result is None
    assert effects.joins[a].generation_id == generation + 1
    assert [x.member_id for x in effects.joins[a].members] == [a]
    assert m.heartbeat(G, generation, b, None, 13) == ErrorCode.UNKNOWN_MEMBER_ID


def test_session_expiry_removes_a_silent_member() -> None:
    m = manager()
    a, b, generation = stable_pair(m)
    now = 5 + SESSION_MS // 2
    assert m.heartbeat(G, generation, a, None, now) == ErrorCode.NONE
    assert not m.tick(now)
    now = 5 + SESSION_MS + 1  # b's session (last seen at its sync, t=4/5) is over; a's is not
    m.tick(now)
    assert b not in m.groups[G].members
    assert m.groups[G].state == GroupState.PREPARING_REBALANCE


def test_rebalance_deadline_drops_members_that_did_not_rejoin() -> None:
    m = manager()
    a, b, generation = stable_pair(m)
    assert m.heartbeat(G, generation, a, None, 100) == ErrorCode.NONE
    result, _, effects = m.join_group(
        join_request(a, client_id="a", protocols=(("roundrobin", b""), ("range", b"m"))), 100
    )
    assert result is None
    assert not effects.joins
    # b keeps heartbeating (REBALANCE_IN_PROGRESS) but never rejoins.
    for now in range(200, 100 + REBALANCE_MS, 5000):
        assert m.heartbeat(G, generation, b, None, now) == ErrorCode.REBALANCE_IN_PROGRESS
        assert not m.tick(now).joins
    assert not m.tick(100 + REBALANCE_MS - 1).joins
    effects = m.tick(100 + REBALANCE_MS)
    assert effects.joins[a].error == ErrorCode.NONE
    assert effects.joins[a].protocol_name == "roundrobin"  # the only member's first choice
    assert b not in m.groups[G].members


def test_errors_for_wrong_member_and_generation() -> None:
    m = manager()
    a, b, generation = stable_pair(m)
    assert m.heartbeat(G, generation, "nobody", None, 10) == ErrorCode.UNKNOWN_MEMBER_ID
    assert m.heartbeat(G, generation + 7, a, None, 10) == ErrorCode.ILLEGAL_GENERATION
    assert m.heartbeat("other", 1, a, None, 10) == ErrorCode.UNKNOWN_MEMBER_ID
    assert m.heartbeat("", 1, a, None, 10) == ErrorCode.INVALID_GROUP_ID
    result, _ = sync(m, a, generation - 1, 10)
    assert result == SyncResult(ErrorCode.ILLEGAL_GENERATION)
    result, _ = sync(m, "nobody", generation, 10)
    assert result == SyncResult(ErrorCode.UNKNOWN_MEMBER_ID)
    assert m.validate_commit(G, generation - 1, a, None, 10) == ErrorCode.ILLEGAL_GENERATION
    assert m.validate_commit(G, generation, "nobody", None, 10) == ErrorCode.UNKNOWN_MEMBER_ID
    assert m.validate_commit(G, -1, "", None, 10) == ErrorCode.UNKNOWN_MEMBER_ID  # not empty
    assert m.validate_commit(G, generation, b, None, 10) == ErrorCode.NONE
    assert m.validate_commit("", -1, "", None, 10) == ErrorCode.INVALID_GROUP_ID
    unknown, _, _ = m.join_group(join_request("ghost"), 10)
    assert unknown is not None
    assert unknown.error == ErrorCode.UNKNOWN_MEMBER_ID
    _, errors, _ = m.leave_group(G, [("ghost", None)], 10)
    assert errors == [ErrorCode.UNKNOWN_MEMBER_ID]


@pytest.mark.parametrize(
    ("request_", "error"),
    [
        (join_request(group_id=""), ErrorCode.INVALID_GROUP_ID),
        (join_request(session_ms=10), ErrorCode.INVALID_SESSION_TIMEOUT),
        (join_request(session_ms=1_800_001), ErrorCode.INVALID_SESSION_TIMEOUT),
        (join_request(member_id="never-joined"), ErrorCode.UNKNOWN_MEMBER_ID),
    ],
)
def test_join_refusals(request_: JoinRequest, error: ErrorCode) -> None:
    result, _, effects = manager().join_group(request_, 0)
    assert result is not None
    assert result.error == error
    assert not effects


def test_inconsistent_protocol_is_refused() -> None:
    m = manager()
    stable_pair(m)
    result, _, _ = m.join_group(join_request(protocols=(("sticky-only", b""),)), 50)
    assert result is not None
    assert result.error == ErrorCode.INCONSISTENT_GROUP_PROTOCOL


def test_commit_during_completing_rebalance_is_refused() -> None:
    m = manager()
    a, _, _ = join_new(m, 0)
    assert m.groups[G].state == GroupState.COMPLETING_REBALANCE
    assert m.validate_commit(G, 1, a, None, 1) == ErrorCode.REBALANCE_IN_PROGRESS


def test_simple_consumer_commits_and_delete_group() -> None:
    m = manager()
    tp = TopicPartition("t", 0)
    assert m.validate_commit(G, -1, "", None, 0) == ErrorCode.NONE
    m.apply_offsets(G, {tp: OffsetAndMetadata(42)})
    assert m.committed(G) == {tp: OffsetAndMetadata(42)}
    assert m.groups[G].state == GroupState.EMPTY
    assert m.delete_group(G, 1) == (ErrorCode.NONE, [tp])
    assert m.committed(G) == {}
    assert m.delete_group(G, 2) == (ErrorCode.GROUP_ID_NOT_FOUND, [])


def test_delete_non_empty_group_is_refused() -> None:
    m = manager()
    stable_pair(m)
    assert m.delete_group(G, 10) == (ErrorCode.NON_EMPTY_GROUP, [])


def test_last_member_leaving_empties_the_group() -> None:
    m = manager()
    a, _, _ = join_new(m, 0)
    sync(m, a, 1, 0, {a: b""})
    _, errors, effects = m.leave_group(G, [(a, None)], 1)
    assert errors == [ErrorCode.NONE]
    group = m.groups[G]
    assert group.state == GroupState.EMPTY
    assert group.generation_id == 2
    assert effects.group_records[G] is not None
    assert effects.group_records[G].members == ()


def test_initial_rebalance_delay_waits_for_more_members() -> None:
    m = manager(initial_delay_ms=3000)
    a, result, effects = join_new(m, 0, "a")
    assert result is None
    assert not effects.joins
    b, result, effects = join_new(m, 1000, "b")
    assert not effects.joins
    assert not m.tick(3999).joins  # the delay was extended to 1000 + 3000
    effects = m.tick(4000)
    assert set(effects.joins) == {a, b}


def test_pending_member_that_never_rejoins_is_forgotten() -> None:
    m = manager()
    first, member_id, _ = m.join_group(join_request(), 0)
    assert first is not None
    assert first.error == ErrorCode.MEMBER_ID_REQUIRED
    m.tick(SESSION_MS)
    assert member_id not in m.groups[G].pending_members
    late, _, _ = m.join_group(join_request(member_id), SESSION_MS + 1)
    assert late is not None
    assert late.error == ErrorCode.UNKNOWN_MEMBER_ID


def test_static_member_restart_keeps_assignment_without_rebalance() -> None:
    m = manager()
    result, member_id, effects = m.join_group(join_request(instance_id="i1"), 0)
    assert result is None  # static members skip MEMBER_ID_REQUIRED
    generation = effects.joins[member_id].generation_id
    sync(m, member_id, generation, 1, {member_id: b"A"})
    result, new_id, _ = m.join_group(join_request(instance_id="i1"), 2)
    assert result is not None
    assert result.error == ErrorCode.NONE
    assert new_id != member_id
    assert result.generation_id == generation
    assert m.groups[G].state == GroupState.STABLE
    # The old incarnation is fenced.
    assert m.heartbeat(G, generation, member_id, "i1", 3) == ErrorCode.UNKNOWN_MEMBER_ID
    assert m.heartbeat(G, generation, new_id, "i1", 3) == ErrorCode.NONE


def test_unload_answers_parked_requests_not_coordinator() -> None:
    m = manager()
    a, _b, _generation = stable_pair(m)
    m.join_group(join_request(a, client_id="a"), 10)
    effects = m.unload()
    assert effects.joins[a].error == ErrorCode.NOT_COORDINATOR
    assert m.groups == {}


def test_load_restores_stable_group() -> None:
    m = manager()
    _a, b, generation = stable_pair(m)
    record = m.groups[G].record()
    other = manager()
    other.load({G: record}, {G: {TopicPartition("t", 0): OffsetAndMetadata(7)}}, 1000)
    group = other.groups[G]
    assert group.state == GroupState.STABLE
    assert group.generation_id == generation
    assert other.heartbeat(G, generation, b, None, 1001) == ErrorCode.NONE
    assert other.committed(G)[TopicPartition("t", 0)].offset == 7
    result, _ = other.sync_group(
        G,
        generation_id=generation,
        member_id=b,
        group_instance_id=None,
        protocol_type=None,
        protocol_name=None,
        assignments={},
        now_ms=1002,
    )
    assert result is not None
    assert result.assignment == b"B2"


@pytest.mark.parametrize(
    ("group_id", "partition"),
    # Kafka's Utils.abs("...".hashCode()) % 50, computed by hand from Java's String.hashCode.
    [("", 0), ("a", 97 % 50), ("ab", (97 * 31 + 98) % 50), ("my-group", 0)],
)
def test_partition_for_matches_java_hashcode(group_id: str, partition: int) -> None:
    if group_id == "my-group":
        h = 0
        for ch in group_id:
            h = (31 * h + ord(ch)) & 0xFFFFFFFF
        h = h - (1 << 32) if h >= 1 << 31 else h
        partition = abs(h) % 50
    assert partition_for(group_id, 50) == partition


def test_retried_join_while_parked_stays_parked_and_completes() -> None:
    m = manager()
    a, b, generation = stable_pair(m)
    result, _, effects = m.join_group(join_request(a, client_id="a"), 10)  # the leader rejoins
    assert result is None
    assert not effects.joins  # waits for b
    result, _, effects = m.join_group(join_request(a, client_id="a"), 11)  # the client retried
    assert result is None
    assert not effects.joins
    result, _, effects = m.join_group(join_request(b, client_id="b"), 12)
    assert result is None
    assert {k: v.generation_id for k, v in effects.joins.items()} == {
        a: generation + 1,
        b: generation + 1,
    }
