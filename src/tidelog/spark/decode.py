"""Columnar decode: the v2 batches of a Fetch response into Arrow-ready columns (Spark's
Kafka schema), dropping what the query's isolation level does not see.

A column-wise decoder (no per-record objects): it runs on the executors for every row read.
The record layout is ``tidelog.protocol.batch_builder``'s. A truncated last batch (a broker
cuts one at max_bytes) is ignored.

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


def _append_records(  # noqa: PLR0912, PLR0915 - hot loop: a call per field costs ~12% per record
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
    ``[from_offset, until_offset)`` to ``columns``: one-byte varints (the common case)
    inline, longer ones by ``read_varint``."""
    keys, values, offsets = columns.keys, columns.values, columns.offsets
    timestamps, types, headers_col = columns.timestamps_us, columns.timestamp_types, columns.headers
    n = len(data)
    p = 0
    try:
        # Hot loop, kept whole (one pass per record): a call per field costs more than it decodes.
        for _ in range(count):
            # length varint (skipped: fields are parsed one by one)
            while data[p] & 0x80:
                p += 1
            p += 2  # last length byte + attributes
            # timestampDelta varlong
            b = data[p]
            if b < 0x80:
                ts_delta = (b >> 1) ^ -(b & 1)
                p += 1
            else:
                ts_delta, p = read_varint(data, p, n)
            # offsetDelta varint
            b = data[p]
            if b < 0x80:
                off_delta = (b >> 1) ^ -(b & 1)
                p += 1
            else:
                off_delta, p = read_varint(data, p, n)
            # key
            b = data[p]
            if b < 0x80:
                klen = (b >> 1) ^ -(b & 1)
                p += 1
            else:
                klen, p = read_varint(data, p, n)
            if klen < 0:
                key = None
            else:
                key = data[p : p + klen]
                p += klen
            # value
            b = data[p]
            if b < 0x80:
                vlen = (b >> 1) ^ -(b & 1)
                p += 1
            else:
                vlen, p = read_varint(data, p, n)
            if vlen < 0:
                value = None
            else:
                value = data[p : p + vlen]
                p += vlen
            # headers
            b = data[p]
            if b < 0x80:
                hcount = (b >> 1) ^ -(b & 1)
                p += 1
            else:
                hcount, p = read_varint(data, p, n)
            record_headers: list[tuple[str, bytes | None]] = []
            for _h in range(hcount):
                hklen, p = read_varint(data, p, n)
                hkey = data[p : p + hklen].decode(errors="replace")
                p += hklen
                hvlen, p = read_varint(data, p, n)
                if hvlen < 0:
                    hval = None
                else:
                    hval = data[p : p + hvlen]
                    p += hvlen
                record_headers.append((hkey, hval))
            offset = base_offset + off_delta
            if offset < from_offset or offset >= until_offset:
                continue
            keys.append(key)
            values.append(value)
            offsets.append(offset)
            # LogAppendTime: every record has the batch's max timestamp.
            timestamps.append(
                (max_timestamp_ms if log_append else base_timestamp_ms + ts_delta) * 1000
            )
            types.append(log_append)
            if include_headers:
                headers_col.append(record_headers)
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
