"""The record batch codecs: bounded decompression, compression as Kafka's clients write it,
and the broker's ``compression.type`` (Kafka's ``BrokerCompressionType``).

A compressed v2 batch compresses everything after its 61-byte header (the records) with
the codec in attributes bits 0-2. The framings Kafka's clients write, which this module
reads and writes:

  gzip (1)    RFC 1952 (Java's ``GZIPOutputStream``); concatenated members are read, as
              Java's ``GZIPInputStream`` does. Read with the standard library's zlib.
  snappy (2)  snappy-java's "xerial" framing (what the Java client and kafka-python write):
              ``\\x82SNAPPY\\x00`` + version int32 + compatible version int32, then
              ``(int32 length, raw snappy block)*``; or one raw snappy block (librdkafka).
              Written xerial-framed in 32 KiB blocks, which every client reads.
  lz4 (3)     the LZ4 frame format. Kafka's ``KafkaLZ4BlockInputStream`` refuses dependent
              blocks, so frames are written with independent 64 KiB blocks and no content
              checksum, as Kafka's ``KafkaLZ4BlockOutputStream`` writes them.
  zstd (4)    zstd frames (KIP-110: Produce v7+ and Fetch v10+ only, which the server
              enforces).

Compression levels are KIP-390's ``compression.{gzip,lz4,zstd}.level`` with Kafka's
defaults (``CompressionLevels``).

Decompression is bounded (``decompress(..., max_bytes)``): a batch whose records would
decompress to more than ``max_bytes`` raises ``DecompressedTooLargeError`` after producing
at most about that much, so a small "zip bomb" cannot take the broker's memory; anything
that is not a whole, well-formed stream of the codec raises ``CodecError``. The codecs are
maintained libraries (zlib and cramjam for gzip, cramjam for snappy and for writing zstd,
python-lz4, python-zstandard for bounded zstd reads); only the xerial framing, a
length-prefixed list of blocks, is read and written here.
"""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass
from typing import Final

import cramjam
import lz4.frame
import zstandard

from tidelog.protocol.records import Compression

#: Kafka's ``compression.type`` values for topics and brokers (``BrokerCompressionType``):
#: ``producer`` keeps the producer's codec, ``uncompressed`` stores batches uncompressed,
#: a codec name recompresses every data batch with it. Kafka 3.x has no ``none`` here.
COMPRESSION_TYPES: Final = ("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer")
#: ``compression.type`` -> the codec it forces (``producer`` forces none).
_FORCED: Final = {
    "uncompressed": Compression.NONE,
    "gzip": Compression.GZIP,
    "snappy": Compression.SNAPPY,
    "lz4": Compression.LZ4,
    "zstd": Compression.ZSTD,
}
#: Kafka's ``CompressionType.name``, as kafka-dump-log prints it.
CODEC_NAMES: Final = {
    Compression.NONE: "none",
    Compression.GZIP: "gzip",
    Compression.SNAPPY: "snappy",
    Compression.LZ4: "lz4",
    Compression.ZSTD: "zstd",
}

XERIAL_MAGIC: Final = b"\x82SNAPPY\x00"
_XERIAL_HEADER: Final = XERIAL_MAGIC + struct.pack(">ii", 1, 1)
_XERIAL_HEADER_SIZE: Final = len(_XERIAL_HEADER)  # 16
#: snappy-java's default block size.
_XERIAL_BLOCK: Final = 32 * 1024
_INT32: Final = struct.Struct(">i")
#: zstd windows beyond this are refused (zstd's own default limit, ZSTD_WINDOWLOG_LIMIT_DEFAULT).
_ZSTD_MAX_WINDOW: Final = 1 << 27
#: zlib's level for gzip level -1 (Java's ``Deflater.DEFAULT_COMPRESSION``).
_GZIP_DEFAULT_LEVEL: Final = 6
#: python-lz4 picks its fast compressor below this level, LZ4HC from it on.
_LZ4_HC_MIN_LEVEL: Final = 3


@dataclass(frozen=True, slots=True, kw_only=True)
class CompressionLevels:
    """KIP-390's ``compression.{gzip,lz4,zstd}.level``, with Kafka's defaults: gzip -1
    (zlib's default, 6), lz4 9 (LZ4HC level 9, as Kafka's ``Lz4Compression``), zstd 3."""

    gzip: int = -1
    lz4: int = 9
    zstd: int = 3


class CodecError(ValueError):
    """The bytes are not a whole, well-formed stream of the codec."""


class DecompressedTooLargeError(CodecError):
    """The stream decompresses to more than the bound it was read with."""


def target_codec(compression_type: str, source: int) -> int:
    """The codec a batch with codec ``source`` is stored with under ``compression.type``
    (Kafka's ``BrokerCompressionType.targetCompressionType``)."""
    forced = _FORCED.get(compression_type)
    return source if forced is None else int(forced)


def codec_name(codec: int) -> str:
    try:
        return CODEC_NAMES[Compression(codec)]
    except ValueError:
        return f"unknown({codec})"


def decompress(codec: int, data: bytes | memoryview, *, max_bytes: int) -> bytes:
    """The records of a batch body compressed with ``codec``; see the module docstring."""
    if codec == Compression.NONE:
        if len(data) > max_bytes:
            raise DecompressedTooLargeError(f"{len(data)} bytes, above {max_bytes}")
        return bytes(data)
    try:
        if codec == Compression.GZIP:
            return _gunzip(data, max_bytes)
        if codec == Compression.SNAPPY:
            return _unsnappy(bytes(data), max_bytes)
        if codec == Compression.LZ4:
            return _unlz4(data, max_bytes)
        if codec == Compression.ZSTD:
            return _unzstd(bytes(data), max_bytes)
    except CodecError:
        raise
    except Exception as exc:  # zlib.error, cramjam/lz4 RuntimeError, ZstdError, ...
        raise CodecError(f"{codec_name(codec)}: {exc}") from None
    raise CodecError(f"unknown compression codec {codec}")


