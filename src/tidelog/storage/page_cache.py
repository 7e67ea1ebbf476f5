"""Keeping a log's page-cache footprint to its tail (``tidelog.log.page.cache.keep.bytes``).

Kafka leaves the page cache to the kernel: every byte appended stays cached until memory
runs short. tidelog instead writes a log's bytes back soon after they are appended and
drops them from the cache once they are more than ``keep`` bytes behind the log's end
(readers of the tail, followers and consumers that keep up, still read from memory; older
data is read from disk, as in Kafka once the cache has turned over).

Why: the copy into the page cache is most of a broker's CPU at large records, and it costs
3-7 times more into pages the kernel has not used for a while than into pages it freed
moments ago (measured on the 2-vCPU VM the benchmarks run on, whose hypervisor takes freed
guest memory back: docs/performance.md "The page cache on this VM"). Dropping what was
written behind the tail keeps a broker writing into recently freed pages. It also spares
the kernel's reclaim the work of finding old log pages when the cache is full.

Both calls are hints: a failure or an unsupported platform leaves the data where it is,
and no read ever depends on what is cached. Only clean pages are dropped, so the order is:
start writeback of a stretch when it is appended (``start_writeback``), and drop it
(``drop``) a step or more later, when it is clean.

Neither runs on the caller's thread. ``sync_file_range`` "does not wait" for the disk, but
it runs the file system's block allocation for the range, and ext4 may first read its block
bitmaps from the disk: up to 32 ms per call (4.7 ms at the median of those over 2 ms) on a
broker's event loop under a produce flood, and ``POSIX_FADV_DONTNEED`` up to 40 ms
(``perf trace`` of three brokers, docs/performance.md "What stalled the event loop on the
disk"). Both are handed to one hint thread per process (``_HintThread``), in order, each
with a ``dup`` of the descriptor: the segment may close its own meanwhile, and a reused
descriptor number must not receive another file's hint. At most ``MAX_PENDING`` hints
wait; a hint beyond that is skipped.

What a reader does about the rest: a read far behind a log's end may find its bytes on the
disk only. ``Log.uncached_range`` names the bytes such a read will touch (an ``Uncached``,
holding its own descriptor) and ``load_all``, run in a worker thread, reads them through a
scratch buffer, so the read itself, on the event loop, finds them in memory.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import functools
import os
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Final

from tidelog.storage.serial_worker import SerialWorker

#: Appended bytes between two hints: each step starts writeback of the newest STEP bytes
#: and drops the stretch now more than ``keep`` behind.
STEP: Final = 8 * 1024 * 1024
#: tidelog.log.page.cache.keep.bytes' default.
DEFAULT_KEEP: Final = 64 * 1024 * 1024
_PAGE: Final = 4096
#: sync_file_range(2) flag: start writeback of the range's dirty pages, do not wait.
_SYNC_FILE_RANGE_WRITE: Final = 2
#: Hints waiting for the hint thread beyond which a new one is skipped (each holds a
#: descriptor, and its file's blocks if the file is deleted meanwhile).
MAX_PENDING: Final = 64


def _load_sync_file_range() -> Callable[[int, int, int, int], int] | None:
    """libc's ``sync_file_range`` (Python's ``os`` does not expose it), or None."""
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    try:
        func = ctypes.CDLL(name, use_errno=True).sync_file_range
    except (OSError, AttributeError):
        return None
    func.argtypes = [ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint]
    func.restype = ctypes.c_int
    result: Callable[[int, int, int, int], int] = func
    return result


_sync_file_range = _load_sync_file_range()
#: Whether this platform can do both steps (Linux with glibc/musl).
SUPPORTED: Final = _sync_file_range is not None and hasattr(os, "posix_fadvise")


def write_back_now(fd: int, offset: int, length: int) -> None:
    """Ask the kernel to start writing ``length`` bytes at ``offset`` to disk; may block on
    the file system's block allocation (module docstring)."""
    if _sync_file_range is not None and length > 0:
        _sync_file_range(fd, offset, length, _SYNC_FILE_RANGE_WRITE)


def drop_now(fd: int, offset: int, length: int) -> None:
    """Drop the clean cached pages of the range (dirty ones stay: nothing is lost)."""
    if length > 0:
        with contextlib.suppress(OSError):
            os.posix_fadvise(fd, offset, length, os.POSIX_FADV_DONTNEED)


Hint = Callable[[int, int, int], None]


class _HintThread:
    """Runs hints in order on one ``SerialWorker``, each on its own ``dup`` of the
    descriptor, at most ``MAX_PENDING`` waiting."""

    def __init__(self) -> None:
        self._worker = SerialWorker("tidelog-page-cache")

    def submit(self, hint: Hint, fd: int, offset: int, length: int) -> bool:
        """Queue ``hint(dup of fd, offset, length)``; False if skipped (``MAX_PENDING``
        waiting, or the descriptor is already closed)."""
        if length <= 0 or self._worker.pending() >= MAX_PENDING:
            return False
        try:
            own = os.dup(fd)
        except OSError:
            return False
        self._worker.submit(functools.partial(_run_hint, hint, own, offset, length))
        return True

    def pending(self) -> int:
        """Hints waiting for the hint thread."""
        return self._worker.pending()

    def settle(self) -> None:
        """Wait until every hint queued so far has run."""
        self._worker.settle()


