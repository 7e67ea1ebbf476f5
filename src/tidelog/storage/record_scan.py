"""Record-level reading of ONE batch: ListOffsets by timestamp, the leader's validation of
compressed batches (``tidelog.storage.log_validator``) and ``tidelog dump-log``. Never on
the path of uncompressed produce or of fetch.

The records of a v2 batch (KIP-98; Kafka's ``DefaultRecord``), after the 61-byte header and
after decompression (``tidelog.storage.compression``); varints are zig-zag::

    length varint | attributes int8 | timestampDelta varlong | offsetDelta varint |
    keyLength varint, key | valueLength varint, value |
    headerCount varint, (keyLength varint, key, valueLength varint, value)*

Rules a well-formed body keeps (Kafka's ``DefaultRecord.readFrom`` and the batch's record
iterator): exactly ``recordsCount`` records, each exactly ``length`` bytes long (its fields
end where it ends), key and value lengths -1 (null) or within the record, a header count
>= 0, header keys never null, varints at most 10 bytes, and no bytes after the last record.
A body that breaks one raises ``RecordFormatError`` naming the record and its byte.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Final, NamedTuple

from tidelog.protocol.records import BATCH_HEADER_SIZE, parse_header
from tidelog.protocol.varint import VarintError, append_varint, read_varint
from tidelog.storage.compression import decompress

#: ListOffsets reads batches that were validated on append: bounded only against damage.
_SCAN_MAX_BYTES: Final = 1 << 30


class RecordFormatError(ValueError):
    """A batch body breaks the record framing (see the module docstring)."""


class DecodedRecord(NamedTuple):
    """One record of a batch, its deltas relative to the batch header."""

    attributes: int
    timestamp_delta: int
    offset_delta: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[bytes, bytes | None], ...]


def _skip(pos: int, size: int, end: int) -> int:
    """Past a key, value or header value of ``size`` bytes (-1: null)."""
    if size < -1:
        raise RecordFormatError(f"a field has length {size}")
    if size > 0:
        pos += size
        if pos > end:
            raise RecordFormatError("a field runs past the record's end")
    return pos


def _record_start(body: bytes, pos: int, index: int, count: int) -> tuple[int, int]:
    """The length varint of record ``index`` at ``pos`` -> (record end, fields start)."""
    end = len(body)
    if pos >= end:
        raise RecordFormatError(f"the batch declares {count} records but holds {index}")
    length, fields = read_varint(body, pos, end)
    if length < 1 or fields + length > end:
        raise RecordFormatError(f"it declares {length} bytes, {end - fields} remain in the batch")
    return fields + length, fields


def check_records(body: bytes, count: int) -> bool:  # noqa: PLR0912, PLR0915 - hot loop, see below
    """Walk ``count`` records of ``body`` by the rules above without copying keys or values
    (Kafka's ``skipKeyValueIterator``). Returns whether the offset deltas are 0..count-1 in
    order; raises ``RecordFormatError`` when a rule is broken.

    This runs for every record of every compressed batch a leader appends, so the one-byte
    varints (most of them) are decoded inline: a call to ``tidelog.protocol.varint.
    read_varint`` for each costs more than twice as much (timeit); it takes the rest.
    """
    pos = 0
    end = len(body)
    in_order = True
    varint = read_varint
    for index in range(count):
        start = pos
        try:
            if pos >= end:
                raise RecordFormatError(f"the batch declares {count} records but holds {index}")
            b = body[pos]
            if b < 0x80:
                length = (b >> 1) ^ -(b & 1)
                pos += 1
            else:
                length, pos = varint(body, pos, end)
            fields = pos
            record_end = pos + length
            if length < 1 or record_end > end:
                raise RecordFormatError(f"it declares {length} bytes, {end - pos} remain")
            pos += 1  # attributes
            b = body[pos] if pos < record_end else 0xFF
            if b < 0x80:  # timestampDelta
                pos += 1
            else:
                _, pos = varint(body, pos, record_end)
            b = body[pos] if pos < record_end else 0xFF
            if b < 0x80:
                offset_delta = (b >> 1) ^ -(b & 1)
                pos += 1
            else:
                offset_delta, pos = varint(body, pos, record_end)
            if offset_delta != index:
                in_order = False
            for _ in (0, 1):  # key, value
                b = body[pos] if pos < record_end else 0xFF
                if b < 0x80:
                    size = (b >> 1) ^ -(b & 1)
                    pos += 1
                else:
                    size, pos = varint(body, pos, record_end)
                pos = _skip(pos, size, record_end)
            b = body[pos] if pos < record_end else 0xFF
            if b < 0x80:
                headers = (b >> 1) ^ -(b & 1)
                pos += 1
            else:
                headers, pos = varint(body, pos, record_end)
            if headers < 0:
                raise RecordFormatError(f"it has {headers} headers")
            for _ in range(headers):
                size, pos = varint(body, pos, record_end)
                if size < 0:
                    raise RecordFormatError("a header key is null")
                pos = _skip(pos, size, record_end)
                size, pos = varint(body, pos, record_end)
                pos = _skip(pos, size, record_end)
            if pos != record_end:
                raise RecordFormatError(
                    f"it declares {length} bytes but its fields take {pos - fields}"
                )
        except (RecordFormatError, VarintError) as exc:
            raise RecordFormatError(f"record {index} at byte {start}: {exc}") from None
    if pos != end:
        raise RecordFormatError(f"{end - pos} bytes follow the last of the {count} records")
    return in_order


def _field(body: bytes, pos: int, end: int) -> tuple[bytes | None, int]:
    size, pos = read_varint(body, pos, end)
    after = _skip(pos, size, end)
    return (None if size == -1 else body[pos:after]), after


def iter_records(body: bytes, count: int) -> Iterator[DecodedRecord]:
    """The ``count`` records of ``body``, decoded; ``RecordFormatError`` as ``check_records``
    (raised when the bad record is reached: the records before it are yielded)."""
    pos = 0
    for index in range(count):
        start = pos
        try:
            record_end, pos = _record_start(body, pos, index, count)
            fields = pos
            attributes = body[pos]
            timestamp_delta, pos = read_varint(body, pos + 1, record_end)
            offset_delta, pos = read_varint(body, pos, record_end)
            key, pos = _field(body, pos, record_end)
            value, pos = _field(body, pos, record_end)
            count_headers, pos = read_varint(body, pos, record_end)
            if count_headers < 0:
                raise RecordFormatError(f"it has {count_headers} headers")
            headers: list[tuple[bytes, bytes | None]] = []
            for _ in range(count_headers):
                header_key, pos = _field(body, pos, record_end)
                if header_key is None:
                    raise RecordFormatError("a header key is null")
                header_value, pos = _field(body, pos, record_end)
                headers.append((header_key, header_value))
            if pos != record_end:
                raise RecordFormatError(
                    f"it declares {record_end - fields} bytes but its fields take {pos - fields}"
                )
        except (RecordFormatError, VarintError) as exc:
            raise RecordFormatError(f"record {index} at byte {start}: {exc}") from None
        yield DecodedRecord(attributes, timestamp_delta, offset_delta, key, value, tuple(headers))
    if pos != len(body):
        raise RecordFormatError(f"{len(body) - pos} bytes follow the last of the {count} records")


def _encode_field(value: bytes | None, out: bytearray) -> None:
    if value is None:
        append_varint(-1, out)
    else:
        append_varint(len(value), out)
        out += value


def encode_records(records: Iterable[DecodedRecord]) -> bytes:
    """The body (uncompressed) holding ``records``, framed as the module docstring says."""
    out = bytearray()
    one = bytearray()
    for r in records:
        one.clear()
        one.append(r.attributes & 0xFF)
        append_varint(r.timestamp_delta, one)
        append_varint(r.offset_delta, one)
        _encode_field(r.key, one)
        _encode_field(r.value, one)
        append_varint(len(r.headers), one)
        for header_key, header_value in r.headers:
            _encode_field(header_key, one)
            _encode_field(header_value, one)
        append_varint(len(one), out)
        out += one
    return bytes(out)


def record_offsets_and_timestamps(batch: bytes) -> list[tuple[int, int]]:
    """``[(offset, timestamp)]`` of every record in one whole batch."""
    header = parse_header(batch)
    body = decompress(
        header.compression, batch[BATCH_HEADER_SIZE : header.size], max_bytes=_SCAN_MAX_BYTES
    )
    log_append_time = header.timestamp_type == 1
    return [
        (
            header.base_offset + r.offset_delta,
            header.max_timestamp if log_append_time else header.base_timestamp + r.timestamp_delta,
        )
        for r in iter_records(body, header.records_count)
    ]


def first_record_at_or_after(
    batch: bytes, timestamp_ms: int, *, min_offset: int = 0
) -> tuple[int, int] | None:
    """``(offset, timestamp)`` of the first record (offset >= ``min_offset``) with
    timestamp >= ``timestamp_ms``, or None."""
    for offset, timestamp in record_offsets_and_timestamps(batch):
        if offset >= min_offset and timestamp >= timestamp_ms:
            return offset, timestamp
    return None
