"""The leader's validation of compressed batches and its recompression (Kafka's
LogValidator): batches built by kafka-python's independent codec, checked against its reader."""

from __future__ import annotations

import struct
from pathlib import Path
from typing import Any

import crc32c
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder

from tidelog.client.records import Record, build_control_batch, decode_records
from tidelog.client.records import build_batch as build_our_batch
from tidelog.errors import ErrorCode
from tidelog.protocol.records import (
    BATCH_HEADER_SIZE,
    CRC_START,
    Compression,
    CorruptRecordBatchError,
    compute_crc,
    parse_header,
)
from tidelog.storage import batch_validation
from tidelog.storage.compression import compress, decompress
from tidelog.storage.errors import RecordTooLargeError
from tidelog.storage.log import Log, LogConfig
from tidelog.storage.log_validator import (
    max_decompressed_bytes,
    needs_validation,
    validate_batch,
)
from tidelog.storage.record_scan import (
    DecodedRecord,
    check_records,
    encode_records,
    iter_records,
)

from .batches import BASE_TS, read_all

CODECS = [Compression.GZIP, Compression.SNAPPY, Compression.LZ4, Compression.ZSTD]
TYPES = ["uncompressed", "gzip", "snappy", "lz4", "zstd"]
MB = 1 << 20


def kp_batch(
    n: int,
    codec: int = 0,
    *,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    transactional: bool = False,
) -> bytes:
    """``n`` records with keys, values and headers, by kafka-python's builder."""
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=codec,
        is_transactional=transactional,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=base_sequence,
        batch_size=1 << 24,
    )
    for i in range(n):
        builder.append(
            i,
            timestamp=BASE_TS + 7 * i,
            key=None if i % 5 == 0 else b"key-%d" % i,
            value=b"value %d " % i * 30,
            headers=[("h", b"%d" % i), ("empty", None)] if i % 2 else [],
        )
    return bytes(builder.build())


def with_body(
    batch: bytes, body: bytes, *, codec: int | None = None, count: int | None = None
) -> bytes:
    """``batch`` with another (compressed) body, codec or record count, CRC made valid again:
    what a client that compressed garbage would send."""
    out = bytearray(batch[:BATCH_HEADER_SIZE] + body)
    struct.pack_into(">i", out, 8, len(out) - 12)
    if codec is not None:
        (attributes,) = struct.unpack_from(">h", out, 21)
        struct.pack_into(">h", out, 21, (attributes & ~7) | codec)
    if count is not None:
        struct.pack_into(">i", out, 57, count)
        struct.pack_into(">i", out, 23, count - 1)
    struct.pack_into(">I", out, 17, crc32c.crc32c(bytes(out[CRC_START:])))
    return bytes(out)


def plain_body(batch: bytes) -> bytes:
    header = parse_header(batch)
    return decompress(header.compression, batch[BATCH_HEADER_SIZE:], max_bytes=1 << 30)


def kp_records(batch: bytes) -> list[tuple[Any, ...]]:
    return [
        (r.offset, r.timestamp, r.key, r.value, tuple(r.headers)) for r in DefaultRecordBatch(batch)
    ]


def validate(batch: bytes, compression_type: str = "producer", **kw: Any) -> bytes | None:
    kw.setdefault("max_decompressed", MB)
    return validate_batch(batch, compression_type=compression_type, **kw)


# ------------------------------------------------------------------ as sent


@pytest.mark.parametrize("codec", CODECS)
def test_well_formed_batches_are_kept_as_sent(codec: Compression) -> None:
    batch = kp_batch(40, codec)
    assert needs_validation(parse_header(batch).attributes, "producer")
    assert validate(batch) is None
    assert validate(batch, compression_type=TYPES[codec]) is None  # already the target


def test_uncompressed_batches_skip_the_validator_unless_recompressed() -> None:
    attributes = parse_header(kp_batch(3)).attributes
    assert not needs_validation(attributes, "producer")
    assert not needs_validation(attributes, "uncompressed")
    assert needs_validation(attributes, "zstd")


# ------------------------------------------------------------------ recompression


