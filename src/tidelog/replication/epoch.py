"""The leader epoch cache: which epoch began at which offset (seed 002; KIP-101, KIP-279).

A list of ``(epoch, start_offset)`` entries, strictly increasing in both fields. The leader
of epoch ``e`` records ``(e, its log end offset)`` before it takes writes (rule 7); a replica
that appends a batch stamped with a newer epoch records ``(epoch, batch base offset)``.
Followers ask the leader ``end_offset_for(epoch)`` to find where their logs diverge, which
replaces truncation to the high watermark (the data loss of seed 002).

This module is pure; ``tidelog.storage`` persists it as ``leader-epoch-checkpoint``.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable
from dataclasses import dataclass

from tidelog.model import NO_EPOCH, NO_OFFSET


@dataclass(frozen=True, slots=True, order=True)
class EpochEntry:
    epoch: int
    start_offset: int


class LeaderEpochCache:
    """Kafka's ``LeaderEpochFileCache`` logic, in memory.

    Invariant: entries are strictly increasing in epoch and in start offset.
    """

    __slots__ = ("_entries",)

    def __init__(self, entries: Iterable[EpochEntry] = ()) -> None:
        self._entries: list[EpochEntry] = []
        for entry in entries:
            self.assign(entry.epoch, entry.start_offset)

    @property
    def entries(self) -> tuple[EpochEntry, ...]:
        return tuple(self._entries)

    def latest_entry(self) -> EpochEntry | None:
        return self._entries[-1] if self._entries else None

    def latest_epoch(self) -> int | None:
        return self._entries[-1].epoch if self._entries else None

    def earliest_entry(self) -> EpochEntry | None:
        return self._entries[0] if self._entries else None

    def assign(self, epoch: int, start_offset: int) -> bool:
        """Record that ``epoch`` starts at ``start_offset``; return whether anything changed.

        Entries that would break monotonicity (an epoch >= ``epoch`` or a start offset >=
        ``start_offset``) are removed first, as Kafka does: they describe a history that the
        new epoch replaced.
        """
        if epoch < 0 or start_offset < 0:
            raise ValueError(f"epoch {epoch} and start offset {start_offset} must be >= 0")
        latest = self.latest_entry()
        if latest is not None and latest.epoch == epoch and latest.start_offset <= start_offset:
            return False
        self._entries = [
            e for e in self._entries if e.epoch < epoch and e.start_offset < start_offset
        ]
        self._entries.append(EpochEntry(epoch, start_offset))
        return True

    def end_offset_for(self, requested_epoch: int, log_end_offset: int) -> tuple[int, int]:
        """Answer OffsetForLeaderEpoch: ``(largest epoch <= requested, its end offset)``.

        The end offset of an epoch is the start offset of the next higher epoch, or the log end
        offset for the latest epoch. ``(NO_EPOCH, NO_OFFSET)`` when the requested epoch is
        undefined or newer than any known; a requested epoch older than every entry answers
        ``(requested, first start offset)`` so the follower truncates below the known history.
        """
        if requested_epoch == NO_EPOCH or not self._entries:
            return NO_EPOCH, NO_OFFSET
        if self._entries[-1].epoch == requested_epoch:
            return requested_epoch, log_end_offset
        epochs = [e.epoch for e in self._entries]
        higher = bisect.bisect_right(epochs, requested_epoch)
        if higher == len(epochs):
            return NO_EPOCH, NO_OFFSET
        higher_start = self._entries[higher].start_offset
        if higher == 0:
            return requested_epoch, higher_start
        return self._entries[higher - 1].epoch, higher_start

    def epoch_for_offset(self, offset: int) -> int | None:
        """The epoch whose range contains ``offset``, or None if before every entry."""
        starts = [e.start_offset for e in self._entries]
        i = bisect.bisect_right(starts, offset)
        return self._entries[i - 1].epoch if i else None

    def previous_epoch(self) -> int | None:
        return self._entries[-2].epoch if len(self._entries) >= 2 else None

    def truncate_from_end(self, end_offset: int) -> bool:
        """Forget epochs starting at or after ``end_offset`` (the log was truncated there)."""
        kept = [e for e in self._entries if e.start_offset < end_offset]
        changed = len(kept) != len(self._entries)
        self._entries = kept
        return changed

    def truncate_from_start(self, start_offset: int) -> bool:
        """Forget history before ``start_offset`` (log start moved), keeping the epoch in force.

        The last entry at or before ``start_offset`` survives with its start moved up to
        ``start_offset``; every earlier entry goes.
        """
        starts = [e.start_offset for e in self._entries]
        i = bisect.bisect_right(starts, start_offset)
        if i == 0:
            return False
        floor = self._entries[i - 1]
        if i == 1 and floor.start_offset == start_offset:
            return False
        self._entries = [EpochEntry(floor.epoch, start_offset), *self._entries[i:]]
        return True

    def clear(self) -> None:
        self._entries = []

    def __repr__(self) -> str:
        body = ", ".join(f"{e.epoch}@{e.start_offset}" for e in self._entries)
        return f"LeaderEpochCache([{body}])"
