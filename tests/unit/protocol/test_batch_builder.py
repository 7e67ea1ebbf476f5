"""The one batch encoder: byte-exact record forms, the header it frames, and round trips
through the consumer-side decoder (``tidelog.client.records.decode_records``)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tidelog.client.records import decode_records
from tidelog.protocol.batch_builder import (
    TRANSACTIONAL_ATTRIBUTE,
    RecordFields,
    encode_batch,
    encode_records,
    frame_batch,
)
from tidelog.protocol.records import (
    BATCH_HEADER_SIZE,
    Compression,
    TimestampType,
    iter_batches,
    parse_header,
)


@pytest.mark.parametrize(
    ("records", "deltas", "section"),
    [
        # length 7 | attributes 0 | tsDelta 0 | offsetDelta 0 | key null | value "v" | 0 headers
        ([(None, b"v", ())], None, b"\x0e\x00\x00\x00\x01\x02v\x00"),
        ([(b"k", None, ())], None, b"\x0e\x00\x00\x00\x02k\x01\x00"),
        # length 9, one header: key "h" (utf-8), value null
        ([(None, None, [("h", None)])], None, b"\x12\x00\x00\x00\x01\x01\x02\x02h\x01"),
        # timestamp deltas are zig-zag varlongs; the second record has offsetDelta 1
        (
            [(None, b"a", ()), (None, b"b", ())],
            [-1, 64],
            b"\x0e\x00\x01\x00\x01\x02a\x00" + b"\x10\x00\x80\x01\x02\x01\x02b\x00",
        ),
    ],
)
def test_records_section_is_byte_exact(
    records: list[RecordFields], deltas: list[int] | None, section: bytes
) -> None:
    assert encode_records(records, deltas) == section


def test_encode_batch_frames_one_uncompressed_batch() -> None:
    records: list[RecordFields] = [(b"k%d" % i, b"v" * i, ()) for i in range(3)]
    batch = encode_batch(
        records,
        1_700_000_000_000,
        producer_id=7,
        producer_epoch=2,
        base_sequence=40,
        transactional=True,
    )
    ((pos, header),) = list(iter_batches(batch, verify_crc=True))
    assert pos == 0
    assert header.size == len(batch) == BATCH_HEADER_SIZE + len(encode_records(records))
    assert (header.base_offset, header.last_offset_delta, header.records_count) == (0, 2, 3)
    assert header.base_timestamp == header.max_timestamp == 1_700_000_000_000
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (7, 2, 40)
    assert header.is_transactional
    assert not header.is_control
    assert header.compression == Compression.NONE
    assert header.timestamp_type == TimestampType.CREATE_TIME
    plain = parse_header(encode_batch(records, 5), 0)
    assert not plain.is_transactional
    assert (plain.producer_id, plain.producer_epoch, plain.base_sequence) == (-1, -1, -1)


OPT_BYTES = st.one_of(st.none(), st.binary(max_size=300))
RECORD = st.tuples(
    OPT_BYTES, OPT_BYTES, st.lists(st.tuples(st.text(max_size=8), OPT_BYTES), max_size=3)
)


@settings(max_examples=200)
@given(
    data=st.data(),
    records=st.lists(RECORD, min_size=1, max_size=8),
    base_timestamp=st.integers(0, 2**42),
    base_offset=st.integers(0, 2**40),
)
def test_frame_then_decode_round_trips(
    data: st.DataObject, records: list[RecordFields], base_timestamp: int, base_offset: int
) -> None:
    deltas = data.draw(
        st.one_of(
            st.none(),
            st.lists(st.integers(-(2**40), 2**40), min_size=len(records), max_size=len(records)),
        )
    )
    timestamps = [base_timestamp + d for d in deltas or [0] * len(records)]
    batch = frame_batch(
        encode_records(records, deltas),
        count=len(records),
        base_timestamp_ms=base_timestamp,
        max_timestamp_ms=max(timestamps),
        attributes=TRANSACTIONAL_ATTRIBUTE,
        base_offset=base_offset,
        partition_leader_epoch=3,
    )
    decoded = list(decode_records(batch))
    assert [(r.key, r.value, list(r.headers)) for r in decoded] == [
        (k, v, list(h)) for k, v, h in records
    ]
    assert [r.offset for r in decoded] == list(range(base_offset, base_offset + len(records)))
    assert [r.timestamp_ms for r in decoded] == timestamps
    assert {r.leader_epoch for r in decoded} == {3}
    assert parse_header(batch, 0).max_timestamp == max(timestamps)
