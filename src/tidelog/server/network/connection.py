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
   A region of at most ``SENDFILE_MIN_BYTES`` is copied with ``pread`` and written with the
   bytes around it, so a small answer leaves in one write.
   This works the same on uvloop and the default loop (uvloop lacks ``loop.sendfile``).
   Never on TLS: the kernel would send plaintext past the TLS layer, so a TLS connection
   always copies (Kafka loses zero-copy on SSL the same way).
5b. A response the dispatcher returns at once goes through ``region_reads.prepare``: its
   small regions are read there if the page cache holds them, and regions it does not hold
   are read in a worker thread before the response takes its turn (``region_reads``), so a
   consumer catching up on old data does not hold the loop while the disk reads.
6. Security (issue 20). A connection belongs to one listener (``listener_name``,
   ``security_protocol``). On SSL/SASL_SSL listeners the connection runs TLS itself over
   ``ssl.MemoryBIO`` (``_Tls``): ciphertext in from the transport, plaintext to the frame
   decoder, responses encrypted on the way out. Doing it here rather than with
   ``loop.start_tls`` works the same on uvloop and asyncio (uvloop's start_tls lost the
   ClientHello of about half the connections under concurrency) and lets a failed
   handshake be logged with the peer and the reason before the connection closes; a
   handshake not done within ``TLS_HANDSHAKE_TIMEOUT_S`` closes it too. The principal
   starts as ``User:ANONYMOUS``; a client certificate replaces it (mutual TLS), and on SASL
   listeners a per-connection ``authenticator`` must complete before any other request is
   served (the dispatcher enforces it and sets the principal).
7. ``CloseConnection(final=...)`` writes one last response (in order, after everything
   pending) and then closes: a failed SaslAuthenticate is answered, then the connection ends.
8. Client quotas (KIP-219): a request over its quota is answered at once with its throttle
   time and the connection is muted for that time (``throttle``): nothing more is read
   from it until the time is up.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import os
import socket
import ssl
import struct
import time
import typing
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from tidelog.protocol.errors import FrameTooLargeError
from tidelog.protocol.framing import FrameDecoder
from tidelog.security.principal import ANONYMOUS, KafkaPrincipal
from tidelog.server.network import region_reads
from tidelog.server.network.region_reads import SENDFILE_MIN_BYTES, RecordsRegion
from tidelog.server.network.request_context import RequestContext

log = logging.getLogger(__name__)

#: Responses pending per connection before we stop reading from it (rule 4).
MAX_IN_FLIGHT = 100
ResponsePart = bytes | memoryview | RecordsRegion


@dataclass(frozen=True, slots=True)
class Response:
    """A framed response as parts: bytes, and file regions to sendfile."""

    parts: Sequence[ResponsePart | object]  # other objects: RecordsRegion-like


class CloseConnection(Exception):  # noqa: N818 - a control-flow signal, not an error type
    """Raised by a dispatcher when the peer broke the protocol: close this connection, after
    writing ``final`` if given (rule 7)."""

    def __init__(self, message: str, final: Response | None = None) -> None:
        super().__init__(message)
        self.final = final


class Authenticator(Protocol):
    """A connection's SASL exchange (``tidelog.server.network.sasl.SaslServerAuthenticator``)."""

    @property
    def complete(self) -> bool: ...
    @property
    def principal(self) -> KafkaPrincipal | None: ...


#: In ``Connection._pending``: close the connection once everything before it is written.
_CLOSE_AFTER = object()


DispatchResult = Response | None | asyncio.Future[Response | None]

#: TLS handshakes that take longer are abandoned (Kafka: the connection setup timeout).
TLS_HANDSHAKE_TIMEOUT_S = 10.0


class Dispatcher(Protocol):
    def dispatch(self, conn: Connection, frame: bytes) -> DispatchResult: ...