def _run_hint(hint: Hint, fd: int, offset: int, length: int) -> None:
    """One hint on the hint thread; ``fd`` is the hint's own and is closed here."""
    try:
        hint(fd, offset, length)
    except OSError:
        pass  # a hint: the data stays where it is
    finally:
        with contextlib.suppress(OSError):
            os.close(fd)


_HINTS: Final = _HintThread()


def start_writeback(fd: int, offset: int, length: int) -> None:
    """Start writeback of the range on the hint thread (``write_back_now``)."""
    _HINTS.submit(write_back_now, fd, offset, length)


def drop(fd: int, offset: int, length: int) -> None:
    """Drop the range's clean cached pages on the hint thread (``drop_now``)."""
    _HINTS.submit(drop_now, fd, offset, length)


def settle() -> None:
    """Wait until every hint given so far has run (tests; nothing else needs to)."""
    _HINTS.settle()


_NOWAIT: Final[int | None] = getattr(os, "RWF_NOWAIT", None)
#: Whether this platform can read from the page cache alone (``read_cached``, ``cached``).
CAN_READ_CACHED: Final = _NOWAIT is not None


def read_cached(fd: int, offset: int, length: int) -> memoryview | None:
    """The ``length`` bytes at ``offset`` if the page cache holds them all, else None: an
    ``RWF_NOWAIT`` read, which never waits for the disk (a miss starts reading the page in
    the background). None where ``RWF_NOWAIT`` is missing (not Linux)."""
    if _NOWAIT is None:
        return None
    buf = bytearray(length)
    try:
        got = os.preadv(fd, [buf], offset, _NOWAIT)
    except OSError:  # BlockingIOError: not all of it is cached
        return None
    return memoryview(buf) if got == length else None


def cached(fd: int, offset: int) -> bool:
    """Whether the page cache holds the byte at ``offset`` (``read_cached`` of one byte).
    True where that cannot be asked (not Linux): nothing is known, nothing is moved."""
    return not CAN_READ_CACHED or read_cached(fd, offset, 1) is not None


def ends_cached(fd: int, offset: int, length: int) -> bool:
    """Whether the page cache holds the first and the last byte of the range (``cached``):
    the probe of a range too large to read for the answer."""
    return cached(fd, offset) and cached(fd, offset + length - 1)


#: ``load`` reads through a buffer of this size (one per thread).
_LOAD_CHUNK: Final = 1024 * 1024
_scratch = threading.local()


def load(fd: int, offset: int, length: int) -> None:
    """Bring the range into the page cache by reading it (waits for the disk: not on an
    event loop). Stops early at the end of the file."""
    buf: bytearray | None = getattr(_scratch, "buf", None)
    if buf is None:
        buf = _scratch.buf = bytearray(_LOAD_CHUNK)
    end = offset + length
    while offset < end:
        got = os.preadv(fd, [memoryview(buf)[: min(len(buf), end - offset)]], offset)
        if got <= 0:
            return
        offset += got


@dataclass(frozen=True, slots=True)
class Uncached:
    """Bytes of a segment file a read will touch that may be on the disk only. ``fd`` is a
    ``dup`` owned by this object: ``load_all`` closes it."""

    fd: int
    offset: int
    length: int


def load_all(ranges: Sequence[Uncached]) -> None:
    """``load`` each range, then close its descriptor; a failed read only skips the range
    (the read that follows reads from the disk as it would have)."""
    for r in ranges:
        try:
            load(r.fd, r.offset, r.length)
        except OSError:
            pass
        finally:
            with contextlib.suppress(OSError):
                os.close(r.fd)


class CacheWindow:
    """Where one segment file stands: written back up to ``written_back``, dropped below
    ``dropped`` (except pages that were still being written back, or read again, since).
    Invariant: ``dropped <= written_back <= the segment's size``, and
    ``dropped`` is page-aligned."""

    __slots__ = ("dropped", "written_back")

    def __init__(self, size: int) -> None:
        # A segment opened at start-up: leave what it holds to the kernel.
        self.written_back = size
        self.dropped = size - size % _PAGE

    def after_append(self, fd: int, size: int, keep: int) -> None:
        """The segment now ends at ``size``: take a step if STEP bytes came since the last."""
        if size - self.written_back < STEP:
            return
        self.finish(fd, size)
        self.release(fd, size, keep)

    def finish(self, fd: int, size: int) -> None:
        """Start writeback of everything up to ``size`` (a step, or the rest of a segment
        that became inactive; dropped later)."""
        if size > self.written_back:
            start_writeback(fd, self.written_back, size - self.written_back)
            self.written_back = size

    def release(self, fd: int, size: int, keep: int) -> None:
        """Drop what is more than ``keep`` bytes behind ``size`` and was written back at
        least a step ago (the newest stretch may still be on its way to the disk)."""
        limit = self.written_back if keep == 0 else min(size - keep, self.written_back - STEP)
        limit -= limit % _PAGE
        if limit > self.dropped:
            # From a step back: pages still being written back last time get another go.
            start = max(0, self.dropped - STEP)
            drop(fd, start, limit - start)
            self.dropped = limit

    def truncated(self, size: int) -> None:
        """The file was cut to ``size``."""
        self.written_back = min(self.written_back, size)
        self.dropped = min(self.dropped, size - size % _PAGE)
