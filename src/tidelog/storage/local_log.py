"""The segments of one partition log (Kafka's ``LocalLog``): the ordered segment list with
its base offsets, rolling, the removal of segments (renamed ``*.deleted``, files closed
``file.delete.delay.ms`` later: ``tidelog.storage.log`` rule 6), the page-cache hints for the
tail (``tidelog.storage.page_cache``) and which files a flush must sync.

It knows nothing of offsets beyond its segments' (log start, recovery point), of producer
state or of leader epochs: ``Log`` keeps those and calls this under its lock.
"""

from __future__ import annotations

import bisect
import functools
import os
import random
import shutil
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Final

from tidelog.storage.log_config import LogConfig
from tidelog.storage.segment import LogSegment
from tidelog.storage.serial_worker import SerialWorker
from tidelog.storage.txn_index import AbortedTxn

#: Offsets inside a segment are stored relative to its base as int32.
_MAX_RELATIVE_OFFSET: Final = 2**31 - 1


def roll_jitter(config: LogConfig) -> int:
    """segment.jitter.ms: a segment's random head start on segment.ms, drawn when it becomes
    active, below min(segment.jitter.ms, segment.ms) (Kafka's ``UnifiedLog.
    randomSegmentJitter``), so that topics created together do not all roll at once."""
    if config.segment_jitter_ms <= 0:
        return 0
    return random.randrange(min(config.segment_jitter_ms, config.segment_ms))


