"""Hand-written encoders for the hot responses: Produce and Fetch.

kio encodes in pure Python (~50 µs per small response); these write the same bytes in a
few µs, and are tested byte-for-byte against kio over Hypothesis-generated responses
(``tests/unit/protocol/test_responses.py``). Inputs are plain frozen dataclasses rather than
kio entities so the server builds no kio objects on the hot path.

Fetch responses may carry records as an opaque ``RecordsRegion`` (anything with a
``length``; storage's ``FetchSlice`` is one): the encoder then returns the frame in pieces,
``bytes`` chunks interleaved with the region objects themselves, and the server sends each
region with ``os.sendfile``. The size prefix and every length field already count the
regions' lengths, so the region must deliver exactly ``length`` bytes.

Wire rules kept here (PROTOCOL_NOTES.md):

- Empty records are written as an empty byte string, never null (kafka-python crashes and
  librdkafka stops reporting end of partition on null).
- Tagged fields (flexible versions) are written only when they differ from their default,
  in tag order, exactly as kio does: Fetch ``diverging_epoch`` (0), ``current_leader`` (1),
  ``snapshot_id`` (2), ``node_endpoints`` (top level, 0, v16+); Produce ``current_leader``
  (0, v10+), ``node_endpoints`` (top level, 0, v10+).
- Response header v0 below the first flexible version (Produce v9, Fetch v12), v1 from it.
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Final, Protocol, runtime_checkable

from tidelog.protocol.field_writers import array_length, nullable_string, string, tagged, uvarint

PRODUCE_FIRST_FLEXIBLE: Final = 9
FETCH_FIRST_FLEXIBLE: Final = 12
#: Records at least this large are returned as their own chunk instead of being copied.
INLINE_RECORDS_MAX: Final = 32 * 1024

_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
_SIZE_CORRELATION = struct.Struct(">ii")
_EMPTY_TAGS: Final = b"\x00"
_ZERO_UUID: Final = bytes(16)
_NULL_LEGACY_ARRAY: Final = b"\xff\xff\xff\xff"
_NULL_COMPACT: Final = b"\x00"

# Produce partition: index, error_code, base_offset, log_append_time, log_start_offset.
_PRODUCE_PARTITION = struct.Struct(">ihqqq")
# Fetch partition: partition_index, error_code, high_watermark, last_stable_offset,
# log_start_offset.
_FETCH_PARTITION = struct.Struct(">ihqqq")
_FETCH_TOP = struct.Struct(">ihi")  # throttle_time_ms, error_code, session_id
_EPOCH_END_OFFSET = struct.Struct(">iqb")  # epoch, end_offset, empty tags
_LEADER_ID_AND_EPOCH = struct.Struct(">iib")  # leader_id, leader_epoch, empty tags
_SNAPSHOT_ID = struct.Struct(">qib")  # end_offset, epoch, empty tags
_ABORTED = struct.Struct(">qq")


@runtime_checkable
class RecordsRegion(Protocol):
    """Records the encoder does not see: ``length`` bytes the server sends itself."""

    @property
    def length(self) -> int: ...


@dataclass(frozen=True, slots=True)
class NodeEndpoint:
    """A broker the client should talk to (KIP-951 leader discovery)."""

    node_id: int
    host: str
    port: int
    rack: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class ProducePartitionResponse:
    index: int
    error_code: int = 0
    base_offset: int = -1
    log_append_time_ms: int = -1
    log_start_offset: int = -1
    #: (batch_index, batch_index_error_message), v8+.
    record_errors: Sequence[tuple[int, str | None]] = ()
    error_message: str | None = None
    #: (leader_id, leader_epoch) when the leader moved, v10+.
    current_leader: tuple[int, int] = (-1, -1)


@dataclass(frozen=True, slots=True, kw_only=True)
class ProduceTopicResponse:
    name: str = ""
    #: Used instead of ``name`` from v13.
    topic_id: uuid.UUID | None = None
    partitions: Sequence[ProducePartitionResponse] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class FetchPartitionResponse:
    partition_index: int
    error_code: int = 0
    high_watermark: int = -1
    last_stable_offset: int = -1
    log_start_offset: int = -1
    #: (epoch, end_offset) of the largest epoch below the diverging point, v12+.
    diverging_epoch: tuple[int, int] = (-1, -1)
    #: (leader_id, leader_epoch), v12+.
    current_leader: tuple[int, int] = (-1, -1)
    #: (end_offset, epoch), v12+.
    snapshot_id: tuple[int, int] = (-1, -1)
    #: (producer_id, first_offset); None is written as a null array.
    aborted_transactions: Sequence[tuple[int, int]] | None = None
    preferred_read_replica: int = -1
    records: bytes | memoryview | RecordsRegion = b""


@dataclass(frozen=True, slots=True, kw_only=True)
class FetchTopicResponse:
    topic: str = ""
    #: Used instead of ``topic`` from v13.
    topic_id: uuid.UUID | None = None
    partitions: Sequence[FetchPartitionResponse] = ()


def _node_endpoints(endpoints: Sequence[NodeEndpoint]) -> bytes:
    parts = [uvarint(len(endpoints) + 1)]
    for node in endpoints:
        parts.append(_I32.pack(node.node_id))
        parts.append(string(node.host, True))
        parts.append(_I32.pack(node.port))
        parts.append(nullable_string(node.rack, True))
        parts.append(_EMPTY_TAGS)
    return b"".join(parts)


def encode_produce_response(
    correlation_id: int,
    version: int,
    topics: Sequence[ProduceTopicResponse],
    *,
    throttle_time_ms: int = 0,
    node_endpoints: Sequence[NodeEndpoint] = (),
) -> bytes:
    """The whole Produce response frame (size prefix included), versions 3-13."""
    if not 3 <= version <= 13:
        raise ValueError(f"Produce v{version} is not supported by the fast encoder")
    flexible = version >= PRODUCE_FIRST_FLEXIBLE
    parts: list[bytes] = [b"", _EMPTY_TAGS] if flexible else [b""]
    append = parts.append
    append(array_length(len(topics), flexible))
    for topic in topics:
        if version >= 13:
            append(topic.topic_id.bytes if topic.topic_id is not None else _ZERO_UUID)
        else:
            append(string(topic.name, flexible))
        append(array_length(len(topic.partitions), flexible))
        for p in topic.partitions:
            _append_produce_partition(p, version, flexible, append)
        if flexible:
            append(_EMPTY_TAGS)
    append(_I32.pack(throttle_time_ms))
    if flexible:
        if version >= 10 and node_endpoints:
            append(b"\x01")
            append(tagged(0, _node_endpoints(node_endpoints)))
        else:
            append(_EMPTY_TAGS)
    body = b"".join(parts)
    return _SIZE_CORRELATION.pack(len(body) + 4, correlation_id) + body


def _append_produce_partition(
    p: ProducePartitionResponse, version: int, flexible: bool, append: Callable[[bytes], None]
) -> None:
    """One Produce partition response: offsets, record errors and error message (v8+),
    and the KIP-951 current leader tag (v10+)."""
    fields = _PRODUCE_PARTITION.pack(
        p.index, p.error_code, p.base_offset, p.log_append_time_ms, p.log_start_offset
    )
    append(fields if version >= 5 else fields[:-8])
    if version >= 8:
        append(array_length(len(p.record_errors), flexible))
        for batch_index, message in p.record_errors:
            append(_I32.pack(batch_index))
            append(nullable_string(message, flexible))
            if flexible:
                append(_EMPTY_TAGS)
        append(nullable_string(p.error_message, flexible))
    if flexible:
        if version >= 10 and p.current_leader != (-1, -1):
            append(b"\x01")
            append(tagged(0, _LEADER_ID_AND_EPOCH.pack(*p.current_leader, 0)))
        else:
            append(_EMPTY_TAGS)


def encode_fetch_response(
    correlation_id: int,
    version: int,
    topics: Sequence[FetchTopicResponse],
    *,
    throttle_time_ms: int = 0,
    error_code: int = 0,
    session_id: int = 0,
    node_endpoints: Sequence[NodeEndpoint] = (),
) -> list[bytes | RecordsRegion]:
    """The whole Fetch response frame, versions 4-18, as chunks to write in order.

    ``bytes`` chunks are written as they are; any other chunk is one of the partitions'
    ``RecordsRegion`` objects, to be sent with ``os.sendfile``. The first chunk starts with
    the size prefix. ``b"".join`` of the chunks is the frame when no region is used.
    """
    if not 4 <= version <= 18:
        raise ValueError(f"Fetch v{version} is not supported by the fast encoder")
    flexible = version >= FETCH_FIRST_FLEXIBLE
    # ``parts`` collects the bytes of the chunk being built; a large or opaque records
    # section ends it (``_append_fetch_records``) and becomes a chunk of its own.
    chunks: list[bytes | RecordsRegion] = []
    parts: list[bytes] = [b"", _EMPTY_TAGS] if flexible else [b""]
    append = parts.append
    top = _FETCH_TOP.pack(throttle_time_ms, error_code, session_id)
    append(top if version >= 7 else top[:4])
    append(array_length(len(topics), flexible))
    total = 0  # bytes in finished chunks (regions included)
    for topic in topics:
        if version >= 13:
            append(topic.topic_id.bytes if topic.topic_id is not None else _ZERO_UUID)
        else:
            append(string(topic.topic, flexible))
        append(array_length(len(topic.partitions), flexible))
        for p in topic.partitions:
            _append_fetch_partition_head(p, version, flexible, append)
            total += _append_fetch_records(p.records, flexible, parts, chunks)
            if flexible:
                _append_fetch_partition_tags(p, parts)
        if flexible:
            append(_EMPTY_TAGS)
    if flexible:
        if version >= 16 and node_endpoints:
            append(b"\x01")
            append(tagged(0, _node_endpoints(node_endpoints)))
        else:
            append(_EMPTY_TAGS)
    return _fetch_frame(correlation_id, chunks, b"".join(parts), total)


def _append_fetch_partition_head(
    p: FetchPartitionResponse, version: int, flexible: bool, append: Callable[[bytes], None]
) -> None:
    """A Fetch partition's fields before its records: offsets, aborted transactions and
    the preferred read replica."""
    fields = _FETCH_PARTITION.pack(
        p.partition_index, p.error_code, p.high_watermark, p.last_stable_offset, p.log_start_offset
    )
    append(fields if version >= 5 else fields[:-8])
    aborted = p.aborted_transactions
    if aborted is None:
        append(_NULL_COMPACT if flexible else _NULL_LEGACY_ARRAY)
    else:
        append(array_length(len(aborted), flexible))
        for producer_id, first_offset in aborted:
            append(_ABORTED.pack(producer_id, first_offset))
            if flexible:
                append(_EMPTY_TAGS)
    if version >= 11:
        append(_I32.pack(p.preferred_read_replica))


def _append_fetch_records(
    records: bytes | memoryview | RecordsRegion,
    flexible: bool,
    parts: list[bytes],
    chunks: list[bytes | RecordsRegion],
) -> int:
    """Append a partition's records with their length; returns how many bytes left
    ``parts`` for ``chunks`` (0 when the records were copied inline).

    Records of ``INLINE_RECORDS_MAX`` bytes or more, and every ``RecordsRegion``, close the
    chunk being built and follow it as a chunk of their own, so they are never copied.
    """
    if isinstance(records, bytes | bytearray | memoryview):
        size = len(records)
        parts.append(uvarint(size + 1) if flexible else _I32.pack(size))
        if size < INLINE_RECORDS_MAX:
            parts.append(bytes(records) if not isinstance(records, bytes) else records)
            return 0
        chunk = b"".join(parts)
        chunks.append(chunk)
        chunks.append(bytes(records))
    else:
        size = records.length
        parts.append(uvarint(size + 1) if flexible else _I32.pack(size))
        chunk = b"".join(parts)
        chunks.append(chunk)
        chunks.append(records)
    parts.clear()
    return len(chunk) + size


def _append_fetch_partition_tags(p: FetchPartitionResponse, parts: list[bytes]) -> None:
    """A flexible Fetch partition's tagged fields, in tag order, only those not default."""
    tags: list[bytes] = []
    if p.diverging_epoch != (-1, -1):
        tags.append(tagged(0, _EPOCH_END_OFFSET.pack(*p.diverging_epoch, 0)))
    if p.current_leader != (-1, -1):
        tags.append(tagged(1, _LEADER_ID_AND_EPOCH.pack(*p.current_leader, 0)))
    if p.snapshot_id != (-1, -1):
        tags.append(tagged(2, _SNAPSHOT_ID.pack(*p.snapshot_id, 0)))
    if tags:
        parts.append(uvarint(len(tags)))
        parts.extend(tags)
    else:
        parts.append(_EMPTY_TAGS)


