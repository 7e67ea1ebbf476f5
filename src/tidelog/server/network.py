"""The listener: one asyncio protocol per client connection, answers in request order.

Theory of operation:

1. Bytes arrive in ``data_received`` and go through the pure ``FrameDecoder`` (size prefix,
   ``socket.request.max.bytes``). An oversized or negative size closes this connection only.
2. Each frame is handed to the dispatcher *synchronously and in arrival order*, so a request
   sees the effects of every request before it on the same connection (a pipelined produce
   then fetch reads its own write).
3. The dispatcher returns a ``Response`` at once, ``None`` for "no response" (acks=0), a
   future resolving to either (delayed produce / long-poll fetch), or raises
   ``CloseConnection``. Responses are written strictly in request order (Kafka's per-connection
   ordering guarantee): a slot at the head of ``_pending`` is written when it is ready, and
   everything behind it waits.
4. Back-pressure: when more than ``MAX_IN_FLIGHT`` responses are pending, or the transport's
   write buffer is above its high-water mark, reading pauses until the client catches up.
5. Records regions (``FetchSlice``-like objects with ``fileno``/``position``/``length``) are
   sent with ``os.sendfile`` straight from the segment file when the transport's buffer is
   empty (so the bytes cannot overtake anything queued), otherwise copied with ``pread``.
   This works the same on uvloop and the default loop (uvloop lacks ``loop.sendfile``).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import os
import socket
import struct
import time
import typing
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from tidelog.protocol.errors import FrameTooLargeError
from tidelog.protocol.framing import FrameDecoder

log = logging.getLogger(__name__)

#: Responses pending per connection before we stop reading from it (rule 4).
MAX_IN_FLIGHT = 100


class RecordsRegion(Protocol):
    """A contiguous byte range of an open file (storage's ``FetchSlice``)."""

    @property
    def fileno(self) -> int: ...
    @property
    def position(self) -> int: ...
    @property
    def length(self) -> int: ...


ResponsePart = bytes | memoryview | RecordsRegion


@dataclass(frozen=True, slots=True)
class Response:
    """A framed response as parts: bytes, and file regions to sendfile."""

    parts: Sequence[ResponsePart | object]  # other objects: RecordsRegion-like


class CloseConnection(Exception):  # noqa: N818 - a control-flow signal, not an error type
    """Raised by a dispatcher when the peer broke the protocol: close this connection."""


DispatchResult = Response | None | asyncio.Future[Response | None]


class Dispatcher(Protocol):
    def dispatch(self, conn: Connection, frame: bytes) -> DispatchResult: ...


_SIZE = struct.Struct(">i")


class FrameAssembler:
    """``FrameDecoder`` plus a fast path for frames that span several reads.

    ``FrameDecoder.feed`` appends every read to one ``bytearray``; for a 1 MB Produce
    arriving in 64-256 KiB reads that costs milliseconds per frame (re-growing the buffer),
    which capped large-record produce throughput. Here a frame whose (valid) size prefix
    says it is incomplete is collected as a list of reads and handed to the decoder whole,
    once, when complete: one join plus the decoder's own single-frame fast path. Size
    validation and frame splitting stay the decoder's (an invalid size is fed to it at once,
    so it raises ``FrameTooLargeError`` as before).
    """

    __slots__ = ("_chunks", "_decoder", "_have", "_need")

    def __init__(self, max_frame_bytes: int) -> None:
        self._decoder = FrameDecoder(max_frame_bytes)
        self._chunks: list[bytes] = []
        self._have = 0
        self._need = 0

    def feed(self, data: bytes | memoryview) -> list[bytes]:
        if self._chunks:
            self._chunks.append(bytes(data))
            self._have += len(data)
            if self._have < self._need:
                return []
            joined = memoryview(b"".join(self._chunks))
            self._chunks = []
            frames = self._decoder.feed(joined[: self._need])
            rest = joined[self._need :]
            return frames + self.feed(rest) if len(rest) else frames
        if self._decoder.buffered_bytes == 0 and len(data) >= 4:
            (size,) = _SIZE.unpack_from(data, 0)
            if 0 <= size <= self._decoder.max_frame_bytes and len(data) < size + 4:
                self._chunks = [bytes(data)]
                self._have = len(data)
                self._need = size + 4
                return []
        return self._decoder.feed(data)


class Connection(asyncio.Protocol):
    """One client connection (rules 1-5)."""

    def __init__(
        self,
        dispatcher: Dispatcher,
        max_request_bytes: int,
        on_close: Callable[[Connection], None] | None = None,
    ) -> None:
        self._dispatcher = dispatcher
        self._decoder = FrameAssembler(max_request_bytes)
        self._pending: collections.deque[DispatchResult] = collections.deque()
        self._transport: asyncio.Transport | None = None
        self._sock_fd = -1
        self._reading_paused = False
        self._writing_paused = False
        self._on_close = on_close
        self.peer = "?"
        self.closed = False
        # Per-connection state handlers may keep (e.g. the last request's client id).
        self.client_id: str | None = None
        #: time.monotonic() of the last bytes received or response written.
        self.last_active = time.monotonic()

    # --- asyncio.Protocol -------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports implement asyncio.Transport without subclassing it.
        self._transport = typing.cast(asyncio.Transport, transport)
        peer = transport.get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if peer else "?"
        sock = transport.get_extra_info("socket")
        if sock is not None:
            self._sock_fd = sock.fileno()
            with contextlib.suppress(OSError):  # not a TCP socket
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        for slot in self._pending:
            if isinstance(slot, asyncio.Future) and not slot.done():
                slot.cancel()
        self._pending.clear()
        if self._on_close is not None:
            self._on_close(self)

    def pause_writing(self) -> None:
        self._writing_paused = True
        self._update_reading()

    def resume_writing(self) -> None:
        self._writing_paused = False
        self._update_reading()

    def data_received(self, data: bytes) -> None:
        if self.closed:
            return
        self.last_active = time.monotonic()
        try:
            frames = self._decoder.feed(data)
        except FrameTooLargeError as exc:
            log.warning("closing connection from %s: %s", self.peer, exc)
            self.close()
            return
        for frame in frames:
            if self._is_closing():
                return
            try:
                result = self._dispatcher.dispatch(self, frame)
            except CloseConnection as exc:
                log.warning("closing connection from %s: %s", self.peer, exc)
                self.close()
                return
            except Exception:
                log.exception("closing connection from %s: request handler failed", self.peer)
                self.close()
                return
            if isinstance(result, asyncio.Future):
                result.add_done_callback(self._on_future_done)
            self._pending.append(result)
        self._flush()
        self._update_reading()

    def eof_received(self) -> bool | None:
        # The client half-closed: answer what is pending, then close (returning True keeps
        # the transport open for our writes until then).
        if not self._pending:
            return None
        self._close_when_drained = True
        return True

    _close_when_drained = False

    # --- ordered writing ----------------------------------------------------------------

    def _on_future_done(self, _future: asyncio.Future[Response | None]) -> None:
        if not self.closed:
            self._flush()
            self._update_reading()

    def _flush(self) -> None:
        """Write every ready response at the head of the queue, in order (rule 3)."""
        pending = self._pending
        while pending:
            head = pending[0]
            if isinstance(head, asyncio.Future):
                if not head.done():
                    return
                if head.cancelled():
                    self.close()
                    return
                exc = head.exception()
                if isinstance(exc, CloseConnection):
                    log.warning("closing connection from %s: %s", self.peer, exc)
                    self.close()
                    return
                if exc is not None:
                    log.error(
                        "closing connection from %s: delayed request failed",
                        self.peer,
                        exc_info=exc,
                    )
                    self.close()
                    return
                head = head.result()
            pending.popleft()
            if head is not None:
                self._write(head)
            if self.closed:
                return
        if self._close_when_drained:
            self.close()

    def _write(self, response: Response) -> None:
        transport = self._transport
        assert transport is not None
        self.last_active = time.monotonic()
        for part in response.parts:
            if isinstance(part, (bytes, memoryview)):
                if len(part):
                    transport.write(part)
            else:
                self._write_region(typing.cast(RecordsRegion, part))

    def _write_region(self, region: RecordsRegion) -> None:
        """Rule 5: zero-copy while nothing is queued ahead, else copy the rest."""
        transport = self._transport
        assert transport is not None
        position, remaining = region.position, region.length
        if self._sock_fd >= 0 and transport.get_write_buffer_size() == 0:
            while remaining > 0:
                try:
                    sent = os.sendfile(self._sock_fd, region.fileno, position, remaining)
                except (BlockingIOError, InterruptedError):
                    break
                except OSError:
                    # The socket died under us; the transport will notice and close.
                    return
                if sent == 0:
                    break
                position += sent
                remaining -= sent
        if remaining > 0:
            data = os.pread(region.fileno, remaining, position)
            if len(data) < remaining:  # pragma: no cover - file truncated under the read
                log.error("short read of %d bytes from a segment; closing %s", remaining, self.peer)
                self.close()
                return
            transport.write(data)

    def _update_reading(self) -> None:
        transport = self._transport
        if transport is None or self.closed:
            return
        should_pause = self._writing_paused or len(self._pending) > MAX_IN_FLIGHT
        if should_pause and not self._reading_paused:
            self._reading_paused = True
            transport.pause_reading()
        elif not should_pause and self._reading_paused:
            self._reading_paused = False
            transport.resume_reading()

    def _is_closing(self) -> bool:
        return self.closed or self._transport is None or self._transport.is_closing()

    def is_idle(self, now: float, max_idle_s: float) -> bool:
        """Nothing pending and nothing received or sent for ``max_idle_s`` seconds."""
        return not self._pending and now - self.last_active > max_idle_s

    def close(self) -> None:
        if self._transport is not None and not self._transport.is_closing():
            self._transport.close()
        self.closed = True
