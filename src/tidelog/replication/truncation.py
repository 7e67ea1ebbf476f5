"""Where a follower's log diverges from the leader's (KIP-101, KIP-279, KIP-320; seed 002).

A replica that becomes follower never truncates blindly to its HW (the m2 loss of seed 002).
Instead, in rounds:

1. The follower asks the leader ``OffsetForLeaderEpoch(latest local epoch)``; the leader
   answers ``leader_end_offset_for_epoch``: the largest epoch it knows <= the one asked, and
   where that epoch ends in its log.
2. ``follower_truncation_offset`` turns the answer into an offset. If the follower knows the
   answered epoch, the logs agree up to the smaller of the two end offsets of that epoch:
   truncate there, done. If it does not (its history skipped that epoch), truncate to the end
   of its own largest epoch below the answer and ask again with its new latest epoch.
3. Once fetching, every Fetch carries ``last_fetched_epoch``; the leader answers
   ``diverging_epoch`` when the follower's tail does not belong to its history, and the
   follower handles it exactly like an OffsetForLeaderEpoch answer (KIP-320).

The rounds terminate: each incomplete round strictly lowers the follower's latest epoch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from tidelog.model import NO_EPOCH, NO_OFFSET


class EpochCacheReader(Protocol):
    """The queries truncation needs (``LeaderEpochCache`` or storage's persistent one)."""

    def end_offset_for(self, requested_epoch: int, log_end_offset: int) -> tuple[int, int]: ...

    def latest_epoch(self) -> int | None: ...


@dataclass(frozen=True, slots=True)
class EpochEndOffset:
    """An OffsetForLeaderEpoch answer, or a Fetch response's DivergingEpoch."""

    leader_epoch: int
    end_offset: int

    @property
    def is_undefined(self) -> bool:
        return self.leader_epoch == NO_EPOCH or self.end_offset == NO_OFFSET


@dataclass(frozen=True, slots=True)
class OffsetTruncationState:
    """Truncate the local log to ``offset``; ``truncation_completed`` False means ask again."""

    offset: int
    truncation_completed: bool


def leader_end_offset_for_epoch(
    cache: EpochCacheReader, log_end_offset: int, requested_epoch: int
) -> EpochEndOffset:
    """The leader's OffsetForLeaderEpoch answer for ``requested_epoch``."""
    epoch, end = cache.end_offset_for(requested_epoch, log_end_offset)
    return EpochEndOffset(epoch, end)


def diverging_epoch(
    cache: EpochCacheReader, log_end_offset: int, *, fetch_offset: int, last_fetched_epoch: int
) -> EpochEndOffset | None:
    """KIP-320, on the leader: None when the follower's log up to ``fetch_offset`` (whose last
    batch has ``last_fetched_epoch``) can be part of this log; otherwise the DivergingEpoch."""
    if last_fetched_epoch == NO_EPOCH:
        return None
    answer = leader_end_offset_for_epoch(cache, log_end_offset, last_fetched_epoch)
    if (
        answer.is_undefined
        or answer.end_offset < fetch_offset
        or answer.leader_epoch < last_fetched_epoch
    ):
        return answer
    return None


def follower_truncation_offset(
    cache: EpochCacheReader,
    *,
    log_end_offset: int,
    high_watermark: int,
    leader_answer: EpochEndOffset,
) -> OffsetTruncationState:
    """Kafka's ``getOffsetTruncationState``: the follower's decision for one round."""
    if leader_answer.end_offset == NO_OFFSET:
        # The leader knows no epoch <= ours (it cannot happen with a leader that recorded its
        # epoch at election). Kafka's fallback is the local HW, which is all we can prove.
        return OffsetTruncationState(min(high_watermark, log_end_offset), True)
    if leader_answer.leader_epoch == NO_EPOCH:
        return OffsetTruncationState(min(leader_answer.end_offset, log_end_offset), True)
    follower_epoch, follower_end = cache.end_offset_for(leader_answer.leader_epoch, log_end_offset)
    if follower_epoch == NO_EPOCH or follower_end == NO_OFFSET:
        # No local epoch <= the leader's: our whole epoch history is newer than the answer,
        # so keep only what the leader has.
        return OffsetTruncationState(min(leader_answer.end_offset, log_end_offset), True)
    if follower_epoch != leader_answer.leader_epoch:
        # We never saw the leader's epoch: cut our history back to before it and ask again
        # with our (now lower) latest epoch.
        return OffsetTruncationState(min(follower_end, log_end_offset), False)
    return OffsetTruncationState(min(leader_answer.end_offset, follower_end, log_end_offset), True)
