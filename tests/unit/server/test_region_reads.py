"""Records regions the page cache does not hold are read off the event loop
(``tidelog.server.network.region_reads``, connection rule 5b).

Pages are taken out of the page cache with ``POSIX_FADV_DONTNEED`` after an fsync and checked
with ``mincore`` (a read would bring them back); on a file system that keeps them anyway
(tmpfs) the cold cases are skipped.
"""

from __future__ import annotations

import asyncio
import mmap
import os
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from tidelog.protocol.framing import frame
from tidelog.server.network import region_reads
from tidelog.server.network.connection import Connection, DispatchResult, Response
from tidelog.server.network.region_reads import SENDFILE_MIN_BYTES
from tidelog.storage import page_cache

from ..residency import resident as _resident
from .test_network import FakeTransport, Region

pytestmark = pytest.mark.skipif(
    not hasattr(os, "RWF_NOWAIT"), reason="reads the page cache with RWF_NOWAIT (Linux)"
)

SIZE = 3 * SENDFILE_MIN_BYTES


@pytest.fixture
def segment(tmp_path: Path) -> Iterator[tuple[int, bytes]]:
    payload = os.urandom(SIZE)
    fd = os.open(tmp_path / "00000000000000000000.log", os.O_RDWR | os.O_CREAT)
    os.write(fd, payload)
    os.fsync(fd)
    try:
        yield fd, payload
    finally:
        os.close(fd)


def _evict(fd: int) -> None:
    os.posix_fadvise(fd, 0, SIZE, os.POSIX_FADV_RANDOM)  # no readahead past what is read
    os.posix_fadvise(fd, 0, SIZE, os.POSIX_FADV_DONTNEED)
    if any(_resident(fd)):
        pytest.skip("this file system keeps the pages in memory (tmpfs?)")


def test_cached_small_regions_are_read_at_once_and_large_ones_left_for_sendfile(
    segment: tuple[int, bytes],
) -> None:
    fd, payload = segment
    large = Region(fd, 10, SENDFILE_MIN_BYTES + 1)
    parts, cold = region_reads.prepare([b"h", Region(fd, 5, 100), large, Region(fd, 0, 0)])
    assert cold == []
    assert parts[0] == b"h"
    assert bytes(parts[1]) == payload[5:105]  # type: ignore[arg-type]
    assert parts[2] is large
    assert isinstance(parts[3], Region)  # empty: nothing to read


def test_regions_not_cached_are_cold_and_read_in_the_worker(
    segment: tuple[int, bytes],
) -> None:
    fd, payload = segment
    _evict(fd)
    large = Region(fd, 1000, 2 * SENDFILE_MIN_BYTES)
    parts, cold = region_reads.prepare([b"h", Region(fd, 70_000, 300), large])
    assert cold == [1, 2]
    unread = parts[1]
    assert isinstance(unread, Region)  # nothing was read on the caller's thread
    assert region_reads.read_cold(parts, cold) is parts
    assert parts[1] == payload[70_000:70_300]
    assert parts[2] is large  # still sent with sendfile, now from the page cache
    assert page_cache.cached(fd, 1000)
    assert page_cache.cached(fd, 1000 + 2 * SENDFILE_MIN_BYTES - 1)
    assert region_reads.prepare([large]) == ([large], [])


def test_a_large_region_with_a_cold_end_is_cold(segment: tuple[int, bytes]) -> None:
    fd, _ = segment
    _evict(fd)
    os.pread(fd, 4096, 0)  # the first page is cached again, the last is not
    assert _resident(fd)[0]
    assert not _resident(fd)[2 * SENDFILE_MIN_BYTES // mmap.PAGESIZE - 1]
    _, cold = region_reads.prepare([Region(fd, 0, 2 * SENDFILE_MIN_BYTES)])
    assert cold == [0]


def test_a_failed_read_leaves_the_region_for_the_write(tmp_path: Path) -> None:
    fd = os.open(tmp_path / "gone", os.O_RDWR | os.O_CREAT)
    os.close(fd)  # the segment was closed under the read
    small, large = Region(fd, 0, 10), Region(fd, 0, 2 * SENDFILE_MIN_BYTES)
    parts: list[object] = [small, large]
    assert region_reads.read_cold(parts, [0, 1]) == [small, large]


def test_a_cold_answer_is_read_off_the_loop_and_written_in_its_turn(
    segment: tuple[int, bytes], monkeypatch: pytest.MonkeyPatch
) -> None:
    fd, payload = segment
    _evict(fd)
    read_on: list[str] = []
    real_read_cold = region_reads.read_cold

    def recording(parts: list[object], cold: list[int]) -> list[object]:
        read_on.append(threading.current_thread().name)
        return real_read_cold(parts, cold)

    monkeypatch.setattr(region_reads, "read_cold", recording)

    class Dispatcher:
        def dispatch(self, conn: Connection, data: bytes) -> DispatchResult:
            if data == b"old":
                return Response([b"<", Region(fd, 200, 100), b">"])
            return Response([b"ok:" + data])

    async def scenario() -> None:
        conn = Connection(Dispatcher(), 1 << 20)
        transport = FakeTransport()
        conn.connection_made(transport)
        conn.data_received(frame(b"old") + frame(b"next"))
        assert transport.written == b""  # the cold read is not done on the loop
        for _ in range(500):
            if transport.written:
                break
            await asyncio.sleep(0.01)
        assert bytes(transport.written) == b"<" + payload[200:300] + b">ok:next"
        assert read_on
        assert read_on[0] != threading.current_thread().name

    asyncio.run(scenario())


@pytest.mark.parametrize("cold", [False, True], ids=["cached", "cold"])
def test_the_request_timing_follows_the_answer_read_here(
    segment: tuple[int, bytes], cold: bool
) -> None:
    """The dispatcher keys a request's timing by its answer; an answer replaced by one with
    its regions read (or by the task reading them) keeps it, and it is told when written."""
    fd, payload = segment
    if cold:
        _evict(fd)
    sent: list[float] = []

    class Timing:
        def sent(self, dequeued: float) -> None:
            sent.append(dequeued)

    class Dispatcher:
        def dispatch(self, conn: Connection, data: bytes) -> DispatchResult:
            response = Response([Region(fd, 0, 10)])
            conn.timings[id(response)] = Timing()
            return response

    async def scenario() -> None:
        conn = Connection(Dispatcher(), 1 << 20)
        transport = FakeTransport()
        conn.connection_made(transport)
        conn.data_received(frame(b"fetch"))
        for _ in range(500):
            if transport.written:
                break
            await asyncio.sleep(0.01)
        assert bytes(transport.written) == payload[:10]
        assert len(sent) == 1
        assert conn.timings == {}

    asyncio.run(scenario())
