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

    Invariant: ``_buffer[_pos:]`` holds the unconsumed bytes, and they never include a
    complete frame after ``feed`` returns.
    """

    __slots__ = ("_broken", "_buffer", "_pos", "max_frame_bytes")

    def __init__(self, max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES) -> None:
        if max_frame_bytes < 0:
            raise ValueError(f"max_frame_bytes must be >= 0, got {max_frame_bytes}")
        self.max_frame_bytes = max_frame_bytes
        self._buffer = bytearray()
        self._pos = 0
        self._broken: FrameTooLargeError | None = None

    @property
    def buffered_bytes(self) -> int:
        """Bytes received that do not yet form a complete frame."""
        return len(self._buffer) - self._pos

    def feed(self, data: bytes | bytearray | memoryview) -> list[bytes]:
        """Add received bytes; return every frame now complete, in order.

        Frames are ``bytes`` (kio refuses writable buffers). Raises ``FrameTooLargeError``
        on a bad size prefix; frames completed before it in the same call are lost with the
        connection, which is what closing it means anyway.
        """
        if self._broken is not None:
            raise self._broken
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
        while end - pos >= SIZE_PREFIX_BYTES:
            (size,) = _SIZE.unpack_from(buffer, pos)
            self._check(size)
            stop = pos + SIZE_PREFIX_BYTES + size
            if stop > end:
                break
            frames.append(bytes(buffer[pos + SIZE_PREFIX_BYTES : stop]))
            pos = stop
        if pos == end:
            buffer.clear()
            pos = 0
        elif pos > 65536 and pos * 2 > end:
            # Compact occasionally so a long-lived connection's buffer stays small.
            del buffer[:pos]
            pos = 0
        self._pos = pos
        return frames

    def _check(self, size: int) -> None:
        if size < 0 or size > self.max_frame_bytes:
            self._broken = FrameTooLargeError(size, self.max_frame_bytes)
            raise self._broken
