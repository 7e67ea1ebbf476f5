"""Keeping a log's page cache to its tail (``tidelog.storage.page_cache``).

The arithmetic is checked with the two kernel calls recorded; one test checks with the real
kernel that the old part of a log really leaves the page cache and the tail stays, by
reading single pages with ``RWF_NOWAIT`` (which fails with EAGAIN for a page not cached).
The hint thread is checked with hints that record where and on what file they ran.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from tidelog.storage import page_cache
from tidelog.storage.log import Log, LogConfig
from tidelog.storage.page_cache import STEP, CacheWindow

from .batches import build_batch, read_all

MIB = 1024 * 1024


class Calls:
    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.log: list[tuple[str, int, int]] = []
        monkeypatch.setattr(
            page_cache, "start_writeback", lambda fd, off, n: self.log.append(("wb", off, n))
        )
        monkeypatch.setattr(
            page_cache, "drop", lambda fd, off, n: self.log.append(("drop", off, n))
        )

    def take(self) -> list[tuple[str, int, int]]:
        out, self.log = self.log, []
        return out


def test_steps_write_back_the_new_bytes_and_drop_what_is_keep_behind(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls = Calls(monkeypatch)
    keep = 2 * STEP
    window = CacheWindow(0)
    window.after_append(3, STEP - 1, keep)
    assert calls.take() == []  # less than a step: nothing
    window.after_append(3, STEP + 100, keep)
    assert calls.take() == [("wb", 0, STEP + 100)]
    window.after_append(3, 2 * STEP + 100, keep)
    assert calls.take() == [("wb", STEP + 100, STEP)]  # nothing is keep behind yet
    window.after_append(3, 3 * STEP + 5000, keep)
    # Dropped: up to keep behind the end, page-aligned, and only bytes written back a
    # step before (the newest stretch may still be on its way to the disk).
    assert calls.take() == [("wb", 2 * STEP + 100, STEP + 4900), ("drop", 0, STEP + 4096)]
    window.after_append(3, 10 * STEP, keep)
    assert calls.take() == [
        ("wb", 3 * STEP + 5000, 7 * STEP - 5000),
        ("drop", 4096, 8 * STEP - 4096),
    ]
    # (from a step back: pages still being written back last time get another go)
    assert (window.dropped, window.written_back) == (8 * STEP, 10 * STEP)


def test_a_segment_opened_at_start_up_is_left_to_the_kernel(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls = Calls(monkeypatch)
    window = CacheWindow(5 * STEP + 10)
    window.after_append(3, 6 * STEP, STEP)
    assert calls.take() == []
    window.after_append(3, 6 * STEP + 10, STEP)
    assert calls.take() == [("wb", 5 * STEP + 10, STEP)]  # only what it appends itself


def test_truncation_moves_the_marks_back(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = Calls(monkeypatch)
    window = CacheWindow(0)
    window.after_append(3, 4 * STEP, STEP)
    calls.take()
    window.truncated(STEP + 10)
    assert (window.dropped, window.written_back) == (STEP, STEP + 10)
    window.after_append(3, 2 * STEP + 10, STEP)
    assert calls.take() == [("wb", STEP + 10, STEP)]


def test_a_rolled_segment_is_dropped_once_the_next_holds_keep_bytes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = Calls(monkeypatch)
    log = Log.open(
        tmp_path / "t-0",
        LogConfig(segment_bytes=STEP + STEP // 2, page_cache_keep_bytes=STEP),
        now_ms=0,
    )
    batch = build_batch(1, value_size=MIB - 200)
    size = len(batch)
    assert STEP // 9 < size < STEP // 8  # a step every 9 batches
    for _ in range(12):  # the first segment is full
        log.append_as_leader(batch, leader_epoch=0, now_ms=0)
    in_first = 9 * size - STEP
    in_first -= in_first % 4096
    assert calls.take() == [("wb", 0, 9 * size), ("drop", 0, in_first)]
    log.append_as_leader(batch, leader_epoch=0, now_ms=0)  # rolls
    assert log.segment_base_offsets == (0, 12)
    # The old segment's rest goes to the disk at once; its cache stays for now.
    assert calls.take() == [("wb", 9 * size, 3 * size)]
    for _ in range(7):
        log.append_as_leader(batch, leader_epoch=0, now_ms=0)
    assert calls.take() == []
    log.append_as_leader(batch, leader_epoch=0, now_ms=0)  # the new segment holds keep
    rest = 12 * size - 12 * size % 4096
    assert calls.take() == [
        ("wb", 0, 9 * size),
        ("drop", 0, in_first),
        ("drop", 0, rest),  # all of the old segment
    ]
    assert len(read_all(log)) == 21 * size


def _cached(fd: int, offset: int) -> bool:
    try:
        os.preadv(fd, [bytearray(4096)], offset, os.RWF_NOWAIT)
    except BlockingIOError:
        return False
    return True


@pytest.mark.skipif(not page_cache.SUPPORTED, reason="needs sync_file_range and posix_fadvise")
def test_the_kernel_drops_the_old_part_and_keeps_the_tail(tmp_path: Path) -> None:
    probe = tmp_path / "probe"
    fd = os.open(probe, os.O_RDWR | os.O_CREAT)
    os.write(fd, b"x" * 4096)
    os.fsync(fd)
    page_cache.drop_now(fd, 0, 4096)
    kept = _cached(fd, 0)
    os.close(fd)
    if kept:
        pytest.skip(f"{tmp_path}'s file system keeps pages in memory (tmpfs?)")

    log = Log.open(tmp_path / "t-0", LogConfig(page_cache_keep_bytes=2 * STEP), now_ms=0)
    batch = build_batch(1, value_size=MIB - 200)
    for _ in range(4 * 9):
        log.append_as_leader(batch, leader_epoch=0, now_ms=0)
        log.flush()  # written back for sure: the next step can drop it
        page_cache.settle()  # the step's hints have run
    segment_fd = log._local.segments[-1].fd
    size = log._local.segments[-1].size
    assert not _cached(segment_fd, 0)
    assert not _cached(segment_fd, STEP)
    assert _cached(segment_fd, size - 4096)
    assert _cached(segment_fd, size - STEP)
    assert len(read_all(log)) == size  # reads come from the disk as before


class _Recorder:
    """A hint that waits for ``go`` and records the thread it ran on and its file's inode."""

    def __init__(self) -> None:
        self.go = threading.Event()
        self.ran: list[tuple[str, int, int, int]] = []

    def __call__(self, fd: int, offset: int, length: int) -> None:
        self.go.wait(10)
        self.ran.append((threading.current_thread().name, os.fstat(fd).st_ino, offset, length))


