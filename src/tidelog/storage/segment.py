"""One log segment: ``<20-digit base offset>.log`` plus its ``.index``, ``.timeindex`` and
``.txnindex`` (aborted transactions, ``tidelog.storage.txn_index``).

A segment holds whole v2 batches with contiguous offsets starting at ``base_offset``. Only
batch headers are ever decoded here; records stay opaque bytes (docs/design.md "Speed").

Invariants:
  * ``size`` is the byte length of whole, validated batches in the ``.log`` file, and every
    read stops there. The file is longer only while an append is in flight: its bytes are
    written past ``size`` (``write_unpublished``) while their CRCs are still being checked,
    and become part of the segment (``publish``) only once they passed, or are cut off again
    (``discard_unpublished``);
  * batches follow each other in offset order: each base offset is at least the previous
    ``next_offset``, and equal to it unless the log is compacted (``tidelog.storage.cleaner``
    removes records and whole batches, keeping the others' offsets, as Kafka's cleaner);
    a cleaned batch may hold fewer records than its offset range;
  * ``next_offset`` is one past the last offset in the segment (``base_offset`` if empty);
  * index entries point at batch starts below ``size`` (see ``tidelog.storage.index``);
  * aborted-transaction entries have their marker below ``next_offset`` (a truncation drops
    the others with the batches);
  * ``_recent`` holds the last offsets and positions of consecutive batches ending with
    the last one published, while the segment is active (at most ``2 * _RECENT_BATCHES``;
    a truncation keeps those below the cut). A read at the log end (a follower, a consumer
    at the HW) finds its batch there with one header read, instead of walking from the
    index entry up to ``index.interval.bytes`` before it. Appends extend its arrays in
    place (offset first) and trims and cuts replace it whole, so a reader on another
    thread sees a consistent prefix.
"""

from __future__ import annotations

import bisect
import contextlib
import os
from array import array
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from tidelog.protocol.records import (
    BATCH_HEADER_SIZE,
    BatchHeader,
    CorruptRecordBatchError,
    compute_crc,
    parse_header,
)
from tidelog.storage.index import IndexCorruptError, OffsetIndex, TimeIndex
from tidelog.storage.page_cache import CacheWindow
from tidelog.storage.txn_index import TXN_INDEX_SUFFIX, TransactionIndex

LOG_SUFFIX: Final = ".log"
INDEX_SUFFIX: Final = ".index"
TIME_INDEX_SUFFIX: Final = ".timeindex"
DELETED_SUFFIX: Final = ".deleted"
#: A segment the cleaner is writing, and one it finished (``tidelog.storage.cleaner``).
CLEANED_SUFFIX: Final = ".cleaned"
SWAP_SUFFIX: Final = ".swap"
#: Bytes read at a time when walking batch headers.
_SCAN_CHUNK: Final = 64 * 1024
_FIRST_HEADER_CHUNK: Final = 8 * 1024
#: How many of the latest published batches a segment keeps the place of (``_recent``):
#: a follower or a consumer at the HW reads within the last few.
_RECENT_BATCHES: Final = 32
#: A verify_from_offset above every offset: framing checks only.
_NO_VERIFY: Final = 2**63
#: Buffers per pwritev call (Linux IOV_MAX is 1024).
_IOV_MAX: Final = 1024


def segment_file_name(base_offset: int, suffix: str) -> str:
    return f"{base_offset:020d}{suffix}"


@dataclass(slots=True)
class ScanResult:
    """Outcome of walking (and optionally verifying) a segment's batches."""

    next_offset: int
    valid_size: int
    #: Why the walk stopped before the end of the file (None: the whole file is valid).
    error: str | None = None
    #: ``(epoch, batch base offset, batch last offset)`` each time the epoch grew, in order.
    epoch_starts: list[tuple[int, int, int]] = field(default_factory=list)


