"""Records as a client sees them: ``Record`` in, ``build_batch`` (with compression) and
transaction markers out, and ``decode_records`` of what a Fetch returns.

For tidelog's own CLI, coordinators, tests and the Spark source; the broker never decodes
records (docs/design.md "Speed"). The record layout and the one encoder are
``tidelog.protocol.batch_builder``. Compressed batches compress everything after the
header; the decoder handles gzip, snappy (raw or xerial-framed, as the Java client writes),
lz4 (frame format) and zstd through ``cramjam``.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Final

import cramjam

from tidelog.protocol.batch_builder import (
    CONTROL_ATTRIBUTE,
    TRANSACTIONAL_ATTRIBUTE,
    encode_records,
    frame_batch,
)
from tidelog.protocol.records import (
    BATCH_HEADER_SIZE,
    BatchHeader,
    Compression,
    CorruptRecordBatchError,
    TimestampType,
    iter_batches,
    read_batch_size,
)
from tidelog.protocol.varint import VarintError, read_varint

_XERIAL_MAGIC: Final = b"\x82SNAPPY\x00"
_XERIAL_HEADER_SIZE: Final = 16
_I32 = struct.Struct(">i")
#: ControlRecordType key (version int16, type int16) and EndTransactionMarker value
#: (version int16, coordinator epoch int32), both version 0.
_CONTROL_KEY = struct.Struct(">hh")
_END_TXN_VALUE = struct.Struct(">hi")
CONTROL_TYPE_ABORT: Final = 0
CONTROL_TYPE_COMMIT: Final = 1


@dataclass(frozen=True, slots=True)
class Record:
    """A record to put in a batch. ``timestamp_ms`` None = the batch's base timestamp."""

    value: bytes | None
    key: bytes | None = None
    headers: Sequence[tuple[str, bytes | None]] = ()
    timestamp_ms: int | None = None


@dataclass(frozen=True, slots=True)
class ConsumerRecord:
    """A decoded record with its position in the log."""

    offset: int
    timestamp_ms: int
    timestamp_type: TimestampType
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...]
    leader_epoch: int


def _compress(codec: Compression, data: bytes) -> bytes:
    if codec == Compression.NONE:
        return data
    if codec == Compression.GZIP:
        return bytes(cramjam.gzip.compress(data))
    if codec == Compression.SNAPPY:
        return bytes(cramjam.snappy.compress_raw(data))
    if codec == Compression.LZ4:
        return bytes(cramjam.lz4.compress(data))
    if codec == Compression.ZSTD:
        return bytes(cramjam.zstd.compress(data))
    raise ValueError(f"unknown compression {codec}")


def build_batch(
    records: Sequence[Record],
    *,
    base_offset: int = 0,
    base_timestamp_ms: int | None = None,
    compression: Compression = Compression.NONE,
    timestamp_type: TimestampType = TimestampType.CREATE_TIME,
    partition_leader_epoch: int = -1,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    is_transactional: bool = False,
    is_control: bool = False,
) -> bytes:
    """One v2 batch holding ``records`` (at least one), CRC-32C filled in
    (``tidelog.protocol.batch_builder`` encodes it).

    ``is_control`` sets attributes bit 5 (a control batch: see ``build_control_batch``).

    Record timestamps default to ``base_timestamp_ms``, which defaults to the first record's
    timestamp or 0 (the caller supplies wall time: this module reads no clock).
    """
    if not records:
        raise ValueError("a batch holds at least one record")
    if base_timestamp_ms is None:
        base_timestamp_ms = next((r.timestamp_ms for r in records if r.timestamp_ms is not None), 0)
    deltas = [0 if r.timestamp_ms is None else r.timestamp_ms - base_timestamp_ms for r in records]
    body = _compress(
        compression,
        encode_records(
            [(r.key, r.value, r.headers) for r in records], deltas if any(deltas) else None
        ),
    )
    attributes = (
        int(compression)
        | (int(timestamp_type) << 3)
        | (TRANSACTIONAL_ATTRIBUTE if is_transactional else 0)
        | (CONTROL_ATTRIBUTE if is_control else 0)
    )
    return frame_batch(
        body,
        count=len(records),
        base_timestamp_ms=base_timestamp_ms,
        max_timestamp_ms=base_timestamp_ms + max(0, *deltas),
        attributes=attributes,
        base_offset=base_offset,
        partition_leader_epoch=partition_leader_epoch,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=base_sequence,
    )


