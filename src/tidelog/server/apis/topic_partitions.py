"""DescribeTopicPartitions (API 75, KIP-966): topic metadata a page at a time.

Rules (Kafka's ``DescribeTopicPartitionsRequestHandler`` and ``describeTopicResponse``):

1. No topics asked: every topic the client may DESCRIBE, by name; topics it may not are
   left out, as are unknown ones. Topics asked: each one, by name, with
   TOPIC_AUTHORIZATION_FAILED (or INVALID_TOPIC_EXCEPTION for an illegal name) when it may
   not DESCRIBE, UNKNOWN_TOPIC_OR_PARTITION (or INVALID_TOPIC_EXCEPTION) when it does not
   exist; refused topics come after the others.
2. The cursor (topic, partition) starts the page: topics sorting before its topic are
   skipped and its topic starts at its partition. A cursor topic that is not among the
   topics asked is INVALID_REQUEST for every topic.
3. A page holds at most ``max(1, min(response_partition_limit, 2000))`` partitions. When a
   topic does not fit, the page ends inside it and ``next_cursor`` names its next
   partition; when the limit is reached exactly and topics remain, ``next_cursor`` names
   the next topic at partition 0. No ``next_cursor``: this was the last page.
4. Partitions carry what Metadata carries (leader, epoch, replicas, ISR, offline replicas);
   eligible leader replicas (KIP-966's ELR) are not built: empty lists.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any, Final

from tidelog.errors import ErrorCode
from tidelog.protocol.apis import ApiKey
from tidelog.protocol.codec import RequestHeader
from tidelog.security.acls import AclOperation, ResourceType
from tidelog.server.apis.helper import RequestHelper
from tidelog.server.auth import authz
from tidelog.server.config.broker_config import topic_name_error
from tidelog.server.metadata.backend import MetadataBackend

#: Kafka's ``max.request.partition.size.limit`` default.
MAX_PARTITIONS_PER_PAGE: Final = 2000
INTERNAL_TOPICS: Final = frozenset({"__consumer_offsets", "__transaction_state"})


def _missing(name: str, error: ErrorCode) -> dict[str, Any]:
    if topic_name_error(name):
        error = ErrorCode.INVALID_TOPIC_EXCEPTION
    return {
        "error_code": error,
        "name": name,
        "topic_id": uuid.UUID(int=0),
        "is_internal": False,
        "partitions": [],
    }


class DescribeTopicPartitionsApi:
    """DescribeTopicPartitions of one broker, from its metadata backend."""

    def __init__(self, helper: RequestHelper, backend: MetadataBackend) -> None:
        self.helper = helper
        self.backend = backend

    def handlers(self) -> dict[int, Callable[[RequestHeader, Any], Any]]:
        return {ApiKey.DESCRIBE_TOPIC_PARTITIONS: self.handle}

    def handle(self, header: RequestHeader, body: Any) -> Any:
        return describe_topic_partitions(self.helper, self.backend, header, body)


def describe_topic_partitions(
    helper: RequestHelper, backend: MetadataBackend, header: RequestHeader, body: Any
) -> Any:
    asked = [str(t.name) for t in body.topics]
    fetch_all = not asked
    cursor = body.cursor
    start_topic = None if cursor is None else str(cursor.topic_name)
    start_partition = 0 if cursor is None else max(0, int(cursor.partition_index))

    def respond(topics: list[dict[str, Any]], next_cursor: dict[str, Any] | None) -> Any:
        return helper.respond(header, {"topics": topics, "next_cursor": next_cursor})

    if start_topic is not None and not fetch_all and start_topic not in asked:
        # Rule 2: Kafka's InvalidRequestException answered for every topic.
        return respond([_missing(n, ErrorCode.INVALID_REQUEST) for n in asked], None)
    names = sorted(backend.topics) if fetch_all else sorted(set(asked))
    if start_topic is not None:
        names = [n for n in names if n >= start_topic]
    denied = authz.denied_names(
        helper.authorizer, AclOperation.DESCRIBE, ResourceType.TOPIC, names, header.api_key
    )
    remaining = max(1, min(int(body.response_partition_limit), MAX_PARTITIONS_PER_PAGE))
    topics: list[dict[str, Any]] = []
    next_cursor: dict[str, Any] | None = None
    for name in (n for n in names if n not in denied):
        info = backend.topics.get(name)
        if info is None:
            if not fetch_all:
                topics.append(_missing(name, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION))
            continue
        if remaining == 0:
            next_cursor = {"topic_name": name, "partition_index": 0}
            break
        entry: dict[str, Any] = {
            "error_code": ErrorCode.NONE,
            "name": name,
            "topic_id": info.topic_id,
            "is_internal": name in INTERNAL_TOPICS,
            "topic_authorized_operations": authz.authorized_operations(
                helper.authorizer, ResourceType.TOPIC, name, header.api_key
            ),
        }
        if info.num_partitions == 0:
            # Known from LeaderAndIsr, not yet described by UpdateMetadata (as Metadata).
            topics.append({**entry, "error_code": ErrorCode.LEADER_NOT_AVAILABLE, "partitions": []})
            continue
        first = start_partition if name == start_topic else 0
        partitions = [
            {**p, "eligible_leader_replicas": [], "last_known_elr": []}
            for p in backend.partition_metadata(info)[first : first + remaining]
        ]
        topics.append({**entry, "partitions": partitions})
        following = first + len(partitions)
        if following < info.num_partitions:
            next_cursor = {"topic_name": name, "partition_index": following}
            break
        remaining -= len(partitions)
    if not fetch_all:
        topics += [_missing(n, ErrorCode.TOPIC_AUTHORIZATION_FAILED) for n in names if n in denied]
    return respond(topics, next_cursor)


__all__ = ["MAX_PARTITIONS_PER_PAGE", "DescribeTopicPartitionsApi", "describe_topic_partitions"]