class LogSegment:
    """A segment's files, open for reading and (if active) appending."""

    __slots__ = (
        "_bytes_since_index_entry",
        "_dirty",
        "_indexes_existed",
        "_recent",
        "base_offset",
        "cache",
        "directory",
        "fd",
        "index_interval_bytes",
        "log_path",
        "max_timestamp",
        "next_offset",
        "offset_index",
        "offset_of_max_timestamp",
        "rolling_base_ms",
        "size",
        "time_index",
        "txn_index",
    )

    def __init__(
        self,
        directory: Path,
        base_offset: int,
        *,
        index_interval_bytes: int,
        max_index_entries: int,
        now_ms: int,
    ) -> None:
        """Open (creating if needed) the segment's three files; call ``load`` or nothing."""
        self.directory = directory
        self.base_offset = base_offset
        self.index_interval_bytes = index_interval_bytes
        self.log_path = directory / segment_file_name(base_offset, LOG_SUFFIX)
        new = not self.log_path.exists()
        self.fd = os.open(self.log_path, os.O_RDWR | os.O_CREAT, 0o644)
        self.size = os.fstat(self.fd).st_size
        #: What of the file this process wrote back and dropped from the page cache.
        self.cache = CacheWindow(self.size)
        index_path = directory / segment_file_name(base_offset, INDEX_SUFFIX)
        time_index_path = directory / segment_file_name(base_offset, TIME_INDEX_SUFFIX)
        self._indexes_existed = index_path.exists() and time_index_path.exists()
        self.offset_index = OffsetIndex(
            index_path,
            base_offset,
            max_index_entries,
        )
        self.time_index = TimeIndex(time_index_path, base_offset)
        # A new segment gets its (empty) .txnindex now; an existing one's is read by
        # ``txn_index.load`` (a missing file is then a lost one: txn_index invariant 4).
        self.txn_index = TransactionIndex(
            directory / segment_file_name(base_offset, TXN_INDEX_SUFFIX), base_offset, create=new
        )
        self.next_offset = base_offset
        self.max_timestamp = -1
        self.offset_of_max_timestamp = -1
        # segment.ms counts from the first append into the segment (or from its load).
        self.rolling_base_ms: int | None = now_ms if self.size else None
        self._bytes_since_index_entry = 0
        self._dirty = False
        self._recent = RecentBatches()

    # ------------------------------------------------------------------ loading / recovery

    def load_indexes(self) -> bool:
        """Load both index files; False (and empty indexes) if either is missing or fails
        its check."""
        if not self._indexes_existed and self.size:
            return False
        try:
            self.offset_index.load(self.size)
            self.time_index.load()
        except IndexCorruptError:
            self.offset_index.truncate_entries(0)
            self.time_index.truncate_to_offset(self.base_offset)
            return False
        return True

    def trust_up_to(self, next_offset: int) -> None:
        """Accept a segment below the recovery point without reading it (Kafka does the same).

        ``next_offset`` is the following segment's base offset; the max timestamp comes from
        the time index's last entry, written when the segment stopped being active.
        """
        self.next_offset = next_offset
        last = self.time_index.last_entry()
        self.max_timestamp, self.offset_of_max_timestamp = last if last else (-1, -1)

    def scan(self, *, verify_from_offset: int, full: bool, gaps: bool = False) -> ScanResult:
        """Walk the batches to the end of the file, rebuilding the indexes as appends would.

        ``full``: start at byte 0 with empty indexes; otherwise resume at the last offset index
        entry below ``verify_from_offset`` (the recovery point). Batches whose last offset is
        >= ``verify_from_offset`` get the full check (framing, magic, offset continuity,
        monotonic epoch, record count, CRC-32C); earlier ones only framing. The walk stops at
        the first failure; the caller decides whether to truncate (``truncate_at``) or refuse.
        Checked batches must continue exactly where the previous one ended and hold a record
        per offset unless ``gaps`` (a compacted log); earlier ones may skip offsets.
        """
        start_pos, expected, skip_index_for_first, next_offset = self._scan_start(
            verify_from_offset, full=full
        )
        file_size = os.fstat(self.fd).st_size
        result = ScanResult(next_offset=next_offset, valid_size=start_pos)
        if start_pos and start_pos >= file_size:
            result.error = f"file has {file_size} bytes but its index points at byte {start_pos}"
            return result
        prev_epoch = -1
        first = True
        for pos, header, buf, at in self._walk(start_pos, file_size):
            if isinstance(header, str):
                result.error = header
                break
            error = _batch_error(
                pos,
                header,
                buf,
                at,
                expected=expected,
                prev_epoch=prev_epoch,
                verify_from_offset=verify_from_offset,
                gaps=gaps,
            )
            if error is not None:
                result.error = error
                break
            epoch = header.partition_leader_epoch
            if epoch > prev_epoch and epoch >= 0:
                result.epoch_starts.append((epoch, header.base_offset, header.last_offset))
            prev_epoch = epoch
            self._account(
                header.last_offset,
                header.max_timestamp,
                header.size,
                pos,
                index=not (first and skip_index_for_first),
            )
            first = False
            expected = header.next_offset
            result.valid_size = pos + header.size
            result.next_offset = header.next_offset
        if result.error is None:
            self.size = result.valid_size
            self.next_offset = result.next_offset
        return result

    def _scan_start(
        self, verify_from_offset: int, *, full: bool
    ) -> tuple[int, int | None, bool, int]:
        """Where ``scan`` starts: ``(byte position, expected base offset of the first batch
        or None when resuming, whether that batch's index entry is already there, the next
        offset if no batch follows)``. Resuming keeps the index entries up to the last one
        below ``verify_from_offset``; a full scan (or one without such an entry) empties
        the indexes. Either way the max timestamp restarts from the time index."""
        expected: int | None = self.base_offset
        start_pos, skip_index_for_first, next_offset = 0, False, self.base_offset
        if not full and self.offset_index.entries:
            entry_off, entry_pos = self.offset_index.lookup(verify_from_offset - 1)
            if entry_off >= 0:
                keep = self.offset_index.offsets.index(entry_off) + 1
                self.offset_index.truncate_entries(keep)
                self.time_index.truncate_to_offset(entry_off + 1)
                start_pos, expected, skip_index_for_first = entry_pos, None, True
                next_offset = entry_off
            else:
                full = True
        else:
            full = True
        if full:
            self.offset_index.truncate_entries(0)
            self.time_index.truncate_to_offset(self.base_offset)
        last = self.time_index.last_entry()
        self.max_timestamp, self.offset_of_max_timestamp = last if last else (-1, -1)
        self._bytes_since_index_entry = 0
        return start_pos, expected, skip_index_for_first, next_offset

    def _walk(self, start: int, end: int) -> Iterator[tuple[int, BatchHeader | str, bytes, int]]:
        """Yield ``(position, header or error text, buffer, position in buffer)`` per batch.

        The buffer holds the whole batch (for the CRC). Stops after yielding an error.
        """
        pos = start
        buf = b""
        buf_start = start
        while pos < end:
            at = pos - buf_start
            if len(buf) - at < BATCH_HEADER_SIZE:
                buf = os.pread(self.fd, max(_SCAN_CHUNK, BATCH_HEADER_SIZE), pos)
                buf_start, at = pos, 0
            if len(buf) - at < BATCH_HEADER_SIZE:
                yield pos, f"torn batch header at byte {pos} ({end - pos} bytes left)", buf, at
                return
            size = int.from_bytes(buf[at + 8 : at + 12], "big", signed=True) + 12
            if size < BATCH_HEADER_SIZE or pos + size > end:
                yield pos, f"batch at byte {pos} declares {size} bytes, {end - pos} left", buf, at
                return
            if len(buf) - at < size:
                buf = os.pread(self.fd, max(_SCAN_CHUNK, size), pos)
                buf_start, at = pos, 0
            try:
                header = parse_header(buf, at)
            except CorruptRecordBatchError as exc:
                yield pos, f"batch at byte {pos}: {exc}", buf, at
                return
            yield pos, header, buf, at
            pos += size

    def _account(
        self, last_offset: int, max_timestamp: int, size: int, position: int, index: bool
    ) -> None:
        """Update the max timestamp and the sparse indexes for a batch at ``position``.

        Kafka's rule: an index entry (batch last offset -> batch position) once more than
        ``index.interval.bytes`` were appended since the previous entry.
        """
        if max_timestamp > self.max_timestamp:
            self.max_timestamp = max_timestamp
            self.offset_of_max_timestamp = last_offset
        if index and self._bytes_since_index_entry > self.index_interval_bytes:
            self.offset_index.append(last_offset, position)
            self.time_index.maybe_append(self.max_timestamp, self.offset_of_max_timestamp)
            self._bytes_since_index_entry = 0
        self._bytes_since_index_entry += size

    def truncate_at(self, position: int, next_offset: int) -> int:
        """Cut the file at a batch boundary ``position``; returns the bytes removed."""
        removed = os.fstat(self.fd).st_size - position
        os.ftruncate(self.fd, position)
        self.size = position
        self._recent = self._recent.below(position)
        self.cache.truncated(position)
        self.next_offset = next_offset
        self.offset_index.truncate_to_position(position)
        self.time_index.truncate_to_offset(next_offset)
        self.txn_index.truncate_to(next_offset)
        self._dirty = True
        if position == 0:
            self.rolling_base_ms = None
        # The max timestamp and the index state may have come from removed batches:
        # recompute them from the last index entry on (headers only, no CRC).
        result = self.scan(verify_from_offset=_NO_VERIFY, full=False)
        if result.error is not None:
            raise AssertionError(f"{self.log_path}: valid prefix failed a rescan: {result.error}")
        return removed

    # ------------------------------------------------------------------ appends

    def append(
        self,
        pieces: list[bytes | memoryview],
        size: int,
        batches: list[tuple[int, int, int]],
        now_ms: int,
    ) -> None:
        """Write validated, stamped batches (``pieces`` concatenated, ``size`` bytes) with
        one positional vectored write, and publish them.

        ``batches``: ``(size, last offset, max timestamp)`` of each batch written.
        """
        try:
            self.write_unpublished(pieces, size)
        except OSError:
            # A full or failing disk (ENOSPC, EIO) after part of the batches reached the
            # file: cut them off again, so the file holds exactly the published batches and a
            # restart's recovery cannot revive a batch that was never acknowledged.
            # (Shrinking a file frees space; if even that fails, ``size`` still marks the
            # end and the next append overwrites from there.)
            with contextlib.suppress(OSError):
                self.discard_unpublished()
            raise
        self.publish(size, batches, now_ms)

    def write_unpublished(self, pieces: list[bytes | memoryview], size: int) -> None:
        """Write ``pieces`` (``size`` bytes) at ``self.size`` without publishing them: no read,
        index or offset sees them until ``publish``; ``discard_unpublished`` cuts them off."""
        position = self.size
        for chunk_start in range(0, len(pieces), _IOV_MAX):
            chunk = (
                pieces if len(pieces) <= _IOV_MAX else pieces[chunk_start : chunk_start + _IOV_MAX]
            )
            chunk_size = size if chunk is pieces else sum(len(p) for p in chunk)
            written = os.pwritev(self.fd, chunk, position)
            while written < chunk_size:  # short write (disk full, signal): finish it
                rest = memoryview(b"".join(chunk))[written:]
                written += os.pwrite(self.fd, rest, position + written)
            position += chunk_size

    def discard_unpublished(self) -> None:
        """Cut the file back to the published batches (an append that failed its checks)."""
        os.ftruncate(self.fd, self.size)

    def publish(self, size: int, batches: list[tuple[int, int, int]], now_ms: int) -> None:
        """Make ``size`` bytes written by ``write_unpublished`` part of the segment."""
        position = self.size
        if self.rolling_base_ms is None:
            self.rolling_base_ms = now_ms
        recent = self._recent
        for batch_size, last_offset, max_timestamp in batches:
            self._account(last_offset, max_timestamp, batch_size, position, True)
            recent.add(last_offset, position)
            position += batch_size
        if len(recent.positions) > 2 * _RECENT_BATCHES:
            self._recent = recent.latest(_RECENT_BATCHES)
        self.size = position
        self.next_offset = batches[-1][1] + 1
        self._dirty = True

    def on_become_inactive(self) -> None:
        """Record the final max timestamp in the time index (Kafka does this on roll)."""
        if self.max_timestamp >= 0:
            self.time_index.maybe_append(self.max_timestamp, self.offset_of_max_timestamp)
        self.offset_index.write_pending()
        self.time_index.write_pending()
        # Its fd, if an abort opened one, is not needed any more (flush fsyncs by path).
        self.txn_index.close()
        self._recent = RecentBatches()  # reads at the log end go to the new segment

    # ------------------------------------------------------------------ reads

    def headers_from(self, position: int) -> Iterator[tuple[int, BatchHeader]]:
        """``(position, header)`` of each batch from ``position`` (a batch start) to the end.

        Only the 61 header bytes are needed, but reads go in chunks to save system calls.
        """
        end = self.size
        pos = position
        buf = b""
        buf_start = position
        # The first read is small (a lookup usually lands within index.interval.bytes of
        # the batch wanted, and big batches need one header each); later ones are larger.
        chunk = _FIRST_HEADER_CHUNK
        while pos < end:
            at = pos - buf_start
            if len(buf) - at < BATCH_HEADER_SIZE:
                buf = os.pread(self.fd, min(chunk, end - pos), pos)
                buf_start, at = pos, 0
                chunk = _SCAN_CHUNK
            header = parse_header_only(buf, at)
            yield pos, header
            pos += header.size

    def find_batch(self, offset: int, start_position: int = 0) -> tuple[int, BatchHeader] | None:
        """Position and header of the first batch whose last offset is >= ``offset``."""
        found = self._find_recent(offset, start_position)
        if found is not None:
            return found
        _, position = self.offset_index.lookup(offset)
        position = max(position, start_position)
        for pos, header in self.headers_from(position):
            if header.last_offset >= offset:
                return pos, header
        return None

    def _find_recent(self, offset: int, start_position: int) -> tuple[int, BatchHeader] | None:
        """``find_batch`` from ``_recent``, when the batch wanted and the one before it are
        both there (so no earlier batch qualifies); None sends the caller to the index."""
        size = self.size  # read before the places: those past it are not published yet
        found = self._recent.find(offset)
        if found is None:
            return None
        last_offset, position = found
        if not start_position <= position < size:
            return None
        header = parse_header_only(os.pread(self.fd, BATCH_HEADER_SIZE, position), 0)
        if header.last_offset != last_offset:
            return None
        return position, header

    def batch_boundary_at_or_before(self, limit: int, start: int) -> int:
        """The end of the last whole batch that ends at or before byte ``limit`` (>= start)."""
        position = max(self.offset_index.lookup_position(limit), start)
        end = position
        for pos, header in self.headers_from(position):
            if pos + header.size > limit:
                break
            end = pos + header.size
        return end

    def read_extent(
        self, fetch_offset: int, max_bytes: int, max_offset: int | None, min_one_batch: bool
    ) -> tuple[int, int, int] | None:
        """``(position, length, first batch base offset)`` of whole batches, or None.

        Starts at the batch containing ``fetch_offset``; stops before the first batch whose
        last offset is >= ``max_offset`` and within ``max_bytes`` (unless ``min_one_batch``
        and not even the first batch fits).
        """
        found = self.find_batch(fetch_offset)
        if found is None:
            return None
        start, first = found
        if max_offset is not None and first.last_offset >= max_offset:
            return None
        end = self.size
        if max_offset is not None and max_offset < self.next_offset:
            stop = self.find_batch(max_offset, start)
            if stop is not None:
                end = stop[0]
        if start + max_bytes < end:
            end = self.batch_boundary_at_or_before(start + max_bytes, start)
        if end <= start:
            if not min_one_batch:
                return None
            end = start + first.size
        return start, end - start, first.base_offset

    def read_bytes(self, position: int, length: int) -> bytes:
        return os.pread(self.fd, length, position)

    # ------------------------------------------------------------------ lifecycle

    @property
    def is_empty(self) -> bool:
        return self.size == 0

    def flush(self) -> None:
        # Clear the flag before the fsync: an append racing with a flush from another thread
        # sets it again and is flushed next time.
        if self._dirty:
            self._dirty = False
            os.fsync(self.fd)
        self.offset_index.flush()
        self.time_index.flush()
        self.txn_index.flush()

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
        self.offset_index.close()
        self.time_index.close()
        self.txn_index.close()

    def paths(self) -> list[Path]:
        return [self.log_path, self.offset_index.path, self.time_index.path, self.txn_index.path]

    def mark_deleted(self) -> None:
        """Rename the files to ``*.deleted``; the fds stay open until ``close`` (readers).

        Every file object follows its rename, so ``delete_files`` later removes exactly the
        renamed files, never those of a new segment created at the same base offset (a
        truncation to the same offset: ``Log.truncate_fully_and_start_at``)."""
        for path in self.paths():
            target = path.with_name(path.name + DELETED_SUFFIX)
            if path.exists():
                os.rename(path, target)
        self.log_path = self.log_path.with_name(self.log_path.name + DELETED_SUFFIX)
        for index in (self.offset_index, self.time_index, self.txn_index):
            index.path = index.path.with_name(index.path.name + DELETED_SUFFIX)

    def delete_files(self) -> None:
        self.close()
        for path in self.paths():
            for candidate in (path, path.with_name(path.name + DELETED_SUFFIX)):
                candidate.unlink(missing_ok=True)


