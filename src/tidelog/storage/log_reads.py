"""Reading a log's segments (``tidelog.storage.log`` rules 4 and 9c): the range a fetch may
start in, the ``FetchSlice`` of a fetch, the bytes a fetch far behind the log end may find on
the disk only (``uncached_range``), the records found by timestamp (ListOffsets) and the
aborted transactions of a fetch. Functions of the segment list and its base offsets (or
of the ``LocalLog`` holding both); the ``Log`` calls them under its lock.
"""

from __future__ import annotations

import bisect
import os
from dataclasses import dataclass

from tidelog.model import TopicPartition
from tidelog.storage import page_cache
from tidelog.storage.errors import OffsetOutOfRangeError
from tidelog.storage.local_log import LocalLog
from tidelog.storage.log_config import LogConfig
from tidelog.storage.page_cache import Uncached
from tidelog.storage.record_scan import first_record_at_or_after, record_offsets_and_timestamps
from tidelog.storage.segment import LogSegment
from tidelog.storage.txn_index import AbortedTxn


@dataclass(frozen=True, slots=True)
class FetchSlice:
    """Whole batches: ``length`` contiguous bytes at ``position`` of one segment file.

    Zero-copy: ``os.sendfile(sock_fd, s.fileno, s.position, s.length)``. The fd stays valid
    until the segment is deleted (``file.delete.delay.ms`` after retention/truncation) or
    the log is closed; a truncation may shorten the file under it. Send or copy promptly.
    """

    fileno: int
    position: int
    length: int
    first_offset: int

    def read_bytes(self) -> bytes:
        data = os.pread(self.fileno, self.length, self.position)
        if len(data) != self.length:
            raise OSError(f"short read: {len(data)} of {self.length} bytes (log truncated?)")
        return data


def check_fetch_offset(
    topic_partition: TopicPartition, fetch_offset: int, log_start_offset: int, log_end_offset: int
) -> None:
    """OffsetOutOfRangeError unless ``fetch_offset`` is in [log start, log end]."""
    if fetch_offset < log_start_offset or fetch_offset > log_end_offset:
        raise OffsetOutOfRangeError(
            f"{topic_partition}: offset {fetch_offset} is outside "
            f"[{log_start_offset}, {log_end_offset}]"
        )


def read_slice(
    segments: list[LogSegment],
    bases: list[int],
    fetch_offset: int,
    max_bytes: int,
    *,
    max_offset: int | None,
    min_one_batch: bool,
) -> FetchSlice | None:
    """Whole batches of one segment from the batch holding ``fetch_offset`` (a valid offset
    below the log end and ``max_offset``), within ``max_bytes`` unless ``min_one_batch``."""
    i = bisect.bisect_right(bases, fetch_offset) - 1
    while i < len(segments):
        seg = segments[i]
        if fetch_offset < seg.next_offset:
            extent = seg.read_extent(fetch_offset, max_bytes, max_offset, min_one_batch)
            if extent is None:
                if i + 1 < len(segments) and seg.find_batch(fetch_offset) is None:
                    # Its batches from fetch_offset on were cleaned away: the next
                    # segment's first batch follows (tidelog.storage.cleaner).
                    fetch_offset = segments[i + 1].base_offset
                    i += 1
                    continue
                return None
            position, length, first_offset = extent
            return FetchSlice(seg.fd, position, length, first_offset)
        i += 1
    return None


def uncached_range(
    local: LocalLog, fetch_offset: int, max_bytes: int, config: LogConfig
) -> Uncached | None:
    """What a read at ``fetch_offset`` of up to ``max_bytes`` will touch (the batch headers
    from the index entry before it, then the records), if it may be on the disk only: the
    log keeps its last ``keep`` bytes in the page cache (``page_cache``), so a read in an
    older segment, or more than ``keep`` bytes behind the active segment's end, may not find
    it there. None for a read nearer the end, with ``keep`` < 0 (the kernel's choice,
    unknown here), or when the page cache holds both ends of the range (a reader catching
    up finds what readahead brought in). No read waits for the disk. The range holds a
    ``dup`` of the file's descriptor (its reader closes it)."""
    segments, keep = local.segments, config.page_cache_keep_bytes
    i = bisect.bisect_right(local.bases, fetch_offset) - 1
    if keep < 0 or not 0 <= i < len(segments):
        return None
    seg = segments[i]
    _, position = seg.offset_index.lookup(fetch_offset)
    if i == len(segments) - 1 and seg.size - position <= keep:
        return None
    length = min(seg.size - position, max_bytes + config.index_interval_bytes)
    if length <= 0 or seg.fd < 0:
        return None
    if page_cache.ends_cached(seg.fd, position, length):
        return None
    try:
        return Uncached(os.dup(seg.fd), position, length)
    except OSError:
        return None


