"""Record-level decoding of one batch, cross-checked against kafka-python's reader."""

from __future__ import annotations

import cramjam
import crc32c
import pytest
from kafka.record.default_records import DefaultRecordBatch

from tidelog.protocol.records import BATCH_HEADER_SIZE, CRC_START, Compression, parse_header
from tidelog.storage.record_scan import first_record_at_or_after, record_offsets_and_timestamps

from .batches import BASE_TS, build_batch


@pytest.mark.parametrize("codec", list(Compression))
def test_offsets_and_timestamps_match_kafka_python(codec: Compression) -> None:
    raw = build_batch(25, compression=int(codec), value_size=120, ts_step=-3)
    ours = record_offsets_and_timestamps(raw)
    theirs = [(r.offset, r.timestamp) for r in DefaultRecordBatch(raw)]
    assert ours == theirs
    assert ours[0] == (0, BASE_TS)


def test_raw_snappy_without_xerial_framing() -> None:
    # Some producers (librdkafka) send plain snappy blocks rather than Java's xerial framing.
    plain = build_batch(10, value_size=200)
    body = bytes(cramjam.snappy.compress_raw(plain[BATCH_HEADER_SIZE:]))
    batch = bytearray(plain[:BATCH_HEADER_SIZE] + body)
    batch[8:12] = (len(batch) - 12).to_bytes(4, "big")
    batch[22] = (batch[22] & ~0x07) | int(Compression.SNAPPY)  # attributes, low byte
    batch[17:21] = crc32c.crc32c(bytes(batch[CRC_START:])).to_bytes(4, "big")
    assert parse_header(batch).compression == Compression.SNAPPY
    assert [(r.offset, r.timestamp) for r in DefaultRecordBatch(bytes(batch))] == (
        record_offsets_and_timestamps(bytes(batch))
    )


def test_first_record_at_or_after() -> None:
    raw = build_batch(5, ts_step=10)
    assert first_record_at_or_after(raw, BASE_TS + 11) == (2, BASE_TS + 20)
    assert first_record_at_or_after(raw, BASE_TS, min_offset=3) == (3, BASE_TS + 30)
    assert first_record_at_or_after(raw, BASE_TS + 41) is None
