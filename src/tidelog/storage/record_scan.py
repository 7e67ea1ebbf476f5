"""Record-level reading of ONE batch, for ListOffsets by timestamp (never on the hot path).

Decodes the v2 record framing far enough to get each record's offset and timestamp:
``length varint, attributes int8, timestampDelta varlong, offsetDelta varint, ...``
(KIP-98). Compressed batches are decompressed with cramjam: gzip, snappy (raw or Kafka's
xerial framing), lz4 (frame format) and zstd.
"""

from __future__ import annotations

import struct
from typing import Final

import cramjam

from tidelog.protocol.records import BATCH_HEADER_SIZE, Compression, parse_header

_XERIAL_MAGIC: Final = b"\x82SNAPPY\x00"
_XERIAL_HEADER: Final = 16
_INT32: Final = struct.Struct(">i")


def _varint(buf: bytes, pos: int) -> tuple[int, int]:
    """Zig-zag varint at ``pos`` -> (value, next position)."""
    shift = 0
    raw = 0
    while True:
        byte = buf[pos]
        pos += 1
        raw |= (byte & 0x7F) << shift
        if not byte & 0x80:
            break
        shift += 7
        if shift > 63:
            raise ValueError("varint too long")
    return (raw >> 1) ^ -(raw & 1), pos


def _unxerial(data: bytes) -> bytes:
    out = bytearray()
    pos = _XERIAL_HEADER
    while pos < len(data):
        (length,) = _INT32.unpack_from(data, pos)
        pos += 4
        out += bytes(cramjam.snappy.decompress_raw(data[pos : pos + length]))
        pos += length
    return bytes(out)


def decompress(codec: int, data: bytes) -> bytes:
    if codec == Compression.NONE:
        return data
    if codec == Compression.GZIP:
        return bytes(cramjam.gzip.decompress(data))
    if codec == Compression.SNAPPY:
        if data.startswith(_XERIAL_MAGIC):
            return _unxerial(data)
        return bytes(cramjam.snappy.decompress_raw(data))
    if codec == Compression.LZ4:
        return bytes(cramjam.lz4.decompress(data))
    if codec == Compression.ZSTD:
        return bytes(cramjam.zstd.decompress(data))
    raise ValueError(f"unknown compression codec {codec}")


def record_offsets_and_timestamps(batch: bytes) -> list[tuple[int, int]]:
    """``[(offset, timestamp)]`` of every record in one whole batch."""
    header = parse_header(batch)
    body = decompress(header.compression, batch[BATCH_HEADER_SIZE : header.size])
    result: list[tuple[int, int]] = []
    pos = 0
    log_append_time = header.timestamp_type == 1
    for _ in range(header.records_count):
        length, pos = _varint(body, pos)
        start = pos
        pos += 1  # attributes
        ts_delta, pos = _varint(body, pos)
        offset_delta, pos = _varint(body, pos)
        timestamp = header.max_timestamp if log_append_time else header.base_timestamp + ts_delta
        result.append((header.base_offset + offset_delta, timestamp))
        pos = start + length
    return result


def first_record_at_or_after(
    batch: bytes, timestamp_ms: int, *, min_offset: int = 0
) -> tuple[int, int] | None:
    """``(offset, timestamp)`` of the first record (offset >= ``min_offset``) with
    timestamp >= ``timestamp_ms``, or None."""
    for offset, timestamp in record_offsets_and_timestamps(batch):
        if offset >= min_offset and timestamp >= timestamp_ms:
            return offset, timestamp
    return None