def _batch_error(
    pos: int,
    header: BatchHeader,
    buf: bytes,
    at: int,
    *,
    expected: int | None,
    prev_epoch: int,
    verify_from_offset: int,
    gaps: bool,
) -> str | None:
    """Why ``scan`` stops at the batch at byte ``pos`` (None: it is sound): its base offset
    (not before ``expected``; exactly it for a checked batch unless ``gaps``), its record
    count against its last offset delta, a leader epoch below the previous batch's, and
    for a batch whose last offset is at or above ``verify_from_offset`` its CRC-32C."""
    strict = not gaps and header.last_offset >= verify_from_offset
    if expected is not None and (
        header.base_offset < expected or (strict and header.base_offset != expected)
    ):
        return f"batch at byte {pos} has base offset {header.base_offset}, expected {expected}"
    if (
        header.last_offset_delta < 0
        or header.records_count > header.last_offset_delta + 1
        or (strict and header.records_count != header.last_offset_delta + 1)
    ):
        return (
            f"batch at byte {pos} has {header.records_count} records but last offset "
            f"delta {header.last_offset_delta}"
        )
    epoch = header.partition_leader_epoch
    if epoch < prev_epoch:
        return f"batch at byte {pos} has leader epoch {epoch} < {prev_epoch}"
    if header.last_offset >= verify_from_offset and compute_crc(buf, at, header) != header.crc:
        return f"batch at byte {pos} fails its CRC-32C check"
    return None


