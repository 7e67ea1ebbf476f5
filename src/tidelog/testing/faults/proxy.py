"""Loopback TCP proxies that can partition one network link (the nemesis' network faults).

One ``LinkProxy`` listens on a free 127.0.0.1 port and forwards every connection to one
target port. ``cut()`` partitions the link the way a dropped-packet partition looks to TCP:
nothing is forwarded any more in either direction (bytes stay in the kernel buffers, so no
request is torn in half), new connections are accepted but not carried, and peers notice
only through their own timeouts. ``heal()`` lets the held bytes flow again, exactly as TCP
retransmission does after a real partition heals (if the peers have not given up).

Every proxy runs on one asyncio loop in a daemon thread (``ProxyLoop``); the methods are
thread-safe and return once the loop applied them.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")

_CHUNK = 65536


class ProxyLoop:
    """An asyncio loop in a daemon thread, hosting any number of ``LinkProxy``."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self._thread.start()

    def call(self, coro: Coroutine[Any, Any, T], timeout_s: float = 10.0) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout_s)

    def close(self) -> None:
        if self.loop.is_closed():
            return
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(5.0)
        if not self._thread.is_alive():
            self.loop.close()


class LinkProxy:
    """127.0.0.1:``port`` → 127.0.0.1:``target_port``; see the module docstring."""

    def __init__(self, loop: ProxyLoop, target_port: int, name: str) -> None:
        self.name = name
        self.target_port = target_port
        self._loop = loop
        self._open: asyncio.Event | None = None
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self.port = loop.call(self._start())

    async def _start(self) -> int:
        self._open = asyncio.Event()
        self._open.set()
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        port: int = self._server.sockets[0].getsockname()[1]
        return port

    @property
    def is_cut(self) -> bool:
        return self._open is not None and not self._open.is_set()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        assert self._open is not None
        self._writers.add(writer)
        try:
            await self._open.wait()
            try:
                up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.target_port)
            except OSError:
                return
            if up_writer.get_extra_info("sockname") == up_writer.get_extra_info("peername"):
                # TCP self-connect: the target is down and the kernel picked its port as our
                # ephemeral source port. Holding it would keep the broker from binding its
                # listener on restart ("address already in use"): let go at once.
                up_writer.transport.abort()
                return
            self._writers.add(up_writer)
            try:
                await asyncio.gather(self._pump(reader, up_writer), self._pump(up_reader, writer))
            finally:
                self._writers.discard(up_writer)
                up_writer.close()
        finally:
            self._writers.discard(writer)
            writer.close()

    async def _pump(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        assert self._open is not None
        try:
            while True:
                await self._open.wait()
                data = await reader.read(_CHUNK)
                if not data:
                    break
                # Read while open, cut before the write: hold the bytes until healed.
                await self._open.wait()
                writer.write(data)
                await writer.drain()
        except (OSError, asyncio.IncompleteReadError):
            pass
        finally:
            with contextlib.suppress(OSError, RuntimeError):
                writer.close()

    def cut(self) -> None:
        async def do() -> None:
            assert self._open is not None
            self._open.clear()

        self._loop.call(do())

    def heal(self) -> None:
        async def do() -> None:
            assert self._open is not None
            self._open.set()

        self._loop.call(do())

    def close(self) -> None:
        async def do() -> None:
            assert self._open is not None
            self._open.set()
            if self._server is not None:
                self._server.close()
            for w in list(self._writers):
                w.close()

        with contextlib.suppress(Exception):
            self._loop.call(do())
