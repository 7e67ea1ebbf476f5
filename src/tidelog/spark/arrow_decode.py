"""Vectorized decode: the v2 batches of a Fetch response straight into Arrow arrays.

The executors' fast path (``tidelog.spark.read_loop``). One Python pass per fetch walks
the batches (header, CRC-32C, the transaction rules of ``tidelog.spark.decode.kept_batches``)
and one short Python loop per record only steps over its length varint; every field is
then decoded for all records of the fetch at once with numpy, and the key and value
columns are cut out of the records sections as Arrow binary arrays without a Python object
per record. Measured in docs/spark.md "Performance".

Records with headers, when the query asks for them (``includeHeaders``), are left to the
record-by-record decoder (``decode_fetch`` returns None): headers are rare on a hot topic
and a list of structs per record gains nothing from vectorizing. Malformed records raise
``CorruptRecordBatchError``, as the record-by-record decoder does; records whose fields do
not fill their declared length are malformed here too.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from tidelog.model import TopicPartition
from tidelog.protocol.records import CorruptRecordBatchError
from tidelog.protocol.varint import VarintError, read_varint
from tidelog.spark.decode import KeptBatch, kept_batches

I64 = npt.NDArray[np.int64]
#: Zero bytes after the records sections: a varint read past a malformed record's end stays
#: inside the buffer (and is caught by the length check) instead of indexing out of it.
_PAD: Final = bytes(16)
#: A zig-zag varlong takes at most 10 bytes.
_MAX_VARINT_BYTES: Final = 10
#: An Arrow binary view holds data of up to 12 bytes itself, and the first 4 of longer data.
_INLINE: Final = 12
_INLINE_AT: Final = np.arange(_INLINE)
_PREFIX: Final = np.arange(4)


def decode_fetch(
    buf: bytes,
    tp: TopicPartition,
    schema: pa.Schema,
    *,
    from_offset: int,
    until_offset: int,
    include_headers: bool,
    aborted_transactions: Sequence[tuple[int, int]] | None = None,
) -> tuple[pa.RecordBatch | None, int] | None:
    """The rows of ``buf`` in ``[from_offset, until_offset)`` as one Arrow batch of
    ``schema`` (None: no rows) and the next fetch offset, as ``decode.decode_into`` sees
    them; None when a kept record has headers and ``include_headers`` is set (the caller
    decodes this fetch record by record)."""
    batches, next_offset = kept_batches(
        buf,
        from_offset=from_offset,
        until_offset=until_offset,
        aborted_transactions=aborted_transactions,
    )
    if not batches:
        return None, next_offset
    work = b"".join([b.records for b in batches] + [_PAD])
    starts = _record_starts(work, batches)
    fields = _Fields(np.frombuffer(work, np.uint8), starts, len(work) - len(_PAD))
    if fields.has_headers and include_headers:
        return None
    counts = np.array([b.record_count for b in batches], np.int64)
    which = np.repeat(np.arange(len(batches)), counts)
    offsets = np.array([b.base_offset for b in batches], np.int64)[which] + fields.offset_delta
    keep = (offsets >= from_offset) & (offsets < until_offset)
    rows = int(np.count_nonzero(keep))
    if rows == 0:
        return None, next_offset
    log_append = np.array([b.log_append for b in batches], np.int32)[which]
    base_ts = np.array([b.base_timestamp_ms for b in batches], np.int64)[which]
    max_ts = np.array([b.max_timestamp_ms for b in batches], np.int64)[which]
    # LogAppendTime: every record has the batch's max timestamp.
    timestamps = np.where(log_append == 1, max_ts, base_ts + fields.timestamp_delta) * 1000
    if rows != len(offsets):
        offsets, timestamps, log_append = offsets[keep], timestamps[keep], log_append[keep]
        fields.select(keep)
    arrays: list[pa.Array] = [
        _binary(fields.arr, fields.key_start, fields.key_length),
        _binary(fields.arr, fields.value_start, fields.value_length),
        pa.repeat(pa.scalar(tp.topic, pa.string()), rows),
        pa.repeat(pa.scalar(tp.partition, pa.int32()), rows),
        pa.array(offsets, pa.int64()),
        pa.array(timestamps, pa.int64()).view(pa.timestamp("us", tz="UTC")),
        pa.array(log_append, pa.int32()),
    ]
    if include_headers:
        headers_type = schema.field("headers").type
        arrays.append(
            pa.ListArray.from_arrays(
                pa.array(np.zeros(rows + 1, np.int32)), pa.array([], headers_type.value_type)
            )
        )
    return pa.RecordBatch.from_arrays(arrays, schema=schema), next_offset


def _record_starts(work: bytes, batches: Sequence[KeptBatch]) -> I64:
    """Where each record (its length varint) starts in ``work`` (the batches' records
    sections back to back): the one loop per record, stepping over each record (its
    fields are checked against its length in ``_Fields``)."""
    starts: list[int] = []
    append = starts.append
    p = 0
    end = 0
    n = len(work)
    try:
        for batch in batches:
            end += len(batch.records)
            for _ in range(batch.record_count):
                append(p)
                b = work[p]
                if b < 0x80:
                    p += 1 + ((b >> 1) ^ -(b & 1))
                    continue
                c = work[p + 1]
                if c < 0x80:
                    v = (b & 0x7F) | (c << 7)
                    p += 2 + ((v >> 1) ^ -(v & 1))
                    continue
                length, p = read_varint(work, p, n)
                p += length
            if p != end:
                raise CorruptRecordBatchError(
                    f"batch at offset {batch.base_offset}: its {batch.record_count} records take "
                    f"{p - end + len(batch.records)} bytes, not {len(batch.records)}"
                )
    except (IndexError, VarintError) as exc:
        raise CorruptRecordBatchError(f"record runs past its batch: {exc}") from exc
    return np.array(starts, np.int64)


def _varints(arr: npt.NDArray[np.uint8], pos: I64) -> tuple[I64, I64]:
    """The zig-zag varints at ``pos`` in ``arr``: (values, sizes in bytes)."""
    if pos.size and int(pos.max()) >= arr.size:
        raise CorruptRecordBatchError("a record field runs past its batch")
    byte = arr[pos].astype(np.int64)
    raw = byte & 0x7F
    size = np.ones_like(pos)
    more = np.flatnonzero(byte & 0x80)
    shift = 7
    while more.size:
        if shift >= 7 * _MAX_VARINT_BYTES:
            raise CorruptRecordBatchError("record varint longer than 10 bytes")
        at = pos[more] + size[more]
        if int(at.max()) >= arr.size:
            raise CorruptRecordBatchError("record varint runs past its batch")
        byte = arr[at].astype(np.int64)
        raw[more] |= (byte & 0x7F) << shift
        size[more] += 1
        more = more[(byte & 0x80) != 0]
        shift += 7
    return (raw >> 1) ^ -(raw & 1), size


class _Fields:
    """Every record's fields, decoded at once from the record starts."""

    def __init__(self, arr: npt.NDArray[np.uint8], starts: I64, data_end: int) -> None:
        self.arr = arr
        length, size = _varints(arr, starts)
        record_end = starts + size + length
        pos = starts + size + 1  # record attributes (unused)
        self.timestamp_delta, size = _varints(arr, pos)
        pos = pos + size
        self.offset_delta, size = _varints(arr, pos)
        pos = pos + size
        self.key_length, size = _varints(arr, pos)
        self.key_start = pos + size
        pos = self.key_start + np.maximum(self.key_length, 0)
        self.value_length, size = _varints(arr, pos)
        self.value_start = pos + size
        pos = self.value_start + np.maximum(self.value_length, 0)
        header_count, size = _varints(arr, pos)
        pos = pos + size
        headers = header_count != 0
        self.has_headers = bool(np.any(headers))
        # Headers are not decoded here: a record with some only has to hold them.
        fields_end_ok = (pos == record_end) | (headers & (pos < record_end))
        next_start = np.append(starts[1:], data_end)
        bad = (
            (record_end != next_start)
            | ~fields_end_ok
            | (self.key_length < -1)
            | (self.value_length < -1)
            | (header_count < 0)
        )
        if bool(np.any(bad)):
            first = int(np.argmax(bad))
            raise CorruptRecordBatchError(
                f"record {first} of the fetch declares {int(length[first])} bytes but its "
                "fields take a different size"
            )

    def select(self, keep: npt.NDArray[np.bool_]) -> None:
        """Keep only the records ``keep`` marks."""
        self.key_start, self.key_length = self.key_start[keep], self.key_length[keep]
        self.value_start, self.value_length = self.value_start[keep], self.value_length[keep]


