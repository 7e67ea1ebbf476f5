"""Group requests a client gets wrong, sent as exact protocol bytes to one broker: what each
gets back is Kafka's error code."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import ConsumerGroupType
from confluent_kafka.admin import AdminClient

from tests.harness import BrokerProcess
from tests.integration.groups.helpers import GROUP_OVERRIDES
from tests.integration.rawclient import Raw, create
from tidelog.errors import ErrorCode
from tidelog.protocol.apis import ApiKey

pytestmark = pytest.mark.integration

JOIN_V = 5
PROTOCOLS = [{"name": "range", "metadata": b"\x00\x00\x00\x00\x00\x01\x00\x01t\xff\xff\xff\xff"}]


@pytest.fixture(scope="module")
def raw(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Raw]:
    process = BrokerProcess(tmp_path_factory.mktemp("groups-bad"), GROUP_OVERRIDES).start()
    conn = Raw(process)
    try:
        found = conn.call(ApiKey.FIND_COORDINATOR, 4, {"key_type": 0, "coordinator_keys": ["x"]})
        assert found.coordinators[0].node_id == 0  # creates __consumer_offsets
        yield conn
    finally:
        conn.close()
        process.stop()


def join(raw: Raw, group: str, member_id: str = "", session_ms: int = 30000) -> Any:
    return raw.call(
        ApiKey.JOIN_GROUP,
        JOIN_V,
        {
            "group_id": group,
            "session_timeout": session_ms,
            "rebalance_timeout": 30000,
            "member_id": member_id,
            "group_instance_id": None,
            "protocol_type": "consumer",
            "protocols": PROTOCOLS,
        },
    )


def member(raw: Raw, group: str) -> tuple[str, int]:
    """A member of a Stable one-member group: (member id, generation)."""
    first = join(raw, group)
    assert first.error_code == ErrorCode.MEMBER_ID_REQUIRED
    joined = join(raw, group, first.member_id)
    assert joined.error_code == ErrorCode.NONE
    assert joined.leader == first.member_id
    synced = raw.call(
        ApiKey.SYNC_GROUP,
        3,
        {
            "group_id": group,
            "generation_id": joined.generation_id,
            "member_id": first.member_id,
            "group_instance_id": None,
            "assignments": [{"member_id": first.member_id, "assignment": b"mine"}],
        },
    )
    assert synced.error_code == ErrorCode.NONE
    assert synced.assignment == b"mine"
    return first.member_id, joined.generation_id


def heartbeat(raw: Raw, group: str, member_id: str, generation: int) -> int:
    body = raw.call(
        ApiKey.HEARTBEAT,
        3,
        {
            "group_id": group,
            "generation_id": generation,
            "member_id": member_id,
            "group_instance_id": None,
        },
    )
    return int(body.error_code)


def commit(
    raw: Raw, group: str, member_id: str, generation: int, *, offset: int = 5, topic: str = "t"
) -> int:
    body = raw.call(
        ApiKey.OFFSET_COMMIT,
        8,
        {
            "group_id": group,
            "generation_id_or_member_epoch": generation,
            "member_id": member_id,
            "group_instance_id": None,
            "topics": [
                {
                    "name": topic,
                    "partitions": [
                        {"partition_index": 0, "committed_offset": offset, "committed_metadata": ""}
                    ],
                }
            ],
        },
    )
    return int(body.topics[0].partitions[0].error_code)


def offset_delete(raw: Raw, group: str) -> tuple[int, int | None]:
    """OffsetDelete of t-0: (group error, partition error or None)."""
    body = raw.call(
        ApiKey.OFFSET_DELETE,
        0,
        {"group_id": group, "topics": [{"name": "t", "partitions": [{"partition_index": 0}]}]},
    )
    partition = body.topics[0].partitions[0].error_code if body.topics else None
    return int(body.error_code), partition


def test_empty_group_id_is_invalid(raw: Raw) -> None:
    assert join(raw, "").error_code == ErrorCode.INVALID_GROUP_ID
    assert heartbeat(raw, "", "m", 1) == ErrorCode.INVALID_GROUP_ID
    assert commit(raw, "", "", -1) == ErrorCode.INVALID_GROUP_ID


def test_session_timeout_out_of_range(raw: Raw) -> None:
    assert join(raw, "g-timeout", session_ms=10).error_code == ErrorCode.INVALID_SESSION_TIMEOUT


def test_unknown_member_and_illegal_generation(raw: Raw) -> None:
    create(raw, "t")
    member_id, generation = member(raw, "g-errors")
    assert heartbeat(raw, "g-errors", member_id, generation) == ErrorCode.NONE
    assert heartbeat(raw, "g-errors", member_id, generation + 1) == ErrorCode.ILLEGAL_GENERATION
    assert heartbeat(raw, "g-errors", "stranger", generation) == ErrorCode.UNKNOWN_MEMBER_ID
    assert heartbeat(raw, "no-such-group", member_id, generation) == ErrorCode.UNKNOWN_MEMBER_ID
    assert join(raw, "g-errors", "stranger").error_code == ErrorCode.UNKNOWN_MEMBER_ID
    assert commit(raw, "g-errors", member_id, generation + 3) == ErrorCode.ILLEGAL_GENERATION
    assert commit(raw, "g-errors", "stranger", generation) == ErrorCode.UNKNOWN_MEMBER_ID
    assert commit(raw, "g-errors", member_id, generation, offset=9) == ErrorCode.NONE
    assert commit(raw, "g-errors", member_id, generation, topic="nope") == (
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    )
    fetched = raw.call(
        ApiKey.OFFSET_FETCH,
        8,
        {
            "groups": [
                {"group_id": "g-errors", "topics": [{"name": "t", "partition_indexes": [0, 1]}]}
            ]
        },
    )
    partitions = fetched.groups[0].topics[0].partitions
    assert [(p.partition_index, p.committed_offset) for p in partitions] == [(0, 9), (1, -1)]
    # Offsets of a topic the live group subscribes to cannot be deleted (KIP-496).
    assert offset_delete(raw, "g-errors") == (ErrorCode.NONE, ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC)
    assert offset_delete(raw, "nope")[0] == ErrorCode.GROUP_ID_NOT_FOUND
    # A live group cannot be deleted; an unknown one is not found.
    deleted = raw.call(ApiKey.DELETE_GROUPS, 2, {"groups_names": ["g-errors", "nope"]})
    assert [(r.group_id, r.error_code) for r in deleted.results] == [
        ("g-errors", ErrorCode.NON_EMPTY_GROUP),
        ("nope", ErrorCode.GROUP_ID_NOT_FOUND),
    ]
    # After the member leaves, the group is Empty and deleting it drops its offsets.
    left = raw.call(
        ApiKey.LEAVE_GROUP, 3, {"group_id": "g-errors", "members": [{"member_id": member_id}]}
    )
    assert left.error_code == ErrorCode.NONE
    assert left.members[0].error_code == ErrorCode.NONE
    assert offset_delete(raw, "g-errors") == (ErrorCode.NONE, ErrorCode.NONE)
    # An Empty group takes a "simple" commit (generation -1), as from a consumer using assign().
    assert commit(raw, "g-errors", "", -1, offset=11) == ErrorCode.NONE
    described = raw.call(ApiKey.DESCRIBE_GROUPS, 5, {"groups": ["g-errors", "nope"]})
    assert [(g.group_id, g.group_state) for g in described.groups] == [
        ("g-errors", "Empty"),
        ("nope", "Dead"),
    ]
    before = raw.call(
        ApiKey.OFFSET_FETCH,
        8,
        {"groups": [{"group_id": "g-errors", "topics": [{"name": "t", "partition_indexes": [0]}]}]},
    )
    assert before.groups[0].topics[0].partitions[0].committed_offset == 11
    deleted = raw.call(ApiKey.DELETE_GROUPS, 2, {"groups_names": ["g-errors"]})
    assert deleted.results[0].error_code == ErrorCode.NONE
    fetched = raw.call(
        ApiKey.OFFSET_FETCH,
        8,
        {"groups": [{"group_id": "g-errors", "topics": [{"name": "t", "partition_indexes": [0]}]}]},
    )
    assert fetched.groups[0].topics[0].partitions[0].committed_offset == -1


def test_inconsistent_protocol(raw: Raw) -> None:
    member(raw, "g-proto")
    body = raw.call(
        ApiKey.JOIN_GROUP,
        JOIN_V,
        {
            "group_id": "g-proto",
            "session_timeout": 6000,
            "rebalance_timeout": 6000,
            "member_id": "",
            "group_instance_id": None,
            "protocol_type": "connect",
            "protocols": PROTOCOLS,
        },
    )
    assert body.error_code == ErrorCode.INCONSISTENT_GROUP_PROTOCOL


def test_describe_groups_v6_and_list_groups_v5(raw: Raw) -> None:
    member(raw, "g-v6")
    # KIP-1043: from v6 an unknown group is GROUP_ID_NOT_FOUND with Kafka's message.
    described = raw.call(ApiKey.DESCRIBE_GROUPS, 6, {"groups": ["g-v6", "nope"]})
    rows = [(g.group_id, g.error_code, g.group_state, g.error_message) for g in described.groups]
    assert rows == [
        ("g-v6", ErrorCode.NONE, "Stable", None),
        ("nope", ErrorCode.GROUP_ID_NOT_FOUND, "Dead", "Group nope not found."),
    ]

    # KIP-848's type filter: every tidelog group is classic; names are case-insensitive.
    def listed(types: list[str]) -> list[tuple[str, str]]:
        answer = raw.call(ApiKey.LIST_GROUPS, 5, {"states_filter": [], "types_filter": types})
        assert answer.error_code == ErrorCode.NONE
        return sorted((g.group_id, g.group_type) for g in answer.groups if g.group_id == "g-v6")

    assert listed([]) == [("g-v6", "classic")]
    assert listed(["Classic"]) == [("g-v6", "classic")]
    assert listed(["consumer"]) == []
    # confluent-kafka (librdkafka 2.16) sends the type filter in ListGroups v5.
    host, port = raw.sock.getpeername()[:2]
    admin = AdminClient({"bootstrap.servers": f"{host}:{port}"})
    cases = (({ConsumerGroupType.CLASSIC}, True), ({ConsumerGroupType.CONSUMER}, False))
    for types, expected in cases:
        result = admin.list_consumer_groups(types=types, request_timeout=10).result(timeout=15)
        found = {g.group_id: g.type for g in result.valid}
        assert ("g-v6" in found) is expected, (types, found)
        if expected:
            assert found["g-v6"] == ConsumerGroupType.CLASSIC
