"""What a log remembers of its truncations: a generation bumped by every one (a flush that
a truncation overtook must not move the recovery point past replaced data; the cleaner's
swap is refused once segments it read may have changed) and the lowest log end offset one
left since the last look (a future log's copier cuts its copy there,
``tidelog.storage.future_log``). ``Log`` updates it under its lock.
"""

from __future__ import annotations


class Truncations:
    """A log's truncation generation and its truncation floor."""

    __slots__ = ("_floor", "generation")

    def __init__(self) -> None:
        self.generation = 0
        #: -1 after a full truncation; None when nothing was truncated since ``take_floor``.
        self._floor: int | None = None

    def note_floor(self, floor: int) -> None:
        """A truncation left the log end at ``floor`` (-1: the log was emptied)."""
        current = self._floor
        self._floor = floor if current is None else min(current, floor)

    def take_floor(self) -> int | None:
        """The lowest floor noted since the previous call, or None; resets it."""
        floor, self._floor = self._floor, None
        return floor