def _binary(arr: npt.NDArray[np.uint8], start: I64, length: I64) -> pa.Array:
    """The binary column of the byte ranges ``[start, start + length)`` of ``arr``
    (length -1: null): Arrow views into ``arr`` (16 bytes a row, built at once), then one
    cast that copies the bytes out in Arrow's C++."""
    rows = len(start)
    valid = length >= 0
    lengths = np.where(valid, length, 0)
    # A view: int32 length, then the data itself when it fits in 12 bytes, else a 4-byte
    # prefix, int32 buffer index (0: arr) and int32 offset (arr is below 2 GiB).
    views = np.zeros((rows, 16), np.uint8)
    words = views.view(np.int32)
    words[:, 0] = lengths
    long = np.flatnonzero(lengths > _INLINE)
    if long.size:
        views[long, 4:8] = arr[start[long, None] + _PREFIX]
        words[long, 3] = start[long]
    short = np.flatnonzero((lengths > 0) & (lengths <= _INLINE))
    if short.size:
        inline = arr[start[short, None] + _INLINE_AT]
        inline[_INLINE_AT[None, :] >= lengths[short, None]] = 0
        views[short, 4:16] = inline
    null_count = rows - int(np.count_nonzero(valid))
    validity = pa.py_buffer(np.packbits(valid, bitorder="little")) if null_count else None
    array = pa.Array.from_buffers(
        pa.binary_view(),
        rows,
        [validity, pa.py_buffer(views), pa.py_buffer(arr)],
        null_count=null_count,
    )
    return array.cast(pa.binary())
