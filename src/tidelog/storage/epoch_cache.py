"""The leader epoch cache persisted as ``leader-epoch-checkpoint`` (Kafka's LeaderEpochFileCache).

The logic is ``tidelog.replication.epoch.LeaderEpochCache`` (pure, seed 002 / KIP-101); this
wrapper writes the checkpoint file (temp + fsync + rename) whenever an operation changed the
entries. Changes are rare (a new epoch, a truncation), so the fsync is not on the append path
in steady state.

Invariant: the file, when present, holds exactly ``entries`` as of the last change.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from tidelog.replication.epoch import EpochEntry, LeaderEpochCache
from tidelog.storage.checkpoints import LeaderEpochCheckpointFile
from tidelog.storage.errors import CorruptCheckpointError


class LeaderEpochFileCache:
    """Same query methods as ``LeaderEpochCache``; mutations persist."""

    __slots__ = ("_cache", "_file", "_log_end_offset", "loaded_from_file")

    def __init__(self, path: Path, log_end_offset: Callable[[], int]) -> None:
        self._file = LeaderEpochCheckpointFile(path)
        self._log_end_offset = log_end_offset
        try:
            entries = self._file.read()
            self.loaded_from_file = path.exists()
        except CorruptCheckpointError:
            # Rebuilt by the log from its batch headers (Log.open).
            entries = []
            self.loaded_from_file = False
        self._cache = LeaderEpochCache(entries)

    @property
    def path(self) -> Path:
        return self._file.path

    @property
    def entries(self) -> tuple[EpochEntry, ...]:
        return self._cache.entries

    def latest_entry(self) -> EpochEntry | None:
        return self._cache.latest_entry()

    def latest_epoch(self) -> int | None:
        return self._cache.latest_epoch()

    def earliest_entry(self) -> EpochEntry | None:
        return self._cache.earliest_entry()

    def previous_epoch(self) -> int | None:
        return self._cache.previous_epoch()

    def epoch_for_offset(self, offset: int) -> int | None:
        return self._cache.epoch_for_offset(offset)

    def end_offset_for(
        self, requested_epoch: int, log_end_offset: int | None = None
    ) -> tuple[int, int]:
        """OffsetForLeaderEpoch: ``(largest epoch <= requested, its end offset)``.

        ``log_end_offset`` defaults to the owning log's current log end offset.
        """
        leo = self._log_end_offset() if log_end_offset is None else log_end_offset
        return self._cache.end_offset_for(requested_epoch, leo)

    def starts_new_epoch(self, leader_epoch: int, owner: object) -> bool:
        """Whether a leader append with ``leader_epoch`` starts an epoch the cache has not
        recorded yet (``tidelog.storage.log`` rule 3: recorded before the data). A leader
        never appends with an epoch below the latest one: ValueError naming ``owner``."""
        latest = self._cache.latest_epoch()
        if latest is not None and leader_epoch < latest:
            raise ValueError(
                f"{owner}: append with leader epoch {leader_epoch} below "
                f"the latest epoch {latest} in the epoch cache"
            )
        return latest is None or leader_epoch > latest

    def assign(self, epoch: int, start_offset: int) -> bool:
        changed = self._cache.assign(epoch, start_offset)
        if changed:
            self._persist()
        return changed

    def truncate_from_end(self, end_offset: int) -> bool:
        changed = self._cache.truncate_from_end(end_offset)
        if changed:
            self._persist()
        return changed

    def truncate_from_start(self, start_offset: int) -> bool:
        changed = self._cache.truncate_from_start(start_offset)
        if changed:
            self._persist()
        return changed

    def clear(self) -> None:
        self._cache.clear()
        self._persist()

    def persist(self) -> None:
        """Write the file even if nothing changed (e.g. to create it)."""
        self._persist()

    def _persist(self) -> None:
        self._file.write(self._cache.entries)

    def __repr__(self) -> str:
        return f"LeaderEpochFileCache({self._cache!r})"