@pytest.mark.parametrize("source", [Compression.NONE, *CODECS])
@pytest.mark.parametrize("compression_type", TYPES)
def test_recompression_keeps_every_field(source: Compression, compression_type: str) -> None:
    batch = kp_batch(
        25, source, producer_id=4242, producer_epoch=3, base_sequence=17, transactional=True
    )
    target = TYPES.index(compression_type)
    rebuilt = validate(batch, compression_type)
    if target == source:
        assert rebuilt is None
        return
    assert rebuilt is not None
    before, after = parse_header(batch), parse_header(rebuilt)
    assert after.compression == target
    assert compute_crc(rebuilt, 0, after) == after.crc
    assert after.size == len(rebuilt)
    for field in (
        "base_offset",
        "partition_leader_epoch",
        "magic",
        "last_offset_delta",
        "base_timestamp",
        "max_timestamp",
        "producer_id",
        "producer_epoch",
        "base_sequence",
        "records_count",
    ):
        assert getattr(after, field) == getattr(before, field), field
    assert after.attributes & ~7 == before.attributes & ~7  # transactional, timestamp type
    assert after.is_transactional
    assert kp_records(rebuilt) == kp_records(batch)
    assert plain_body(rebuilt) == plain_body(batch)  # the record bytes themselves are kept
    # tidelog's own consumer-side decoder agrees.
    ours = [(r.offset, r.key, r.value) for r in decode_records(rebuilt)]
    assert ours == [(o, k, v) for o, _t, k, v, _h in kp_records(batch)]


def test_control_batches_are_never_recompressed() -> None:
    marker = build_control_batch(7, 1, True, 3, BASE_TS)
    attributes = parse_header(marker).attributes
    assert not needs_validation(attributes, "zstd")
    assert validate(marker, "zstd") is None


def test_offset_deltas_not_in_order_are_rewritten_as_kafka_does() -> None:
    batch = kp_batch(6, Compression.GZIP)
    records = list(iter_records(plain_body(batch), 6))
    shuffled = [
        r._replace(offset_delta=d) for r, d in zip(records, [0, 0, 2, 9, 4, 5], strict=True)
    ]
    bad = with_body(batch, compress(Compression.GZIP, encode_records(shuffled)))
    assert not check_records(plain_body(bad), 6)
    rebuilt = validate(bad)
    assert rebuilt is not None
    assert parse_header(rebuilt).compression == Compression.GZIP
    assert [r.offset_delta for r in iter_records(plain_body(rebuilt), 6)] == list(range(6))
    assert kp_records(rebuilt) == kp_records(batch)


# ------------------------------------------------------------------ refusals


def _corrupt(batch: bytes) -> CorruptRecordBatchError:
    with pytest.raises(CorruptRecordBatchError) as info:
        validate(batch)
    assert info.value.code == ErrorCode.CORRUPT_MESSAGE
    return info.value


