"""Where a partition's log is: ListOffsets (offsets for timestamps) and
OffsetForLeaderEpoch (the end offset of a leader epoch, KIP-101)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tidelog.client.wire import error_code, make, schema_module
from tidelog.errors import ErrorCode
from tidelog.model import TopicPartition
from tidelog.protocol.apis import ApiKey


@dataclass(frozen=True, slots=True)
class ListOffsetsResult:
    error_code: ErrorCode
    offset: int
    timestamp: int
    leader_epoch: int = -1


@dataclass(frozen=True, slots=True)
class EpochEndOffset:
    error_code: ErrorCode
    leader_epoch: int
    end_offset: int


def list_offsets_request(
    version: int, partitions: Mapping[TopicPartition, int], *, isolation_level: int
) -> Any:
    """ListOffsets request ``version``: partition -> timestamp."""
    m = schema_module(ApiKey.LIST_OFFSETS, version)
    by_topic: dict[str, list[Any]] = {}
    for tp, ts in partitions.items():
        by_topic.setdefault(tp.topic, []).append(
            make(
                m.ListOffsetsPartition,
                partition_index=tp.partition,
                timestamp=ts,
                current_leader_epoch=-1,
                max_num_offsets=1,
            )
        )
    return make(
        m.ListOffsetsRequest,
        replica_id=-1,
        isolation_level=isolation_level,
        topics=tuple(
            m.ListOffsetsTopic(name=t, partitions=tuple(ps)) for t, ps in by_topic.items()
        ),
    )


def read_list_offsets(response: Any) -> dict[TopicPartition, ListOffsetsResult]:
    """Every partition's answer in a ListOffsets response."""
    return {
        TopicPartition(topic.name, int(p.partition_index)): ListOffsetsResult(
            error_code=error_code(p.error_code),
            offset=int(p.offset),
            timestamp=int(p.timestamp),
            leader_epoch=int(getattr(p, "leader_epoch", -1)),
        )
        for topic in response.topics
        for p in topic.partitions
    }


def offset_for_leader_epoch_request(
    version: int, partitions: Mapping[TopicPartition, tuple[int, int]], *, replica_id: int
) -> Any:
    """OffsetForLeaderEpoch request ``version``: partition -> (leader epoch asked about,
    current leader epoch or -1)."""
    m = schema_module(ApiKey.OFFSET_FOR_LEADER_EPOCH, version)
    by_topic: dict[str, list[Any]] = {}
    for tp, (epoch, current) in partitions.items():
        by_topic.setdefault(tp.topic, []).append(
            make(
                m.OffsetForLeaderPartition,
                partition=tp.partition,
                current_leader_epoch=current,
                leader_epoch=epoch,
            )
        )
    return make(
        m.OffsetForLeaderEpochRequest,
        replica_id=replica_id,
        topics=tuple(
            m.OffsetForLeaderTopic(topic=t, partitions=tuple(ps)) for t, ps in by_topic.items()
        ),
    )


def read_offset_for_leader_epoch(response: Any) -> dict[TopicPartition, EpochEndOffset]:
    """Every partition's answer in an OffsetForLeaderEpoch response."""
    return {
        TopicPartition(t.topic, int(p.partition)): EpochEndOffset(
            error_code(p.error_code), int(p.leader_epoch), int(p.end_offset)
        )
        for t in response.topics
        for p in t.partitions
    }