def build_control_batch(
    producer_id: int,
    producer_epoch: int,
    commit: bool,
    coordinator_epoch: int,
    timestamp_ms: int,
    *,
    base_offset: int = 0,
    partition_leader_epoch: int = -1,
) -> bytes:
    """A transaction marker (KIP-98, Kafka's ``EndTransactionMarker``): a control batch
    (attributes transactional | control, never compressed, base sequence -1) of the
    transaction's producer id and epoch holding one record: key = version 0 + type (0 ABORT,
    1 COMMIT), value = version 0 + ``coordinator_epoch``."""
    record = Record(
        key=_CONTROL_KEY.pack(0, CONTROL_TYPE_COMMIT if commit else CONTROL_TYPE_ABORT),
        value=_END_TXN_VALUE.pack(0, coordinator_epoch),
        timestamp_ms=timestamp_ms,
    )
    return build_batch(
        [record],
        base_offset=base_offset,
        base_timestamp_ms=timestamp_ms,
        partition_leader_epoch=partition_leader_epoch,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=-1,
        is_transactional=True,
        is_control=True,
    )


def decompress(codec: int, data: bytes) -> bytes:
    """The records section of a batch compressed with ``codec`` (attributes bits 0-2)."""
    if codec == Compression.NONE:
        return data
    if codec == Compression.GZIP:
        return bytes(cramjam.gzip.decompress(data))
    if codec == Compression.SNAPPY:
        if data.startswith(_XERIAL_MAGIC):
            # snappy-java's framing: 16-byte header, then (int32 size, raw block)*.
            out = []
            pos = _XERIAL_HEADER_SIZE
            while pos < len(data):
                (size,) = _I32.unpack_from(data, pos)
                pos += 4
                out.append(bytes(cramjam.snappy.decompress_raw(data[pos : pos + size])))
                pos += size
            return b"".join(out)
        return bytes(cramjam.snappy.decompress_raw(data))
    if codec == Compression.LZ4:
        return bytes(cramjam.lz4.decompress(data))
    if codec == Compression.ZSTD:
        return bytes(cramjam.zstd.decompress(data))
    raise CorruptRecordBatchError(f"unknown compression codec {codec}")


class _Cursor:
    __slots__ = ("buf", "pos")

    def __init__(self, buf: bytes) -> None:
        self.buf = buf
        self.pos = 0

    def varint(self) -> int:
        try:
            value, self.pos = read_varint(self.buf, self.pos, len(self.buf))
        except VarintError as exc:
            raise CorruptRecordBatchError(f"record varint: {exc}") from exc
        return value

    def nullable_bytes(self) -> bytes | None:
        length = self.varint()
        if length < 0:
            return None
        end = self.pos + length
        if end > len(self.buf):
            raise CorruptRecordBatchError("record field runs past the batch")
        value = self.buf[self.pos : end]
        self.pos = end
        return value


def whole_batches(buf: bytes) -> bytes:
    """``buf`` without a truncated batch at its end (a broker may cut one at ``max_bytes``)."""
    end = 0
    while end < len(buf):
        size = read_batch_size(buf, end)
        if size is None or end + size > len(buf):
            break
        end += size
    return buf[:end] if end != len(buf) else buf


def decode_records(
    buf: bytes, *, verify_crc: bool = True, include_control: bool = False
) -> Iterator[ConsumerRecord]:
    """The records of whole v2 batches (as a Fetch response carries them).

    A truncated batch at the end (a broker may cut one at ``max_bytes``) is ignored.
    Control batches (transaction markers) are skipped unless ``include_control``.
    """
    view = whole_batches(buf)
    for pos, header in iter_batches(view, verify_crc=verify_crc):
        if header.is_control and not include_control:
            continue
        yield from batch_records(view, pos, header)


def batch_records(buf: bytes, pos: int, header: BatchHeader) -> Iterator[ConsumerRecord]:
    """The records of the batch at ``buf[pos:]`` whose header is ``header``, decompressed."""
    payload = bytes(buf[pos + BATCH_HEADER_SIZE : pos + header.size])
    try:
        data = decompress(header.compression, payload)
    except CorruptRecordBatchError:
        raise
    except Exception as exc:  # cramjam's DecompressionError and friends
        raise CorruptRecordBatchError(
            f"batch at offset {header.base_offset} does not decompress: {exc}"
        ) from exc
    cursor = _Cursor(data)
    timestamp_type = header.timestamp_type
    for _ in range(header.records_count):
        length = cursor.varint()
        record_end = cursor.pos + length
        cursor.pos += 1  # attributes
        timestamp_delta = cursor.varint()
        offset_delta = cursor.varint()
        key = cursor.nullable_bytes()
        value = cursor.nullable_bytes()
        headers = []
        for _h in range(cursor.varint()):
            header_key = cursor.nullable_bytes()
            headers.append(((header_key or b"").decode(errors="replace"), cursor.nullable_bytes()))
        if cursor.pos != record_end:
            raise CorruptRecordBatchError(
                f"record at offset {header.base_offset + offset_delta} declares {length} "
                "bytes but its fields take a different size"
            )
        yield ConsumerRecord(
            offset=header.base_offset + offset_delta,
            timestamp_ms=header.max_timestamp
            if timestamp_type == TimestampType.LOG_APPEND_TIME
            else header.base_timestamp + timestamp_delta,
            timestamp_type=timestamp_type,
            key=key,
            value=value,
            headers=tuple(headers),
            leader_epoch=header.partition_leader_epoch,
        )
