"""Kafka's framing: every request and response is a 4-byte big-endian size, then the payload.

``FrameDecoder`` is a pure state machine (bytes in, frames out, in the style of h11): the
connection feeds whatever the socket returned and gets back the complete frames. A size
prefix that is negative or above ``socket.request.max.bytes`` raises ``FrameTooLargeError``
before any of that frame is buffered; after that the stream cannot be resynchronised, so the
decoder refuses further input and the connection must close.
"""

from __future__ import annotations

import struct
from typing import Final

from tidelog.protocol.errors import FrameTooLargeError

#: Kafka's default for ``socket.request.max.bytes`` (100 MiB).
DEFAULT_MAX_FRAME_BYTES: Final = 104857600

_SIZE = struct.Struct(">i")
SIZE_PREFIX_BYTES: Final = 4


def frame(payload: bytes | bytearray | memoryview) -> bytes:
    """``payload`` with its size prefix."""
    return _SIZE.pack(len(payload)) + payload


def frame_size_prefix(size: int) -> bytes:
    """Just the 4-byte prefix, for frames written in several pieces."""
    return _SIZE.pack(size)


class FrameDecoder:
    """Splits a byte stream into frames (payloads without their size prefix).

    Invariants: ``_buffer[_pos:]`` holds the unconsumed bytes of small frames, and they
    never include a complete frame after ``feed`` returns. A frame of ``large_frame_bytes``
    or more that is not complete yet is held instead as a list of pieces (``_pieces``, its
    payload so far, ``_missing`` bytes still to come) and joined once when complete: one
    copy of its bytes, where growing the buffer and slicing the frame out of it made three
    fresh allocations of its size (1.2 ms per 1 MiB frame on the 2-CPU VM, 0.85 GB/s: the
    follower fetch path of every large batch went through it).
    """

    __slots__ = (
        "_broken",
        "_buffer",
        "_missing",
        "_pieces",
        "_pieces_bytes",
        "_pos",
        "large_frame_bytes",
        "max_frame_bytes",
    )

    def __init__(
        self, max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES, large_frame_bytes: int = 65536
    ) -> None:
        if max_frame_bytes < 0:
            raise ValueError(f"max_frame_bytes must be >= 0, got {max_frame_bytes}")
        self.max_frame_bytes = max_frame_bytes
        self.large_frame_bytes = large_frame_bytes
        self._buffer = bytearray()
        self._pos = 0
        self._pieces: list[bytes] = []
        self._pieces_bytes = 0
        self._missing = 0
        self._broken: FrameTooLargeError | None = None

    @property
    def buffered_bytes(self) -> int:
        """Bytes received that do not yet form a complete frame."""
        if self._missing:
            return SIZE_PREFIX_BYTES + self._pieces_bytes
        return len(self._buffer) - self._pos

    def feed(self, data: bytes | bytearray | memoryview) -> list[bytes]:
        """Add received bytes; return every frame now complete, in order.

        Frames are ``bytes`` (kio refuses writable buffers). Raises ``FrameTooLargeError``
        on a bad size prefix; frames completed before it in the same call are lost with the
        connection, which is what closing it means anyway.
        """
        if self._broken is not None:
            raise self._broken
        if self._missing:
            return self._feed_large(data)
        buffer = self._buffer
        # Fast path: nothing buffered and the data holds exactly one frame.
        if self._pos == len(buffer) and len(data) >= SIZE_PREFIX_BYTES:
            (size,) = _SIZE.unpack_from(data, 0)
            self._check(size)
            if len(data) == size + SIZE_PREFIX_BYTES:
                return [bytes(data[SIZE_PREFIX_BYTES:])]
        buffer += data
        frames: list[bytes] = []
        pos = self._pos
        end = len(buffer)
        large = False
        with memoryview(buffer) as view:
            while end - pos >= SIZE_PREFIX_BYTES:
                (size,) = _SIZE.unpack_from(view, pos)
                self._check(size)
                stop = pos + SIZE_PREFIX_BYTES + size
                if stop > end:
                    if size >= self.large_frame_bytes:
                        # Incomplete and large: collect the rest as pieces (see above).
                        first = bytes(view[pos + SIZE_PREFIX_BYTES : end])
                        self._pieces = [first]
                        self._pieces_bytes = len(first)
                        self._missing = size - len(first)
                        large = True
                    break
                frames.append(bytes(view[pos + SIZE_PREFIX_BYTES : stop]))
                pos = stop
        if large or pos == end:
            buffer.clear()
            pos = 0
        elif pos > 65536 and pos * 2 > end:
            # Compact occasionally so a long-lived connection's buffer stays small.
            del buffer[:pos]
            pos = 0
        self._pos = pos
        return frames

    def _feed_large(self, data: bytes | bytearray | memoryview) -> list[bytes]:
        """More of a large frame (``_missing`` > 0): keep the piece, join when complete."""
        missing = self._missing
        if len(data) < missing:
            piece = bytes(data)  # no copy when the socket gave bytes
            self._pieces.append(piece)
            self._pieces_bytes += len(piece)
            self._missing = missing - len(piece)
            return []
        view = memoryview(data)
        self._pieces.append(bytes(view[:missing]))
        payload = b"".join(self._pieces)
        self._pieces = []
        self._pieces_bytes = 0
        self._missing = 0
        rest = view[missing:]
        return [payload, *self.feed(rest)] if len(rest) else [payload]

    def _check(self, size: int) -> None:
        if size < 0 or size > self.max_frame_bytes:
            self._broken = FrameTooLargeError(size, self.max_frame_bytes)
            raise self._broken
