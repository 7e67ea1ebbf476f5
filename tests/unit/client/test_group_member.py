"""``GroupMember``'s steps against scripted coordinator answers (no broker): the member id
dance, the leader's range assignment, a moved coordinator, the answers that end a
generation, commits and leaving."""

from __future__ import annotations

from collections import deque
from types import SimpleNamespace
from typing import Any, cast

import pytest

from tidelog.client import BlockingClient
from tidelog.client.consumer_protocol import (
    decode_assignment,
    encode_assignment,
    encode_subscription,
)
from tidelog.client.errors import BrokerError
from tidelog.client.group_member import GroupMember
from tidelog.client.transactions import COORDINATOR_GROUP, CoordinatorResult
from tidelog.errors import ErrorCode
from tidelog.model import TopicPartition


class ScriptedClient:
    """Answers each request with the next scripted answer for its kind."""

    def __init__(self, answers: dict[str, list[Any]], partitions: int = 3) -> None:
        self.answers = {kind: deque(items) for kind, items in answers.items()}
        self.partitions = partitions
        self.sent: list[tuple[str, Any, int | None]] = []
        self.lookups = 0

    def find_coordinator(self, key: str, *, key_type: int) -> CoordinatorResult:
        assert key_type == COORDINATOR_GROUP
        self.lookups += 1
        return CoordinatorResult(ErrorCode.NONE, 7, "127.0.0.1", 9092)

    def metadata(self, topics: list[str]) -> Any:
        topic = SimpleNamespace(error_code=ErrorCode.NONE, partitions=[0] * self.partitions)
        return SimpleNamespace(topics=dict.fromkeys(topics, topic))

    def send(self, request: Any, *, node_id: int | None, timeout_s: float | None) -> Any:
        kind = type(request).__name__
        self.sent.append((kind, request, node_id))
        return self.answers[kind].popleft()


def _member(client: ScriptedClient, **kwargs: Any) -> GroupMember:
    return GroupMember(cast(BlockingClient, client), "g", ["t"], **kwargs)


def _join(code: ErrorCode = ErrorCode.NONE, member: str = "m-1", leader: str = "m-1") -> Any:
    members = [
        SimpleNamespace(member_id="m-1", metadata=encode_subscription(["t"])),
        SimpleNamespace(member_id="m-2", metadata=encode_subscription(["t"])),
    ]
    return SimpleNamespace(
        error_code=int(code),
        member_id=member,
        generation_id=4,
        leader=leader,
        members=members if leader == member else [],
    )


def _sync(code: ErrorCode = ErrorCode.NONE, *tps: TopicPartition) -> Any:
    return SimpleNamespace(error_code=int(code), assignment=encode_assignment(list(tps)))


def _code(code: ErrorCode) -> Any:
    return SimpleNamespace(error_code=int(code))


def test_a_leader_joins_with_the_id_it_is_given_and_assigns_ranges() -> None:
    client = ScriptedClient(
        {
            "JoinGroupRequest": [_join(ErrorCode.MEMBER_ID_REQUIRED, member="m-1"), _join()],
            "SyncGroupRequest": [_sync(ErrorCode.NONE, TopicPartition("t", 0))],
        }
    )
    member = _member(client)
    assert member.join() == (TopicPartition("t", 0),)
    joins = [r for kind, r, _ in client.sent if kind == "JoinGroupRequest"]
    assert [j.member_id for j in joins] == ["", "m-1"]
    assert joins[0].protocol_type == "consumer"
    assert [(p.name, p.metadata) for p in joins[0].protocols] == [
        ("range", encode_subscription(["t"]))
    ]
    (sync,) = [r for kind, r, _ in client.sent if kind == "SyncGroupRequest"]
    assert (sync.generation_id, sync.member_id) == (4, "m-1")
    assert {a.member_id: decode_assignment(a.assignment) for a in sync.assignments} == {
        "m-1": (TopicPartition("t", 0), TopicPartition("t", 1)),
        "m-2": (TopicPartition("t", 2),),
    }
    assert all(node == 7 for _, _, node in client.sent)
    assert member.in_generation


