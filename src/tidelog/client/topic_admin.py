"""Topic admin requests: CreateTopics and DeleteTopics, and their per-topic answers."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from tidelog.client.wire import error_code, make, ms, schema_module
from tidelog.errors import ErrorCode
from tidelog.protocol.apis import ApiKey


@dataclass(frozen=True, slots=True)
class NewTopic:
    name: str
    num_partitions: int = -1
    replication_factor: int = -1
    #: partition -> broker ids (then num_partitions/replication_factor must be -1).
    assignments: Mapping[int, Sequence[int]] = field(default_factory=dict)
    configs: Mapping[str, str | None] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class TopicError:
    error_code: ErrorCode
    message: str | None = None


def create_topics_request(
    version: int, topics: Sequence[NewTopic], *, timeout_ms: int, validate_only: bool
) -> Any:
    """CreateTopics request ``version`` for ``topics``."""
    m = schema_module(ApiKey.CREATE_TOPICS, version)
    return make(
        m.CreateTopicsRequest,
        topics=tuple(
            m.CreatableTopic(
                name=t.name,
                num_partitions=t.num_partitions,
                replication_factor=t.replication_factor,
                assignments=tuple(
                    m.CreatableReplicaAssignment(partition_index=p, broker_ids=tuple(ids))
                    for p, ids in sorted(t.assignments.items())
                ),
                configs=tuple(
                    m.CreatableTopicConfig(name=k, value=v) for k, v in t.configs.items()
                ),
            )
            for t in topics
        ),
        timeout=ms(timeout_ms),
        validate_only=validate_only,
    )


def read_create_topics(response: Any) -> dict[str, TopicError]:
    """Every topic's answer in a CreateTopics response."""
    return {
        t.name: TopicError(error_code(t.error_code), getattr(t, "error_message", None))
        for t in response.topics
    }


def delete_topics_request(version: int, names: Sequence[str], *, timeout_ms: int) -> Any:
    """DeleteTopics request ``version`` for the topics ``names``."""
    m = schema_module(ApiKey.DELETE_TOPICS, version)
    return make(m.DeleteTopicsRequest, topic_names=tuple(names), timeout=ms(timeout_ms))


def read_delete_topics(response: Any) -> dict[str, TopicError]:
    """Every topic's answer in a DeleteTopics response."""
    return {
        r.name: TopicError(error_code(r.error_code), getattr(r, "error_message", None))
        for r in response.responses
    }