class ResponseTiming(Protocol):
    """A request's time marks (``RequestTiming`` of
    ``tidelog.server.observability.metrics.request_metrics``): told when the connection took
    its answer off the queue (``dequeued``, ``time.monotonic()``) and has written it."""

    def sent(self, dequeued: float) -> None: ...


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

    @property
    def max_frame_bytes(self) -> int:
        return self._decoder.max_frame_bytes

    @max_frame_bytes.setter
    def max_frame_bytes(self, value: int) -> None:
        self._decoder.max_frame_bytes = value

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
        *,
        listener_name: str = "PLAINTEXT",
        security_protocol: str = "PLAINTEXT",
        tls: ssl.SSLContext | None = None,
        tls_principal: Callable[[ssl.SSLObject], KafkaPrincipal] | None = None,
        authenticator: Authenticator | None = None,
        max_unauthenticated_bytes: int = 524288,
    ) -> None:
        self._dispatcher = dispatcher
        self._max_request_bytes = max_request_bytes
        # Before a SASL login a frame may not exceed sasl.server.max.receive.size (Kafka's
        # rule since 2.8: an unauthenticated client must not make the broker buffer 100 MB).
        self._decoder = FrameAssembler(
            max_request_bytes
            if authenticator is None
            else min(max_request_bytes, max_unauthenticated_bytes)
        )
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
        #: time.monotonic() of the last bytes received or response written (while the
        #: frames of a read are dispatched: when they were received).
        self.last_active = time.monotonic()
        #: With metrics on, the dispatcher's time marks of pending answers, by id of their
        #: ``_pending`` slot; recorded when written (``_flush``).
        self.timings: dict[int, ResponseTiming] = {}
        # Rule 6.
        self.listener_name = listener_name
        self.security_protocol = security_protocol
        self.principal: KafkaPrincipal = ANONYMOUS
        #: Built on first use and again when the principal changes (TLS, SASL): the
        #: dispatcher sets it for every request without building one per request.
        self._context: RequestContext | None = None
        #: The peer's IP address without the port (ACL hosts match it).
        self.client_host = ""
        #: The SASL exchange still to complete (None: none needed, or done).
        self.authenticator = authenticator
        self._tls_context = tls
        self._tls_principal = tls_principal
        self._tls: _Tls | None = None
        self._handshake_timer: asyncio.TimerHandle | None = None
        # Rule 8: while set, the connection is muted; it fires at the end of the throttle.
        self._throttle_timer: asyncio.TimerHandle | None = None
        self._throttled_until = 0.0

    # --- asyncio.Protocol -------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports implement asyncio.Transport without subclassing it.
        self._transport = typing.cast(asyncio.Transport, transport)
        peer = transport.get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if peer else "?"
        self.client_host = str(peer[0]) if peer else ""
        sock = transport.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):  # not a TCP socket
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if self._tls is None:
                self._sock_fd = sock.fileno()  # rule 5: zero-copy only without TLS
        if self._tls_context is not None:
            self._tls = _Tls(self._tls_context)
            self._handshake_timer = asyncio.get_running_loop().call_later(
                TLS_HANDSHAKE_TIMEOUT_S, self._handshake_timed_out
            )

    def _handshake_timed_out(self) -> None:
        if self._tls is not None and not self._tls.established and not self.closed:
            log.warning(
                "closing connection from %s on listener %s: TLS handshake not done in %.0f s",
                self.peer,
                self.listener_name,
                TLS_HANDSHAKE_TIMEOUT_S,
            )
            self.close()

    def _tls_received(self, tls: _Tls, data: bytes) -> bytes | None:
        """Rule 6: ciphertext in; the plaintext it carried out (None: the connection is
        closing)."""
        transport = self._transport
        assert transport is not None
        was_established = tls.established
        try:
            plaintext = tls.receive(data)
        except ssl.SSLError as exc:
            phase = "TLS handshake failed" if not tls.established else "TLS error"
            log.warning(
                "closing connection from %s on listener %s: %s: %s",
                self.peer,
                self.listener_name,
                phase,
                # A refused certificate says why (expired, unknown CA), not only
                # CERTIFICATE_VERIFY_FAILED.
                getattr(exc, "verify_message", None) or exc.reason or exc,
            )
            pending = tls.outgoing()  # the alert telling the client why
            if pending:
                transport.write(pending)
            self.close()
            return None
        pending = tls.outgoing()
        if pending:
            transport.write(pending)
        if tls.established and not was_established:
            if self._handshake_timer is not None:
                self._handshake_timer.cancel()
            if self._tls_principal is not None:
                try:
                    self.principal = self._tls_principal(tls.sslobj)
                    self._context = None
                except Exception as exc:
                    log.warning(
                        "closing connection from %s: no principal from its certificate: %s",
                        self.peer,
                        exc,
                    )
                    self.close()
                    return None
        if tls.peer_closed:
            self.close()
            return None
        return plaintext

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
        tls = self._tls
        if tls is not None:
            plaintext = self._tls_received(tls, data)
            if not plaintext:
                return
            data = plaintext
        self.last_active = time.monotonic()
        try:
            frames = self._decoder.feed(data)
        except FrameTooLargeError as exc:
            if self.authenticator is not None:
                log.warning(
                    "closing connection from %s on listener %s: frame size %d before SASL "
                    "authentication exceeds sasl.server.max.receive.size=%d",
                    self.peer,
                    self.listener_name,
                    exc.size,
                    self._decoder.max_frame_bytes,
                )
            else:
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
                if exc.final is None:
                    self.close()
                    return
                self._pending.append(exc.final)
                self._pending.append(_CLOSE_AFTER)  # type: ignore[arg-type]
                break
            except Exception:
                log.exception("closing connection from %s: request handler failed", self.peer)
                self.close()
                return
            result = self._prepared(result)
            if isinstance(result, asyncio.Future):
                result.add_done_callback(self._on_future_done)
            self._pending.append(result)
        self._flush()
        self._update_reading()

    def _prepared(self, response: DispatchResult) -> DispatchResult:
        """Rule 5b: a response with regions comes back with its cached small regions read,
        or as a task that reads its cold regions in a worker thread first (the request's
        timing moves with it); anything else as it is."""
        if not isinstance(response, Response) or not region_reads.has_regions(response.parts):
            return response
        parts, cold = region_reads.prepare(response.parts)
        result: DispatchResult = (
            asyncio.ensure_future(self._read_cold(parts, cold)) if cold else Response(parts)
        )
        timing = self.timings.pop(id(response), None) if self.timings else None
        if timing is not None:
            self.timings[id(result)] = timing
        return result

    @staticmethod
    async def _read_cold(parts: list[ResponsePart | object], cold: list[int]) -> Response | None:
        return Response(await asyncio.to_thread(region_reads.read_cold, parts, cold))

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
            if head is _CLOSE_AFTER:
                self.close()
                return
            if isinstance(head, asyncio.Future):
                ready, head = self._future_response(head)
                if not ready:
                    return
            slot = pending.popleft()
            timing = self.timings.pop(id(slot), None) if self.timings else None
            if timing is None:
                if head is not None:
                    self._write(head)
            else:
                dequeued = time.monotonic()
                if head is not None:
                    self._write(head)
                timing.sent(dequeued)
            if self.closed:
                return
        if self._close_when_drained:
            self.close()

    def _future_response(
        self, future: asyncio.Future[Response | None]
    ) -> tuple[bool, Response | None]:
        """A delayed request's answer at the head of the queue: (True, its response) once it
        succeeded; (False, None) while it runs, and after a failure, which closes the
        connection (a later answer must not be written in its place, rule 3)."""
        if not future.done():
            return False, None
        if future.cancelled():
            self.close()
            return False, None
        exc = future.exception()
        if isinstance(exc, CloseConnection):
            log.warning("closing connection from %s: %s", self.peer, exc)
            self.close()
            return False, None
        if exc is not None:
            log.error(
                "closing connection from %s: delayed request failed",
                self.peer,
                exc_info=exc,
            )
            self.close()
            return False, None
        return True, future.result()

    def _write(self, response: Response) -> None:
        transport = self._transport
        assert transport is not None
        self.last_active = time.monotonic()
        tls = self._tls
        if tls is not None:
            # Rule 6: the whole response encrypted at once (regions read with pread).
            for part in response.parts:
                data = self._bytes_of(part)
                if data is None:
                    return
                if len(data):
                    tls.send(data)
            transport.write(tls.outgoing())
            return
        # Rule 5: small regions are copied and sent with the bytes around them in one
        # write; only a large one goes out by sendfile, between two writes.
        gathered: list[bytes | memoryview] = []
        for part in response.parts:
            if not isinstance(part, (bytes, memoryview)):
                region = typing.cast(RecordsRegion, part)
                if region.length > SENDFILE_MIN_BYTES:
                    if gathered:
                        transport.write(b"".join(gathered))
                        gathered = []
                    self._write_region(region)
                    continue
            data = self._bytes_of(part)
            if data is None:
                return
            if len(data):
                gathered.append(data)
        if gathered:
            transport.write(gathered[0] if len(gathered) == 1 else b"".join(gathered))

    def _bytes_of(self, part: ResponsePart | object) -> bytes | memoryview | None:
        """A part's bytes: itself, or a region read with pread (None: the read failed and
        the connection is closing)."""
        if isinstance(part, (bytes, memoryview)):
            return part
        region = typing.cast(RecordsRegion, part)
        return self._read_region(region) if region.length else b""

    def _read_region(self, region: RecordsRegion) -> bytes | None:
        data = os.pread(region.fileno, region.length, region.position)
        if len(data) < region.length:  # pragma: no cover - file truncated under the read
            log.error("short read of %d bytes from a segment; closing %s", region.length, self.peer)
            self.close()
            return None
        return data

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

    def throttle(self, throttle_ms: int) -> None:
        """Rule 8: read nothing more for ``throttle_ms`` ms (from now; a longer throttle
        already running is kept)."""
        if throttle_ms <= 0 or self.closed:
            return
        until = time.monotonic() + throttle_ms / 1000
        if until <= self._throttled_until:
            return
        self._throttled_until = until
        if self._throttle_timer is not None:
            self._throttle_timer.cancel()
        self._throttle_timer = asyncio.get_running_loop().call_later(
            throttle_ms / 1000, self._end_throttle
        )
        self._update_reading()

    @property
    def throttled(self) -> bool:
        return self._throttle_timer is not None

    def _end_throttle(self) -> None:
        self._throttle_timer = None
        self._throttled_until = 0.0
        self._update_reading()

    def _update_reading(self) -> None:
        transport = self._transport
        if transport is None or self.closed:
            return
        should_pause = (
            self._writing_paused
            or len(self._pending) > MAX_IN_FLIGHT
            or self._throttle_timer is not None
        )
        if should_pause and not self._reading_paused:
            self._reading_paused = True
            transport.pause_reading()
        elif not should_pause and self._reading_paused:
            self._reading_paused = False
            transport.resume_reading()

    def _is_closing(self) -> bool:
        return self.closed or self._transport is None or self._transport.is_closing()

    @property
    def request_context(self) -> RequestContext:
        """Who this connection's requests come from (``tidelog.server.network.request_context``)."""
        context = self._context
        if context is None:
            context = self._context = RequestContext(
                self.principal, self.client_host, self.listener_name, self.security_protocol
            )
        return context

    def authenticated(self, principal: KafkaPrincipal) -> None:
        """The SASL login succeeded (rule 6): requests of any size from now on."""
        self.principal = principal
        self._context = None
        self.authenticator = None
        self._decoder.max_frame_bytes = self._max_request_bytes

    def is_idle(self, now: float, max_idle_s: float) -> bool:
        """Nothing pending and nothing received or sent for ``max_idle_s`` seconds."""
        return not self._pending and now - self.last_active > max_idle_s

    def close(self) -> None:
        if self._handshake_timer is not None:
            self._handshake_timer.cancel()
        if self._throttle_timer is not None:
            self._throttle_timer.cancel()
        if self._transport is not None and not self._transport.is_closing():
            self._transport.close()
        self.closed = True


