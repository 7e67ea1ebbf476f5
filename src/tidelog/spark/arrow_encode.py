"""The sink's fast path: Arrow batches of rows to records sections without a Python object
per row.

A write task's rows arrive as Arrow batches (``DataSourceArrowWriter``). When they carry
no headers and go to one topic, ``send_batch`` picks every row's partition at once and
encodes each partition's rows as whole records sections: the small fields (lengths,
offset deltas) are varints built with numpy, and Arrow's C++ joins them with the keys and
values (``binary_join_element_wise``). The bytes are the ones the one encoder,
``tidelog.protocol.batch_builder.encode_records``, writes (tests/unit/spark compares
them); the producer frames them (``Producer.send_section``). Other rows go row by row
through ``Producer.send``.

Partitions follow Kafka's producer: the row's ``partition`` if set, else murmur2 of the key
(``tidelog.protocol.partitioner``, column-wise here), else the uniform sticky
partitioner of KIP-794: rows
without a key fill a batch of about ``batch.size`` bytes for one partition, and the next
batch goes to the next partition.
"""

from __future__ import annotations

from typing import Final

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from tidelog.model import TopicPartition
from tidelog.protocol.partitioner import partition_for_key
from tidelog.spark.errors import ConnectorError
from tidelog.spark.options import SparkOptionError, WriteOptions
from tidelog.spark.producer import Producer

I64 = npt.NDArray[np.int64]
#: A zig-zag varint of a 64-bit value takes at most 10 bytes.
_VARINT_BYTES: Final = 10
#: Record attributes (0) and timestampDelta (0): every record the sink writes.
_ATTRIBUTES_AND_TIME: Final = pa.scalar(b"\x00\x00", pa.binary())
#: headerCount 0.
_NO_HEADERS: Final = pa.scalar(b"\x00", pa.binary())
_NOTHING: Final = pa.scalar(b"", pa.binary())
#: Kafka's murmur2 constants (``tidelog.protocol.partitioner``).
_MURMUR_M: Final = 0x5BD1E995
_MURMUR_SEED: Final = 0x9747B28C
#: Keys up to this long hash column-wise (``key_partitions``).
_MAX_VECTOR_KEY: Final = 256
#: Runs of rows per partition beyond which a batch's rows are grouped by partition first.
_MAX_RUNS: Final = 64


def column(batch: pa.RecordBatch, name: str) -> pa.Array | None:
    """The column called ``name`` (any case, as Spark's Kafka sink matches), or None."""
    for i, column_name in enumerate(batch.schema.names):
        if column_name.lower() == name:
            return batch.column(i)
    return None


def _varint_sizes(zigzag: I64) -> I64:
    """Bytes of each zig-zag encoded value as a varint."""
    sizes = np.ones_like(zigzag)
    rest = zigzag >> 7
    while True:
        more = rest != 0
        if not more.any():
            return sizes
        sizes += more
        rest >>= 7


def varints(values: I64) -> tuple[pa.Array, I64]:
    """``values`` as zig-zag varints (Kafka's record fields), one binary value a row, and
    their sizes."""
    zigzag = (values << 1) ^ (values >> 63)
    sizes = _varint_sizes(zigzag)
    width = int(sizes.max()) if sizes.size else 1
    groups = np.empty((len(values), width), np.int64)
    for k in range(width):
        groups[:, k] = (zigzag >> (7 * k)) & 0x7F
    used = np.arange(width)[None, :] < sizes[:, None]
    groups[:, : width - 1] |= np.where(used[:, 1:], 0x80, 0)
    data = groups.astype(np.uint8)[used]
    offsets = np.zeros(len(values) + 1, np.int32)
    np.cumsum(sizes, out=offsets[1:])
    array = pa.Array.from_buffers(
        pa.binary(), len(values), [None, pa.py_buffer(offsets), pa.py_buffer(data)]
    )
    return array, sizes


def _lengths(array: pa.Array) -> I64:
    """Byte lengths of a binary array's values, -1 for nulls."""
    lengths = pc.binary_length(array).fill_null(-1)
    return np.asarray(lengths, dtype=np.int64)


