"""The metrics HTTP endpoint (``MetricsEndpoint``): the package's rule 4.

``GET /metrics`` (or ``HEAD``) answers a registry's samples in Prometheus' text format, from
an asyncio server on the broker's loop; other paths may be routed to another server of
pages (the web console, ``tidelog.server.observability.console``).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Iterator
from typing import Final

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import Metric

from tidelog.server.config.values import MetricsListener

#: The text format ``generate_latest`` writes (Prometheus 0.0.4; newer clients of the
#: library advertise 1.0.0, which is the same text for names like ours).
CONTENT_TYPE: Final = "text/plain; version=0.0.4; charset=utf-8"
#: How long a scrape connection may take to send its request.
REQUEST_READ_TIMEOUT_S: Final = 10.0
#: Longest request line or header line read; a request has at most this many header lines.
MAX_LINE_BYTES: Final = 8192
MAX_HEADER_LINES: Final = 100


_REASONS: Final = {
    200: "OK",
    400: "Bad Request",
    404: "Not Found",
    405: "Method Not Allowed",
}


def _answer(
    status: int, body: bytes, *, content_type: str = "text/plain; charset=utf-8", head: bool
) -> bytes:
    lines = [
        f"HTTP/1.1 {status} {_REASONS[status]}",
        f"Content-Type: {content_type}",
        f"Content-Length: {len(body)}",
        "Connection: close",
    ]
    if status == 405:
        lines.append("Allow: GET, HEAD")
    header = ("\r\n".join(lines) + "\r\n\r\n").encode("ascii")
    return header if head else header + body


class _Collected:
    """Families already collected, in the shape ``generate_latest`` reads (a registry)."""

    def __init__(self, families: list[Metric]) -> None:
        self._families = families

    def collect(self) -> Iterator[Metric]:
        return iter(self._families)


def scrape_text(registry: CollectorRegistry) -> Callable[[], bytes]:
    """Collect ``registry`` now and return the formatting of what was collected.

    The collectors read state that belongs to the event loop, so they run here, on it; the
    text (three quarters of a scrape: 80 of 110 ms with 5,000 hosted partitions on the 2-CPU
    VM) is formatted by the returned call, which reads only the collected families and so
    may run in a worker thread.
    """
    collected = _Collected(list(registry.collect()))
    return lambda: generate_latest(collected)


class MetricsEndpoint:
    """``GET /metrics`` on the broker's loop (package rule 4)."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.registry = registry
        self._server: asyncio.Server | None = None
        self._connections: set[asyncio.Task[None]] = set()
        self.bound_port = -1
        #: Other GET/HEAD paths, by prefix (the web console,
        #: ``tidelog.server.observability.console``):
        #: ``route(head, target, writer)`` answers, or streams itself and returns None.
        self.routes: dict[bytes, Callable[..., Awaitable[bytes | None]]] = {}

    async def start(self, listener: MetricsListener) -> int:
        """Listen; return the bound port."""
        self._server = await asyncio.start_server(
            self._serve, listener.host, listener.port, reuse_address=True, limit=MAX_LINE_BYTES
        )
        sockets = self._server.sockets
        self.bound_port = sockets[0].getsockname()[1] if sockets else listener.port
        return self.bound_port

    async def stop(self) -> None:
        server = self._server
        if server is None:
            return
        self._server = None
        server.close()
        for task in list(self._connections):
            task.cancel()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(server.wait_closed(), 2.0)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._connections.add(task)
        try:
            answer = await self._answer(reader, writer)
            if answer is not None:
                writer.write(answer)
                await writer.drain()
                if not answer.startswith(b"HTTP/1.1 200") and writer.can_write_eof():
                    # Bad input may have more behind it: closing with unread bytes would
                    # reset the connection, and the client might never read the answer.
                    writer.write_eof()
                    await self._discard(reader)
        except (ConnectionError, asyncio.CancelledError):
            pass
        finally:
            if task is not None:
                self._connections.discard(task)
            writer.close()
            with contextlib.suppress(ConnectionError, asyncio.CancelledError):
                await writer.wait_closed()

    @staticmethod
    async def _discard(reader: asyncio.StreamReader) -> None:
        """Read and drop what the client still sends, until it closes (at most 1 s and
        1 MiB: a lingering close)."""
        with contextlib.suppress(TimeoutError, ConnectionError):
            async with asyncio.timeout(1.0):
                left = 1 << 20
                while left > 0:
                    chunk = await reader.read(65536)
                    if not chunk:
                        return
                    left -= len(chunk)

    async def _answer(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter | None = None
    ) -> bytes | None:
        """The answer to the request ``reader`` brings; None: close without one (the peer
        went away or said nothing in time)."""
        try:
            async with asyncio.timeout(REQUEST_READ_TIMEOUT_S):
                line = await reader.readline()
                if not line:
                    return None
                parts = line.rstrip(b"\r\n").split(b" ")
                if len(parts) != 3 or not parts[2].startswith(b"HTTP/1."):
                    return _answer(400, b"bad request line\n", head=False)
                for _ in range(MAX_HEADER_LINES):
                    header = await reader.readline()
                    if header in (b"\r\n", b"\n"):
                        break
                    if not header:
                        return None
                else:
                    return _answer(400, b"too many header lines\n", head=False)
        except TimeoutError:
            return None
        except ValueError:  # a line longer than MAX_LINE_BYTES
            return _answer(400, b"line too long\n", head=False)
        method, target = parts[0], parts[1]
        head = method == b"HEAD"
        if method not in (b"GET", b"HEAD"):
            return _answer(405, b"only GET and HEAD\n", head=False)
        path = target.split(b"?", 1)[0]
        route = next((r for p, r in self.routes.items() if path.startswith(p)), None)
        if route is not None and writer is not None:
            return await route(head, target, writer)
        if path != b"/metrics":
            return _answer(404, b"not found: the metrics are at /metrics\n", head=head)
        body = await asyncio.to_thread(scrape_text(self.registry))
        return _answer(200, body, content_type=CONTENT_TYPE, head=head)


__all__ = ["CONTENT_TYPE", "MAX_HEADER_LINES", "MAX_LINE_BYTES", "MetricsEndpoint", "scrape_text"]
