"""The consumer protocol's bytes inside JoinGroup and SyncGroup, and the range assignor.

A ``consumer`` group's members describe themselves in JoinGroup's protocol metadata with a
ConsumerProtocolSubscription (version int16, topics [string], user_data nullable bytes;
v1+ append owned partitions, v2+ a generation, v3+ a rack: a reader of v0 ignores them, as
Kafka's do), and the leader hands each member a ConsumerProtocolAssignment (version int16,
[topic string, [partition int32]], user_data nullable bytes) in SyncGroup. Non-flexible,
big-endian, strings with an int16 length. This client writes version 0 of both.

``range_assign`` is Kafka's ``RangeAssignor`` (protocol name ``range``): per topic, the
subscribed members in member id order each get a contiguous run of partitions, the first
``partitions % members`` one more than the rest.

Pure: bytes in, values out.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping, Sequence
from typing import Final

from tidelog.coordinator.records import RecordFormatError, RecordReader
from tidelog.model import TopicPartition

PROTOCOL_TYPE: Final = "consumer"
RANGE: Final = "range"
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")


def _string(value: str) -> bytes:
    raw = value.encode()
    return _I16.pack(len(raw)) + raw


def encode_subscription(topics: Sequence[str]) -> bytes:
    """A version-0 ConsumerProtocolSubscription of ``topics`` without user data."""
    return b"".join(
        [_I16.pack(0), _I32.pack(len(topics)), *(_string(t) for t in topics), _I32.pack(-1)]
    )


def decode_subscription(raw: bytes) -> tuple[str, ...]:
    """The topics of a ConsumerProtocolSubscription of any version; empty when it cannot be
    read (such a member is assigned nothing)."""
    try:
        r = RecordReader(raw)
        r.i16()
        return tuple(r.string() for _ in range(r.count() or 0))
    except RecordFormatError:
        return ()


def encode_assignment(partitions: Sequence[TopicPartition]) -> bytes:
    """A version-0 ConsumerProtocolAssignment of ``partitions`` without user data."""
    by_topic: dict[str, list[int]] = {}
    for tp in sorted(partitions):
        by_topic.setdefault(tp.topic, []).append(tp.partition)
    out = [_I16.pack(0), _I32.pack(len(by_topic))]
    for topic, numbers in by_topic.items():
        out += [_string(topic), _I32.pack(len(numbers)), *(_I32.pack(p) for p in numbers)]
    out.append(_I32.pack(-1))
    return b"".join(out)


def decode_assignment(raw: bytes) -> tuple[TopicPartition, ...]:
    """The partitions of a ConsumerProtocolAssignment of any version, sorted; empty when it
    cannot be read (or is empty: a member the leader gave nothing)."""
    try:
        r = RecordReader(raw)
        r.i16()
        out = []
        for _ in range(r.count() or 0):
            topic = r.string()
            out += [TopicPartition(topic, r.i32()) for _ in range(r.count() or 0)]
        return tuple(sorted(out))
    except RecordFormatError:
        return ()


def range_assign(
    subscriptions: Mapping[str, Sequence[str]], partition_counts: Mapping[str, int]
) -> dict[str, tuple[TopicPartition, ...]]:
    """Kafka's RangeAssignor: member id -> its partitions, from each member's subscribed
    topics and each topic's partition count (topics without a count are not assigned).
    Every member is in the answer, possibly with nothing."""
    assigned: dict[str, list[TopicPartition]] = {m: [] for m in subscriptions}
    topics = sorted({t for ts in subscriptions.values() for t in ts})
    for topic in topics:
        count = partition_counts.get(topic)
        if count is None:
            continue
        members = sorted(m for m, ts in subscriptions.items() if topic in ts)
        per_member, extra = divmod(count, len(members))
        for i, member in enumerate(members):
            start = per_member * i + min(i, extra)
            length = per_member + (1 if i < extra else 0)
            assigned[member] += [TopicPartition(topic, p) for p in range(start, start + length)]
    return {m: tuple(tps) for m, tps in assigned.items()}
