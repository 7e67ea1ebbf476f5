"""Log compaction: Kafka's ``LogCleaner`` for logs whose ``cleanup.policy`` has ``compact``.

Theory of operation
-------------------
A compacted log keeps at least the latest record of every key. Each log dir's
``cleaner-offset-checkpoint`` (Kafka's format: version 0, a count, ``topic partition
offset`` lines) holds each log's FIRST DIRTY OFFSET: everything below it was cleaned
(the "clean" section), everything from it on was not (the "dirty" section).

Rules:
  1. Cleanable bound. Only whole segments below the FIRST UNCLEANABLE OFFSET are touched:
     the largest segment base at or below min(active segment base, last stable offset at
     the high watermark (open transactions, KIP-98), recovery point, base of the first
     segment whose largest timestamp is newer than ``min.compaction.lag.ms``). Staying below
     the recovery point keeps every swapped segment among those recovery trusts. The first
     dirty offset is the checkpoint within [log start, recovery point]: a truncation below
     the recovery point lowers it (``tidelog.storage.log`` rule 8), so data appended again
     after a truncation into the clean section is never taken for clean.
  2. Selection (``LogCleaner.clean_once``, Kafka's ``grabFilthiestCompactedLog``): a log is
     cleanable when dirty bytes / (clean + dirty bytes) >= ``min.cleanable.dirty.ratio``, or
     when the first dirty batch is older than ``max.compaction.lag.ms``; the one with the
     highest ratio is cleaned first, one log per pass.
  3. Offset map: key -> offset of its LATEST record, over the dirty section, skipping control
     batches and aborted transactions (their data never wins). It holds at most
     ``log.cleaner.dedupe.buffer.size * log.cleaner.io.buffer.load.factor / 24`` keys (Kafka's
     24 bytes an entry); when it is full the dirty section ends at the first record that did
     not fit, and the rest waits for the next pass. Keys of 16 bytes or more are kept as their
     MD5 (Kafka's ``SkimpyOffsetMap`` keeps only the digest; ``tidelog.storage.offset_map``).
  4. Rewrite. The segments from the log start to the end of the dirty section are grouped
     (Kafka's ``groupSegmentsBySize``: a group stays within ``segment.bytes``, the offset
     index size and 2^31 offsets) and each group is rewritten into ONE segment based at the
     group's first base. A record is kept when its key is not in the map or its offset is at
     least the map's. Kept batches keep their base offset, last offset delta (so the
     producer's sequence range and last offset are unchanged), epoch, producer fields and
     codec; a batch with records removed is rebuilt around the kept records' bytes (new
     count, max timestamp, CRC-32C) and recompressed with its own codec. Offsets are never
     changed: the log gets gaps, which reads, recovery and followers of compacted logs
     accept (``tidelog.storage.log``).
  5. Removal beyond duplicates:
       a. records without a key (they can only predate the compact policy);
       b. tombstones (null value) once their source segment's largest timestamp is more than
          ``delete.retention.ms`` old (consumers had that long to see them);
       c. data of aborted transactions (the ``.txnindex`` entries of the whole log);
       d. transaction markers once ``delete.retention.ms`` passed as for tombstones AND no
          batch of their transaction is kept; a marker whose transaction still has data
          stays.
     A batch left empty is dropped, except the LAST batch of a producer id the producer
     state still holds: it stays as an empty batch (header only, same offsets, sequence and
     epoch), so idempotence and transaction state survive a restart's replay.
  6. Crash-safe swap (Kafka's; ``tidelog.storage.segment_swap``): the group's new files
     are written as ``<name>.cleaned`` and fsynced; renamed to ``<name>.swap`` (indexes
     first, the ``.log`` last); then, under the log's lock (``Log.replace_segments``), the
     old segments are renamed ``*.deleted`` (their fds stay open for
     ``file.delete.delay.ms``) and the ``.swap`` files renamed to their final names. At
     open (``complete_swaps``), ``.cleaned`` files are deleted and a ``<base>.log.swap`` is
     completed: the segments it replaces (bases in [base, its next offset)) are deleted and
     its files renamed. Index ``.swap`` files without their log are deleted. A clean that
     meets a changed log (truncation, retention, close) drops its files and stops; the
     checkpoint moves only when every group was swapped.
  7. Threads: ``clean_once`` does its heavy work without the log's lock (it reads the old
     segments through its own file descriptors, so a retention or truncation meanwhile
     cannot make it read another file); the lock is taken for a snapshot of the segment
     list and for each swap. The broker runs it in a worker thread every
     ``log.cleaner.backoff.ms`` while ``log.cleaner.enable`` is true.

Followers compact their own replicas the same way (as Kafka's do). Differences from Kafka:
the tombstone horizon of rule 5b counts from the segment's largest record timestamp (Kafka
3.x stamps a delete horizon into the batch header, KIP-534, which older clients misread);
one cleaner thread.
"""

