"""The cluster as a Metadata response describes it: brokers, topics, partition leaders.

``metadata_request`` builds the request for a version, ``read_metadata`` reads the answer
into ``ClusterMetadata``, the value the client routes by.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from tidelog.client.wire import error_code, make, schema_module
from tidelog.errors import ErrorCode
from tidelog.model import TopicPartition
from tidelog.protocol.apis import ApiKey


@dataclass(frozen=True, slots=True)
class BrokerMetadata:
    node_id: int
    host: str
    port: int
    rack: str | None = None


@dataclass(frozen=True, slots=True)
class PartitionMetadata:
    partition: int
    error_code: ErrorCode
    leader_id: int
    leader_epoch: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    offline_replicas: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class TopicMetadata:
    name: str
    error_code: ErrorCode
    topic_id: uuid.UUID | None
    partitions: Mapping[int, PartitionMetadata]


@dataclass(frozen=True, slots=True)
class ClusterMetadata:
    cluster_id: str | None
    controller_id: int
    brokers: Mapping[int, BrokerMetadata]
    topics: Mapping[str, TopicMetadata]

    def leader_for(self, tp: TopicPartition) -> int | None:
        topic = self.topics.get(tp.topic)
        partition = topic.partitions.get(tp.partition) if topic else None
        if partition is None or partition.leader_id < 0:
            return None
        return partition.leader_id


def metadata_request(
    version: int, topics: Iterable[str] | None, *, allow_auto_topic_creation: bool
) -> Any:
    """Metadata request ``version`` for ``topics`` (all topics when None)."""
    m = schema_module(ApiKey.METADATA, version)
    request_topics = (
        None
        if topics is None
        else tuple(make(m.MetadataRequestTopic, name=t, topic_id=None) for t in topics)
    )
    return make(
        m.MetadataRequest,
        topics=request_topics,
        allow_auto_topic_creation=allow_auto_topic_creation,
        include_cluster_authorized_operations=False,
        include_topic_authorized_operations=False,
    )


def read_metadata(response: Any) -> ClusterMetadata:
    """The cluster a Metadata response describes (only the topics it names)."""
    brokers = {
        int(b.node_id): BrokerMetadata(int(b.node_id), b.host, int(b.port), b.rack)
        for b in response.brokers
    }
    result_topics = {}
    for t in response.topics:
        partitions = {
            int(p.partition_index): PartitionMetadata(
                partition=int(p.partition_index),
                error_code=error_code(p.error_code),
                leader_id=int(p.leader_id),
                leader_epoch=int(getattr(p, "leader_epoch", -1)),
                replicas=tuple(int(r) for r in p.replica_nodes),
                isr=tuple(int(r) for r in p.isr_nodes),
                offline_replicas=tuple(int(r) for r in getattr(p, "offline_replicas", ())),
            )
            for p in t.partitions
        }
        result_topics[t.name] = TopicMetadata(
            name=t.name,
            error_code=error_code(t.error_code),
            topic_id=getattr(t, "topic_id", None),
            partitions=partitions,
        )
    return ClusterMetadata(
        cluster_id=getattr(response, "cluster_id", None),
        controller_id=int(getattr(response, "controller_id", -1)),
        brokers=brokers,
        topics=result_topics,
    )