@pytest.mark.parametrize("codec", CODECS)
def test_corrupt_payloads_are_corrupt_message(codec: Compression) -> None:
    good = kp_batch(30, codec)
    payload = good[BATCH_HEADER_SIZE:]
    assert "does not decompress" in str(_corrupt(with_body(good, b"garbage" * 20)))
    assert "does not decompress" in str(_corrupt(with_body(good, payload[: len(payload) // 2])))
    assert "does not decompress" in str(_corrupt(with_body(good, payload + b"\x00\x01\x02")))
    # A payload of another codec under this codec's bits.
    other = CODECS[(CODECS.index(codec) + 1) % 4]
    _corrupt(with_body(good, compress(other, plain_body(good))))


@pytest.mark.parametrize("codec", CODECS)
def test_malformed_records_are_corrupt_message(codec: Compression) -> None:
    good = kp_batch(10, codec)
    body = plain_body(good)
    records = list(iter_records(body, 10))

    def wrapped(plain: bytes, count: int = 10) -> bytes:
        return with_body(good, compress(codec, plain), count=count)

    assert "holds 10" in str(_corrupt(wrapped(body, count=11)))  # fewer records than declared
    assert "follow the last" in str(_corrupt(wrapped(body, count=9)))  # more than declared
    assert "follow the last" in str(_corrupt(wrapped(body + b"\x00\x00")))  # trailing bytes
    # A record whose length says one byte more than its fields take.
    first = encode_records(records[:1])
    longer = bytes([first[0] + 2]) + first[1:] + b"\x00"
    _corrupt(wrapped(longer + encode_records(records[1:])))
    # A negative header count, a null header key.
    bad_headers = records[0]._replace(headers=((b"k", b"v"),))
    encoded = encode_records([bad_headers])
    negative = encoded[:-5] + b"\x01" + encoded[-4:]  # header count -1 (zig-zag 1)
    assert "headers" in str(_corrupt(wrapped(negative + encode_records(records[1:]))))
    null_key = encoded[:-4] + b"\x01" + encoded[-3:]  # header key length -1
    assert "null" in str(_corrupt(wrapped(null_key + encode_records(records[1:]))))


@settings(max_examples=150, deadline=None)
@given(data=st.data())
def test_random_damage_never_escapes_as_anything_but_kafka_errors(data: st.DataObject) -> None:
    codec = data.draw(st.sampled_from(CODECS))
    good = kp_batch(5, codec)
    payload = bytearray(good[BATCH_HEADER_SIZE:])
    for _ in range(data.draw(st.integers(1, 4))):
        payload[data.draw(st.integers(0, len(payload) - 1))] = data.draw(st.integers(0, 255))
    batch = with_body(good, bytes(payload))
    try:
        rebuilt = validate(batch, data.draw(st.sampled_from(["producer", *TYPES])))
    except (CorruptRecordBatchError, RecordTooLargeError):
        return
    # Accepted: a consumer must then be able to decode it. tidelog's consumer-side decoder,
    # which reads records as Java's DefaultRecord does (kafka-python is no oracle here: it
    # reads the unused record attributes byte as a varint and header keys as strict UTF-8,
    # so it fails on batches Kafka accepts).
    assert len(list(decode_records(rebuilt or batch))) == 5


@pytest.mark.parametrize("codec", CODECS)
def test_zip_bomb_is_record_list_too_large(codec: Compression) -> None:
    good = kp_batch(1, codec)
    bomb = with_body(good, compress(codec, bytes(8 * MB)))
    with pytest.raises(RecordTooLargeError) as info:
        validate(bomb)
    assert info.value.code == ErrorCode.RECORD_LIST_TOO_LARGE
    assert max_decompressed_bytes(1048588) == 64 * 1048588


# ------------------------------------------------------------------ through the Log


def new_log(tmp_path: Path, **config: Any) -> Log:
    return Log.open(tmp_path / "t-0", LogConfig(**config), now_ms=0)


def test_log_recompresses_leader_appends(tmp_path: Path) -> None:
    log = new_log(tmp_path, compression_type="zstd")
    first = kp_batch(10, Compression.GZIP)
    second = kp_batch(5)
    log.append_as_leader(first, leader_epoch=0, now_ms=0)
    info = log.append_as_leader(second, leader_epoch=0, now_ms=0)
    assert (info.first_offset, info.last_offset) == (10, 14)
    stored = read_all(log)
    assert DefaultRecordBatch(stored).compression_type == Compression.ZSTD
    headers = []
    pos = 0
    while pos < len(stored):
        header = parse_header(stored, pos)
        headers.append(header)
        pos += header.size
    assert [(h.base_offset, h.compression) for h in headers] == [(0, 4), (10, 4)]
    got = [(r.offset, r.value) for r in decode_records(stored)]
    assert got == [(i, b"value %d " % i * 30) for i in range(10)] + [
        (10 + i, b"value %d " % i * 30) for i in range(5)
    ]


def test_log_refuses_a_corrupt_compressed_batch_and_writes_nothing(tmp_path: Path) -> None:
    log = new_log(tmp_path)
    log.append_as_leader(kp_batch(3), leader_epoch=0, now_ms=0)
    good = kp_batch(4, Compression.LZ4)
    bad = with_body(good, good[BATCH_HEADER_SIZE:-6])
    size = log.size_bytes
    with pytest.raises(CorruptRecordBatchError) as info:
        log.append_as_leader(kp_batch(2) + bad, leader_epoch=0, now_ms=0)
    assert info.value.code == ErrorCode.CORRUPT_MESSAGE
    assert (log.log_end_offset, log.size_bytes) == (3, size)
    log.append_as_leader(good, leader_epoch=0, now_ms=0)
    assert log.log_end_offset == 7


def test_rebuilt_batch_above_max_message_bytes_is_message_too_large(tmp_path: Path) -> None:
    log = new_log(tmp_path, compression_type="uncompressed", max_message_bytes=4000)
    batch = kp_batch(60, Compression.ZSTD)  # compresses well under 4000 bytes
    assert len(batch) < 4000 < len(plain_body(batch))
    with pytest.raises(RecordTooLargeError) as info:
        log.append_as_leader(batch, leader_epoch=0, now_ms=0)
    assert info.value.code == ErrorCode.MESSAGE_TOO_LARGE
    assert log.log_end_offset == 0


def test_followers_store_the_leaders_bytes_unvalidated(tmp_path: Path) -> None:
    log = new_log(tmp_path, compression_type="zstd")
    good = kp_batch(4, Compression.SNAPPY)
    garbage = with_body(good, b"not snappy at all")
    info = log.append_as_follower(garbage, now_ms=0)
    assert info.num_records == 4
    assert read_all(log) == garbage  # neither refused nor recompressed


def test_uncompressed_fast_path_never_walks_records(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def boom(*_a: object, **_k: object) -> None:
        raise AssertionError("validate_batch called on the fast path")

    monkeypatch.setattr(batch_validation, "validate_batch", boom)
    log = new_log(tmp_path)
    log.append_as_leader(kp_batch(50) + kp_batch(3), leader_epoch=0, now_ms=0)
    assert log.log_end_offset == 53
    log.update_config(LogConfig(compression_type="uncompressed"))
    log.append_as_leader(kp_batch(2), leader_epoch=0, now_ms=0)
    assert log.log_end_offset == 55


def test_idempotent_retry_of_a_recompressed_batch_is_a_duplicate(tmp_path: Path) -> None:
    log = new_log(tmp_path, compression_type="lz4")
    batch = kp_batch(5, Compression.GZIP, producer_id=9, producer_epoch=0, base_sequence=0)
    first = log.append_as_leader(batch, leader_epoch=0, now_ms=0)
    retry = log.append_as_leader(batch, leader_epoch=0, now_ms=0)
    assert retry.duplicate
    assert (retry.first_offset, retry.last_offset) == (first.first_offset, first.last_offset)
    follow = kp_batch(2, Compression.NONE, producer_id=9, producer_epoch=0, base_sequence=5)
    assert log.append_as_leader(follow, leader_epoch=0, now_ms=0).first_offset == 5
    stored = read_all(log)
    assert parse_header(stored).compression == Compression.LZ4
    assert parse_header(stored).base_sequence == 0


def test_zip_bomb_through_the_log(tmp_path: Path) -> None:
    log = new_log(tmp_path, max_message_bytes=100_000)  # bound: 64 MiB
    good = kp_batch(1, Compression.ZSTD)
    bomb = with_body(good, compress(Compression.ZSTD, bytes(65 * MB)))
    assert len(bomb) < 100_000
    with pytest.raises(RecordTooLargeError) as info:
        log.append_as_leader(bomb, leader_epoch=0, now_ms=0)
    assert info.value.code == ErrorCode.RECORD_LIST_TOO_LARGE
    assert log.log_end_offset == 0


@settings(max_examples=40, deadline=None)
@given(
    records=st.lists(
        st.builds(
            Record,
            value=st.none() | st.binary(max_size=300),
            key=st.none() | st.binary(max_size=20),
            headers=st.lists(
                st.tuples(st.text(max_size=5), st.none() | st.binary(max_size=5)), max_size=3
            ),
            timestamp_ms=st.integers(BASE_TS - 10**6, BASE_TS + 10**6),
        ),
        min_size=1,
        max_size=30,
    ),
    codec=st.sampled_from(list(Compression)),
)
def test_walk_and_decode_agree_with_the_client_codec(
    records: list[Record], codec: Compression
) -> None:
    batch = build_our_batch(records, compression=codec)
    body = plain_body(batch)
    assert check_records(body, len(records))
    decoded = list(iter_records(body, len(records)))
    assert [(r.key, r.value) for r in decoded] == [(r.key, r.value) for r in records]
    assert encode_records(decoded) == body
    assert all(isinstance(r, DecodedRecord) for r in decoded)