def _fetch_frame(
    correlation_id: int, chunks: list[bytes | RecordsRegion], tail: bytes, total: int
) -> list[bytes | RecordsRegion]:
    """Prefix the first chunk with the size and correlation id; ``total`` counts the
    finished ``chunks``, ``tail`` is the rest of the body."""
    if chunks:
        if tail:
            chunks.append(tail)
            total += len(tail)
        head = chunks[0]
        assert isinstance(head, bytes)
        chunks[0] = _SIZE_CORRELATION.pack(total + 4, correlation_id) + head
        return chunks
    return [_SIZE_CORRELATION.pack(len(tail) + 4, correlation_id) + tail]


def with_fetch_throttle(first_chunk: bytes, version: int, throttle_time_ms: int) -> bytes:
    """``encode_fetch_response``'s first chunk with ``throttle_time_ms`` written in: the
    field opens the body (after the size, the correlation id and, flexible, the header's
    empty tags), so a quota decided after the answer was built (its size counts against
    ``consumer_byte_rate``) is set without encoding it again."""
    offset = _SIZE_CORRELATION.size + (1 if version >= FETCH_FIRST_FLEXIBLE else 0)
    out = bytearray(first_chunk)
    _I32.pack_into(out, offset, throttle_time_ms)
    return bytes(out)
