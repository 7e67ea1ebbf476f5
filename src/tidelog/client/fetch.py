"""Fetch from one broker: the request for a version and each partition's answer.

With ``READ_COMMITTED`` (KIP-98) the broker returns records below the last stable offset
only, and each result carries the aborted transactions overlapping what was returned.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from tidelog.client.wire import error_code, make, ms, schema_module
from tidelog.errors import ErrorCode
from tidelog.model import TopicPartition
from tidelog.protocol.apis import ApiKey

#: Fetch / ListOffsets isolation levels (KIP-98): read_committed reads up to the last stable
#: offset and gets the aborted transactions of what it fetched.
READ_UNCOMMITTED: Final = 0
READ_COMMITTED: Final = 1


@dataclass(frozen=True, slots=True)
class FetchResult:
    error_code: ErrorCode
    high_watermark: int
    last_stable_offset: int
    log_start_offset: int
    records: bytes
    #: (epoch, end_offset) when the broker detected divergence (v12+), else None.
    diverging_epoch: tuple[int, int] | None = None
    #: (leader_id, leader_epoch) when the broker says who leads now, else None.
    current_leader: tuple[int, int] | None = None
    #: read_committed: (producer id, first offset) of the aborted transactions that overlap
    #: the fetched range, as the broker listed them (empty when it sent none or null).
    aborted_transactions: list[tuple[int, int]] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class FetchRequestPartition:
    """One partition to fetch (the helper's input)."""

    fetch_offset: int
    partition_max_bytes: int = 1 << 20
    current_leader_epoch: int = -1
    last_fetched_epoch: int = -1
    log_start_offset: int = -1


def fetch_request(
    version: int,
    partitions: Mapping[TopicPartition, FetchRequestPartition],
    *,
    max_wait_ms: int,
    min_bytes: int,
    max_bytes: int,
    replica_id: int,
    isolation_level: int,
    session_id: int = 0,
    session_epoch: int = -1,
    forgotten: Iterable[TopicPartition] = (),
) -> Any:
    """Fetch request ``version`` (by topic name: below v13) for ``partitions``; without a
    fetch session unless ``session_id`` / ``session_epoch`` say otherwise (KIP-227, with the
    partitions the session forgets)."""
    m = schema_module(ApiKey.FETCH, version)
    by_topic: dict[str, list[Any]] = {}
    for tp, spec in partitions.items():
        by_topic.setdefault(tp.topic, []).append(
            make(
                m.FetchPartition,
                partition=tp.partition,
                current_leader_epoch=spec.current_leader_epoch,
                fetch_offset=spec.fetch_offset,
                last_fetched_epoch=spec.last_fetched_epoch,
                log_start_offset=spec.log_start_offset,
                partition_max_bytes=spec.partition_max_bytes,
            )
        )
    forgotten_by_topic: dict[str, list[int]] = {}
    for tp in forgotten:
        forgotten_by_topic.setdefault(tp.topic, []).append(tp.partition)
    return make(
        m.FetchRequest,
        replica_id=replica_id,
        max_wait=ms(max_wait_ms),
        min_bytes=min_bytes,
        max_bytes=max_bytes,
        isolation_level=isolation_level,
        session_id=session_id,
        session_epoch=session_epoch,
        topics=tuple(
            m.FetchTopic(topic=topic, partitions=tuple(parts)) for topic, parts in by_topic.items()
        ),
        forgotten_topics_data=tuple(
            m.ForgottenTopic(topic=topic, partitions=tuple(parts))
            for topic, parts in forgotten_by_topic.items()
        ),
        rack_id="",
    )


def read_fetch(response: Any) -> dict[TopicPartition, FetchResult]:
    """Every partition's answer in a Fetch response."""
    results: dict[TopicPartition, FetchResult] = {}
    for topic in response.responses:
        for p in topic.partitions:
            diverging = getattr(p, "diverging_epoch", None)
            leader = getattr(p, "current_leader", None)
            aborted = getattr(p, "aborted_transactions", None) or ()
            results[TopicPartition(topic.topic, int(p.partition_index))] = FetchResult(
                error_code=error_code(p.error_code),
                high_watermark=int(p.high_watermark),
                last_stable_offset=int(p.last_stable_offset),
                log_start_offset=int(getattr(p, "log_start_offset", -1)),
                records=p.records or b"",
                diverging_epoch=None
                if diverging is None or int(diverging.epoch) < 0
                else (int(diverging.epoch), int(diverging.end_offset)),
                current_leader=None
                if leader is None or int(leader.leader_id) < 0
                else (int(leader.leader_id), int(leader.leader_epoch)),
                aborted_transactions=[(int(a.producer_id), int(a.first_offset)) for a in aborted],
            )
    return results
