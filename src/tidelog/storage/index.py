"""Sparse offset and time indexes of one segment, in Kafka's on-disk formats.

``<base>.index``: 8-byte entries ``(int32 relative offset, int32 position)``; an entry maps
the LAST offset of a batch to the byte position where that batch starts. One entry is added
when more than ``index.interval.bytes`` were appended since the previous one, so a lookup
lands at most about that many bytes before the wanted batch.

``<base>.timeindex``: 12-byte entries ``(int64 timestamp, int32 relative offset)``: the
largest batch max-timestamp seen so far and the offset carrying it, appended beside offset
index entries (and once more when a segment stops being active) only when the timestamp grew.

Invariants (checked on load; a violation means the file is rebuilt from the log): the file
holds whole entries; offsets strictly increase (time index: timestamps strictly increase and
offsets do not decrease); every offset is >= the segment's base offset.

Entries live in memory (``array``); new ones are buffered and written to the file in groups
(every ``_WRITE_EVERY`` entries, and on flush, roll, truncation and close), which keeps a
system call off most appends. A crash can therefore leave the file with fewer entries than
the log deserves, never wrong ones: a missing tail entry only makes lookups scan a little
further, and recovery rebuilds every index entry above the recovery point anyway. A torn
last entry is caught by the load check.
"""

from __future__ import annotations

import bisect
import contextlib
import errno
import os
import struct
import threading
from array import array
from pathlib import Path
from typing import Final

_OFFSET_ENTRY: Final = struct.Struct(">ii")
_TIME_ENTRY: Final = struct.Struct(">qi")
OFFSET_ENTRY_SIZE: Final = _OFFSET_ENTRY.size
TIME_ENTRY_SIZE: Final = _TIME_ENTRY.size


class IndexCorruptError(Exception):
    """Internal: an index file failed its load check (the caller rebuilds it)."""


#: Buffered entries written to the file at once.
_WRITE_EVERY: Final = 64


class _IndexFile:
    __slots__ = ("_dirty", "_file_entries", "_lock", "_pending", "base_offset", "fd", "path")

    ENTRY_SIZE = 0

    def __init__(self, path: Path, base_offset: int) -> None:
        self.path = path
        self.base_offset = base_offset
        self.fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        self._dirty = False
        #: Entries already in the file; ``_pending`` holds the encoded ones after them.
        self._file_entries = 0
        self._pending = bytearray()
        # The broker flushes in a worker thread while the appending thread buffers entries:
        # the buffer and its file position change together under this lock (without it,
        # pwrite's export of the buffer made ``+=`` raise BufferError, and two writers
        # could use the same file position).
        self._lock = threading.Lock()

    def _buffer(self, encoded: bytes) -> None:
        with self._lock:
            self._pending += encoded
            if len(self._pending) >= _WRITE_EVERY * self.ENTRY_SIZE:
                # A full disk: the entries stay buffered (the in-memory index is the truth;
                # the file is rebuilt at load if it falls short). An append whose data was
                # written must not fail half-published over its index; the next write,
                # flush or close tries again and reports the failure.
                with contextlib.suppress(OSError):
                    self._write_pending_locked()

    def write_pending(self) -> None:
        """Write buffered entries to the file (no fsync)."""
        with self._lock:
            self._write_pending_locked()

    def _write_pending_locked(self) -> None:
        if self._pending:
            written = os.pwrite(self.fd, self._pending, self._file_entries * self.ENTRY_SIZE)
            # A short write (disk full) counts only the whole entries it wrote; the rest
            # stays pending and is rewritten from the first incomplete entry.
            whole = written // self.ENTRY_SIZE
            self._file_entries += whole
            self._dirty = True
            if whole * self.ENTRY_SIZE == len(self._pending):
                self._pending = bytearray()
                return
            self._pending = self._pending[whole * self.ENTRY_SIZE :]
            raise OSError(errno.ENOSPC, f"short write of {self.path}")

    def _truncate_file(self, keep: int) -> None:
        with self._lock:
            self._write_pending_locked()
            os.ftruncate(self.fd, keep * self.ENTRY_SIZE)
            self._file_entries = keep
            self._dirty = True

    def _read_all(self) -> bytes:
        size = os.fstat(self.fd).st_size
        return os.pread(self.fd, size, 0) if size else b""

    def flush(self) -> None:
        self.write_pending()
        if self._dirty:
            self._dirty = False
            os.fsync(self.fd)

    def close(self) -> None:
        if self.fd >= 0:
            self.write_pending()
            os.close(self.fd)
            self.fd = -1

    def rename(self, path: Path) -> None:
        os.rename(self.path, path)
        self.path = path


