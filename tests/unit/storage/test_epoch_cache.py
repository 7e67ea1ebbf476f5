"""LeaderEpochFileCache: the pure cache's answers, persisted after every change."""

from __future__ import annotations

from pathlib import Path

import pytest

from tidelog.model import NO_EPOCH, NO_OFFSET
from tidelog.storage.epoch_cache import LeaderEpochFileCache


def test_changes_persist_and_reload(tmp_path: Path) -> None:
    path = tmp_path / "leader-epoch-checkpoint"
    leo = 50
    cache = LeaderEpochFileCache(path, lambda: leo)
    assert not path.exists()
    assert cache.assign(1, 0)
    assert not cache.assign(1, 5)  # same epoch, later start: nothing changes, no write
    assert cache.assign(3, 20)
    assert path.read_text() == "0\n2\n1 0\n3 20\n"
    assert cache.end_offset_for(1) == (1, 20)
    assert cache.end_offset_for(3) == (3, 50)  # the owning log's end offset
    assert cache.end_offset_for(2, 60) == (1, 20)
    assert cache.end_offset_for(9) == (NO_EPOCH, NO_OFFSET)
    assert cache.epoch_for_offset(25) == 3
    assert cache.previous_epoch() == 1
    reloaded = LeaderEpochFileCache(path, lambda: leo)
    assert reloaded.entries == cache.entries
    assert reloaded.loaded_from_file


def test_truncations_persist(tmp_path: Path) -> None:
    path = tmp_path / "leader-epoch-checkpoint"
    cache = LeaderEpochFileCache(path, lambda: 100)
    for epoch, start in [(0, 0), (2, 10), (4, 30)]:
        cache.assign(epoch, start)
    assert cache.truncate_from_end(30)
    assert path.read_text() == "0\n2\n0 0\n2 10\n"
    assert cache.truncate_from_start(15)
    assert path.read_text() == "0\n1\n2 15\n"
    assert not cache.truncate_from_end(99)
    cache.clear()
    assert path.read_text() == "0\n0\n"


def test_corrupt_file_starts_empty_and_says_so(tmp_path: Path) -> None:
    path = tmp_path / "leader-epoch-checkpoint"
    path.write_text("0\n3\n1 0\n")
    cache = LeaderEpochFileCache(path, lambda: 0)
    assert cache.entries == ()
    assert not cache.loaded_from_file


def test_a_leader_epoch_is_new_above_the_latest_and_refused_below_it(tmp_path: Path) -> None:
    cache = LeaderEpochFileCache(tmp_path / "leader-epoch-checkpoint", lambda: 0)
    assert cache.starts_new_epoch(0, "t-0")
    cache.assign(2, 0)
    assert not cache.starts_new_epoch(2, "t-0")
    assert cache.starts_new_epoch(3, "t-0")
    with pytest.raises(ValueError, match="t-0: append with leader epoch 1 below the latest"):
        cache.starts_new_epoch(1, "t-0")
