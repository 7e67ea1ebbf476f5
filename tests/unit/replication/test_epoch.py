"""The pure leader epoch cache against Kafka's LeaderEpochFileCache semantics."""

from __future__ import annotations

import itertools

from hypothesis import given
from hypothesis import strategies as st

from tidelog.replication.epoch import EpochEntry, LeaderEpochCache


def cache(*pairs: tuple[int, int]) -> LeaderEpochCache:
    return LeaderEpochCache(EpochEntry(e, o) for e, o in pairs)


def test_end_offset_for() -> None:
    c = cache((1, 0), (3, 10), (5, 20))
    assert c.end_offset_for(5, 30) == (5, 30)  # latest epoch ends at the log end
    assert c.end_offset_for(3, 30) == (3, 20)
    assert c.end_offset_for(4, 30) == (3, 20)  # unknown middle epoch: floor epoch, next start
    assert c.end_offset_for(0, 30) == (0, 0)  # older than all: ends where history starts
    assert c.end_offset_for(6, 30) == (-1, -1)  # newer than all
    assert c.end_offset_for(-1, 30) == (-1, -1)
    assert LeaderEpochCache().end_offset_for(1, 5) == (-1, -1)


def test_assign_is_idempotent_and_drops_conflicting_history() -> None:
    c = cache((1, 0), (2, 5))
    assert not c.assign(2, 7)  # same epoch, later offset: already covered
    assert c.entries == (EpochEntry(1, 0), EpochEntry(2, 5))
    assert c.assign(3, 4)  # a new epoch starting below epoch 2's start replaces epoch 2
    assert c.entries == (EpochEntry(1, 0), EpochEntry(3, 4))


def test_truncate_from_end_and_start() -> None:
    c = cache((1, 0), (2, 5), (3, 9))
    assert c.truncate_from_end(9)
    assert c.entries == (EpochEntry(1, 0), EpochEntry(2, 5))
    assert not c.truncate_from_end(9)
    assert c.truncate_from_start(7)
    assert c.entries == (EpochEntry(2, 7),)
    assert not c.truncate_from_start(7)
    assert not c.truncate_from_start(3)


def test_epoch_for_offset() -> None:
    c = cache((1, 0), (3, 10))
    assert c.epoch_for_offset(0) == 1
    assert c.epoch_for_offset(9) == 1
    assert c.epoch_for_offset(10) == 3
    assert cache((2, 5)).epoch_for_offset(4) is None


@given(st.lists(st.tuples(st.integers(0, 20), st.integers(0, 100)), max_size=30))
def test_entries_stay_strictly_monotonic(assignments: list[tuple[int, int]]) -> None:
    c = LeaderEpochCache()
    for epoch, offset in assignments:
        c.assign(epoch, offset)
        es = c.entries
        assert all(
            a.epoch < b.epoch and a.start_offset < b.start_offset for a, b in itertools.pairwise(es)
        )
        # The assignment just made is always the latest history.
        assert c.latest_epoch() is not None
        assert c.latest_epoch() >= epoch or c.entries[-1].start_offset <= offset
