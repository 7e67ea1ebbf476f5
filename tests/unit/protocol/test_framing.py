"""FrameDecoder: size-prefixed frames, split anywhere, with a maximum size."""

from __future__ import annotations

import itertools
import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tidelog.protocol.errors import FrameTooLargeError
from tidelog.protocol.framing import (
    DEFAULT_MAX_FRAME_BYTES,
    SIZE_PREFIX_BYTES,
    FrameDecoder,
    frame,
)


def test_frame_prefixes_the_big_endian_size() -> None:
    assert frame(b"abc") == b"\x00\x00\x00\x03abc"
    assert frame(b"") == b"\x00\x00\x00\x00"


def test_default_max_is_kafkas_socket_request_max_bytes() -> None:
    assert DEFAULT_MAX_FRAME_BYTES == 104857600
    assert FrameDecoder().max_frame_bytes == 104857600


@pytest.mark.parametrize(
    ("chunks", "expected"),
    [
        ([b"\x00\x00\x00\x03abc"], [b"abc"]),
        ([b"\x00\x00", b"\x00\x03ab", b"c"], [b"abc"]),
        ([b"\x00\x00\x00\x01a\x00\x00\x00\x02bc"], [b"a", b"bc"]),
        ([b"\x00\x00\x00\x00"], [b""]),
        ([b"\x00\x00\x00\x02a"], []),
    ],
)
def test_feed_returns_complete_frames(chunks: list[bytes], expected: list[bytes]) -> None:
    decoder = FrameDecoder()
    got: list[bytes] = []
    for chunk in chunks:
        got += decoder.feed(chunk)
    assert got == expected


def test_frames_are_bytes_even_from_a_bytearray() -> None:
    (got,) = FrameDecoder().feed(bytearray(b"\x00\x00\x00\x01z"))
    assert type(got) is bytes


def test_partial_frame_is_kept() -> None:
    decoder = FrameDecoder()
    assert decoder.feed(b"\x00\x00\x00\x05ab") == []
    assert decoder.buffered_bytes == 6
    assert decoder.feed(b"cde\x00") == [b"abcde"]
    assert decoder.buffered_bytes == 1


@pytest.mark.parametrize("size", [-1, -(2**31), 11])
def test_bad_size_raises_and_the_decoder_stays_broken(size: int) -> None:
    decoder = FrameDecoder(max_frame_bytes=10)
    with pytest.raises(FrameTooLargeError) as info:
        decoder.feed(struct.pack(">i", size) + b"x" * 20)
    assert info.value.size == size
    assert str(size) in str(info.value)
    if size >= 0:
        assert "socket.request.max.bytes=10" in str(info.value)
    else:
        assert "negative" in str(info.value)
    with pytest.raises(FrameTooLargeError):
        decoder.feed(b"\x00\x00\x00\x01a")


def test_oversized_size_is_refused_before_the_body_arrives() -> None:
    decoder = FrameDecoder(max_frame_bytes=100)
    with pytest.raises(FrameTooLargeError):
        decoder.feed(b"\x00\x00\x00\x65")


def test_frame_of_exactly_the_maximum_is_accepted() -> None:
    decoder = FrameDecoder(max_frame_bytes=3)
    assert decoder.feed(frame(b"abc")) == [b"abc"]


@given(
    payloads=st.lists(st.binary(max_size=300), max_size=20),
    cuts=st.lists(st.integers(min_value=0, max_value=7000), max_size=30),
)
def test_any_split_of_a_stream_gives_the_same_frames(
    payloads: list[bytes], cuts: list[int]
) -> None:
    stream = b"".join(frame(p) for p in payloads)
    points = sorted({c for c in cuts if c <= len(stream)} | {0, len(stream)})
    decoder = FrameDecoder(max_frame_bytes=300)
    got: list[bytes] = []
    for start, stop in itertools.pairwise(points):
        got += decoder.feed(stream[start:stop])
    assert got == payloads
    assert decoder.buffered_bytes == 0


@given(
    payloads=st.lists(st.binary(max_size=300), max_size=20),
    cuts=st.lists(st.integers(min_value=0, max_value=7000), max_size=30),
    large=st.integers(min_value=0, max_value=64),
)
def test_large_frames_held_as_pieces_give_the_same_frames(
    payloads: list[bytes], cuts: list[int], large: int
) -> None:
    """Frames of ``large_frame_bytes`` or more that arrive in several pieces are collected
    as pieces and joined once; the stream decodes exactly as with the buffer alone, in
    any split, with small frames before and after them in the same reads."""
    stream = b"".join(frame(p) for p in payloads)
    points = sorted({c for c in cuts if c <= len(stream)} | {0, len(stream)})
    decoder = FrameDecoder(max_frame_bytes=300, large_frame_bytes=large)
    got: list[bytes] = []
    for start, stop in itertools.pairwise(points):
        piece = stream[start:stop]
        before = decoder.buffered_bytes
        out = decoder.feed(bytearray(piece) if start % 2 else piece)
        got += out
        assert all(type(f) is bytes for f in out)
        assert decoder.buffered_bytes == before + len(piece) - sum(
            len(f) + SIZE_PREFIX_BYTES for f in out
        )
    assert got == payloads
    assert decoder.buffered_bytes == 0


def test_a_large_frame_arriving_in_pieces_is_returned_whole_with_what_follows() -> None:
    payload = bytes(range(256)) * 1024  # 256 KiB
    stream = frame(payload) + frame(b"small") + frame(b"x" * 70_000)
    decoder = FrameDecoder()
    got: list[bytes] = []
    for start in range(0, len(stream), 65_536):
        got += decoder.feed(memoryview(stream)[start : start + 65_536])
    assert got == [payload, b"small", b"x" * 70_000]
    assert decoder.buffered_bytes == 0
