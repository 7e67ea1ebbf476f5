"""A small record batch v2 builder and a consumer-side record decoder.

For tidelog's own CLI, tests and the Spark source; the broker never decodes records
(DESIGN.md "Speed"). Record layout inside a batch (after the 61-byte header of
``tidelog.protocol.records``; varints are zigzag)::

    length varint | attributes int8 | timestampDelta varlong | offsetDelta varint |
    keyLength varint, key | valueLength varint, value |
    headerCount varint, (keyLength varint, key utf-8, valueLength varint, value)*

Null key/value/header value: length -1. Compressed batches compress everything after the
header; the decoder handles gzip, snappy (raw or xerial-framed, as the Java client writes),
lz4 (frame format) and zstd through ``cramjam``.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Final

import cramjam
import crc32c

from tidelog.protocol.records import (
    BATCH_HEADER_SIZE,
    CRC_START,
    LOG_OVERHEAD,
    MAGIC_V2,
    Compression,
    CorruptRecordBatchError,
    TimestampType,
    iter_batches,
    read_batch_size,
)

_HEADER = struct.Struct(">qiibIhiqqqhii")
_XERIAL_MAGIC: Final = b"\x82SNAPPY\x00"
_XERIAL_HEADER_SIZE: Final = 16
_I32 = struct.Struct(">i")
#: attributes bits 4 and 5.
_TRANSACTIONAL: Final = 0x10
_CONTROL: Final = 0x20
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


def _zigzag(value: int) -> int:
    return (value << 1) ^ (value >> 63)


def _varint(value: int) -> bytes:
    value = _zigzag(value) & 0xFFFFFFFFFFFFFFFF
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _nullable_bytes(value: bytes | None) -> bytes:
    if value is None:
        return _varint(-1)
    return _varint(len(value)) + value


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
    """One v2 batch holding ``records`` (at least one), CRC-32C filled in.

    ``is_control`` sets attributes bit 5 (a control batch: see ``build_control_batch``).

    Record timestamps default to ``base_timestamp_ms``, which defaults to the first record's
    timestamp or 0 (the caller supplies wall time: this module reads no clock).
    """
    if not records:
        raise ValueError("a batch holds at least one record")
    if base_timestamp_ms is None:
        base_timestamp_ms = next((r.timestamp_ms for r in records if r.timestamp_ms is not None), 0)
    body_parts = []
    max_timestamp = base_timestamp_ms
    for delta, record in enumerate(records):
        timestamp = base_timestamp_ms if record.timestamp_ms is None else record.timestamp_ms
        max_timestamp = max(max_timestamp, timestamp)
        parts = [
            b"\x00",  # record attributes (unused)
            _varint(timestamp - base_timestamp_ms),
            _varint(delta),
            _nullable_bytes(record.key),
            _nullable_bytes(record.value),
            _varint(len(record.headers)),
        ]
        for header_key, header_value in record.headers:
            parts.append(_nullable_bytes(header_key.encode()))
            parts.append(_nullable_bytes(header_value))
        encoded = b"".join(parts)
        body_parts.append(_varint(len(encoded)))
        body_parts.append(encoded)
    body = _compress(compression, b"".join(body_parts))
    attributes = (
        int(compression)
        | (int(timestamp_type) << 3)
        | (_TRANSACTIONAL if is_transactional else 0)
        | (_CONTROL if is_control else 0)
    )
    header = bytearray(
        _HEADER.pack(
            base_offset,
            BATCH_HEADER_SIZE - LOG_OVERHEAD + len(body),
            partition_leader_epoch,
            MAGIC_V2,
            0,
            attributes,
            len(records) - 1,
            base_timestamp_ms,
            max_timestamp,
            producer_id,
            producer_epoch,
            base_sequence,
            len(records),
        )
    )
    batch = header + body
    struct.pack_into(">I", batch, 17, crc32c.crc32c(bytes(batch[CRC_START:])))
    return bytes(batch)


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


def _decompress(codec: int, data: bytes) -> bytes:
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
        value = 0
        shift = 0
        buf = self.buf
        while True:
            if self.pos >= len(buf):
                raise CorruptRecordBatchError("record is truncated")
            byte = buf[self.pos]
            self.pos += 1
            value |= (byte & 0x7F) << shift
            if not byte & 0x80:
                return (value >> 1) ^ -(value & 1)
            shift += 7
            if shift > 63:
                raise CorruptRecordBatchError("record varint is too long")

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


def decode_records(
    buf: bytes, *, verify_crc: bool = True, include_control: bool = False
) -> Iterator[ConsumerRecord]:
    """The records of whole v2 batches (as a Fetch response carries them).

    A truncated batch at the end (a broker may cut one at ``max_bytes``) is ignored.
    Control batches (transaction markers) are skipped unless ``include_control``.
    """
    end = 0
    while end < len(buf):
        size = read_batch_size(buf, end)
        if size is None or end + size > len(buf):
            break
        end += size
    view = buf[:end] if end != len(buf) else buf
    for pos, header in iter_batches(view, verify_crc=verify_crc):
        if header.is_control and not include_control:
            continue
        payload = bytes(view[pos + BATCH_HEADER_SIZE : pos + header.size])
        try:
            data = _decompress(header.compression, payload)
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
                headers.append(
                    ((header_key or b"").decode(errors="replace"), cursor.nullable_bytes())
                )
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
