"""Columnar decode: the v2 batches of a Fetch response into Arrow-ready columns (Spark's
Kafka schema), dropping what the query's isolation level does not see.

A column-wise decoder (no per-record objects): it runs on the executors for every row read.
The record layout is ``tidelog.protocol.batch_builder``'s. A truncated last batch (a broker
cuts one at max_bytes) is ignored.

Transactions (KIP-98, ``kafka.isolation.level``): both levels drop control batches
(transaction markers), which take offsets but are never rows; read_committed also drops the
records of aborted transactions (``TransactionFilter``, the Java consumer's rules).
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import Final

import crc32c
import pyarrow as pa

from tidelog.client.records import CONTROL_TYPE_ABORT, decompress
from tidelog.model import TopicPartition
from tidelog.protocol.records import (
    BATCH_HEADER_SIZE,
    CRC_START,
    CorruptRecordBatchError,
    read_batch_size,
)
from tidelog.protocol.varint import VarintError, read_varint

_BATCH_HEAD: Final = struct.Struct(">qiibIhiqqqhii")
#: A control record's key: int16 version, int16 type (0 abort, 1 commit).
_CONTROL_KEY: Final = struct.Struct(">hh")


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


def _is_abort_marker(data: bytes, count: int) -> bool:
    """Whether a control batch's records (``data``, decompressed) start with an ABORT
    marker: key = int16 version, int16 type (0 abort, 1 commit)."""
    if count < 1:
        return False
    end = len(data)
    try:
        _length, p = read_varint(data, 0, end)
        p += 1  # record attributes
        _ts_delta, p = read_varint(data, p, end)
        _off_delta, p = read_varint(data, p, end)
        key_length, p = read_varint(data, p, end)
    except VarintError as exc:
        raise CorruptRecordBatchError(f"control record: {exc}") from exc
    if key_length < _CONTROL_KEY.size or p + key_length > end:
        raise CorruptRecordBatchError(f"control record key of {key_length} bytes")
    _version, kind = _CONTROL_KEY.unpack_from(data, p)
    return bool(kind == CONTROL_TYPE_ABORT)


class TransactionFilter:
    """Decides which transactional and control batches of one fetch response give no rows
    (KIP-98, the Java consumer's rules).

    Control batches (transaction markers) are always dropped. Under read_committed
    (``aborted_transactions`` not None: the response's (producer id, first offset) list),
    the aborted transactions are taken in first-offset order: once a batch's last offset
    reaches an entry's first offset, that producer is in an aborted transaction, and its
    transactional data batches are dropped until its ABORT marker (a COMMIT marker ends
    nothing). Batches that are neither transactional nor control never get here: they are
    always kept.
    """

    __slots__ = ("_aborted", "_pending", "read_committed")

    def __init__(self, aborted_transactions: Sequence[tuple[int, int]] | None) -> None:
        self.read_committed = aborted_transactions is not None
        #: Not reached yet, latest first offset first (taken from the end).
        self._pending = sorted(aborted_transactions or (), key=lambda a: a[1], reverse=True)
        #: Producers inside an aborted transaction.
        self._aborted: set[int] = set()

    def skips(self, buf: bytes, pos: int, end: int) -> bool:
        """Whether the transactional or control batch ``buf[pos:end]`` is dropped (called
        for each such batch of the response, in log order)."""
        (base_offset, _, _, _, _, attributes, last_delta, _, _, producer_id, _, _, count) = (
            _BATCH_HEAD.unpack_from(buf, pos)
        )
        if not self.read_committed:
            return bool(attributes & 0x20)
        pending = self._pending
        last_offset = base_offset + last_delta
        while pending and pending[-1][1] <= last_offset:
            self._aborted.add(pending.pop()[0])
        if producer_id not in self._aborted:
            return bool(attributes & 0x20)
        if attributes & 0x20 and _is_abort_marker(
            decompress(attributes & 0x07, buf[pos + BATCH_HEADER_SIZE : end]), count
        ):
            self._aborted.discard(producer_id)
        return True


def decode_into(
    buf: bytes,
    columns: Columns,
    *,
    from_offset: int,
    until_offset: int,
    include_headers: bool,
    aborted_transactions: Sequence[tuple[int, int]] | None = None,
) -> int:
    """Decode the whole v2 batches of a Fetch response into ``columns``, keeping records in
    ``[from_offset, until_offset)``. Returns the offset after the last whole batch seen
    (``from_offset`` when there was none): the next fetch offset.

    Control batches (transaction markers) are not rows. ``aborted_transactions`` is None
    for read_uncommitted (transactional records are kept whatever became of their
    transaction); for read_committed it is the fetch response's (producer id, first offset)
    list, and the records of those aborted transactions are dropped (``TransactionFilter``).
    Dropped batches still move the returned offset past them.
    """
    next_offset = from_offset
    txn = TransactionFilter(aborted_transactions)
    pos = 0
    n = len(buf)
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
        ) = _BATCH_HEAD.unpack_from(buf, pos)
        if magic != 2:
            raise CorruptRecordBatchError(f"batch at offset {base_offset} has magic {magic}")
        if base_offset >= until_offset:
            break
        if crc32c.crc32c(memoryview(buf)[pos + CRC_START : pos + size]) != crc:
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
        log_append = (attributes >> 3) & 1
        _append_records(
            columns,
            decompress(attributes & 0x07, buf[start_pos + BATCH_HEADER_SIZE : pos]),
            count,
            base_offset=base_offset,
            base_timestamp_ms=base_ts,
            max_timestamp_ms=max_ts,
            log_append=log_append,
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
