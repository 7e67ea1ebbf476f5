"""The wire forms of Kafka's common request and response fields, for the hand-written
encoders (``tidelog.protocol.responses``, a follower's Fetch in ``tidelog.client.fetch``):
lengths and counts as compact unsigned varints (length + 1, 0 = null) in flexible
versions, as int16 / int32 before them.
"""

from __future__ import annotations

import struct
from typing import Final

from tidelog.protocol.varint import encode_uvarint

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_NULL_COMPACT: Final = b"\x00"
_NULL_LEGACY_STRING: Final = b"\xff\xff"

#: Unsigned varints of 0 .. 16383 (lengths and counts): the common case, without a loop.
_SHORT_UVARINTS: Final = [encode_uvarint(v) for v in range(1 << 14)]


def uvarint(value: int) -> bytes:
    if value < 1 << 14:
        return _SHORT_UVARINTS[value]
    return encode_uvarint(value)


def string(value: str, flexible: bool) -> bytes:
    data = value.encode()
    if flexible:
        return uvarint(len(data) + 1) + data
    return _I16.pack(len(data)) + data


def nullable_string(value: str | None, flexible: bool) -> bytes:
    if value is None:
        return _NULL_COMPACT if flexible else _NULL_LEGACY_STRING
    return string(value, flexible)


def array_length(count: int, flexible: bool) -> bytes:
    return uvarint(count + 1) if flexible else _I32.pack(count)


def tagged(tag: int, data: bytes) -> bytes:
    """One tagged field: its tag, its size, its bytes."""
    return uvarint(tag) + uvarint(len(data)) + data
