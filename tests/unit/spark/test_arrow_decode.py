"""``tidelog.spark.arrow_decode`` without Spark: the vectorized decoder gives the same Arrow
batch and next offset as the record-by-record one (``decode.decode_into``), on hand-built
fetch responses, and the same answer to malformed records."""

from __future__ import annotations

import random
import struct
from collections.abc import Sequence

import pytest

pytest.importorskip("pyarrow")  # the spark extra (scripts/bootstrap.sh spark)

import crc32c
import pyarrow as pa
from pyspark.sql.pandas.types import to_arrow_schema

from tidelog.client import Record, build_batch
from tidelog.model import TopicPartition
from tidelog.protocol.records import CRC_START, Compression, CorruptRecordBatchError, TimestampType
from tidelog.spark.arrow_decode import decode_fetch
from tidelog.spark.decode import Columns, decode_into, to_record_batch
from tidelog.spark.source import read_schema

TP = TopicPartition("orders", 3)
TS = 1_700_000_000_000


def schema(include_headers: bool) -> pa.Schema:
    return to_arrow_schema(read_schema(include_headers), timezone="UTC")


def reference(
    buf: bytes,
    *,
    from_offset: int = 0,
    until_offset: int = 1 << 40,
    include_headers: bool = False,
    aborted: Sequence[tuple[int, int]] | None = None,
) -> tuple[pa.RecordBatch | None, int]:
    columns = Columns()
    next_offset = decode_into(
        buf,
        columns,
        from_offset=from_offset,
        until_offset=until_offset,
        include_headers=include_headers,
        aborted_transactions=aborted,
    )
    if not columns:
        return None, next_offset
    batch = to_record_batch(columns, TP, schema(include_headers), include_headers=include_headers)
    return batch, next_offset


def vectorized(
    buf: bytes,
    *,
    from_offset: int = 0,
    until_offset: int = 1 << 40,
    include_headers: bool = False,
    aborted: Sequence[tuple[int, int]] | None = None,
) -> tuple[pa.RecordBatch | None, int] | None:
    return decode_fetch(
        buf,
        TP,
        schema(include_headers),
        from_offset=from_offset,
        until_offset=until_offset,
        include_headers=include_headers,
        aborted_transactions=aborted,
    )


def assert_same(buf: bytes, **kwargs: object) -> pa.RecordBatch | None:
    expected = reference(buf, **kwargs)  # type: ignore[arg-type]
    got = vectorized(buf, **kwargs)  # type: ignore[arg-type]
    assert got is not None
    assert got[1] == expected[1]
    if expected[0] is None:
        assert got[0] is None
        return None
    assert got[0] is not None
    assert got[0].schema == expected[0].schema
    assert got[0].to_pylist() == expected[0].to_pylist()
    return got[0]


def value(size: int, seed: int) -> bytes | None:
    return None if size < 0 else bytes((seed + i) % 256 for i in range(size))


def mixed_records(count: int, seed: int) -> list[Record]:
    """Keys and values null, empty, inline-short (<= 12 bytes) and long, timestamp deltas
    of every varint size, including negative ones."""
    rng = random.Random(seed)
    sizes = [-1, 0, 1, 11, 12, 13, 63, 64, 100, 8191, 8192, 70_000]
    return [
        Record(
            value=value(rng.choice(sizes), i),
            key=value(rng.choice(sizes[:6]), i + 7),
            timestamp_ms=TS + rng.choice([0, 1, -1, 63, 64, -65, 10**6, -(10**9), 10**12]),
        )
        for i in range(count)
    ]


def batches(records: Sequence[Record], per_batch: int, **kwargs: object) -> bytes:
    out = []
    for start in range(0, len(records), per_batch):
        out.append(
            build_batch(
                records[start : start + per_batch],
                base_offset=start,
                base_timestamp_ms=TS,
                **kwargs,  # type: ignore[arg-type]
            )
        )
    return b"".join(out)


@pytest.mark.parametrize("per_batch", [1, 7, 300])
def test_mixed_records_decode_as_the_record_by_record_decoder_does(per_batch: int) -> None:
    buf = batches(mixed_records(600, per_batch), per_batch)
    batch = assert_same(buf)
    assert batch is not None
    assert batch.num_rows == 600


@pytest.mark.parametrize("compression", [Compression.GZIP, Compression.LZ4, Compression.ZSTD])
def test_compressed_batches(compression: Compression) -> None:
    assert_same(batches(mixed_records(200, 1), 50, compression=compression))


