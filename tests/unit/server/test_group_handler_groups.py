"""The group coordinator's handler groups on their own, with stand-in collaborators: parked
JoinGroup/SyncGroup answers, the group/topic ACL helpers, FindCoordinator for both key
types, the partitions' lookup, and the partition checks of an offset commit."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from types import SimpleNamespace
from typing import Any, cast

from tidelog.coordinator import partition_for
from tidelog.coordinator.group import (
    OFFSET_METADATA_MAX_BYTES,
    Effects,
    GroupConfig,
    GroupManager,
    JoinResult,
    SyncResult,
)
from tidelog.errors import ErrorCode
from tidelog.model import TopicPartition
from tidelog.protocol.apis import ApiKey
from tidelog.protocol.codec import RequestHeader
from tidelog.security.acls import AclOperation, ResourceType
from tidelog.server.apis.find_coordinator import FindCoordinatorApis, Leader
from tidelog.server.auth.authorizer import AclAuthorizer
from tidelog.server.coordinators.group_common import group_refused, topics_refused
from tidelog.server.coordinators.group_membership import ParkedRequests
from tidelog.server.coordinators.group_offsets import OffsetApis
from tidelog.server.coordinators.group_partitions import GroupPartitions, LoadedPartition
from tidelog.server.coordinators.internal_topics import OFFSETS_TOPIC
from tidelog.server.replica.manager import ReplicaManager

NOW = 1_000_000


class _Authorizer:
    """Allows everything but the names in ``denied``."""

    def __init__(self, *denied: str) -> None:
        self.denied = set(denied)
        self.asked: list[tuple[AclOperation, ResourceType, str]] = []

    def authorize(
        self, operation: AclOperation, resource_type: ResourceType, name: str, **_: Any
    ) -> bool:
        self.asked.append((operation, resource_type, name))
        return name not in self.denied


def _header(api: ApiKey, version: int) -> RequestHeader:
    return RequestHeader(int(api), version, 1, "test")


def _respond(_header: RequestHeader, data: Any) -> Any:
    return dict(data)


# --- ParkedRequests ---------------------------------------------------------------------


def test_a_newer_join_answers_the_parked_one_rebalance_in_progress() -> None:
    parked = ParkedRequests()
    answers: list[tuple[str, JoinResult]] = []
    parked.park_join("m", lambda r: answers.append(("first", r)))
    parked.park_join("m", lambda r: answers.append(("second", r)))
    assert answers == [("first", JoinResult(ErrorCode.REBALANCE_IN_PROGRESS, "m"))]
    done = JoinResult(ErrorCode.NONE, "m", generation_id=1)
    parked.resolve(Effects(joins={"m": done, "other": done}))
    assert answers[1:] == [("second", done)]
    assert parked.joins == {}


def test_a_newer_sync_answers_the_parked_one_and_resolve_answers_once() -> None:
    parked = ParkedRequests()
    answers: list[SyncResult] = []
    parked.park_sync("m", answers.append)
    parked.park_sync("m", answers.append)
    assert answers == [SyncResult(ErrorCode.REBALANCE_IN_PROGRESS)]
    parked.resolve(Effects(syncs={"m": SyncResult(ErrorCode.NONE, assignment=b"a")}))
    parked.resolve(Effects(syncs={"m": SyncResult(ErrorCode.NONE, assignment=b"b")}))
    assert answers[1:] == [SyncResult(ErrorCode.NONE, assignment=b"a")]


# --- ACL helpers ------------------------------------------------------------------------


def test_acl_helpers_allow_everything_without_an_authorizer() -> None:
    header = _header(ApiKey.JOIN_GROUP, 5)
    assert not group_refused(None, header, AclOperation.READ, "g")
    assert topics_refused(None, header, AclOperation.READ, ["a", "b"]) == frozenset()


def test_acl_helpers_ask_about_groups_and_topics() -> None:
    fake = _Authorizer("g", "b")
    authorizer = cast(AclAuthorizer, fake)
    header = _header(ApiKey.OFFSET_COMMIT, 8)
    assert group_refused(authorizer, header, AclOperation.READ, "g")
    assert not group_refused(authorizer, header, AclOperation.READ, "h")
    assert topics_refused(authorizer, header, AclOperation.READ, ["a", "b", "b"]) == {"b"}
    assert fake.asked[0] == (AclOperation.READ, ResourceType.GROUP, "g")
    assert (AclOperation.READ, ResourceType.TOPIC, "a") in fake.asked


# --- FindCoordinator --------------------------------------------------------------------


class _Transactions:
    async def find(self, key: str) -> tuple[ErrorCode, str | None, Leader | None]:
        if key == "missing":
            return ErrorCode.COORDINATOR_NOT_AVAILABLE, None, None
        return ErrorCode.NONE, None, (7, "tx-host", 9097)


def _find(
    key_type: int,
    key: str,
    *,
    count: int = 3,
    transactions: _Transactions | None = None,
    authorizer: _Authorizer | None = None,
) -> tuple[dict[str, Any], list[TopicPartition]]:
    asked: list[TopicPartition] = []

    async def ensure() -> int:
        return count

    def leader_of(tp: TopicPartition) -> Leader | None:
        asked.append(tp)
        return (1, "host", 9092) if tp.partition != 0 else None

    find = FindCoordinatorApis(
        ensure_offsets_topic=ensure,
        leader_of=leader_of,
        transactions=lambda: transactions,
        authorizer=lambda: cast(AclAuthorizer | None, authorizer),
        respond=_respond,
    )

    async def inside() -> Any:
        body = SimpleNamespace(key=key, key_type=key_type)
        return await find.handle_find_coordinator(_header(ApiKey.FIND_COORDINATOR, 3), body)

    return asyncio.run(inside()), asked


def test_find_a_group_coordinator_is_the_leader_of_its_partition() -> None:
    key = next(k for k in ("a", "b", "c", "d", "e") if partition_for(k, 3) != 0)
    answer, asked = _find(0, key)
    assert asked == [TopicPartition(OFFSETS_TOPIC, partition_for(key, 3))]
    assert (answer["error_code"], answer["node_id"], answer["host"], answer["port"]) == (
        ErrorCode.NONE,
        1,
        "host",
        9092,
    )


def test_find_a_group_coordinator_while_the_topic_or_its_leader_is_missing() -> None:
    answer, asked = _find(0, "g", count=0)
    assert (answer["error_code"], asked) == (ErrorCode.COORDINATOR_NOT_AVAILABLE, [])
    key = next(k for k in ("a", "b", "c", "d", "e") if partition_for(k, 3) == 0)
    answer, _ = _find(0, key)
    assert answer["error_code"] == ErrorCode.COORDINATOR_NOT_AVAILABLE
    assert answer["node_id"] == -1


def test_find_a_transaction_coordinator_asks_the_transaction_coordinator() -> None:
    answer, asked = _find(1, "tx", transactions=_Transactions())
    assert (answer["error_code"], answer["node_id"], asked) == (ErrorCode.NONE, 7, [])
    answer, _ = _find(1, "missing", transactions=_Transactions())
    assert answer["error_code"] == ErrorCode.COORDINATOR_NOT_AVAILABLE
    assert answer["error_message"] == "COORDINATOR_NOT_AVAILABLE"


def test_find_an_unknown_key_type_or_without_transactions_is_invalid() -> None:
    assert _find(1, "tx")[0]["error_code"] == ErrorCode.INVALID_REQUEST
    assert _find(5, "x")[0]["error_code"] == ErrorCode.INVALID_REQUEST


def test_find_refused_without_describe() -> None:
    answer, asked = _find(0, "g", authorizer=_Authorizer("g"))
    assert (answer["error_code"], asked) == (ErrorCode.GROUP_AUTHORIZATION_FAILED, [])
    assert answer["error_message"]
    answer, _ = _find(1, "tx", transactions=_Transactions(), authorizer=_Authorizer("tx"))
    assert answer["error_code"] == ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED


# --- GroupPartitions --------------------------------------------------------------------


def _partitions(count: int) -> GroupPartitions:
    replica_manager = cast(ReplicaManager, SimpleNamespace(partitions={}))
    config = GroupConfig(
        min_session_timeout_ms=6000,
        max_session_timeout_ms=300000,
        initial_rebalance_delay_ms=0,
        max_size=10,
    )
    return GroupPartitions(replica_manager, lambda: count, config, lambda: NOW, lambda p, e: None)


def test_lookup_is_not_coordinator_without_the_count_or_the_leadership() -> None:
    assert _partitions(0).lookup("g") == (-1, None, ErrorCode.NOT_COORDINATOR)
    assert _partitions(5).lookup("g") == (partition_for("g", 5), None, ErrorCode.NOT_COORDINATOR)


def test_is_current_only_for_the_loaded_manager() -> None:
    partitions = _partitions(1)
    manager = GroupManager(partitions.group_config)
    assert not partitions.is_current(0, manager)
    partitions.loaded[0] = LoadedPartition(manager, 3)
    assert partitions.is_current(0, manager)
    assert not partitions.is_current(0, GroupManager(partitions.group_config))
    assert not partitions.is_current(1, manager)


# --- OffsetApis: an offset commit's partition checks ------------------------------------


def test_offsets_to_commit_checks_each_partition() -> None:
    offsets = OffsetApis(
        lookup=lambda g: (-1, None, ErrorCode.NOT_COORDINATOR),
        is_current=lambda p, m: True,
        append=lambda *a, **k: (-1, asyncio.Future()),
        partition_exists=lambda topic, index: topic != "gone" and index < 2,
        clock=lambda: NOW,
        authorizer=lambda: None,
        respond=_respond,
    )

    def part(index: int, offset: int, metadata: str = "") -> SimpleNamespace:
        return SimpleNamespace(
            partition_index=index,
            committed_offset=offset,
            committed_leader_epoch=4,
            committed_metadata=metadata,
        )

    requested = [
        ("t", 0, part(0, 10, "m")),
        ("t", 5, part(5, 11)),
        ("gone", 0, part(0, 12)),
        ("t", 1, part(1, 13, "x" * (OFFSET_METADATA_MAX_BYTES + 1))),
        ("secret", 0, part(0, 14)),
    ]
    body = SimpleNamespace(retention_time=timedelta(seconds=2))
    errors: dict[tuple[str, int], ErrorCode] = {}
    values = offsets._offsets_to_commit(body, requested, None, frozenset({"secret"}), errors)
    assert errors == {
        ("t", 5): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        ("gone", 0): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        ("t", 1): ErrorCode.OFFSET_METADATA_TOO_LARGE,
        ("secret", 0): ErrorCode.TOPIC_AUTHORIZATION_FAILED,
    }
    [(tp, value)] = values.items()
    assert tp == TopicPartition("t", 0)
    assert (value.offset, value.leader_epoch, value.metadata) == (10, 4, "m")
    assert value.expire_timestamp_ms == NOW + 2000
    # A transaction's offsets carry no expire time (TxnOffsetCommit has no retention).
    values = offsets._offsets_to_commit(body, requested[:1], (1, 0), frozenset(), {})
    assert values[TopicPartition("t", 0)].expire_timestamp_ms == -1
