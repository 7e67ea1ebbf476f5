"""A log's segment list (``tidelog.storage.local_log``): rolling, removal with the file
delete delay, the deletable prefix and what a flush syncs."""

from __future__ import annotations

import threading
from pathlib import Path

from tidelog.protocol.records import parse_header
from tidelog.storage import local_log
from tidelog.storage.local_log import LocalLog, remove_log_directory, settle_removals
from tidelog.storage.log_config import LogConfig
from tidelog.storage.segment import LogSegment

from .batches import build_batch

CONFIG = LogConfig(file_delete_delay_ms=1000)


def new_log(directory: Path) -> LocalLog:
    directory.mkdir()
    segment = LogSegment(directory, 0, index_interval_bytes=4096, max_index_entries=100, now_ms=0)
    return LocalLog(directory, CONFIG, [segment])


def append(local: LocalLog, base_offset: int, n: int) -> None:
    batch = bytearray(build_batch(n))
    batch[0:8] = base_offset.to_bytes(8, "big")
    assert parse_header(bytes(batch)).size == len(batch)
    local.active.append([bytes(batch)], len(batch), [(len(batch), base_offset + n - 1, 0)], 0)


def test_roll_remove_and_delete_after_the_delay(tmp_path: Path) -> None:
    local = new_log(tmp_path / "t-0")
    append(local, 0, 3)
    local.seal_active()
    local.add_segment(3, now_ms=0)
    append(local, 3, 2)
    assert local.bases == [0, 3]
    assert local.log_end_offset == 5
    assert local.take_dir_dirty()
    assert not local.take_dir_dirty()
    assert local.deletable_prefix(lambda seg, upper: upper <= 3, None) == 1
    assert local.deletable_prefix(lambda seg, upper: True, 4) == 1  # the active one reaches 5
    old = local.segments[0]
    local.remove_prefix(1, now_ms=100)
    assert local.bases == [3]
    assert old.log_path.name.endswith(".deleted")
    local.close_pending_deletes(now_ms=1099)
    assert old.log_path.exists()
    local.close_pending_deletes(now_ms=1100)
    assert not old.log_path.exists()
    local.close(delete_pending=True)


def test_truncate_retire_all_and_start_again(tmp_path: Path) -> None:
    local = new_log(tmp_path / "t-0")
    append(local, 0, 3)
    local.seal_active()
    local.add_segment(3, now_ms=0)
    append(local, 3, 2)
    first, active = local.segments
    # Every segment from the recovery point on, and the active one's index files again.
    assert local.segments_to_flush(5, 0) == [first, active, active]
    assert local.segments_to_flush(3, 3) == []
    local.truncate_to(3, now_ms=0)
    assert (local.bases, local.log_end_offset) == ([0], 3)
    local.retire_all(now_ms=0)
    local.start_at(7, now_ms=0)
    assert (local.bases, local.log_end_offset) == ([7], 7)
    local.close(delete_pending=True)


def test_a_removed_partition_directory_is_renamed_away_first(tmp_path: Path) -> None:
    directory = tmp_path / "t-0"
    directory.mkdir()
    (directory / "00000000000000000000.log").write_bytes(b"x")
    remove_log_directory(directory)
    settle_removals()
    assert list(tmp_path.iterdir()) == []
    remove_log_directory(directory)  # gone already: nothing to do


def test_a_removed_directorys_files_are_deleted_off_the_callers_thread(tmp_path: Path) -> None:
    directory = tmp_path / "t-0"
    directory.mkdir()
    (directory / "00000000000000000000.log").write_bytes(b"x")
    gate = threading.Event()
    local_log._REMOVER.submit(lambda: gate.wait(10))  # the remover is busy
    try:
        remove_log_directory(directory)
        # The name is free at once; the files wait, renamed *-delete, for the remover.
        assert not directory.exists()
        [doomed] = tmp_path.iterdir()
        assert doomed.name.endswith("-delete")
        assert (doomed / "00000000000000000000.log").read_bytes() == b"x"
        # The partition is created and deleted again before the remover got to the first.
        directory.mkdir()
        remove_log_directory(directory)
        assert len([p for p in tmp_path.iterdir() if p.name.endswith("-delete")]) == 2
    finally:
        gate.set()
    settle_removals()
    assert list(tmp_path.iterdir()) == []
