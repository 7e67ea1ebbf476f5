"""Loopback TCP proxies that can partition one network link (the nemesis' network faults).

One ``LinkProxy`` listens on a free 127.0.0.1 port and forwards every connection to one
target port. ``cut()`` partitions the link the way a dropped-packet partition looks to TCP:
nothing is forwarded any more in either direction (bytes stay in the kernel buffers, so no
request is torn in half), new connections are accepted but not carried, and peers notice
only through their own timeouts. ``heal()`` lets the held bytes flow again, exactly as TCP
retransmission does after a real partition heals (if the peers have not given up).

Every proxy runs on one asyncio loop in a daemon thread (``ProxyLoop``); the methods are
thread-safe and return once the loop applied them. A proxy owns everything it opens: its
listening socket, one task per carried connection, both transports of each; ``close()``
cancels and awaits the tasks and closes every transport (aborting what a cut left unsent),
so nothing is left for the garbage collector (no ResourceWarning), and ``ProxyLoop.close()``
does the same for whatever is still running on the loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")

_CHUNK = 65536


class ProxyLoop:
    """An asyncio loop in a daemon thread, hosting any number of ``LinkProxy``."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.proxies: list[LinkProxy] = []
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self._thread.start()

    def call(self, coro: Coroutine[Any, Any, T], timeout_s: float = 10.0) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout_s)

    def close(self) -> None:
        """Close every proxy, cancel and await whatever else still runs on the loop, then
        stop and close it."""
        if self.loop.is_closed():
            return
        for proxy in self.proxies:
            proxy.close()

        async def drain() -> None:
            me = asyncio.current_task()
            tasks = [t for t in asyncio.all_tasks() if t is not me]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            await asyncio.sleep(0)  # the transports' connection_lost callbacks

        if self._thread.is_alive():
            with contextlib.suppress(Exception):
                self.call(drain())
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
        self._listener: socket.socket | None = None
        #: One task per accepted connection, and every transport (both sides) still open.
        self._tasks: set[asyncio.Task[Any]] = set()
        self._writers: set[asyncio.StreamWriter] = set()
        self._closed = False
        #: Connections accepted so far (carried or not).
        self.accepted = 0
        self.port = loop.call(self._start())
        loop.proxies.append(self)

    async def _start(self) -> int:
        self._open = asyncio.Event()
        self._open.set()
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            listener.bind(("127.0.0.1", 0))
            listener.listen(128)
            listener.setblocking(False)
            self._server = await asyncio.start_server(self._accept, sock=listener)
        except BaseException:
            listener.close()
            raise
        self._listener = listener
        port: int = listener.getsockname()[1]
        return port

    @property
    def is_cut(self) -> bool:
        return self._open is not None and not self._open.is_set()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        assert self._open is not None
        task = asyncio.current_task()
        assert task is not None
        self.accepted += 1
        self._writers.add(writer)
        if self._closed:
            writer.transport.abort()
            self._writers.discard(writer)
            return
        self._tasks.add(task)
        up_writer: asyncio.StreamWriter | None = None
        try:
            await self._open.wait()
            try:
                up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.target_port)
            except OSError:
                return
            self._writers.add(up_writer)
            if up_writer.get_extra_info("sockname") == up_writer.get_extra_info("peername"):
                # TCP self-connect: the target is down and the kernel picked its port as our
                # ephemeral source port. Holding it would keep the broker from binding its
                # listener on restart ("address already in use"): let go at once.
                up_writer.transport.abort()
                return
            await asyncio.gather(self._pump(reader, up_writer), self._pump(up_reader, writer))
        finally:
            for w in (up_writer, writer):
                if w is not None:
                    await self._finish(w)
            self._tasks.discard(task)

    async def _finish(self, writer: asyncio.StreamWriter) -> None:
        """Close one side: gracefully (what was written is still delivered), bounded; at
        once when the proxy is closing."""
        try:
            if not self._closed:
                writer.close()
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(writer.wait_closed(), 5.0)
        finally:
            writer.transport.abort()  # a no-op once closed
            self._writers.discard(writer)

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
            # EOF or an error on one side ends the other: close it (its task then finishes
            # with both transports closed, see ``_finish``).
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

    async def _close(self) -> None:
        self._closed = True
        if self._server is not None:
            self._server.close()
        if self._listener is not None:
            self._listener.close()
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for w in list(self._writers):
            w.transport.abort()
        self._writers.clear()
        if self._server is not None:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._server.wait_closed(), 2.0)
        await asyncio.sleep(0)  # the aborted transports' connection_lost callbacks

    def close(self) -> None:
        """Stop listening, end every connection, close every socket this proxy opened."""
        if self._closed or self._loop.loop.is_closed():
            return
        with contextlib.suppress(Exception):
            self._loop.call(self._close())
