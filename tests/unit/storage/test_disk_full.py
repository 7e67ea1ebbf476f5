"""A write that fails on a full disk (ENOSPC) leaves the log exactly as before it: nothing
published, no torn bytes past the published end, no epoch without data; the next append
after the disk has room again continues at the same offset, and a reopened log agrees.

The disk is made "full" by making the segment's positional writes fail part way (the
integration test ``tests/faults/test_disk_full.py`` fills a real tmpfs)."""

from __future__ import annotations

import errno
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tidelog.protocol.records import stamp_batch
from tidelog.storage.log import Log, LogConfig

from .batches import build_batch, read_all


def stamped(raw: bytes, base: int, epoch: int) -> bytes:
    buf = bytearray(raw)
    stamp_batch(buf, 0, base, epoch)
    return bytes(buf)


@contextmanager
def disk_full_after(limit: int) -> Iterator[None]:
    """Positional writes of segments write at most ``limit`` more bytes, then ENOSPC."""
    real_pwritev, real_pwrite = os.pwritev, os.pwrite
    left = [limit]

    def pwritev(fd: int, buffers: list[bytes | memoryview], offset: int) -> int:
        return pwrite(fd, b"".join(buffers), offset)

    def pwrite(fd: int, data: bytes | memoryview, offset: int) -> int:
        if left[0] <= 0:
            raise OSError(errno.ENOSPC, "No space left on device")
        n = real_pwrite(fd, memoryview(data)[: left[0]], offset)
        left[0] -= n
        return n

    mp = pytest.MonkeyPatch()
    mp.setattr("tidelog.storage.segment.os.pwritev", pwritev)
    mp.setattr("tidelog.storage.segment.os.pwrite", pwrite)
    try:
        yield
    finally:
        mp.undo()
        assert (os.pwritev, os.pwrite) == (real_pwritev, real_pwrite)


def segment_file_size(log: Log) -> int:
    return (log.directory / f"{0:020d}.log").stat().st_size


@pytest.mark.parametrize("room", [0, 1, 150])
def test_leader_append_on_a_full_disk_changes_nothing(tmp_path: Path, room: int) -> None:
    log = Log.open(tmp_path / "t-0", LogConfig(), now_ms=0)
    log.append_as_leader(build_batch(3), leader_epoch=0, now_ms=1)
    before = read_all(log)
    size = segment_file_size(log)
    with disk_full_after(room), pytest.raises(OSError, match="No space") as failed:
        log.append_as_leader(build_batch(4, seed=1), leader_epoch=1, now_ms=2)
    assert failed.value.errno == errno.ENOSPC
    # What a reader (and a restart) sees: the three records of before, nothing torn after.
    assert log.log_end_offset == 3
    assert read_all(log) == before
    assert segment_file_size(log) == size
    # Space again: the next append takes offset 3, and the log reopens the same.
    info = log.append_as_leader(build_batch(2, seed=2), leader_epoch=1, now_ms=3)
    assert (info.first_offset, info.last_offset) == (3, 4)
    contents = read_all(log)
    log.close()
    reopened = Log.open(tmp_path / "t-0", LogConfig(), now_ms=4)
    assert reopened.log_end_offset == 5
    assert read_all(reopened) == contents
    assert [(e.epoch, e.start_offset) for e in reopened.leader_epoch_cache.entries] == [
        (0, 0),
        (1, 3),
    ]


def test_follower_append_on_a_full_disk_records_no_epoch(tmp_path: Path) -> None:
    log = Log.open(tmp_path / "t-0", LogConfig(), now_ms=0)
    log.append_as_follower(stamped(build_batch(2), 0, 4), now_ms=1)
    with disk_full_after(10), pytest.raises(OSError, match="No space"):
        log.append_as_follower(stamped(build_batch(3, seed=1), 2, 7), now_ms=2)
    assert log.log_end_offset == 2
    # Epoch 7 never reached the log: the cache must not claim it starts at offset 2 (a
    # follower truncates by these entries when it fetches again, rule 3).
    assert [(e.epoch, e.start_offset) for e in log.leader_epoch_cache.entries] == [(4, 0)]
    # The leader's (maybe different) history is taken from offset 2 once there is room.
    log.append_as_follower(stamped(build_batch(1, seed=2), 2, 6), now_ms=3)
    assert [(e.epoch, e.start_offset) for e in log.leader_epoch_cache.entries] == [(4, 0), (6, 2)]
    assert log.log_end_offset == 3


def test_index_entries_survive_a_failed_index_write(tmp_path: Path) -> None:
    """Data written, index file full: the append succeeds (the in-memory index is the truth),
    and the index reaches the file once there is room again."""
    log = Log.open(tmp_path / "t-0", LogConfig(index_interval_bytes=1), now_ms=0)
    index = log.directory / f"{0:020d}.index"
    real_pwrite = os.pwrite

    def pwrite(fd: int, data: bytes | memoryview, offset: int) -> int:
        if os.path.samefile(f"/proc/self/fd/{fd}", index):
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_pwrite(fd, data, offset)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr("tidelog.storage.index.os.pwrite", pwrite)
        for i in range(70):  # more than one buffered block of index entries
            log.append_as_leader(build_batch(1, seed=i), leader_epoch=0, now_ms=i)
        with pytest.raises(OSError, match="No space"):
            log.flush()
    assert log.log_end_offset == 70
    contents = read_all(log)
    log.flush()
    assert index.stat().st_size > 0
    log.close()
    reopened = Log.open(tmp_path / "t-0", LogConfig(index_interval_bytes=1), now_ms=100)
    assert read_all(reopened) == contents
    assert reopened.read(35, 1 << 20) is not None