def encode_records_arrow(keys: pa.Array | None, values: pa.Array) -> bytes:
    """The records section of a batch of ``values`` (binary) with ``keys`` (binary; None:
    all null), no headers, at offset deltas 0, 1, ... and timestamp delta 0: the bytes of
    ``encode_records([(key, value, ()), ...])``."""
    rows = len(values)
    value_lengths = _lengths(values)
    key_lengths = np.full(rows, -1, np.int64) if keys is None else _lengths(keys)
    offset_fields, offset_sizes = varints(np.arange(rows, dtype=np.int64))
    key_fields, key_sizes = varints(key_lengths)
    value_fields, value_sizes = varints(value_lengths)
    body = (
        2
        + offset_sizes
        + key_sizes
        + np.maximum(key_lengths, 0)
        + value_sizes
        + np.maximum(value_lengths, 0)
        + 1
    )
    length_fields, _ = varints(body)
    parts = [length_fields, _ATTRIBUTES_AND_TIME, offset_fields, key_fields]
    if keys is not None:
        parts.append(keys)
    parts += [value_fields, values, _NO_HEADERS]
    joined = pc.binary_join_element_wise(
        *parts, _NOTHING, null_handling="replace", null_replacement=""
    )
    offsets, data = joined.buffers()[1:3]
    first, last = np.frombuffer(offsets, np.int32)[[joined.offset, joined.offset + rows]]
    return data.slice(int(first), int(last - first)).to_pybytes() if data is not None else b""


def _binary(array: pa.Array | None) -> pa.Array | None:
    """A key or value column as binary (Spark sends strings or binary), None if all null."""
    if array is None or array.null_count == len(array):
        return None
    return array.cast(pa.binary()) if array.type != pa.binary() else array


def _topic(batch: pa.RecordBatch, options: WriteOptions) -> str | None:
    """The one topic of the batch's rows; None when rows name different topics."""
    topics = column(batch, "topic")
    if topics is not None and topics.null_count < len(topics):
        distinct = pc.unique(topics.drop_null()).to_pylist()
        if len(distinct) > 1 or (topics.null_count and distinct != [options.topic]):
            return None
        return str(distinct[0])
    if options.topic is None:
        raise SparkOptionError("a row has a null 'topic' and no option 'topic' is set")
    return options.topic


def _has_headers(batch: pa.RecordBatch) -> bool:
    headers = column(batch, "headers")
    if headers is None or headers.null_count == len(headers):
        return False
    return bool(pc.max(pc.list_value_length(headers)).as_py() or 0)


def murmur2(keys: pa.Array) -> npt.NDArray[np.uint32]:
    """Kafka's ``Utils.murmur2`` (``tidelog.protocol.partitioner``) of every value of the
    binary array ``keys`` at once (nulls hash as empty), as unsigned 32-bit values."""
    rows = len(keys)
    offsets = np.frombuffer(keys.buffers()[1], np.int32)[keys.offset : keys.offset + rows + 1]
    data_buffer = keys.buffers()[2]
    data = np.frombuffer(data_buffer if data_buffer is not None else b"", np.uint8)
    data = np.append(data, np.zeros(4, np.uint8)).astype(np.uint32)
    start = offsets[:-1].astype(np.int64)
    length = (offsets[1:] - offsets[:-1]).astype(np.int64)
    m = np.uint32(_MURMUR_M)
    h = np.uint32(_MURMUR_SEED) ^ length.astype(np.uint32)
    words = length // 4
    for w in range(int(words.max()) if rows else 0):
        rows_on = np.flatnonzero(words > w)
        at = start[rows_on] + 4 * w
        k = data[at] | (data[at + 1] << 8) | (data[at + 2] << 16) | (data[at + 3] << 24)
        k = k * m
        k ^= k >> 24
        k = k * m
        h[rows_on] = (h[rows_on] * m) ^ k
    rest = length & 3
    tail = start + 4 * words
    for size, shift in ((3, 16), (2, 8)):
        on = np.flatnonzero(rest >= size)
        h[on] ^= data[tail[on] + size - 1] << shift
    on = np.flatnonzero(rest >= 1)
    h[on] = (h[on] ^ data[tail[on]]) * m
    h ^= h >> 13
    h = h * m
    h ^= h >> 15
    return h


def key_partitions(keys: pa.Array, partitions: int) -> I64:
    """The partition Kafka's producer picks for each key of ``keys`` (binary) among
    ``partitions``: ``toPositive(murmur2(key)) % partitions``. Keys longer than
    ``_MAX_VECTOR_KEY`` bytes (one numpy pass per 4 bytes) hash one by one."""
    lengths = _lengths(keys)
    if lengths.size and int(lengths.max()) > _MAX_VECTOR_KEY:
        return np.array(
            [0 if k is None else partition_for_key(k, partitions) for k in keys.to_pylist()],
            np.int64,
        )
    return (murmur2(keys) & 0x7FFFFFFF).astype(np.int64) % partitions