class _Tls:
    """A server-side TLS session over memory BIOs (rule 6): ``receive`` ciphertext and get
    plaintext, ``send`` plaintext, then write ``outgoing()`` ciphertext to the transport.
    ``ssl.SSLError`` from ``receive`` is the peer's fault (a bad handshake or record)."""

    __slots__ = ("_incoming", "_outgoing", "established", "peer_closed", "sslobj")

    def __init__(self, context: ssl.SSLContext) -> None:
        self._incoming = ssl.MemoryBIO()
        self._outgoing = ssl.MemoryBIO()
        self.sslobj = context.wrap_bio(self._incoming, self._outgoing, server_side=True)
        self.established = False
        self.peer_closed = False

    def receive(self, data: bytes) -> bytes:
        self._incoming.write(data)
        if not self.established:
            try:
                self.sslobj.do_handshake()
            except ssl.SSLWantReadError:
                return b""
            self.established = True
        chunks = []
        while True:
            try:
                chunk = self.sslobj.read(262144)
            except ssl.SSLWantReadError:
                break
            except ssl.SSLZeroReturnError:  # the peer's close_notify
                self.peer_closed = True
                break
            if not chunk:
                self.peer_closed = True
                break
            chunks.append(chunk)
        return b"".join(chunks)

    def send(self, data: bytes | memoryview) -> None:
        view = memoryview(data)
        while view:
            written = self.sslobj.write(view)
            view = view[written:]

    def outgoing(self) -> bytes:
        return self._outgoing.read()