def latest_timestamp(segments: list[LogSegment], start: int) -> tuple[int, int] | None:
    """``(offset, timestamp)`` of the first record carrying the largest timestamp at or
    after the log start offset (ListOffsets -3, KIP-734), or None if there is none.

    Segments know the batch holding their max timestamp, so normally one batch is
    decoded; only a segment straddling the log start is searched batch by batch.
    """
    best: tuple[int, int] | None = None  # (timestamp, offset)
    for seg in segments:
        if seg.next_offset <= start or seg.max_timestamp < 0:
            continue
        if best is not None and seg.max_timestamp <= best[0]:
            continue
        found = seg.find_batch(seg.offset_of_max_timestamp)
        candidate: tuple[int, int] | None = None
        if found is not None and found[1].base_offset >= start:
            position, header = found
            hit = first_record_at_or_after(seg.read_bytes(position, header.size), seg.max_timestamp)
            if hit is not None:
                candidate = (hit[1], hit[0])
        else:
            candidate = _max_record_from(seg, start)
        if candidate is not None and (best is None or candidate[0] > best[0]):
            best = candidate
    return None if best is None else (best[1], best[0])


def _max_record_from(seg: LogSegment, start: int) -> tuple[int, int] | None:
    """``(timestamp, offset)`` of the first record at or after ``start`` carrying the
    largest timestamp among this segment's records from ``start`` on."""
    found = seg.find_batch(start)
    if found is None:
        return None
    best: tuple[int, int] | None = None
    for position, header in seg.headers_from(found[0]):
        if best is not None and header.max_timestamp <= best[0]:
            continue
        batch = seg.read_bytes(position, header.size)
        for offset, timestamp in record_offsets_and_timestamps(batch):
            if offset >= start and (best is None or timestamp > best[0]):
                best = (timestamp, offset)
    return best


def offset_for_timestamp(
    segments: list[LogSegment], start: int, timestamp_ms: int
) -> tuple[int, int] | None:
    """``(offset, timestamp)`` of the first record with timestamp >= ``timestamp_ms``.

    Record-level (the one batch found is decoded, decompressing if needed); None if no
    record at or after the log start offset is that new.
    """
    for seg in segments:
        if seg.next_offset <= start or seg.max_timestamp < timestamp_ms:
            continue
        from_offset = max(seg.time_index.lookup(timestamp_ms), start, seg.base_offset)
        found = seg.find_batch(from_offset)
        if found is None:
            continue
        for pos, header in seg.headers_from(found[0]):
            if header.max_timestamp < timestamp_ms:
                continue
            batch = seg.read_bytes(pos, header.size)
            hit = first_record_at_or_after(batch, timestamp_ms, min_offset=start)
            if hit is not None:
                return hit
    return None


def collect_aborted_transactions(
    segments: list[LogSegment], bases: list[int], start_offset: int, upper_bound_offset: int
) -> list[tuple[int, int]]:
    """``(producer_id, first_offset)`` of every aborted transaction with a marker at or
    after ``start_offset`` and a first offset below ``upper_bound_offset``, in first
    offset order (Kafka's ``UnifiedLog.collectAbortedTransactions``; a Fetch response's
    aborted transactions for data read from ``start_offset``, bounded by the LSO).

    An aborted transaction's entry lives in the index of its MARKER's segment. One that
    matters here has its marker at or after ``start_offset``, so in the segment holding
    ``start_offset`` or a later one: the scan starts there. It can end far later: a
    transaction starting below the bound may be aborted in a segment based above it
    (another transaction kept the LSO low meanwhile), so a segment's base offset is no
    reason to stop. The scan stops at the first entry whose last stable offset reaches
    the bound (``TransactionIndex.collect``: every transaction starting below the bound
    had ended by that marker), else at the last segment; empty indexes cost a test.
    """
    found: list[AbortedTxn] = []
    i = max(0, bisect.bisect_right(bases, start_offset) - 1)
    for k in range(i, len(segments)):
        index = segments[k].txn_index
        if index.entries and index.collect(start_offset, upper_bound_offset, found):
            break
    found.sort(key=lambda txn: txn.first_offset)
    return [(txn.producer_id, txn.first_offset) for txn in found]


__all__ = [
    "FetchSlice",
    "check_fetch_offset",
    "collect_aborted_transactions",
    "latest_timestamp",
    "offset_for_timestamp",
    "read_slice",
]
