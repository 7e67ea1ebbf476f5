"""The batch codecs: round trips, the framings other clients write and read (kafka-python's
independent codec, snappy-java's xerial framing, Kafka's LZ4 frame flags), corrupt streams
and bounded decompression."""

from __future__ import annotations

import time

import cramjam
import kafka.codec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tidelog.protocol.records import Compression
from tidelog.storage.compression import (
    COMPRESSION_TYPES,
    CodecError,
    CompressionLevels,
    DecompressedTooLargeError,
    compress,
    decompress,
    target_codec,
    xerial_snappy,
)

CODECS = [Compression.GZIP, Compression.SNAPPY, Compression.LZ4, Compression.ZSTD]
#: kafka-python's encoders: gzip, xerial snappy (as the Java client), lz4 frame, zstd.
KAFKA_PYTHON_ENCODE = {
    Compression.GZIP: kafka.codec.gzip_encode,
    Compression.SNAPPY: kafka.codec.snappy_encode,
    Compression.LZ4: kafka.codec.lz4_encode,
    Compression.ZSTD: kafka.codec.zstd_encode,
}
KAFKA_PYTHON_DECODE = {
    Compression.GZIP: kafka.codec.gzip_decode,
    Compression.SNAPPY: kafka.codec.snappy_decode,
    Compression.LZ4: kafka.codec.lz4_decode,
    Compression.ZSTD: kafka.codec.zstd_decode,
}
TEXT = b"".join(b"record %d of a compressible batch; " % i for i in range(3000))
MB = 1 << 20


@settings(max_examples=60, deadline=None)
@given(codec=st.sampled_from(list(Compression)), data=st.binary(max_size=200_000))
def test_round_trip(codec: Compression, data: bytes) -> None:
    assert decompress(codec, compress(codec, data), max_bytes=len(data)) == data


@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize("levels", [CompressionLevels(), CompressionLevels(gzip=1, lz4=1, zstd=-5)])
def test_kafka_python_reads_ours_and_we_read_theirs(
    codec: Compression, levels: CompressionLevels
) -> None:
    ours = compress(codec, TEXT, levels)
    assert len(ours) < len(TEXT) // 4
    assert KAFKA_PYTHON_DECODE[codec](ours) == TEXT
    assert decompress(codec, KAFKA_PYTHON_ENCODE[codec](TEXT), max_bytes=MB) == TEXT


def test_snappy_xerial_framing_as_snappy_java_writes_it() -> None:
    framed = xerial_snappy(TEXT)
    assert framed[:16] == b"\x82SNAPPY\x00" + (1).to_bytes(4, "big") + (1).to_bytes(4, "big")
    # 32 KiB blocks, each (int32 length, raw snappy).
    pos, blocks = 16, 0
    while pos < len(framed):
        length = int.from_bytes(framed[pos : pos + 4], "big")
        block = framed[pos + 4 : pos + 4 + length]
        assert len(bytes(cramjam.snappy.decompress_raw(block))) <= 32 * 1024
        pos += 4 + length
        blocks += 1
    assert blocks == -(-len(TEXT) // (32 * 1024))
    # kafka-python's xerial encoder (the Java client's framing) and librdkafka's raw block.
    xerial = kafka.codec.snappy_encode(TEXT, xerial_compatible=True, xerial_blocksize=4096)
    assert xerial.startswith(b"\x82SNAPPY\x00")
    assert decompress(Compression.SNAPPY, xerial, max_bytes=MB) == TEXT
    raw = bytes(cramjam.snappy.compress_raw(TEXT))
    assert decompress(Compression.SNAPPY, raw, max_bytes=MB) == TEXT


def test_lz4_frames_have_independent_blocks_as_kafka_requires() -> None:
    frame = compress(Compression.LZ4, TEXT)
    assert frame[:4] == b"\x04\x22\x4d\x18"  # LZ4 frame magic
    flg, bd = frame[4], frame[5]
    assert flg >> 6 == 0b01  # version
    assert flg & 0x20  # block independence: KafkaLZ4BlockInputStream refuses dependent blocks
    assert not flg & 0x04  # no content checksum
    assert (bd >> 4) & 0x07 == 4  # 64 KiB blocks


def _flip(data: bytes, at: int) -> bytes:
    return data[:at] + bytes([data[at] ^ 0x5A]) + data[at + 1 :]


@pytest.mark.parametrize("codec", CODECS)
def test_corrupt_streams_raise_codec_error(codec: Compression) -> None:
    good = KAFKA_PYTHON_ENCODE[codec](TEXT)
    bad_streams = {
        "empty": b"",
        "garbage": b"definitely not a compressed stream" * 3,
        "truncated": good[: len(good) // 2],
        "trailing garbage": good + b"\x01\x02\x03\x04\x05",
    }
    if codec == Compression.GZIP:
        # Only gzip carries a checksum of its output (snappy, Kafka's lz4 frames and
        # kafka-python's zstd frames do not): a flipped literal elsewhere is caught by the
        # record walk (test_log_validator), or by the batch CRC before that.
        bad_streams["flipped"] = _flip(good, len(good) // 2)
    for name, bad in bad_streams.items():
        try:
            out = decompress(codec, bad, max_bytes=MB)
        except CodecError:
            continue
        pytest.fail(f"{name}: decompressed to {len(out)} bytes")


@pytest.mark.parametrize("codec", list(Compression))
def test_zip_bomb_stops_at_the_bound(codec: Compression) -> None:
    size = 64 * MB if codec != Compression.SNAPPY else 8 * MB
    bomb = compress(codec, bytes(size))
    assert len(bomb) < size // 4 or codec == Compression.NONE
    started = time.monotonic()
    with pytest.raises(DecompressedTooLargeError):
        decompress(codec, bomb, max_bytes=MB)
    # Bounded work, not a 64 MiB decompression (a generous limit for a shared machine).
    assert time.monotonic() - started < 1.0 or codec == Compression.NONE


def test_zstd_bomb_without_declared_content_size() -> None:
    import zstandard

    bomb = zstandard.ZstdCompressor(write_content_size=False).compress(bytes(64 * MB))
    with pytest.raises(DecompressedTooLargeError):
        decompress(Compression.ZSTD, bomb, max_bytes=MB)


def test_exactly_at_the_bound_is_accepted() -> None:
    for codec in list(Compression):
        data = bytes(range(256)) * 4096  # 1 MiB
        assert decompress(codec, compress(codec, data), max_bytes=len(data)) == data
        with pytest.raises(DecompressedTooLargeError):
            decompress(codec, compress(codec, data), max_bytes=len(data) - 1)


@pytest.mark.parametrize(
    ("compression_type", "source", "target"),
    [
        ("producer", Compression.NONE, Compression.NONE),
        ("producer", Compression.LZ4, Compression.LZ4),
        ("uncompressed", Compression.GZIP, Compression.NONE),
        ("uncompressed", Compression.NONE, Compression.NONE),
        ("gzip", Compression.NONE, Compression.GZIP),
        ("snappy", Compression.ZSTD, Compression.SNAPPY),
        ("lz4", Compression.GZIP, Compression.LZ4),
        ("zstd", Compression.GZIP, Compression.ZSTD),
        ("zstd", Compression.ZSTD, Compression.ZSTD),
    ],
)
def test_target_codec_follows_broker_compression_type(
    compression_type: str, source: Compression, target: Compression
) -> None:
    assert compression_type in COMPRESSION_TYPES
    assert target_codec(compression_type, source) == target