def test_log_append_time_gives_every_record_the_max_timestamp() -> None:
    buf = batches(mixed_records(40, 2), 10, timestamp_type=TimestampType.LOG_APPEND_TIME)
    batch = assert_same(buf)
    assert batch is not None
    assert set(batch.column("timestampType").to_pylist()) == {1}


@pytest.mark.parametrize(("start", "until"), [(0, 5), (3, 17), (17, 40), (39, 1000), (40, 50)])
def test_a_range_keeps_only_its_offsets(start: int, until: int) -> None:
    buf = batches(mixed_records(40, 3), 10)
    assert_same(buf, from_offset=start, until_offset=until)


def test_a_truncated_last_batch_is_left_for_the_next_fetch() -> None:
    buf = batches(mixed_records(40, 4), 10)
    assert_same(buf[:-9])
    got = vectorized(buf[:-9])
    assert got is not None
    assert got[1] == 30


def test_an_empty_answer_has_no_rows_and_keeps_the_position() -> None:
    assert vectorized(b"", from_offset=12) == (None, 12)


def test_headers_asked_for_go_to_the_record_by_record_decoder() -> None:
    records = [Record(b"v", headers=[("h", b"x")]), Record(b"w")]
    buf = build_batch(records, base_timestamp_ms=TS)
    assert vectorized(buf, include_headers=True) is None


def test_headers_not_asked_for_are_skipped() -> None:
    records = [Record(b"v", key=b"k", headers=[("h", b"x"), ("n", None)]), Record(b"w")]
    assert_same(build_batch(records, base_timestamp_ms=TS))


def test_no_headers_asked_for_give_empty_header_lists() -> None:
    batch = assert_same(batches(mixed_records(20, 5), 5), include_headers=True)
    assert batch is not None
    assert batch.column("headers").to_pylist() == [[]] * 20


def test_read_committed_drops_aborted_transactions() -> None:
    aborted = build_batch(
        [Record(b"a"), Record(b"b")],
        base_offset=0,
        base_timestamp_ms=TS,
        producer_id=9,
        producer_epoch=0,
        base_sequence=0,
        is_transactional=True,
    )
    plain = build_batch([Record(b"c")], base_offset=2, base_timestamp_ms=TS)
    batch = assert_same(aborted + plain, aborted=[(9, 0)])
    assert batch is not None
    assert batch.column("value").to_pylist() == [b"c"]
    assert_same(aborted + plain, aborted=None)


def recrc(batch: bytearray) -> bytes:
    struct.pack_into(">I", batch, 17, crc32c.crc32c(bytes(batch[CRC_START:])))
    return bytes(batch)


def test_a_record_whose_fields_miss_its_length_is_corrupt() -> None:
    batch = bytearray(build_batch([Record(b"abc"), Record(b"def")], base_timestamp_ms=TS))
    # The first record's length varint (byte 61) says one byte more; the batch still fits.
    batch[61] += 2
    with pytest.raises(CorruptRecordBatchError):
        vectorized(recrc(batch))


def test_a_value_running_past_its_batch_is_corrupt() -> None:
    batch = bytearray(build_batch([Record(b"abc")], base_timestamp_ms=TS))
    # value length varint: record length, attributes, ts delta, offset delta, key (-1).
    batch[61 + 5] = 2 * 100
    with pytest.raises(CorruptRecordBatchError):
        vectorized(recrc(batch))


def test_a_bad_crc_is_corrupt() -> None:
    batch = bytearray(build_batch([Record(b"abc")], base_timestamp_ms=TS))
    batch[-1] ^= 1
    with pytest.raises(CorruptRecordBatchError):
        vectorized(bytes(batch))


def test_the_record_by_record_decoder_reads_headers() -> None:
    # Headers with null and long values (multi-byte varints), keys null and long.
    long_value = bytes(range(256)) * 2
    records = [
        Record(b"v", key=None, headers=[("h", b"x"), ("null", None)]),
        Record(long_value, key=b"k" * 200, headers=[("big", long_value)], timestamp_ms=TS - 1),
        Record(None, key=b"", headers=[]),
    ]
    batch, _next = reference(build_batch(records, base_timestamp_ms=TS), include_headers=True)
    assert batch is not None
    rows = batch.to_pylist()
    assert [r["key"] for r in rows] == [None, b"k" * 200, b""]
    assert [r["value"] for r in rows] == [b"v", long_value, None]
    assert [r["headers"] for r in rows] == [
        [{"key": "h", "value": b"x"}, {"key": "null", "value": None}],
        [{"key": "big", "value": long_value}],
        [],
    ]
    assert [r["offset"] for r in rows] == [0, 1, 2]