class OffsetIndex(_IndexFile):
    """``<base>.index``: batch last offset -> batch start position."""

    __slots__ = ("max_entries", "offsets", "positions")

    ENTRY_SIZE = OFFSET_ENTRY_SIZE

    def __init__(self, path: Path, base_offset: int, max_entries: int) -> None:
        super().__init__(path, base_offset)
        self.max_entries = max_entries
        self.offsets: array[int] = array("q")
        self.positions: array[int] = array("q")

    def load(self, log_size: int) -> None:
        """Read the file; raises IndexCorruptError if it breaks an invariant."""
        data = self._read_all()
        if len(data) % OFFSET_ENTRY_SIZE:
            raise IndexCorruptError(f"{self.path}: size {len(data)} is not a multiple of 8")
        offsets: array[int] = array("q")
        positions: array[int] = array("q")
        last_off = -1
        last_pos = -1
        for rel, pos in _OFFSET_ENTRY.iter_unpack(data):
            off = self.base_offset + rel
            if rel < 0 or off <= last_off or pos <= last_pos or pos >= log_size:
                raise IndexCorruptError(f"{self.path}: entry ({rel}, {pos}) out of order")
            offsets.append(off)
            positions.append(pos)
            last_off, last_pos = off, pos
        self.offsets, self.positions = offsets, positions
        self._file_entries = len(offsets)
        self._pending = bytearray()

    @property
    def entries(self) -> int:
        return len(self.offsets)

    @property
    def is_full(self) -> bool:
        return len(self.offsets) >= self.max_entries

    def append(self, offset: int, position: int) -> None:
        self._buffer(_OFFSET_ENTRY.pack(offset - self.base_offset, position))
        self.offsets.append(offset)
        self.positions.append(position)

    def lookup(self, target_offset: int) -> tuple[int, int]:
        """``(entry offset, position)`` of the largest entry <= target, else ``(-1, 0)``.

        The batch starting at that position ends at or before ``target_offset``, so the batch
        containing ``target_offset`` starts there or later.
        """
        i = bisect.bisect_right(self.offsets, target_offset)
        if i == 0:
            return -1, 0
        return self.offsets[i - 1], self.positions[i - 1]

    def lookup_position(self, limit: int) -> int:
        """The largest indexed batch start <= ``limit`` (0 if none)."""
        i = bisect.bisect_right(self.positions, limit)
        return self.positions[i - 1] if i else 0

    def truncate_to_position(self, position: int) -> None:
        """Keep only entries for batches starting before ``position``."""
        keep = bisect.bisect_left(self.positions, position)
        self._truncate_entries(keep)

    def truncate_entries(self, keep: int) -> None:
        self._truncate_entries(keep)

    def _truncate_entries(self, keep: int) -> None:
        if keep < len(self.offsets):
            del self.offsets[keep:]
            del self.positions[keep:]
        self._truncate_file(min(keep, len(self.offsets)))


class TimeIndex(_IndexFile):
    """``<base>.timeindex``: max timestamp so far -> the offset that carries it."""

    __slots__ = ("offsets", "timestamps")

    ENTRY_SIZE = TIME_ENTRY_SIZE

    def __init__(self, path: Path, base_offset: int) -> None:
        super().__init__(path, base_offset)
        self.timestamps: array[int] = array("q")
        self.offsets: array[int] = array("q")

    def load(self) -> None:
        data = self._read_all()
        if len(data) % TIME_ENTRY_SIZE:
            raise IndexCorruptError(f"{self.path}: size {len(data)} is not a multiple of 12")
        timestamps: array[int] = array("q")
        offsets: array[int] = array("q")
        last_ts = -(1 << 63)
        last_off = -1
        for ts, rel in _TIME_ENTRY.iter_unpack(data):
            off = self.base_offset + rel
            if rel < 0 or ts <= last_ts or off < last_off:
                raise IndexCorruptError(f"{self.path}: entry ({ts}, {rel}) out of order")
            timestamps.append(ts)
            offsets.append(off)
            last_ts, last_off = ts, off
        self.timestamps, self.offsets = timestamps, offsets
        self._file_entries = len(offsets)
        self._pending = bytearray()

    def last_entry(self) -> tuple[int, int] | None:
        if not self.timestamps:
            return None
        return self.timestamps[-1], self.offsets[-1]

    def maybe_append(self, timestamp: int, offset: int) -> None:
        """Append ``(timestamp, offset)`` if the timestamp is newer than the last entry."""
        if self.timestamps and timestamp <= self.timestamps[-1]:
            return
        if timestamp < 0:
            return
        self._buffer(_TIME_ENTRY.pack(timestamp, offset - self.base_offset))
        self.timestamps.append(timestamp)
        self.offsets.append(offset)

    def lookup(self, timestamp: int) -> int:
        """Where a search for the first record with timestamp >= ``timestamp`` may start.

        An entry ``(ts, off)`` with ``ts < timestamp`` says no record up to its index point
        reaches ``timestamp``; the last such entry's offset is a safe start (the segment's base
        offset if there is none).
        """
        i = bisect.bisect_left(self.timestamps, timestamp)
        return self.offsets[i - 1] if i else self.base_offset

    def truncate_to_offset(self, offset: int) -> None:
        """Drop entries whose offset is >= ``offset``."""
        keep = bisect.bisect_left(self.offsets, offset)
        if keep < len(self.offsets):
            del self.timestamps[keep:]
            del self.offsets[keep:]
        self._truncate_file(keep)
