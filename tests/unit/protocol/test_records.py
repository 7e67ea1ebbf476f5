"""Record batch v2 header: parsing, CRC validation and offset stamping, checked against
batches built by kafka-python's independent codec."""

from __future__ import annotations

import pytest
from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder

from tidelog.errors import ErrorCode
from tidelog.protocol.records import (
    BATCH_HEADER_SIZE,
    Compression,
    CorruptRecordBatchError,
    TimestampType,
    compute_crc,
    iter_batches,
    parse_header,
    read_batch_size,
    stamp_batch,
)


def build_batch(n: int, *, compression: int = 0, base_ts: int = 1_700_000_000_000) -> bytes:
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=compression,
        is_transactional=False,
        producer_id=-1,
        producer_epoch=-1,
        base_sequence=-1,
        batch_size=1 << 20,
    )
    for i in range(n):
        builder.append(
            i, timestamp=base_ts + i, key=f"k{i}".encode(), value=b"value-" * 20, headers=[]
        )
    return bytes(builder.build())


def test_header_fields_match_kafka_python() -> None:
    raw = build_batch(5)
    header = parse_header(raw)
    assert header.base_offset == 0
    assert header.size == len(raw)
    assert header.records_count == 5
    assert header.last_offset_delta == 4
    assert header.next_offset == 5
    assert header.base_timestamp == 1_700_000_000_000
    assert header.max_timestamp == 1_700_000_000_004
    assert header.compression == Compression.NONE
    assert header.timestamp_type is TimestampType.CREATE_TIME
    assert not header.is_transactional
    assert not header.is_control
    assert compute_crc(raw, 0, header) == header.crc


@pytest.mark.parametrize(
    "codec", [Compression.GZIP, Compression.LZ4, Compression.ZSTD, Compression.SNAPPY]
)
def test_compressed_batches_keep_codec_bits(codec: Compression) -> None:
    raw = build_batch(10, compression=int(codec))
    ((pos, header),) = list(iter_batches(raw))
    assert pos == 0
    assert header.compression == codec
    assert header.records_count == 10


def test_stamp_keeps_crc_valid_and_kafka_python_reads_new_offsets() -> None:
    raw = bytearray(build_batch(3) + build_batch(2))
    headers = list(iter_batches(raw))
    assert [h.records_count for _, h in headers] == [3, 2]
    stamp_batch(raw, headers[0][0], 100, 7)
    stamp_batch(raw, headers[1][0], 103, 7)
    stamped = list(iter_batches(raw))  # CRC still valid after stamping
    assert [(h.base_offset, h.partition_leader_epoch) for _, h in stamped] == [(100, 7), (103, 7)]
    first = DefaultRecordBatch(bytes(raw[: stamped[0][1].size]))
    assert first.validate_crc()
    assert [r.offset for r in first] == [100, 101, 102]


def test_flipped_byte_in_records_fails_crc() -> None:
    raw = bytearray(build_batch(4))
    raw[BATCH_HEADER_SIZE + 3] ^= 0xFF
    with pytest.raises(CorruptRecordBatchError) as info:
        list(iter_batches(raw))
    assert info.value.code is ErrorCode.CORRUPT_MESSAGE
    assert "CRC" in str(info.value)


def test_truncated_batch_is_reported_with_position() -> None:
    raw = build_batch(4) + build_batch(4)[:-1]
    with pytest.raises(CorruptRecordBatchError, match=r"declares .* bytes but only"):
        list(iter_batches(raw))
    with pytest.raises(CorruptRecordBatchError, match="truncated"):
        parse_header(raw[:20])


def test_old_magic_is_unsupported_for_message_format() -> None:
    raw = bytearray(build_batch(1))
    raw[16] = 1
    with pytest.raises(CorruptRecordBatchError) as info:
        parse_header(raw)
    assert info.value.code is ErrorCode.UNSUPPORTED_FOR_MESSAGE_FORMAT


def test_negative_length_is_corrupt() -> None:
    raw = bytearray(build_batch(1))
    raw[8:12] = (-5).to_bytes(4, "big", signed=True)
    with pytest.raises(CorruptRecordBatchError) as info:
        parse_header(raw)
    assert info.value.code is ErrorCode.CORRUPT_MESSAGE


def test_read_batch_size() -> None:
    raw = build_batch(2)
    assert read_batch_size(raw, 0) == len(raw)
    assert read_batch_size(raw[:10], 0) is None