from __future__ import annotations

import bisect
import logging
import os
import struct
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Final

from tidelog.model import TopicPartition
from tidelog.protocol.records import (
    BATCH_HEADER_SIZE,
    BatchHeader,
    parse_header,
)
from tidelog.storage.checkpoints import OffsetCheckpointFile
from tidelog.storage.compression import decompress
from tidelog.storage.errors import CorruptCheckpointError
from tidelog.storage.log_validator import max_decompressed_bytes, rebuild_batch
from tidelog.storage.offset_map import OffsetMap, record_keys
from tidelog.storage.segment import LogSegment
from tidelog.storage.segment_swap import CleanedSegment
from tidelog.storage.transactions import parse_end_txn_marker

if TYPE_CHECKING:
    from tidelog.storage.log import Log

logger = logging.getLogger(__name__)

CLEANER_CHECKPOINT: Final = "cleaner-offset-checkpoint"
#: Kafka's bytes per offset map entry (16-byte MD5 + 8-byte offset).
MAP_ENTRY_BYTES: Final = 24
_MAX_RELATIVE_OFFSET: Final = 2**31 - 1
_COMPRESSION_MASK: Final = 0x07
_READ_CHUNK: Final = 1 << 20
_COUNT: Final = struct.Struct(">i")
_TIMESTAMPS: Final = struct.Struct(">qq")  # base timestamp, max timestamp at byte 27
_EMPTY_ATTRIBUTES_MASK: Final = ~_COMPRESSION_MASK & 0xFFFF
_NEVER: Final = 2**63 - 1


# ---------------------------------------------------------------------- configuration


