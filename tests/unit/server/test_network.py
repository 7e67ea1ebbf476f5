"""The connection: frames dispatched in order, answers written in request order, bad frames
close only this connection, file regions sent with sendfile or copied."""

from __future__ import annotations

import asyncio
import os
import socket
import struct
import tempfile
from collections.abc import Callable
from typing import Any

import pytest

from tidelog.protocol.framing import frame
from tidelog.server.network.connection import CloseConnection, Connection, DispatchResult, Response


class FakeTransport(asyncio.Transport):
    def __init__(self, sock: socket.socket | None = None) -> None:
        super().__init__()
        self.written = bytearray()
        self.closed = False
        self.paused = False
        self.sock = sock

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        if name == "peername":
            return ("127.0.0.1", 1234)
        if name == "socket":
            return self.sock
        return default

    def write(self, data: Any) -> None:
        self.written += data

    def get_write_buffer_size(self) -> int:
        return 0

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        self.closed = True

    def pause_reading(self) -> None:
        self.paused = True

    def resume_reading(self) -> None:
        self.paused = False


class Dispatcher:
    """Answers b"ok:<frame>"; frames starting with b"wait" get a future; b"bad" closes."""

    def __init__(self) -> None:
        self.futures: list[asyncio.Future[Response | None]] = []
        self.seen: list[bytes] = []

    def dispatch(self, conn: Connection, data: bytes) -> DispatchResult:
        self.seen.append(data)
        if data.startswith(b"bad"):
            raise CloseConnection("bad frame")
        if data.startswith(b"none"):
            return None
        if data.startswith(b"wait"):
            future: asyncio.Future[Response | None] = asyncio.get_running_loop().create_future()
            self.futures.append(future)
            return future
        return Response([b"ok:" + data + b";"])


def test_answers_in_request_order_even_when_a_delayed_one_is_first() -> None:
    async def scenario() -> None:
        dispatcher = Dispatcher()
        conn = Connection(dispatcher, 1 << 20)
        transport = FakeTransport()
        conn.connection_made(transport)
        conn.data_received(frame(b"wait1") + frame(b"a") + frame(b"none") + frame(b"b")[:3])
        conn.data_received(frame(b"b")[3:])
        assert dispatcher.seen == [b"wait1", b"a", b"none", b"b"]  # dispatched at once, in order
        assert transport.written == b""  # but nothing overtakes the parked first request
        dispatcher.futures[0].set_result(Response([b"late;"]))
        await asyncio.sleep(0)
        assert bytes(transport.written) == b"late;ok:a;ok:b;"

    asyncio.run(scenario())


@pytest.mark.parametrize(
    "fail",
    [
        lambda f: f.cancel(),
        lambda f: f.set_exception(CloseConnection("fenced")),
        lambda f: f.set_exception(RuntimeError("handler bug")),
    ],
    ids=["cancelled", "close-connection", "handler-error"],
)
def test_a_failed_delayed_answer_closes_and_nothing_behind_it_is_written(
    fail: Callable[[asyncio.Future[Response | None]], object],
) -> None:
    async def scenario() -> None:
        dispatcher = Dispatcher()
        conn = Connection(dispatcher, 1 << 20)
        transport = FakeTransport()
        conn.connection_made(transport)
        conn.data_received(frame(b"a") + frame(b"wait1") + frame(b"b"))
        assert bytes(transport.written) == b"ok:a;"
        fail(dispatcher.futures[0])
        await asyncio.sleep(0)
        assert transport.closed
        assert bytes(transport.written) == b"ok:a;"  # b's answer never takes wait1's place

    asyncio.run(scenario())


def test_bad_frame_closes_the_connection_and_stops_dispatching() -> None:
    async def scenario() -> None:
        dispatcher = Dispatcher()
        conn = Connection(dispatcher, 1 << 20)
        transport = FakeTransport()
        conn.connection_made(transport)
        conn.data_received(frame(b"a") + frame(b"bad") + frame(b"c"))
        assert transport.closed
        assert dispatcher.seen == [b"a", b"bad"]

    asyncio.run(scenario())


def test_oversized_frame_closes_before_buffering() -> None:
    async def scenario() -> None:
        dispatcher = Dispatcher()
        conn = Connection(dispatcher, 100)
        transport = FakeTransport()
        conn.connection_made(transport)
        conn.data_received(struct.pack(">i", 101) + b"x" * 10)
        assert transport.closed
        assert dispatcher.seen == []

    asyncio.run(scenario())


def test_backpressure_pauses_reading_while_many_answers_pend() -> None:
    async def scenario() -> None:
        dispatcher = Dispatcher()
        conn = Connection(dispatcher, 1 << 20)
        transport = FakeTransport()
        conn.connection_made(transport)
        conn.data_received(b"".join(frame(b"wait%d" % i) for i in range(150)))
        assert transport.paused
        for f in dispatcher.futures:
            f.set_result(None)
        await asyncio.sleep(0)
        assert not transport.paused

    asyncio.run(scenario())


class Region:
    def __init__(self, fileno: int, position: int, length: int) -> None:
        self.fileno, self.position, self.length = fileno, position, length


