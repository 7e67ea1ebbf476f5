"""Follower truncation from OffsetForLeaderEpoch answers / DivergingEpoch (KIP-101/279/320)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from tidelog.replication.epoch import EpochEntry, LeaderEpochCache
from tidelog.replication.truncation import (
    EpochEndOffset,
    OffsetTruncationState,
    diverging_epoch,
    follower_truncation_offset,
    leader_end_offset_for_epoch,
)


def cache_of(log: list[int]) -> LeaderEpochCache:
    """The epoch cache of a log given as the epoch of each offset."""
    c = LeaderEpochCache()
    for offset, epoch in enumerate(log):
        c.assign(epoch, offset)
    return c


def truncate(follower: list[int], leader: list[int], follower_hw: int = 0) -> int:
    """Run the rounds as a follower would; return the final truncation offset."""
    f = list(follower)
    leader_cache = cache_of(leader)
    # A leader records its own epoch at election (rule 7): always the newest it knows.
    leader_cache.assign(100, len(leader))
    while True:
        fc = cache_of(f)
        latest = fc.latest_epoch()
        if latest is None:
            return len(f)
        answer = leader_end_offset_for_epoch(leader_cache, len(leader), latest)
        state = follower_truncation_offset(
            fc, log_end_offset=len(f), high_watermark=follower_hw, leader_answer=answer
        )
        f = f[: state.offset]
        if state.truncation_completed:
            return state.offset


def test_seed_002_no_truncation_when_epochs_agree() -> None:
    # A (follower) restarted with m1, m2 in epoch 0; B (leader) has the same: keep both,
    # even though A's HW is 1 (the old rule would drop m2).
    assert truncate([0, 0], [0, 0], follower_hw=1) == 2


def test_divergent_tail_is_cut_at_the_epoch_boundary() -> None:
    # Follower wrote offsets 3,4 as leader of epoch 1; new leader began epoch 2 at offset 3.
    assert truncate([0, 0, 0, 1, 1], [0, 0, 0, 2, 2, 2]) == 3


def test_multiple_rounds_when_follower_skipped_the_leaders_epoch() -> None:
    # Follower has epochs 0 and 3 (offset 4..); the leader has 0, 2 (from 2) and 4.
    follower = [0, 0, 0, 0, 3, 3]
    leader = [0, 0, 2, 2, 2, 4]
    # Round 1: ask 3 -> leader answers (2, 5); follower's floor for 2 is 0 ending at 4: cut
    # to 4, incomplete. Round 2: ask 0 -> leader (0, 2): truncate to 2.
    assert truncate(follower, leader) == 2


def test_answer_older_than_all_local_epochs() -> None:
    c = cache_of([3, 3, 3])
    s = follower_truncation_offset(
        c, log_end_offset=3, high_watermark=0, leader_answer=EpochEndOffset(1, 10)
    )
    assert s == OffsetTruncationState(0, True)


def test_undefined_answer_falls_back_to_hw() -> None:
    c = cache_of([0, 0, 0])
    s = follower_truncation_offset(
        c, log_end_offset=3, high_watermark=2, leader_answer=EpochEndOffset(-1, -1)
    )
    assert s == OffsetTruncationState(2, True)


def test_diverging_epoch_on_fetch() -> None:
    leader = cache_of([0, 0, 2, 2])
    assert diverging_epoch(leader, 4, fetch_offset=2, last_fetched_epoch=0) is None
    assert diverging_epoch(leader, 4, fetch_offset=4, last_fetched_epoch=2) is None
    # Follower has epoch 1 records up to 3: the leader never had epoch 1.
    assert diverging_epoch(leader, 4, fetch_offset=3, last_fetched_epoch=1) == EpochEndOffset(0, 2)
    # Follower has epoch 0 records beyond where epoch 0 ended on the leader.
    assert diverging_epoch(leader, 4, fetch_offset=3, last_fetched_epoch=0) == EpochEndOffset(0, 2)
    assert diverging_epoch(leader, 4, fetch_offset=0, last_fetched_epoch=-1) is None


def logs() -> st.SearchStrategy[tuple[list[int], list[int]]]:
    """Two logs sharing a prefix, each continuing with its own non-decreasing epochs."""

    def build(prefix_len: int, a: list[int], b: list[int]) -> tuple[list[int], list[int]]:
        prefix = sorted(a[:prefix_len])
        base = prefix[-1] if prefix else 0
        # Divergent suffixes use disjoint epochs above the prefix (one leader per epoch).
        fa = [base + 1 + 2 * e for e in sorted(a[prefix_len:])]
        fb = [base + 2 + 2 * e for e in sorted(b)]
        return prefix + fa, prefix + fb

    return st.builds(
        build,
        st.integers(0, 8),
        st.lists(st.integers(0, 3), max_size=12),
        st.lists(st.integers(0, 3), max_size=6),
    )


@settings(max_examples=300)
@given(logs())
def test_truncation_keeps_exactly_the_common_prefix(pair: tuple[list[int], list[int]]) -> None:
    follower, leader = pair
    common = 0
    while common < min(len(follower), len(leader)) and follower[common] == leader[common]:
        common += 1
    assert truncate(follower, leader) == common


def test_entries_helper_matches_cache() -> None:
    assert cache_of([0, 0, 2]).entries == (EpochEntry(0, 0), EpochEntry(2, 2))