@dataclass(frozen=True, slots=True, kw_only=True)
class CleanerConfig:
    """The broker's ``log.cleaner.*`` settings (Kafka's ``CleanerConfig``)."""

    enable: bool = True  # log.cleaner.enable
    backoff_ms: int = 15_000  # log.cleaner.backoff.ms
    dedupe_buffer_size: int = 128 << 20  # log.cleaner.dedupe.buffer.size
    io_buffer_load_factor: float = 0.9  # log.cleaner.io.buffer.load.factor
    #: log.cleaner.io.max.bytes.per.second: bytes read and written a second, at most.
    max_io_bytes_per_second: float = float("inf")

    @property
    def max_map_entries(self) -> int:
        return max(1, int(self.dedupe_buffer_size * self.io_buffer_load_factor) // MAP_ENTRY_BYTES)


# ---------------------------------------------------------------------- a snapshot of a log


@dataclass(slots=True)
class _Source:
    """One old segment as the cleaner reads it: through its own fd, up to ``size``."""

    segment: LogSegment
    fd: int
    size: int
    upper: int  # the next segment's base offset
    max_timestamp: int

    def batches(self) -> Iterator[tuple[BatchHeader, bytes]]:
        pos = 0
        buf = b""
        buf_start = 0
        while pos < self.size:
            at = pos - buf_start
            if len(buf) - at < BATCH_HEADER_SIZE:
                buf = os.pread(self.fd, min(_READ_CHUNK, self.size - pos), pos)
                buf_start, at = pos, 0
            header = parse_header(buf, at, whole=False)
            if len(buf) - at < header.size:
                buf = os.pread(self.fd, max(_READ_CHUNK, header.size), pos)
                buf_start, at = pos, 0
            yield header, buf[at : at + header.size]
            pos += header.size


@dataclass(slots=True)
class CleanStats:
    """What one clean did (Kafka's ``CleanerStats``, in part)."""

    topic_partition: TopicPartition
    first_dirty_offset: int
    end_offset: int = -1
    bytes_read: int = 0
    bytes_written: int = 0
    records_read: int = 0
    records_kept: int = 0
    segments_before: int = 0
    segments_after: int = 0
    map_entries: int = 0
    elapsed_s: float = 0.0
    complete: bool = False


@dataclass(frozen=True, slots=True)
class CleanableLog:
    """Rules 1-2 for one log."""

    log: Log
    first_dirty_offset: int
    first_uncleanable_offset: int
    clean_bytes: int
    dirty_bytes: int
    needs_compaction_now: bool

    @property
    def ratio(self) -> float:
        total = self.clean_bytes + self.dirty_bytes
        return self.dirty_bytes / total if total else 0.0

    @property
    def cleanable(self) -> bool:
        if self.dirty_bytes <= 0:
            return False
        return self.needs_compaction_now or (
            self.ratio >= self.log.config.min_cleanable_dirty_ratio
        )


def cleanable_log(
    log: Log, checkpoint: int | None, *, now_ms: int, high_watermark: int | None
) -> CleanableLog:
    """Rule 1 and rule 2's figures for ``log`` with checkpointed first dirty offset."""
    config = log.config
    segments, _, _ = log.segments_for_cleaning()
    start = log.log_start_offset
    leo = segments[-1].next_offset
    # A clean never passes the recovery point, and a truncation below it lowers it (log
    # rule 8): bounded by it, the first dirty offset never trusts re-appended data.
    first_dirty = min(
        start if checkpoint is None or not start <= checkpoint <= leo else checkpoint,
        max(start, log.recovery_point),
    )
    bound = segments[-1].base_offset
    lso = log.last_stable_offset(high_watermark) if high_watermark is not None else None
    if lso is None:
        unstable = log.first_unstable_offset()
        lso = unstable if unstable is not None else bound
    bound = min(bound, lso, log.recovery_point)
    if config.min_compaction_lag_ms > 0:
        for seg in segments[:-1]:
            if seg.max_timestamp > now_ms - config.min_compaction_lag_ms:
                bound = min(bound, seg.base_offset)
                break
    bases = [s.base_offset for s in segments]
    k = bisect.bisect_right(bases, bound) - 1
    first_uncleanable = bases[k] if k >= 0 else start
    clean = dirty = 0
    oldest_dirty = None
    for i, seg in enumerate(segments[:-1]):
        upper = segments[i + 1].base_offset
        if upper <= first_dirty:
            clean += seg.size
        elif upper <= first_uncleanable:
            dirty += seg.size
            if oldest_dirty is None and seg.size and config.max_compaction_lag_ms < _NEVER:
                oldest_dirty = _first_timestamp(seg)
    needs_now = (
        oldest_dirty is not None
        and oldest_dirty >= 0
        and now_ms - oldest_dirty > config.max_compaction_lag_ms
    )
    return CleanableLog(log, first_dirty, first_uncleanable, clean, dirty, needs_now)


def _first_timestamp(seg: LogSegment) -> int:
    for _, header in seg.headers_from(0):
        return header.base_timestamp if header.timestamp_type == 0 else header.max_timestamp
    return -1


# ---------------------------------------------------------------------- cleaning


@dataclass(slots=True)
class _TxnState:
    """Rule 5c-d: aborted transactions by producer id, and what each open one kept."""

    aborted: dict[int, list[tuple[int, int]]] = field(default_factory=dict)
    kept_data: dict[int, bool] = field(default_factory=dict)

    def is_aborted(self, producer_id: int, offset: int) -> bool:
        ranges = self.aborted.get(producer_id)
        if not ranges:
            return False
        i = bisect.bisect_right(ranges, (offset, 2**63)) - 1
        return i >= 0 and ranges[i][0] <= offset <= ranges[i][1]


class _Throttle:
    """``log.cleaner.io.max.bytes.per.second`` (Kafka's ``Throttler``)."""

    def __init__(self, rate: float, sleep: Callable[[float], None]) -> None:
        self.rate = rate
        self.sleep = sleep
        self.start = time.monotonic()
        self.done = 0

    def maybe_throttle(self, nbytes: int) -> None:
        if self.rate == float("inf"):
            return
        self.done += nbytes
        ahead = self.done / self.rate - (time.monotonic() - self.start)
        if ahead > 0.01:
            self.sleep(ahead)


def group_segments_by_size(
    sources: Sequence[_Source], max_size: int, max_index_entries: int
) -> list[list[_Source]]:
    """Kafka's ``groupSegmentsBySize``: consecutive segments whose sizes, index entries and
    offset range fit one segment."""
    groups: list[list[_Source]] = []
    i = 0
    while i < len(sources):
        group = [sources[i]]
        size = sources[i].size
        entries = sources[i].segment.offset_index.entries
        i += 1
        while i < len(sources):
            nxt = sources[i]
            if (
                size + nxt.size > max_size
                or entries + nxt.segment.offset_index.entries > max_index_entries
                or nxt.upper - 1 - group[0].segment.base_offset > _MAX_RELATIVE_OFFSET
            ):
                break
            group.append(nxt)
            size += nxt.size
            entries += nxt.segment.offset_index.entries
            i += 1
        groups.append(group)
    return groups


class _Cleaner:
    """One clean of one log (rules 3-6)."""

    def __init__(
        self,
        log: Log,
        first_dirty: int,
        first_uncleanable: int,
        config: CleanerConfig,
        *,
        now_ms: int,
        sleep: Callable[[float], None],
    ) -> None:
        self.log = log
        self.first_dirty = first_dirty
        self.first_uncleanable = first_uncleanable
        self.config = config
        self.now_ms = now_ms
        self.log_config = log.config
        self.bound = max_decompressed_bytes(self.log_config.max_message_bytes)
        self.throttle = _Throttle(config.max_io_bytes_per_second, sleep)
        self.stats = CleanStats(log.topic_partition, first_dirty)

    def run(self) -> CleanStats:
        started = time.monotonic()
        log = self.log
        segments, generation, producers = log.segments_for_cleaning()
        sources: list[_Source] = []
        try:
            for i, seg in enumerate(segments[:-1]):
                upper = segments[i + 1].base_offset
                if upper > self.first_uncleanable:
                    break
                try:
                    fd = os.open(seg.log_path, os.O_RDONLY)
                except FileNotFoundError:  # retention or truncation removed it meanwhile
                    self.stats.elapsed_s = time.monotonic() - started
                    return self.stats
                sources.append(_Source(seg, fd, seg.size, upper, seg.max_timestamp))
            txns = _TxnState()
            for seg in segments:
                for txn in list(seg.txn_index.entries):
                    txns.aborted.setdefault(txn.producer_id, []).append(
                        (txn.first_offset, txn.last_offset)
                    )
            for ranges in txns.aborted.values():
                ranges.sort()
            offset_map = OffsetMap(self.config.max_map_entries)
            end = self._build_offset_map(sources, offset_map, txns)
            self.stats.end_offset = end
            self.stats.map_entries = len(offset_map)
            to_clean = [s for s in sources if s.segment.base_offset < end]
            self.stats.segments_before = len(to_clean)
            groups = group_segments_by_size(
                to_clean, self.log_config.segment_bytes, self.log_config.max_index_entries
            )
            complete = True
            for group in groups:
                if not self._clean_group(group, generation, offset_map, txns, producers):
                    complete = False
                    break
                self.stats.segments_after += 1
            self.stats.complete = complete
        finally:
            for s in sources:
                os.close(s.fd)
        self.stats.elapsed_s = time.monotonic() - started
        return self.stats

    def _build_offset_map(
        self, sources: Sequence[_Source], offset_map: OffsetMap, txns: _TxnState
    ) -> int:
        """Rule 3 over the dirty sources; returns the end of the dirty section cleaned."""
        for source in sources:
            if source.upper <= self.first_dirty:
                continue
            for header, batch in source.batches():
                self.throttle.maybe_throttle(len(batch))
                if header.last_offset < self.first_dirty or header.is_control:
                    continue
                if header.is_transactional and txns.is_aborted(
                    header.producer_id, header.base_offset
                ):
                    continue
                body = decompress(
                    header.compression, batch[BATCH_HEADER_SIZE:], max_bytes=self.bound
                )
                base = header.base_offset
                for _, _, delta, _, key, _ in record_keys(body, header.records_count):
                    if key is None or base + delta < self.first_dirty:
                        continue
                    if not offset_map.put(key, base + delta):
                        logger.info(
                            "%s: the cleaner's offset map is full (%d keys); cleaning up "
                            "to offset %d",
                            self.log.topic_partition,
                            len(offset_map),
                            base + delta,
                        )
                        return base + delta
        return self.first_uncleanable

    def _clean_group(
        self,
        group: list[_Source],
        generation: int,
        offset_map: OffsetMap,
        txns: _TxnState,
        producers: Mapping[int, int],
    ) -> bool:
        log = self.log
        out = CleanedSegment(
            log.directory, group[0].segment.base_offset, self.log_config.index_interval_bytes
        )
        kept_markers: set[int] = set()
        try:
            for source in group:
                horizon_passed = (
                    source.max_timestamp >= 0
                    and source.max_timestamp < self.now_ms - self.log_config.delete_retention_ms
                )
                for header, batch in source.batches():
                    self.stats.bytes_read += len(batch)
                    self.throttle.maybe_throttle(len(batch))
                    kept = self._filter(header, batch, offset_map, txns, producers, horizon_passed)
                    if kept is not None:
                        if header.is_control:
                            kept_markers.add(header.base_offset)
                        out.append(kept, header.last_offset, _max_timestamp_of(kept))
                        self.stats.bytes_written += len(kept)
                        self.throttle.maybe_throttle(len(kept))
                for txn in source.segment.txn_index.entries:
                    if txn.last_offset in kept_markers:
                        out.aborted.append(txn)
            out.finish()
            out.to_swap()
            upper = group[-1].upper

            def install() -> LogSegment:
                config = log.config  # read under the log's lock, as every index setting
                return out.install(
                    upper,
                    index_interval_bytes=config.index_interval_bytes,
                    max_index_entries=config.max_index_entries,
                )

            done = log.replace_segments([s.segment for s in group], generation, install)
        except BaseException:
            out.discard()
            raise
        if not done:
            out.discard()
            logger.info("%s: the log changed during cleaning; cleaning stops", log.topic_partition)
        return done

    def _filter(  # noqa: PLR0917
        self,
        header: BatchHeader,
        batch: bytes,
        offset_map: OffsetMap,
        txns: _TxnState,
        producers: Mapping[int, int],
        horizon_passed: bool,
    ) -> bytes | None:
        """Rules 4-5 for one batch: the bytes to write, or None."""
        pid = header.producer_id
        last_of_producer = pid >= 0 and producers.get(pid) == header.last_offset
        if header.is_control:
            return _filter_marker(batch, pid, txns, horizon_passed, last_of_producer)
        count = header.records_count
        self.stats.records_read += count
        if header.is_transactional and txns.is_aborted(pid, header.base_offset):
            return _empty_batch(batch) if last_of_producer else None
        body = decompress(header.compression, batch[BATCH_HEADER_SIZE:], max_bytes=self.bound)
        spans = _kept_spans(body, count, header.base_offset, offset_map, horizon_passed)
        self.stats.records_kept += len(spans)
        if header.is_transactional and spans:
            txns.kept_data[pid] = True
        if len(spans) == count:
            return batch
        if not spans:
            if last_of_producer:
                if header.is_transactional:
                    txns.kept_data[pid] = True
                return _empty_batch(batch)
            return None
        return _rebuilt(header, batch, body, spans)


def _filter_marker(
    batch: bytes, pid: int, txns: _TxnState, horizon_passed: bool, last_of_producer: bool
) -> bytes | None:
    """Rule 4 for a control batch: a transaction marker goes once its transaction kept no
    data, the delete horizon passed, and it is not its producer's last batch."""
    marker = parse_end_txn_marker(batch) if pid >= 0 else None
    kept_data = txns.kept_data.pop(pid, False)
    if marker is None or kept_data or not horizon_passed or last_of_producer:
        return batch
    return None


def _kept_spans(
    body: bytes, count: int, base: int, offset_map: OffsetMap, horizon_passed: bool
) -> list[tuple[int, int, int]]:
    """Rule 5 for one batch's records: (start, end, timestamp delta) of each record kept."""
    spans: list[tuple[int, int, int]] = []
    for start, end, delta, ts_delta, key, tombstone in record_keys(body, count):
        if key is None:
            continue  # rule 5a
        latest = offset_map.get(key)
        if latest >= 0 and base + delta < latest:
            continue
        if tombstone and horizon_passed:
            continue  # rule 5b
        spans.append((start, end, ts_delta))
    return spans


def _rebuilt(
    header: BatchHeader, batch: bytes, body: bytes, spans: list[tuple[int, int, int]]
) -> bytes:
    """The batch with only the kept records: its header's count and (CreateTime) largest
    timestamp follow them."""
    kept_body = b"".join(body[s:e] for s, e, _ in spans)
    head = bytearray(batch[:BATCH_HEADER_SIZE])
    _COUNT.pack_into(head, 57, len(spans))
    if header.timestamp_type == 0:  # CreateTime: the kept records' largest
        base_ts = header.base_timestamp
        _TIMESTAMPS.pack_into(head, 27, base_ts, base_ts + max(t for _, _, t in spans))
    return rebuild_batch(bytes(head), kept_body, header.compression)


def _max_timestamp_of(batch: bytes) -> int:
    (_, max_ts) = _TIMESTAMPS.unpack_from(batch, 27)
    return int(max_ts)


def _empty_batch(batch: bytes) -> bytes:
    """Rule 5: the batch's header over no records (Kafka's ``writeEmptyHeader``): same base
    offset, last offset delta, producer id, epoch and base sequence."""
    head = bytearray(batch[:BATCH_HEADER_SIZE])
    _COUNT.pack_into(head, 57, 0)
    (attributes,) = struct.unpack_from(">h", head, 21)
    struct.pack_into(">h", head, 21, attributes & _EMPTY_ATTRIBUTES_MASK)
    return rebuild_batch(bytes(head), b"", 0)


def clean_log(
    log: Log,
    checkpoint: int | None,
    config: CleanerConfig,
    *,
    now_ms: int,
    high_watermark: int | None = None,
    sleep: Callable[[float], None] = time.sleep,
) -> CleanStats:
    """Clean ``log`` now (whatever its dirty ratio) from first dirty offset ``checkpoint``
    (None: the log start). ``stats.complete`` says whether ``stats.end_offset`` is the new
    first dirty offset."""
    state = cleanable_log(log, checkpoint, now_ms=now_ms, high_watermark=high_watermark)
    cleaner = _Cleaner(
        log,
        state.first_dirty_offset,
        state.first_uncleanable_offset,
        config,
        now_ms=now_ms,
        sleep=sleep,
    )
    return cleaner.run()


# ---------------------------------------------------------------------- the broker's cleaner


class LogCleaner:
    """The broker's cleaner (Kafka's ``LogCleaner`` + ``LogCleanerManager``): rule 2's
    choice among the compacted logs, one clean per ``clean_once``, the checkpoints.

    ``clean_once`` runs in one worker thread at a time; ``maybe_truncate_checkpoint`` and
    ``forget`` may run from another (they take the checkpoint lock)."""

    def __init__(self, config: CleanerConfig) -> None:
        self.config = config
        self._lock = threading.Lock()
        #: First dirty offset by partition, loaded lazily per log dir.
        self._checkpoints: dict[Path, dict[TopicPartition, int]] = {}
        #: Logs whose clean failed (Kafka's "uncleanable partitions"): skipped until restart.
        self.uncleanable: set[TopicPartition] = set()
        self.last_stats: CleanStats | None = None

    def _dir_checkpoints(self, log_dir: Path) -> dict[TopicPartition, int]:
        offsets = self._checkpoints.get(log_dir)
        if offsets is None:
            try:
                offsets = OffsetCheckpointFile(log_dir / CLEANER_CHECKPOINT).read()
            except CorruptCheckpointError as exc:
                logger.warning("%s; every compacted log there counts as dirty", exc)
                offsets = {}
            self._checkpoints[log_dir] = offsets
        return offsets

    def checkpoint_of(self, log: Log) -> int | None:
        with self._lock:
            return self._dir_checkpoints(log.directory.parent).get(log.topic_partition)

    def _set_checkpoint(
        self, log: Log, offset: int | None, hosted: Mapping[TopicPartition, Log] | None = None
    ) -> None:
        """Write ``log``'s first dirty offset (None: drop it); entries of partitions not in
        ``hosted`` in this log dir (deleted or moved logs) go too."""
        with self._lock:
            log_dir = log.directory.parent
            offsets = self._dir_checkpoints(log_dir)
            if offset is None:
                if offsets.pop(log.topic_partition, None) is None:
                    return
            else:
                offsets[log.topic_partition] = offset
            if hosted is not None:
                for tp in list(offsets):
                    other = hosted.get(tp)
                    if other is None or other.directory.parent != log_dir:
                        del offsets[tp]
            OffsetCheckpointFile(log_dir / CLEANER_CHECKPOINT).write(dict(offsets))

    def maybe_truncate_checkpoint(self, log: Log, offset: int) -> None:
        """A truncation to ``offset``: the first dirty offset may not stay above it."""
        current = self.checkpoint_of(log)
        if current is not None and current > offset:
            self._set_checkpoint(log, offset)

    def forget(self, log: Log) -> None:
        """The log was deleted or moved away."""
        self._set_checkpoint(log, None)
        self.uncleanable.discard(log.topic_partition)

    def grab_filthiest(
        self,
        logs: Mapping[TopicPartition, Log],
        high_watermarks: Mapping[TopicPartition, int],
        now_ms: int,
    ) -> CleanableLog | None:
        """Rule 2."""
        best: CleanableLog | None = None
        for tp, log in list(logs.items()):
            if tp in self.uncleanable or log.closed or not log.config.compact:
                continue
            try:
                state = cleanable_log(
                    log,
                    self.checkpoint_of(log),
                    now_ms=now_ms,
                    high_watermark=high_watermarks.get(tp),
                )
            except Exception as exc:  # closed or changed meanwhile: looked at next time
                logger.debug("%s: not cleanable now: %s", tp, exc)
                continue
            if not state.cleanable:
                continue
            if best is None or (state.needs_compaction_now, state.ratio) > (
                best.needs_compaction_now,
                best.ratio,
            ):
                best = state
        return best

    def clean_once(
        self,
        logs: Mapping[TopicPartition, Log],
        high_watermarks: Mapping[TopicPartition, int],
        now_ms: int,
        *,
        sleep: Callable[[float], None] = time.sleep,
    ) -> CleanStats | None:
        """Clean the filthiest log, if any is cleanable; returns what was done."""
        if not self.config.enable:
            return None
        state = self.grab_filthiest(logs, high_watermarks, now_ms)
        if state is None:
            return None
        log = state.log
        try:
            stats = _Cleaner(
                log,
                state.first_dirty_offset,
                state.first_uncleanable_offset,
                self.config,
                now_ms=now_ms,
                sleep=sleep,
            ).run()
        except Exception:
            if log.closed:
                return None
            logger.exception("%s: cleaning failed; the log is left uncleaned", log.topic_partition)
            self.uncleanable.add(log.topic_partition)
            return None
        if stats.complete:
            self._set_checkpoint(log, stats.end_offset, logs)
        self.last_stats = stats
        logger.info(
            "%s: cleaned offsets [%d, %d): %d segment(s) into %d, %.1f MB -> %.1f MB, "
            "%d of %d records kept, in %.2f s",
            log.topic_partition,
            stats.first_dirty_offset,
            stats.end_offset,
            stats.segments_before,
            stats.segments_after,
            stats.bytes_read / 1e6,
            stats.bytes_written / 1e6,
            stats.records_kept,
            stats.records_read,
            stats.elapsed_s,
        )
        return stats


__all__ = [
    "CLEANER_CHECKPOINT",
    "CleanStats",
    "CleanableLog",
    "CleanerConfig",
    "LogCleaner",
    "clean_log",
    "cleanable_log",
    "group_segments_by_size",
]
