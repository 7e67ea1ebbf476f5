"""The cleaner's record walk (``tidelog.storage.offset_map.record_keys``)."""

from __future__ import annotations

import pytest

from tidelog.protocol.varint import VarintError, append_varint
from tidelog.storage.offset_map import OffsetMap, record_keys


def record(offset_delta: int, ts_delta: int, key: bytes | None, value: bytes | None) -> bytes:
    body = bytearray([0])  # attributes
    append_varint(ts_delta, body)
    append_varint(offset_delta, body)
    append_varint(-1 if key is None else len(key), body)
    body += key or b""
    append_varint(-1 if value is None else len(value), body)
    body += value or b""
    append_varint(0, body)  # no headers
    out = bytearray()
    append_varint(len(body), out)
    return bytes(out + body)


def test_record_keys_reports_each_records_span_and_key() -> None:
    first = record(0, 5, b"k", b"v")
    second = record(1, 7, None, None)
    body = first + second
    assert list(record_keys(body, 2)) == [
        (0, len(first), 0, 5, b"k", False),
        (len(first), len(body), 1, 7, None, True),
    ]


def test_record_keys_refuses_a_record_cut_short() -> None:
    body = record(0, 0, b"key", b"value")
    with pytest.raises(ValueError, match="runs past"):
        list(record_keys(body[:-3], 1))
    with pytest.raises(VarintError):
        list(record_keys(body[:2], 1))


def test_long_keys_are_kept_as_their_digest() -> None:
    offset_map = OffsetMap(1)
    long_key = b"k" * 40
    assert offset_map.put(long_key, 3)
    assert offset_map.get(long_key) == 3
    assert not offset_map.put(b"other", 4)
    assert len(offset_map) == 1