DEFAULT_LEVELS: Final = CompressionLevels()


def compress(codec: int, data: bytes, levels: CompressionLevels = DEFAULT_LEVELS) -> bytes:
    """``data`` compressed with ``codec`` in the framing Kafka's clients read."""
    if codec == Compression.NONE:
        return data
    if codec == Compression.GZIP:
        level = _GZIP_DEFAULT_LEVEL if levels.gzip == -1 else levels.gzip
        return bytes(cramjam.gzip.compress(data, level=level))
    if codec == Compression.SNAPPY:
        return xerial_snappy(data)
    if codec == Compression.LZ4:
        return bytes(
            lz4.frame.compress(
                data,
                compression_level=max(levels.lz4, _LZ4_HC_MIN_LEVEL) if levels.lz4 > 1 else 0,
                block_size=lz4.frame.BLOCKSIZE_MAX64KB,
                block_linked=False,
                content_checksum=False,
            )
        )
    if codec == Compression.ZSTD:
        return bytes(cramjam.zstd.compress(data, level=levels.zstd))
    raise ValueError(f"unknown compression codec {codec}")


def xerial_snappy(data: bytes) -> bytes:
    """snappy-java's framing of ``data`` (32 KiB blocks), as the Java client writes it."""
    out = bytearray(_XERIAL_HEADER)
    view = memoryview(data)
    for start in range(0, len(data), _XERIAL_BLOCK):
        block = bytes(cramjam.snappy.compress_raw(view[start : start + _XERIAL_BLOCK]))
        out += _INT32.pack(len(block))
        out += block
    return bytes(out)


def _too_large(codec: str, max_bytes: int) -> DecompressedTooLargeError:
    return DecompressedTooLargeError(f"{codec} records decompress to more than {max_bytes} bytes")


def _gunzip(data: bytes | memoryview, max_bytes: int) -> bytes:
    out = bytearray()
    rest = bytes(data)
    if not rest:
        raise CodecError("gzip: empty stream")
    while rest:
        member = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)
        out += member.decompress(rest, max_bytes + 1 - len(out))
        if len(out) > max_bytes:
            raise _too_large("gzip", max_bytes)
        if not member.eof:
            raise CodecError("gzip: the stream is truncated")
        rest = member.unused_data
    return bytes(out)


def _snappy_block(block: bytes, budget: int) -> bytes:
    length = int(cramjam.snappy.decompress_raw_len(block))
    if length > budget:
        raise _too_large("snappy", budget)
    return bytes(cramjam.snappy.decompress_raw(block))


def _unsnappy(data: bytes, max_bytes: int) -> bytes:
    if not data.startswith(XERIAL_MAGIC):
        return _snappy_block(data, max_bytes)
    if len(data) < _XERIAL_HEADER_SIZE:
        raise CodecError("snappy: the xerial header is truncated")
    out = bytearray()
    pos = _XERIAL_HEADER_SIZE
    while pos < len(data):
        if len(data) - pos < 4:
            raise CodecError(f"snappy: a xerial block length is truncated at byte {pos}")
        (length,) = _INT32.unpack_from(data, pos)
        pos += 4
        if length <= 0 or length > len(data) - pos:
            raise CodecError(f"snappy: a xerial block at byte {pos - 4} declares {length} bytes")
        try:
            out += _snappy_block(data[pos : pos + length], max_bytes - len(out))
        except DecompressedTooLargeError:
            raise _too_large("snappy", max_bytes) from None
        pos += length
    return bytes(out)


def _unlz4(data: bytes | memoryview, max_bytes: int) -> bytes:
    out = bytearray()
    rest = bytes(data)
    if not rest:
        raise CodecError("lz4: empty stream")
    while rest:
        frame = lz4.frame.LZ4FrameDecompressor()
        out += frame.decompress(rest, max_length=max_bytes + 1 - len(out))
        if len(out) > max_bytes:
            raise _too_large("lz4", max_bytes)
        if not frame.eof:
            raise CodecError("lz4: the frame is truncated")
        rest = frame.unused_data or b""
    return bytes(out)


def _unzstd(data: bytes, max_bytes: int) -> bytes:
    """Two passes: a streaming read that stops past ``max_bytes`` (its reader does not
    report a truncated frame), then, known to fit, a decompression that checks the frames
    end exactly where the data does."""
    if not data:
        raise CodecError("zstd: empty stream")
    if zstandard.frame_content_size(data) > max_bytes:  # -1: not declared
        raise _too_large("zstd", max_bytes)
    decompressor = zstandard.ZstdDecompressor(max_window_size=_ZSTD_MAX_WINDOW)
    reader = decompressor.stream_reader(data, read_across_frames=True)
    produced = 0
    while True:
        chunk = reader.read(max_bytes + 1 - produced)
        if not chunk:
            break
        produced += len(chunk)
        if produced > max_bytes:
            raise _too_large("zstd", max_bytes)
    out = bytearray()
    rest = data
    while rest:
        frame = decompressor.decompressobj()
        out += frame.decompress(rest)
        if not frame.eof:
            raise CodecError("zstd: the frame is truncated")
        rest = frame.unused_data
        if len(out) > max_bytes:  # cannot happen after the first pass; kept as the bound
            raise _too_large("zstd", max_bytes)
    return bytes(out)
