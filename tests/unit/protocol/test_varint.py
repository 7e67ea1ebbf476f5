"""The one varint codec: round trips, Kafka's byte forms, and what bad input raises."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tidelog.protocol.varint import (
    VarintError,
    append_uvarint,
    encode_uvarint,
    encode_varint,
    read_uvarint,
    read_varint,
)


@pytest.mark.parametrize(
    ("value", "encoded"),
    [
        (0, b"\x00"),
        (-1, b"\x01"),
        (1, b"\x02"),
        (63, b"\x7e"),
        (-64, b"\x7f"),
        (64, b"\x80\x01"),
        (300, b"\xd8\x04"),
        (-(1 << 63), b"\xff" * 9 + b"\x01"),
    ],
)
def test_zigzag_varint_bytes_are_kafkas(value: int, encoded: bytes) -> None:
    assert encode_varint(value) == encoded
    assert read_varint(encoded, 0, len(encoded)) == (value, len(encoded))


@given(st.integers(min_value=-(1 << 63), max_value=(1 << 63) - 1))
def test_zigzag_varint_round_trips(value: int) -> None:
    data = b"\xaa" + encode_varint(value) + b"\xbb"
    assert read_varint(data, 1, len(data) - 1) == (value, len(data) - 1)


@given(st.integers(min_value=0, max_value=(1 << 31) - 1))
def test_unsigned_varint_round_trips(value: int) -> None:
    out = bytearray(b"\x01")
    append_uvarint(value, out)
    assert bytes(out[1:]) == encode_uvarint(value)
    assert read_uvarint(bytes(out), 1) == (value, len(out))


def test_a_varint_cut_by_its_end_is_refused() -> None:
    with pytest.raises(VarintError, match="past the end"):
        read_varint(b"\x80\x80\x01", 0, 2)
    with pytest.raises(VarintError, match="past the end"):
        read_uvarint(b"\x80", 0)


def test_too_long_varints_are_refused() -> None:
    with pytest.raises(VarintError, match="longer than 10"):
        read_varint(b"\x80" * 11, 0, 11)
    with pytest.raises(VarintError, match="longer than 5"):
        read_uvarint(b"\x80" * 6, 0)
