"""Fetch from one broker: the request for a version and each partition's answer.

With ``READ_COMMITTED`` (KIP-98) the broker returns records below the last stable offset
only, and each result carries the aborted transactions overlapping what was returned.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from tidelog.client.wire import error_code, make, ms, schema_module
from tidelog.errors import ErrorCode
from tidelog.model import TopicPartition
from tidelog.protocol.apis import ApiKey
from tidelog.protocol.codec import EncodedRequest
from tidelog.protocol.field_writers import array_length, string

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


@dataclass(frozen=True, slots=True)
class FetchTop:
    """A Fetch request's top-level fields (the helper's input)."""

    max_wait_ms: int
    min_bytes: int
    max_bytes: int
    replica_id: int
    isolation_level: int
    session_id: int = 0
    session_epoch: int = -1


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
    partitions the session forgets). Version ``HAND_WRITTEN_FETCH_VERSION`` comes back
    encoded (an ``EncodedRequest``), the others as kio entities."""
    top = FetchTop(
        max_wait_ms, min_bytes, max_bytes, replica_id, isolation_level, session_id, session_epoch
    )
    if version == HAND_WRITTEN_FETCH_VERSION:
        body = _fetch_v12_body(partitions, top, forgotten)
        return EncodedRequest(ApiKey.FETCH, version, body)
    return fetch_request_entity(version, partitions, top, forgotten)


def fetch_request_entity(
    version: int,
    partitions: Mapping[TopicPartition, FetchRequestPartition],
    top: FetchTop,
    forgotten: Iterable[TopicPartition] = (),
) -> Any:
    """``fetch_request`` as kio entities, at any version (topics in first-seen order)."""
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
    forgotten_by_topic = _forgotten_by_topic(forgotten)
    return make(
        m.FetchRequest,
        replica_id=top.replica_id,
        max_wait=ms(top.max_wait_ms),
        min_bytes=top.min_bytes,
        max_bytes=top.max_bytes,
        isolation_level=top.isolation_level,
        session_id=top.session_id,
        session_epoch=top.session_epoch,
        topics=tuple(
            m.FetchTopic(topic=topic, partitions=tuple(parts)) for topic, parts in by_topic.items()
        ),
        forgotten_topics_data=tuple(
            m.ForgottenTopic(topic=topic, partitions=tuple(parts))
            for topic, parts in forgotten_by_topic.items()
        ),
        rack_id="",
    )


def _forgotten_by_topic(forgotten: Iterable[TopicPartition]) -> dict[str, list[int]]:
    """The partitions a session forgets, by topic in first-seen order."""
    by_topic: dict[str, list[int]] = {}
    for tp in forgotten:
        by_topic.setdefault(tp.topic, []).append(tp.partition)
    return by_topic


#: The Fetch version ``fetch_request`` writes by hand: the one our followers speak
#: (``Client``'s preferred versions), flexible, topics by name.
HAND_WRITTEN_FETCH_VERSION: Final = 12

_FETCH_TOP = struct.Struct(">iiiibii")  # replica, max wait, min/max bytes, isolation, session
_FETCH_PARTITION = struct.Struct(">iiqiqib")  # ... partition max bytes, empty tags
_I32 = struct.Struct(">i")
_EMPTY_RACK_AND_TAGS: Final = b"\x01\x00"  # rack_id "" (compact), no tagged fields


def _fetch_v12_body(
    partitions: Mapping[TopicPartition, FetchRequestPartition],
    top: FetchTop,
    forgotten: Iterable[TopicPartition],
) -> bytes:
    """Fetch v12's body, byte for byte what kio writes for the same request
    (``tests/unit/client/test_fetch_request.py``), in a few µs instead of ~100: a follower
    sends one per round. Topics in first-seen order, as ``fetch_request`` groups them."""
    by_topic: dict[str, list[bytes]] = {}
    for tp, spec in partitions.items():
        by_topic.setdefault(tp.topic, []).append(
            _FETCH_PARTITION.pack(
                tp.partition,
                spec.current_leader_epoch,
                spec.fetch_offset,
                spec.last_fetched_epoch,
                spec.log_start_offset,
                spec.partition_max_bytes,
                0,
            )
        )
    parts = [
        _FETCH_TOP.pack(
            top.replica_id,
            top.max_wait_ms,
            top.min_bytes,
            top.max_bytes,
            top.isolation_level,
            top.session_id,
            top.session_epoch,
        ),
        array_length(len(by_topic), True),
    ]
    for topic, entries in by_topic.items():
        parts += (string(topic, True), array_length(len(entries), True), *entries, b"\x00")
    gone = _forgotten_by_topic(forgotten)
    parts.append(array_length(len(gone), True))
    for topic, numbers in gone.items():
        parts += (string(topic, True), array_length(len(numbers), True))
        parts += (_I32.pack(n) for n in numbers)
        parts.append(b"\x00")
    parts.append(_EMPTY_RACK_AND_TAGS)
    return b"".join(parts)


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