class RecentBatches:
    """Last offsets and positions of consecutive batches, oldest first (``_recent``)."""

    __slots__ = ("offsets", "positions")

    def __init__(self, offsets: array[int] | None = None, positions: array[int] | None = None):
        self.offsets = array("q") if offsets is None else offsets
        self.positions = array("q") if positions is None else positions

    def add(self, last_offset: int, position: int) -> None:
        self.offsets.append(last_offset)
        self.positions.append(position)

    def latest(self, count: int) -> RecentBatches:
        return RecentBatches(self.offsets[-count:], self.positions[-count:])

    def below(self, position: int) -> RecentBatches:
        """The places of the batches that start below ``position`` (a cut)."""
        keep = bisect.bisect_left(self.positions, position)
        return RecentBatches(self.offsets[:keep], self.positions[:keep])

    def find(self, offset: int) -> tuple[int, int] | None:
        """``(last offset, position)`` of the first batch whose last offset is >= ``offset``,
        if the batch before it is here too; else None."""
        count = min(len(self.offsets), len(self.positions))
        i = bisect.bisect_left(self.offsets, offset, 0, count)
        if i == 0 or i >= count:
            return None
        return self.offsets[i], self.positions[i]


def parse_header_only(buf: bytes | bytearray | memoryview, pos: int) -> BatchHeader:
    """``parse_header`` for a buffer that may end inside the batch body (reads only)."""
    return parse_header(buf, pos, whole=False)