def test_a_follower_sends_no_assignments_and_a_moved_coordinator_is_looked_up_again() -> None:
    client = ScriptedClient(
        {
            "JoinGroupRequest": [
                _join(ErrorCode.NOT_COORDINATOR),
                _join(member="m-2", leader="m-1"),
            ],
            "SyncGroupRequest": [
                _sync(ErrorCode.REBALANCE_IN_PROGRESS),
                _sync(ErrorCode.NONE, TopicPartition("t", 2)),
            ],
        }
    )
    client.answers["JoinGroupRequest"].append(_join(member="m-2", leader="m-1"))
    member = _member(client)
    assert member.join() == (TopicPartition("t", 2),)
    assert client.lookups == 2
    syncs = [r for kind, r, _ in client.sent if kind == "SyncGroupRequest"]
    assert [s.assignments for s in syncs] == [(), ()]


@pytest.mark.parametrize(
    ("code", "keeps_member_id"),
    [
        (ErrorCode.REBALANCE_IN_PROGRESS, True),
        (ErrorCode.ILLEGAL_GENERATION, True),
        (ErrorCode.UNKNOWN_MEMBER_ID, False),
    ],
)
def test_heartbeat_answers_that_end_the_generation(code: ErrorCode, keeps_member_id: bool) -> None:
    client = ScriptedClient(
        {
            "JoinGroupRequest": [_join(member="m-2", leader="m-1")],
            "SyncGroupRequest": [_sync()],
            "HeartbeatRequest": [_code(ErrorCode.NONE), _code(code)],
        }
    )
    member = _member(client, heartbeat_interval_ms=1000)
    member.join()
    start = member._last_heartbeat_ms
    assert member.maybe_heartbeat(start + 10)  # not due: nothing sent
    assert member.maybe_heartbeat(start + 1000)
    assert not member.maybe_heartbeat(start + 2000)
    assert [k for k, _, _ in client.sent].count("HeartbeatRequest") == 2
    assert (member.member_id == "m-2") is keeps_member_id


def test_a_fatal_join_error_raises_with_its_code() -> None:
    client = ScriptedClient({"JoinGroupRequest": [_join(ErrorCode.GROUP_AUTHORIZATION_FAILED)]})
    with pytest.raises(BrokerError) as caught:
        _member(client).join()
    assert caught.value.code == ErrorCode.GROUP_AUTHORIZATION_FAILED


def _offsets_answer(*rows: tuple[int, int, ErrorCode]) -> Any:
    partitions = [
        SimpleNamespace(partition_index=p, committed_offset=o, error_code=int(c))
        for p, o, c in rows
    ]
    return SimpleNamespace(error_code=0, topics=[SimpleNamespace(name="t", partitions=partitions)])


def test_committed_leaves_out_partitions_without_an_offset_and_waits_out_transactions() -> None:
    client = ScriptedClient(
        {
            "OffsetFetchRequest": [
                _offsets_answer((0, 5, ErrorCode.UNSTABLE_OFFSET_COMMIT)),
                _offsets_answer((0, 5, ErrorCode.NONE), (1, -1, ErrorCode.NONE)),
            ]
        }
    )
    tps = [TopicPartition("t", 0), TopicPartition("t", 1)]
    assert _member(client).committed(tps) == {TopicPartition("t", 0): 5}
    fetch = client.sent[-1][1]
    assert fetch.require_stable
    assert [(t.name, t.partition_indexes) for t in fetch.topics] == [("t", (0, 1))]


def test_commit_carries_the_generation_and_reports_the_first_error_then_leave() -> None:
    client = ScriptedClient(
        {
            "JoinGroupRequest": [_join(member="m-2", leader="m-1")],
            "SyncGroupRequest": [_sync()],
            "OffsetCommitRequest": [
                _offsets_answer((0, 0, ErrorCode.NONE)),
                _offsets_answer((0, 0, ErrorCode.ILLEGAL_GENERATION)),
            ],
            "LeaveGroupRequest": [_code(ErrorCode.NONE)],
        }
    )
    member = _member(client)
    member.join()
    assert member.commit({TopicPartition("t", 0): 12}) == ErrorCode.NONE
    commit = client.sent[-1][1]
    assert (commit.generation_id_or_member_epoch, commit.member_id) == (4, "m-2")
    assert [(p.partition_index, p.committed_offset) for p in commit.topics[0].partitions] == [
        (0, 12)
    ]
    assert member.commit({TopicPartition("t", 0): 13}) == ErrorCode.ILLEGAL_GENERATION
    member.leave()
    leave = client.sent[-1][1]
    assert [m.member_id for m in leave.members] == ["m-2"]
    assert not member.in_generation