def _open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="counts descriptors in /proc")
def test_hints_run_in_order_off_the_callers_thread_on_the_file_they_were_given(
    tmp_path: Path,
) -> None:
    hints = page_cache._HintThread()
    hint = _Recorder()
    first, other = tmp_path / "first", tmp_path / "other"
    fd = os.open(first, os.O_RDWR | os.O_CREAT)
    inode = os.fstat(fd).st_ino
    before = _open_fds()
    assert hints.submit(hint, fd, 0, 4096)
    assert hints.submit(hint, fd, 4096, 8192)
    assert not hints.submit(hint, fd, 0, 0)  # nothing to hint about
    # The segment closes its descriptor and the number is reused before the hints run.
    os.close(fd)
    reused = os.open(other, os.O_RDWR | os.O_CREAT)
    try:
        assert reused == fd
        hint.go.set()
        hints.settle()
        assert hint.ran == [
            ("tidelog-page-cache", inode, 0, 4096),
            ("tidelog-page-cache", inode, 4096, 8192),
        ]
        assert os.fstat(reused).st_ino != inode
    finally:
        os.close(reused)
    assert _open_fds() == before - 1  # the hints' own descriptors are closed again


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="counts descriptors in /proc")
def test_hints_beyond_the_bound_are_skipped_and_hold_no_descriptor(tmp_path: Path) -> None:
    hints = page_cache._HintThread()
    hint = _Recorder()
    fd = os.open(tmp_path / "f", os.O_RDWR | os.O_CREAT)
    try:
        before = _open_fds()
        assert hints.submit(hint, fd, 0, 1)  # taken by the thread, which waits in it
        while hints.pending():
            threading.Event().wait(0.001)
        queued = [hints.submit(hint, fd, i, 1) for i in range(1, page_cache.MAX_PENDING + 6)]
        assert queued == [True] * page_cache.MAX_PENDING + [False] * 5
        assert _open_fds() == before + 1 + page_cache.MAX_PENDING
        hint.go.set()
        hints.settle()
        assert [offset for _, _, offset, _ in hint.ran] == list(range(page_cache.MAX_PENDING + 1))
        assert _open_fds() == before
    finally:
        os.close(fd)