def _sticky(producer: Producer, topic: str, partitions: int, sizes: I64) -> I64:
    """``Producer.sticky`` for many rows at once: each row goes where the bytes before it
    fall, batches of about ``batch_bytes`` one partition after another."""
    batch, used = producer.sticky_state.get(topic, (0, 0))
    ends = used + np.cumsum(sizes)
    chunk = (ends - sizes) // producer.batch_bytes
    total = int(ends[-1]) if ends.size else used
    producer.sticky_state[topic] = (
        batch + total // producer.batch_bytes,
        total % producer.batch_bytes,
    )
    return np.asarray((batch + chunk) % partitions, np.int64)


def _partitions(
    producer: Producer,
    topic: str,
    batch: pa.RecordBatch,
    keys: pa.Array | None,
    values: pa.Array,
) -> I64:
    """Every row's partition (Kafka's producer rules, module docstring)."""
    n = producer.num_partitions(topic)
    rows = batch.num_rows
    sizes = np.maximum(_lengths(values), 0) + 16
    if keys is not None:
        sizes += np.maximum(_lengths(keys), 0)
    out = _sticky(producer, topic, n, sizes)
    if keys is not None:
        keyed = np.flatnonzero(np.asarray(keys.is_valid()))
        out[keyed] = key_partitions(keys, n)[keyed]
    explicit = column(batch, "partition")
    if explicit is not None and explicit.null_count < rows:
        chosen = np.flatnonzero(np.asarray(explicit.is_valid()))
        wanted = np.asarray(explicit.take(pa.array(chosen)), np.int64)
        bad = (wanted < 0) | (wanted >= n)
        if bad.any():
            raise ConnectorError(
                f"a row asks for partition {int(wanted[bad][0])} of topic {topic!r}, which "
                f"has partitions 0..{n - 1}"
            )
        out[chosen] = wanted
    return out


def send_batch(producer: Producer, options: WriteOptions, batch: pa.RecordBatch) -> bool:
    """Queue ``batch``'s rows on ``producer`` as encoded records sections; False (nothing
    queued) when its rows carry headers or go to more than one topic."""
    if batch.num_rows == 0:
        return True
    if _has_headers(batch):
        return False
    topic = _topic(batch, options)
    if topic is None:
        return False
    values = _binary(column(batch, "value"))
    if values is None:
        values = pa.nulls(batch.num_rows, pa.binary())
    keys = _binary(column(batch, "key"))
    partitions = _partitions(producer, topic, batch, keys, values)
    # Runs of rows for one partition (sticky rows come in long runs) are sent as slices;
    # rows scattered over partitions (keys) are grouped first, in order within each.
    bounds = np.flatnonzero(np.diff(partitions)) + 1
    order = None
    if len(bounds) >= _MAX_RUNS:
        order = np.argsort(partitions, kind="stable")
        partitions = partitions[order]
        bounds = np.flatnonzero(np.diff(partitions)) + 1
        values = values.take(pa.array(order))
        keys = None if keys is None else keys.take(pa.array(order))
    starts = [0, *bounds.tolist()]
    ends = [*bounds.tolist(), len(partitions)]
    for start, end in zip(starts, ends, strict=True):
        _send_partition(
            producer,
            TopicPartition(topic, int(partitions[start])),
            None if keys is None else keys.slice(start, end - start),
            values.slice(start, end - start),
        )
    return True


def _send_partition(
    producer: Producer, tp: TopicPartition, keys: pa.Array | None, values: pa.Array
) -> None:
    """One partition's rows as sections of about ``batch_bytes`` each."""
    sizes = np.maximum(_lengths(values), 0) + 16
    if keys is not None:
        sizes += np.maximum(_lengths(keys), 0)
    cuts = np.cumsum(sizes) // max(producer.batch_bytes, 1)
    bounds = np.flatnonzero(np.diff(cuts)) + 1
    for start, end in zip([0, *bounds.tolist()], [*bounds.tolist(), len(values)], strict=True):
        part_keys = None if keys is None else keys.slice(start, end - start)
        section = encode_records_arrow(part_keys, values.slice(start, end - start))
        producer.send_section(tp, section, end - start)
