"""Record batch builder/decoder: round trips, and both directions against kafka-python."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.record.memory_records import MemoryRecords, MemoryRecordsBuilder

from tidelog.client.records import Record, build_batch, decode_records
from tidelog.protocol.records import (
    Compression,
    CorruptRecordBatchError,
    TimestampType,
    iter_batches,
    stamp_batch,
)

OPT_BYTES = st.one_of(st.none(), st.binary(max_size=40))
RECORDS = st.lists(
    st.builds(
        Record,
        value=OPT_BYTES,
        key=OPT_BYTES,
        headers=st.lists(st.tuples(st.text(max_size=8), OPT_BYTES), max_size=3),
        timestamp_ms=st.one_of(st.none(), st.integers(0, 2**42)),
    ),
    min_size=1,
    max_size=8,
)


@settings(max_examples=200)
@given(
    records=RECORDS,
    base_offset=st.integers(0, 2**40),
    compression=st.sampled_from(list(Compression)),
)
def test_build_then_decode_round_trips(
    records: list[Record], base_offset: int, compression: Compression
) -> None:
    batch = build_batch(records, base_offset=base_offset, compression=compression)
    ((pos, header),) = list(iter_batches(batch))  # CRC-32C checked here
    assert pos == 0
    assert header.compression == compression
    assert header.records_count == len(records)
    decoded = list(decode_records(batch))
    base_ts = next((r.timestamp_ms for r in records if r.timestamp_ms is not None), 0)
    assert [(d.offset, d.key, d.value, list(d.headers), d.timestamp_ms) for d in decoded] == [
        (
            base_offset + i,
            r.key,
            r.value,
            list(r.headers),
            base_ts if r.timestamp_ms is None else r.timestamp_ms,
        )
        for i, r in enumerate(records)
    ]


@pytest.mark.parametrize("compression", [0, 1, 2, 3, 4])
def test_kafka_python_batches_decode(compression: int) -> None:
    builder = MemoryRecordsBuilder(magic=2, compression_type=compression, batch_size=1 << 20)
    for i in range(50):
        builder.append(
            timestamp=1000 + i, key=f"k{i}".encode(), value=b"v" * i, headers=[("h", b"x")]
        )
    builder.close()
    data = bytes(builder.buffer())
    decoded = list(decode_records(data))
    assert [(r.offset, r.key, r.value, r.timestamp_ms) for r in decoded] == [
        (i, f"k{i}".encode(), b"v" * i, 1000 + i) for i in range(50)
    ]
    assert all(r.headers == (("h", b"x"),) for r in decoded)


@pytest.mark.parametrize("compression", list(Compression))
def test_our_batches_decode_in_kafka_python(compression: Compression) -> None:
    records = [
        Record(
            f"v{i}".encode(),
            key=None if i % 2 else b"k",
            headers=[("a", None)],
            timestamp_ms=5000 + i,
        )
        for i in range(20)
    ]
    batch = build_batch(records, base_offset=100, compression=compression)
    (theirs,) = list(MemoryRecords(batch))
    assert theirs.validate_crc()
    got = [(r.offset, r.key, r.value, r.timestamp, r.headers) for r in theirs]
    assert got == [
        (100 + i, r.key, r.value, r.timestamp_ms, [("a", None)]) for i, r in enumerate(records)
    ]


def test_log_append_time_batches_report_the_max_timestamp() -> None:
    batch = build_batch(
        [Record(b"a", timestamp_ms=1), Record(b"b", timestamp_ms=9)],
        timestamp_type=TimestampType.LOG_APPEND_TIME,
    )
    assert [r.timestamp_ms for r in decode_records(batch)] == [9, 9]


def test_stamped_batches_keep_their_crc_and_report_the_new_offsets() -> None:
    batch = bytearray(build_batch([Record(b"a"), Record(b"b")]))
    stamp_batch(batch, 0, 40, 6)
    decoded = list(decode_records(bytes(batch)))
    assert [(r.offset, r.leader_epoch) for r in decoded] == [(40, 6), (41, 6)]


def test_a_truncated_trailing_batch_is_ignored() -> None:
    one = build_batch([Record(b"a")])
    two = build_batch([Record(b"b")], base_offset=1)
    assert [r.value for r in decode_records(one + two[:-3])] == [b"a"]


def test_a_corrupted_batch_is_reported() -> None:
    batch = bytearray(build_batch([Record(b"hello")]))
    batch[-2] ^= 0xFF
    with pytest.raises(CorruptRecordBatchError, match="fails its CRC-32C check"):
        list(decode_records(bytes(batch)))


def test_undecompressable_batch_is_reported() -> None:
    batch = build_batch([Record(b"x" * 100)], compression=Compression.ZSTD)
    # Corrupt the compressed payload and skip the CRC to reach the decompressor.
    broken = bytearray(batch)
    broken[70:80] = b"\x00" * 10
    with pytest.raises(CorruptRecordBatchError, match="does not decompress"):
        list(decode_records(bytes(broken), verify_crc=False))


def test_an_empty_batch_is_refused() -> None:
    with pytest.raises(ValueError, match="at least one record"):
        build_batch([])