def test_file_regions_are_sent_exactly() -> None:
    """sendfile on a real socket pair; the bytes arrive in order between the chunks."""

    async def scenario() -> None:
        left, right = socket.socketpair()
        left.setblocking(False)
        with tempfile.TemporaryFile() as f:
            payload = os.urandom(300_000)
            f.write(payload)
            f.flush()
            dispatcher = Dispatcher()
            conn = Connection(dispatcher, 1 << 20)
            transport = FakeTransport(left)
            conn.connection_made(transport)
            # Nothing buffered in the fake transport: the region goes out via os.sendfile as
            # far as the socket takes it, the rest is copied into the transport.
            conn._write(Response([b"", Region(f.fileno(), 1000, 200_000)]))
            received = bytearray()
            right.setblocking(False)
            while True:
                try:
                    chunk = right.recv(1 << 20)
                except BlockingIOError:
                    break
                received += chunk
            received += transport.written
            assert bytes(received) == payload[1000:201_000]
        left.close()
        right.close()

    asyncio.run(scenario())


def test_small_regions_leave_with_the_bytes_around_them_in_one_write() -> None:
    """Rule 5: regions up to SENDFILE_MIN_BYTES are copied into one write; a larger one is
    sent by sendfile between the writes of what comes before and after it."""
    from tidelog.server.network.region_reads import SENDFILE_MIN_BYTES

    class CountingTransport(FakeTransport):
        def __init__(self, sock: socket.socket | None = None) -> None:
            super().__init__(sock)
            self.writes: list[bytes] = []

        def write(self, data: Any) -> None:
            self.writes.append(bytes(data))
            super().write(data)

    async def scenario() -> None:
        left, right = socket.socketpair()
        left.setblocking(False)
        right.setblocking(False)
        with tempfile.TemporaryFile() as f:
            payload = os.urandom(200_000)
            f.write(payload)
            f.flush()
            conn = Connection(Dispatcher(), 1 << 20)
            transport = CountingTransport(left)
            conn.connection_made(transport)
            small = [b"head", Region(f.fileno(), 0, 100), b"mid", Region(f.fileno(), 500, 0)]
            conn._write(Response([*small, Region(f.fileno(), 1000, 3000), b"tail"]))
            assert transport.writes == [
                b"head" + payload[:100] + b"mid" + payload[1000:4000] + b"tail"
            ]
            transport.writes.clear()
            big = SENDFILE_MIN_BYTES + 1
            conn._write(Response([b"a", Region(f.fileno(), 7, big), b"z"]))
            # The region went out by sendfile (as far as the socket took it; the rest is
            # copied into the transport), between the two writes.
            assert transport.writes[0] == b"a"
            assert transport.writes[-1] == b"z"
            received = bytearray()
            while True:
                try:
                    received += right.recv(1 << 20)
                except BlockingIOError:
                    break
            assert received
            copied = b"".join(transport.writes[1:-1])
            assert bytes(received) + copied == payload[7 : 7 + big]
        left.close()
        right.close()

    asyncio.run(scenario())


def test_frame_assembler_splits_any_chunking_like_the_decoder() -> None:
    import random

    import pytest

    from tidelog.protocol.errors import FrameTooLargeError
    from tidelog.server.network.connection import FrameAssembler

    rng = random.Random(7)
    payloads = [os.urandom(rng.choice([0, 1, 5, 300, 70_000, 300_000])) for _ in range(30)]
    stream = b"".join(frame(p) for p in payloads)
    for _ in range(20):
        assembler = FrameAssembler(1 << 20)
        got: list[bytes] = []
        pos = 0
        while pos < len(stream):
            step = rng.choice([1, 3, 4, 100, 65536, 200_000])
            got += assembler.feed(stream[pos : pos + step])
            pos += step
        assert got == payloads
    assembler = FrameAssembler(1000)
    assert assembler.feed(frame(b"ok")) == [b"ok"]
    with pytest.raises(FrameTooLargeError):
        assembler.feed(struct.pack(">i", 1001) + b"x" * 10)


def test_frame_assembler_keeps_no_view_of_a_buffer_that_can_change() -> None:
    from tidelog.server.network.connection import FrameAssembler

    payload = bytes(range(256)) * 40
    stream = frame(payload) + frame(b"next")
    assembler = FrameAssembler(1 << 20)
    got: list[bytes] = []
    for start in range(0, len(stream), 1000):
        # A reused receive buffer: overwritten after every feed.
        buffer = bytearray(stream[start : start + 1000])
        got += assembler.feed(memoryview(buffer))
        buffer[:] = b"\xff" * len(buffer)
    assert got == [payload, b"next"]
    assert all(type(f) is bytes for f in got)


def test_idle_only_without_pending_answers() -> None:
    async def scenario() -> None:
        dispatcher = Dispatcher()
        conn = Connection(dispatcher, 1 << 20)
        conn.connection_made(FakeTransport())
        conn.data_received(frame(b"wait"))
        later = conn.last_active + 1000
        assert not conn.is_idle(later, 10)  # an answer is still owed
        dispatcher.futures[0].set_result(None)
        await asyncio.sleep(0)
        assert conn.is_idle(conn.last_active + 11, 10)
        assert not conn.is_idle(conn.last_active + 9, 10)

    asyncio.run(scenario())


def test_a_throttled_connection_is_muted_for_the_throttle_time() -> None:
    # KIP-219 (network rule 8): answered at once, then not read until the time is up; a
    # shorter throttle meanwhile does not shorten it, and backpressure ending does not end it.
    async def scenario() -> None:
        conn = Connection(Dispatcher(), 1 << 20)
        transport = FakeTransport()
        conn.connection_made(transport)
        conn.data_received(frame(b"a"))
        assert transport.written.endswith(b"ok:a;")
        conn.throttle(150)
        conn.throttle(10)
        assert transport.paused
        assert conn.throttled
        conn.resume_writing()
        await asyncio.sleep(0.05)
        assert transport.paused
        await asyncio.sleep(0.15)
        assert not transport.paused
        assert not conn.throttled
        conn.throttle(0)
        assert not transport.paused

    asyncio.run(scenario())
