"""Kafka's two varint codecs, once: unsigned (protocol tagged fields, compact lengths) and
zig-zag signed (the fields of a v2 record).

Both are the protobuf base-128 encoding: seven bits a byte, low group first, the high bit
set on every byte but the last. A signed value is zig-zag mapped first (0, -1, 1, -2 ... ->
0, 1, 2, 3 ...) so that small negative numbers stay short (Kafka's ``ByteUtils``).

Decoders take the buffer, the position and the end of the region they may read, and return
``(value, next position)``; bytes that run past ``end`` or a varint longer than Kafka allows
raise ``VarintError`` (a ``ValueError``), which each caller turns into its own error.
"""

from __future__ import annotations

from typing import Final

#: An unsigned varint of an int32 takes at most 5 bytes; a zig-zag varlong at most 10.
MAX_UVARINT_BYTES: Final = 5
MAX_VARLONG_BYTES: Final = 10

_MASK64: Final = 0xFFFFFFFFFFFFFFFF

Buffer = bytes | bytearray | memoryview


class VarintError(ValueError):
    """A varint runs past the end of its region, or is longer than Kafka allows."""


def read_uvarint(buf: Buffer, pos: int, end: int | None = None) -> tuple[int, int]:
    """Unsigned varint (at most 5 bytes, an int32) at ``pos`` -> (value, next position)."""
    if end is None:
        end = len(buf)
    value = 0
    shift = 0
    while True:
        if pos >= end:
            raise VarintError("varint runs past the end of the buffer")
        byte = buf[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, pos
        shift += 7
        if shift >= 7 * MAX_UVARINT_BYTES:
            raise VarintError(f"varint longer than {MAX_UVARINT_BYTES} bytes")


def read_varint(buf: Buffer, pos: int, end: int) -> tuple[int, int]:
    """Zig-zag varint (at most 10 bytes, a varlong) at ``pos`` -> (value, next position)."""
    if pos >= end:
        raise VarintError("varint runs past the end of the buffer")
    byte = buf[pos]
    if byte < 0x80:  # the common cases first: one byte, then two
        return (byte >> 1) ^ -(byte & 1), pos + 1
    if pos + 1 < end and buf[pos + 1] < 0x80:
        raw = (byte & 0x7F) | (buf[pos + 1] << 7)
        return (raw >> 1) ^ -(raw & 1), pos + 2
    start = pos
    shift = 0
    raw = 0
    while True:
        if pos >= end:
            raise VarintError("varint runs past the end of the buffer")
        byte = buf[pos]
        pos += 1
        raw |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return (raw >> 1) ^ -(raw & 1), pos
        shift += 7
        if pos - start >= MAX_VARLONG_BYTES:
            raise VarintError(f"varint longer than {MAX_VARLONG_BYTES} bytes")


def append_uvarint(value: int, out: bytearray) -> None:
    """Append ``value`` (>= 0) as an unsigned varint."""
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)


def append_varint(value: int, out: bytearray) -> None:
    """Append ``value`` as a zig-zag varint (a signed 64-bit value)."""
    append_uvarint(((value << 1) ^ (value >> 63)) & _MASK64, out)


def encode_uvarint(value: int) -> bytes:
    """``value`` (>= 0) as an unsigned varint."""
    out = bytearray()
    append_uvarint(value, out)
    return bytes(out)


def _encode_varint_uncached(value: int) -> bytes:
    out = bytearray()
    append_varint(value, out)
    return bytes(out)


#: Zig-zag varints of -1 .. 16383 (null and short lengths, offset deltas): the common case.
_SHORT_VARINTS: Final = [_encode_varint_uncached(v) for v in range(-1, 1 << 14)]


def encode_varint(value: int) -> bytes:
    """``value`` as a zig-zag varint (a signed 64-bit value)."""
    if -1 <= value < (1 << 14):
        return _SHORT_VARINTS[value + 1]
    return _encode_varint_uncached(value)
