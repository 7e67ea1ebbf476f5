"""Columnar decode: the v2 batches of a Fetch response into Arrow-ready columns (Spark's
Kafka schema), dropping what the query's isolation level does not see.

The batch walk (``kept_batches``: header, CRC-32C, decompression) serves both decoders;
``decode_into`` decodes records one by one, for the executors' reads of records with
headers when ``includeHeaders`` is set (``tidelog.spark.arrow_decode`` decodes the rest
column-wise). The record layout is ``tidelog.protocol.batch_builder``'s. A truncated last
batch (a broker cuts one at max_bytes) is ignored.

Transactions (KIP-98, ``kafka.isolation.level``): both levels drop control batches
(transaction markers), which take offsets but are never rows; read_committed also drops the
records of aborted transactions (``tidelog.client.fetched_records.TransactionFilter``,
the Java consumer's rules).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import crc32c
import pyarrow as pa

from tidelog.client.fetched_records import BATCH_HEAD, TransactionFilter
from tidelog.client.records import decompress
from tidelog.model import TopicPartition
from tidelog.protocol.records import (
    BATCH_HEADER_SIZE,
    CRC_START,
    CorruptRecordBatchError,
    read_batch_size,
)
from tidelog.protocol.varint import VarintError, read_varint


class Columns:
    """Column lists of decoded records (Spark's Kafka schema), ready for Arrow."""

    __slots__ = ("headers", "keys", "offsets", "timestamp_types", "timestamps_us", "values")

    def __init__(self) -> None:
        self.keys: list[bytes | None] = []
        self.values: list[bytes | None] = []
        self.offsets: list[int] = []
        self.timestamps_us: list[int] = []
        self.timestamp_types: list[int] = []
        self.headers: list[list[tuple[str, bytes | None]]] = []

    def __len__(self) -> int:
        return len(self.offsets)


class KeptBatch(NamedTuple):
    """A data batch of a fetch that the query's isolation level sees: its records section
    (decompressed) and what its records need from the header."""

    records: bytes
    record_count: int
    base_offset: int
    base_timestamp_ms: int
    max_timestamp_ms: int
    #: 1: LogAppendTime (every record has ``max_timestamp_ms``), 0: CreateTime.
    log_append: int


def kept_batches(
    buf: bytes,
    *,
    from_offset: int,
    until_offset: int,
    aborted_transactions: Sequence[tuple[int, int]] | None = None,
) -> tuple[list[KeptBatch], int]:
    """The whole v2 batches of a Fetch response that hold records in ``[from_offset,
    until_offset)`` and that the isolation level sees, CRC-32C checked, and the offset
    after the last whole batch seen (``from_offset`` when there was none): the next fetch
    offset.

    Control batches (transaction markers) are not rows. ``aborted_transactions`` is None
    for read_uncommitted (transactional records are kept whatever became of their
    transaction); for read_committed it is the fetch response's (producer id, first offset)
    list, and the records of those aborted transactions are dropped (``TransactionFilter``).
    Dropped batches still move the returned offset past them.
    """
    kept: list[KeptBatch] = []
    next_offset = from_offset
    txn = TransactionFilter(aborted_transactions)
    pos = 0
    n = len(buf)
    view = memoryview(buf)
    while True:
        size = read_batch_size(buf, pos)
        if size is None or pos + size > n or size < BATCH_HEADER_SIZE:
            break
        (
            base_offset,
            _length,
            _epoch,
            magic,
            crc,
            attributes,
            last_delta,
            base_ts,
            max_ts,
            _pid,
            _pepoch,
            _seq,
            count,
        ) = BATCH_HEAD.unpack_from(buf, pos)
        if magic != 2:
            raise CorruptRecordBatchError(f"batch at offset {base_offset} has magic {magic}")
        if base_offset >= until_offset:
            break
        if crc32c.crc32c(view[pos + CRC_START : pos + size]) != crc:
            raise CorruptRecordBatchError(f"batch at offset {base_offset} fails its CRC-32C")
        batch_end_offset = base_offset + last_delta + 1
        start_pos, pos = pos, pos + size
        next_offset = max(next_offset, batch_end_offset)
        # One attribute test for plain batches; transactional (0x10) and control (0x20)
        # ones go through the transaction state, in log order.
        if (attributes & 0x30 and txn.skips(buf, start_pos, pos)) or (
            batch_end_offset <= from_offset
        ):
            continue
        kept.append(
            KeptBatch(
                decompress(attributes & 0x07, buf[start_pos + BATCH_HEADER_SIZE : pos]),
                count,
                base_offset,
                base_ts,
                max_ts,
                (attributes >> 3) & 1,
            )
        )
    return kept, next_offset


def decode_into(
    buf: bytes,
    columns: Columns,
    *,
    from_offset: int,
    until_offset: int,
    include_headers: bool,
    aborted_transactions: Sequence[tuple[int, int]] | None = None,
) -> int:
    """Decode the batches ``kept_batches`` keeps into ``columns``, record by record,
    keeping records in ``[from_offset, until_offset)``. Returns the next fetch offset."""
    batches, next_offset = kept_batches(
        buf,
        from_offset=from_offset,
        until_offset=until_offset,
        aborted_transactions=aborted_transactions,
    )
    for batch in batches:
        _append_records(
            columns,
            batch.records,
            batch.record_count,
            base_offset=batch.base_offset,
            base_timestamp_ms=batch.base_timestamp_ms,
            max_timestamp_ms=batch.max_timestamp_ms,
            log_append=batch.log_append,
            from_offset=from_offset,
            until_offset=until_offset,
            include_headers=include_headers,
        )
    return next_offset


def _zigzag(data: bytes, p: int, n: int) -> tuple[int, int]:
    """A zigzag varint at ``p`` and the position after it (one-byte varints inline)."""
    b = data[p]
    if b < 0x80:
        return (b >> 1) ^ -(b & 1), p + 1
    return read_varint(data, p, n)


def _bytes_field(data: bytes, p: int, n: int) -> tuple[bytes | None, int]:
    """A length-prefixed bytes field (length -1: None) and the position after it."""
    length, p = _zigzag(data, p, n)
    if length < 0:
        return None, p
    return data[p : p + length], p + length


def _headers(data: bytes, p: int, n: int) -> tuple[list[tuple[str, bytes | None]], int]:
    """A record's headers (key as text, value or None) and the position after them."""
    count, p = _zigzag(data, p, n)
    out: list[tuple[str, bytes | None]] = []
    for _ in range(count):
        key_length, p = read_varint(data, p, n)
        key = data[p : p + key_length].decode(errors="replace")
        value, p = _bytes_field(data, p + key_length, n)
        out.append((key, value))
    return out, p


def _append_records(
    columns: Columns,
    data: bytes,
    count: int,
    *,
    base_offset: int,
    base_timestamp_ms: int,
    max_timestamp_ms: int,
    log_append: int,
    from_offset: int,
    until_offset: int,
    include_headers: bool,
) -> None:
    """Append the ``count`` records of one batch's records section ``data`` that fall in
    ``[from_offset, until_offset)`` to ``columns``, record by record (the path of records
    with headers; ``arrow_decode`` decodes the others column-wise)."""
    n = len(data)
    p = 0
    try:
        for _ in range(count):
            # The length varint is skipped (fields are parsed one by one), then attributes.
            while data[p] & 0x80:
                p += 1
            p += 2
            ts_delta, p = _zigzag(data, p, n)
            off_delta, p = _zigzag(data, p, n)
            key, p = _bytes_field(data, p, n)
            value, p = _bytes_field(data, p, n)
            record_headers, p = _headers(data, p, n)
            offset = base_offset + off_delta
            if offset < from_offset or offset >= until_offset:
                continue
            columns.keys.append(key)
            columns.values.append(value)
            columns.offsets.append(offset)
            # LogAppendTime: every record has the batch's max timestamp.
            timestamp_ms = max_timestamp_ms if log_append else base_timestamp_ms + ts_delta
            columns.timestamps_us.append(timestamp_ms * 1000)
            columns.timestamp_types.append(log_append)
            if include_headers:
                columns.headers.append(record_headers)
    except VarintError as exc:
        raise CorruptRecordBatchError(f"batch at offset {base_offset}: record {exc}") from exc


def to_record_batch(
    columns: Columns, tp: TopicPartition, schema: pa.Schema, *, include_headers: bool
) -> pa.RecordBatch:
    """The Arrow batch of ``columns`` read from ``tp`` (Spark's Kafka schema)."""
    n = len(columns)
    arrays = [
        pa.array(columns.keys, pa.binary()),
        pa.array(columns.values, pa.binary()),
        pa.array([tp.topic] * n, pa.string()),
        pa.array([tp.partition] * n, pa.int32()),
        pa.array(columns.offsets, pa.int64()),
        pa.array(columns.timestamps_us, pa.int64()).cast(pa.timestamp("us", tz="UTC")),
        pa.array(columns.timestamp_types, pa.int32()),
    ]
    if include_headers:
        arrays.append(pa.array(columns.headers, schema.field("headers").type))
    return pa.RecordBatch.from_arrays(arrays, schema=schema)
