"""Encoding record batches v2 (magic 2): the records section and the header that frames it.

The one producer-side encoder of tidelog: the client's ``build_batch`` (CLI, coordinators,
tests) and the Spark sink both write through it. Pure: bytes in, bytes out; compression,
if any, is the caller's (it compresses the records section before framing it). The
layout of a record (Kafka's ``DefaultRecord``; varints are zig-zag,
``tidelog.protocol.varint``)::

    length varint | attributes int8 | timestampDelta varlong | offsetDelta varint |
    keyLength varint, key | valueLength varint, value |
    headerCount varint, (keyLength varint, key utf-8, valueLength varint, value)*

Null key, value or header value: length -1. The 61-byte header is described in
``tidelog.protocol.records``.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import Final

import crc32c

from tidelog.protocol.records import BATCH_HEADER_SIZE, CRC_START, LOG_OVERHEAD, MAGIC_V2
from tidelog.protocol.varint import encode_varint

#: ``(key, value, headers)`` of one record; headers are ``(utf-8 key, value)`` pairs.
RecordFields = tuple[bytes | None, bytes | None, Sequence[tuple[str, bytes | None]]]

_HEADER: Final = struct.Struct(">qiibIhiqqqhii")
_CRC: Final = struct.Struct(">I")
_CRC_AT: Final = 17
#: Attributes bit 4: the batch belongs to a transaction (KIP-98).
TRANSACTIONAL_ATTRIBUTE: Final = 0x10
#: Attributes bit 5: a control batch (transaction markers).
CONTROL_ATTRIBUTE: Final = 0x20
#: Record attributes (unused, 0) followed by a timestampDelta of 0: the common case.
_NO_ATTRIBUTES_SAME_TIME: Final = b"\x00\x00"
_NO_ATTRIBUTES: Final = b"\x00"
_NULL: Final = encode_varint(-1)


def encode_records(
    records: Sequence[RecordFields], timestamp_deltas: Sequence[int] | None = None
) -> bytes:
    """The records section of a batch: ``records`` at offset deltas 0, 1, ..., each with its
    timestamp delta from the batch's base timestamp (None: all 0).

    The write path's hot loop (the Spark sink encodes every row here): short varints come
    from ``encode_varint``'s table, and a record's fields are joined once."""
    parts: list[bytes] = []
    append = parts.append
    varint = encode_varint
    null = _NULL
    for delta, (key, value, headers) in enumerate(records):
        fields = [
            _NO_ATTRIBUTES_SAME_TIME
            if timestamp_deltas is None
            else _NO_ATTRIBUTES + varint(timestamp_deltas[delta]),
            varint(delta),
            null if key is None else varint(len(key)) + key,
            null if value is None else varint(len(value)) + value,
            varint(len(headers)),
        ]
        for header_key, header_value in headers:
            raw_key = header_key.encode()
            fields.append(varint(len(raw_key)) + raw_key)
            fields.append(
                null if header_value is None else varint(len(header_value)) + header_value
            )
        body = b"".join(fields)
        append(varint(len(body)))
        append(body)
    return b"".join(parts)


def frame_batch(
    records_section: bytes,
    *,
    count: int,
    base_timestamp_ms: int,
    max_timestamp_ms: int,
    attributes: int = 0,
    base_offset: int = 0,
    partition_leader_epoch: int = -1,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
) -> bytes:
    """The whole batch: the header of ``count`` records (offset deltas ``0..count-1``) in
    front of ``records_section`` (as ``encode_records`` wrote it, compressed or not, which
    ``attributes`` bits 0-2 say), CRC-32C filled in."""
    header = bytearray(
        _HEADER.pack(
            base_offset,
            BATCH_HEADER_SIZE - LOG_OVERHEAD + len(records_section),
            partition_leader_epoch,
            MAGIC_V2,
            0,  # CRC, filled in below
            attributes,
            count - 1,
            base_timestamp_ms,
            max_timestamp_ms,
            producer_id,
            producer_epoch,
            base_sequence,
            count,
        )
    )
    crc = crc32c.crc32c(records_section, crc32c.crc32c(bytes(header[CRC_START:])))
    _CRC.pack_into(header, _CRC_AT, crc)
    return bytes(header) + records_section


def encode_batch(
    records: Sequence[RecordFields],
    timestamp_ms: int,
    *,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    transactional: bool = False,
) -> bytes:
    """One uncompressed batch of ``records`` (at least one), all stamped ``timestamp_ms``
    (CreateTime). An idempotent or transactional producer passes its producer id, epoch
    and the batch's first sequence."""
    return frame_batch(
        encode_records(records),
        count=len(records),
        base_timestamp_ms=timestamp_ms,
        max_timestamp_ms=timestamp_ms,
        attributes=TRANSACTIONAL_ATTRIBUTE if transactional else 0,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=base_sequence,
    )