class LocalLog:
    """The segment list of a log directory; never empty (the last segment is the active
    one). Not thread-safe on its own."""

    def __init__(self, directory: Path, config: LogConfig, segments: list[LogSegment]) -> None:
        self.directory = directory
        self.config = config
        self.segments = segments
        self.bases = [s.base_offset for s in segments]
        #: A segment file was created or renamed since the last ``take_dir_dirty``.
        self._dir_dirty = False
        #: Removed segments and when their files are closed and deleted.
        self._pending_deletes: list[tuple[int, LogSegment]] = []
        #: The segment before the active one while part of its tail is still within
        #: ``page_cache_keep_bytes`` of the log end (see ``keep_page_cache_to_tail``).
        self._cache_previous: LogSegment | None = None
        #: How much earlier than segment.ms the active segment rolls (``roll_jitter``).
        self.roll_jitter_ms = roll_jitter(config)

    @property
    def active(self) -> LogSegment:
        return self.segments[-1]

    @property
    def log_end_offset(self) -> int:
        return self.segments[-1].next_offset

    @property
    def size_bytes(self) -> int:
        return sum(s.size for s in self.segments)

    def update_config(self, config: LogConfig) -> None:
        self.config = config
        for seg in self.segments:
            seg.index_interval_bytes = config.index_interval_bytes
            seg.offset_index.max_entries = config.max_index_entries

    def index_aborted(self, aborted: list[AbortedTxn]) -> None:
        """Write each aborted transaction to the index of the segment holding its marker."""
        for txn in aborted:
            i = bisect.bisect_right(self.bases, txn.last_offset) - 1
            self.segments[i].txn_index.append(txn)

    def mark_dir_dirty(self) -> None:
        self._dir_dirty = True

    def take_dir_dirty(self) -> bool:
        """Whether the directory needs an fsync for what changed since the last call."""
        dirty, self._dir_dirty = self._dir_dirty, False
        return dirty

    # ------------------------------------------------------------------ rolling

    def roll_needed(self, size: int, last_offset: int, now_ms: int) -> bool:
        """Whether ``size`` more bytes up to ``last_offset`` need a new segment first:
        ``segment.bytes``, ``segment.ms``, a full offset index, or offsets past int32."""
        active = self.segments[-1]
        if active.is_empty:
            return False
        config = self.config
        return (
            active.size + size > config.segment_bytes
            or (
                active.rolling_base_ms is not None
                and now_ms - active.rolling_base_ms > config.segment_ms - self.roll_jitter_ms
            )
            or active.offset_index.is_full
            or last_offset - active.base_offset > _MAX_RELATIVE_OFFSET
        )

    def seal_active(self) -> None:
        """The first step of a roll: the active segment becomes inactive."""
        previous = self.segments[-1]
        previous.on_become_inactive()
        if self.config.page_cache_keep_bytes >= 0:
            # Its tail stays cached until the new segment holds page_cache_keep_bytes.
            self._release_previous_segment()
            previous.cache.finish(previous.fd, previous.size)
            self._cache_previous = previous

    def add_segment(self, base_offset: int, now_ms: int) -> LogSegment:
        """The last step of a roll: a new active segment at ``base_offset``."""
        segment = self._new_segment(base_offset, now_ms)
        self.segments.append(segment)
        self.roll_jitter_ms = roll_jitter(self.config)
        self.bases.append(base_offset)
        self._dir_dirty = True
        return segment

    def _new_segment(self, base_offset: int, now_ms: int) -> LogSegment:
        return LogSegment(
            self.directory,
            base_offset,
            index_interval_bytes=self.config.index_interval_bytes,
            max_index_entries=self.config.max_index_entries,
            now_ms=now_ms,
        )

    # ------------------------------------------------------------------ page cache

    def keep_page_cache_to_tail(self, active: LogSegment) -> None:
        """Write back and drop from the page cache what is more than page_cache_keep_bytes
        behind the log end (``tidelog.storage.page_cache``); a hint, nothing reads it."""
        keep = self.config.page_cache_keep_bytes
        active.cache.after_append(active.fd, active.size, keep)
        if active.size >= keep:
            self._release_previous_segment()

    def _release_previous_segment(self) -> None:
        """Drop all of the segment before the active one from the page cache (once)."""
        previous, self._cache_previous = self._cache_previous, None
        if previous is not None and previous.fd >= 0:
            previous.cache.release(previous.fd, previous.size, 0)

    # ------------------------------------------------------------------ removal

    def retire(self, seg: LogSegment, now_ms: int) -> None:
        """Rename a removed segment to ``*.deleted``; close its fds after the delay."""
        seg.mark_deleted()
        self._pending_deletes.append((now_ms + self.config.file_delete_delay_ms, seg))
        self._dir_dirty = True

    @property
    def has_pending_deletes(self) -> bool:
        """Whether removed segments' files wait for ``close_pending_deletes``."""
        return bool(self._pending_deletes)

    def close_pending_deletes(self, now_ms: int) -> None:
        """Close and delete the files of segments removed long enough ago."""
        keep: list[tuple[int, LogSegment]] = []
        for deadline, seg in self._pending_deletes:
            if now_ms >= deadline:
                seg.delete_files()
            else:
                keep.append((deadline, seg))
        self._pending_deletes = keep

    def truncate_to(self, offset: int, now_ms: int) -> None:
        """Drop every batch whose last offset is >= ``offset``: later segments are retired,
        the one holding ``offset`` is cut at the batch containing it."""
        while len(self.segments) > 1 and self.segments[-1].base_offset >= offset:
            self.retire(self.segments.pop(), now_ms)
            self.bases.pop()
        active = self.segments[-1]
        found = active.find_batch(offset)
        if found is not None:
            position, header = found
            active.truncate_at(position, header.base_offset)
        elif active.next_offset > offset:
            active.next_offset = offset  # its batches end in a compaction gap

    def retire_all(self, now_ms: int) -> None:
        """Retire every segment; ``start_at`` must follow (the list is never left empty)."""
        for seg in self.segments:
            self.retire(seg, now_ms)
        self.segments = []
        self.bases = []

    def start_at(self, offset: int, now_ms: int) -> None:
        """After ``retire_all``: one empty segment at ``offset`` (a new file at the same base
        as a retired one: the retired files were renamed)."""
        self.segments = [self._new_segment(offset, now_ms)]
        self.bases = [offset]
        self._dir_dirty = True

    def deletable_prefix(
        self, predicate: Callable[[LogSegment, int], bool], high_watermark: int | None
    ) -> int:
        """How many leading segments satisfy ``predicate(seg, upper)``, ``upper`` being the
        next segment's base (the log end offset for the active segment); an empty active
        segment never counts, nor a segment reaching past ``high_watermark``."""
        leo = self.log_end_offset
        count = 0
        for i, seg in enumerate(self.segments):
            last = i == len(self.segments) - 1
            upper = leo if last else self.segments[i + 1].base_offset
            if last and seg.is_empty:
                break
            if high_watermark is not None and upper > high_watermark:
                break
            if not predicate(seg, upper):
                break
            count += 1
        return count

    def remove_prefix(self, count: int, now_ms: int) -> None:
        """Retire the first ``count`` segments (fewer than all of them)."""
        for seg in self.segments[:count]:
            self.retire(seg, now_ms)
        del self.segments[:count]
        del self.bases[:count]

    def replace(
        self, old: list[LogSegment], install: Callable[[], LogSegment], now_ms: int
    ) -> bool:
        """Replace ``old`` (consecutive segments below the active one) by the segment
        ``install`` opens, the old files renamed ``*.deleted`` first; False, ``install`` not
        called, when ``old`` is not such a run of this log's segments."""
        i = next((k for k, seg in enumerate(self.segments) if seg is old[0]), -1)
        if i < 0 or self.segments[i : i + len(old)] != old or i + len(old) >= len(self.segments):
            return False
        for seg in old:
            self.retire(seg, now_ms)
        new = install()
        self.segments[i : i + len(old)] = [new]
        self.bases[i : i + len(old)] = [new.base_offset]
        if self._cache_previous in old:
            self._cache_previous = None
        return True

    # ------------------------------------------------------------------ files

    def segments_to_flush(self, target: int, recovery_point: int) -> list[LogSegment]:
        """The segments holding offsets in [recovery_point, target), and the active one
        (its index files) when ``target`` reaches the log end."""
        segments = [
            s for s in self.segments if s.base_offset < target and s.next_offset > recovery_point
        ]
        if target >= self.log_end_offset:
            segments.append(self.segments[-1])  # index files of an empty active segment
        return segments

    def close(self, *, delete_pending: bool) -> None:
        """Close every segment's files; removed segments' files are deleted if
        ``delete_pending``, else only closed."""
        for seg in self.segments:
            seg.close()
        for _, seg in self._pending_deletes:
            if delete_pending:
                seg.delete_files()
            else:
                seg.close()
        self._pending_deletes = []


#: Removes renamed-away partition directories off the caller's thread: a topic deletion
#: runs on a broker's event loop, and ``rmtree`` of a large log waits on the disk.
_REMOVER: Final = SerialWorker("tidelog-log-remover")


def remove_log_directory(directory: Path) -> None:
    """Delete a partition directory: renamed away at once, so a crash midway never leaves
    a half-deleted log that would be loaded (Kafka renames to ``*-delete``), and the name
    is free for a new log when this returns; the files are removed on a worker thread
    (``settle_removals``). A ``*-delete`` directory the process did not get to is removed
    at the next start (``LogManager``)."""
    if not directory.exists():
        return
    # A fresh name each time: an earlier removal of the same partition may still be
    # waiting for the remover under its own.
    doomed = directory.with_name(f"{directory.name}.{uuid.uuid4().hex}-delete")
    os.rename(directory, doomed)
    _REMOVER.submit(functools.partial(shutil.rmtree, doomed, ignore_errors=True))


def settle_removals() -> None:
    """Wait until every directory ``remove_log_directory`` renamed away so far is gone."""
    _REMOVER.settle()


__all__ = ["LocalLog", "remove_log_directory", "settle_removals"]
