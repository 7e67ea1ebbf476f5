"""One partition's log on disk (Kafka's UnifiedLog; compaction is ``tidelog.storage.cleaner``):
its lock and the order in which appends, truncations, retention and flushes change it. Its
parts: the segment list ``local_log``, opening ``log_loader``, validation ``batch_validation``,
write plans ``append_plan``, reads ``log_reads``, retention ``log_retention``, flushes and
the recovery point ``log_flush``, truncations ``log_truncation``.

Theory of operation
-------------------
A log is a directory ``<log.dir>/<topic>-<partition>/`` of segments (``segment``) with
contiguous offsets, plus ``leader-epoch-checkpoint``. Appends go to the last (active) one; it
rolls (a new segment at the log end) when ``segment.bytes`` would be exceeded, ``segment.ms``
passed since its first append, or its offset index is full.

Rules:
  1. An append validates EVERY batch (framing, magic 2, record count, size, CRC-32C) before
     writing ANY (the CRC-32C, for large appends: before publishing any, rule 1a); the leader
     then stamps baseOffset and partitionLeaderEpoch in place (both outside the CRC,
     docs/design.md rule 1) and writes all batches with one ``pwritev``. Records of
     uncompressed batches are never decoded on this path (but with a KIP-937 bound set).
     1b. Compressed batches, and every data batch of a log whose ``compression.type``
     names a codec, are decompressed (bounded), walked record by record and maybe rebuilt
     with the target codec before that (``log_validator``, Kafka's LogValidator), then
     LogAppendTime stamped (``log_timestamps``); followers store the leader's bytes as is.
     1a. Large appends (256 KiB or more of immutable ``bytes``) check the CRC-32Cs beside
     the write instead of before it, while the stamped batches are written PAST the active
     segment's published end (how: ``tidelog.storage.crc_helper``). Nothing unvalidated is
     ever visible: readers see only published bytes (``LogSegment.size``, the log end
     offset, the indexes), which move only after every batch passed; a failed check cuts
     the file back and raises before anything moved, as if the batch had been refused up
     front. The recovery point never passes the published log end, so a crash in the
     window leaves the unvalidated bytes where recovery re-validates them (a corrupt tail
     is truncated). Appends that must change something before the data (a new leader
     epoch, rule 3; a roll; an idempotent batch that may be answered without a write,
     rule 7) check every CRC first, as small ones do.
  2. A follower append keeps the leader's offsets and epochs; it must continue exactly at
     the log end offset.
  3. Every new leader epoch seen (leader stamp or follower batch) is recorded in the leader
     epoch cache before the data is written; truncation trims the cache to the log.
  4. ``read`` returns whole batches as a ``FetchSlice`` (fd, position, length) of ONE
     segment file so the server can ``os.sendfile`` it; the slice starts at the batch
     containing the fetch offset.
  5. No fsync per append by default (``flush.messages`` / ``flush.ms`` are "never", as in
     Kafka): durability comes from replication. ``recovery_point`` is the offset below which
     everything is fsynced; after an unclean stop every batch at or above it is re-validated
     and a torn or corrupt tail truncated; corruption below it is refused (CorruptLogError)
     rather than silently truncated or served.
  6. Removed segments (retention, truncation) are renamed ``*.deleted`` and their fds stay
     open for ``file.delete.delay.ms`` so FetchSlices handed out just before stay valid.
  7. Idempotent producers (``tidelog.storage.producer_state``): every batch with a producer
     id goes through ``producer_state`` — checked on the leader path (a retry of one of the
     producer's last five batches is answered with its original offsets and not written;
     sequence and epoch errors come back in ``AppendInfo.error``, nothing written), applied
     unchecked on the follower path, snapshotted at every roll and at close, rebuilt at open
     and after a truncation that cut a producer's batch, a marker or the start of an ongoing
     transaction, trimmed when the log start moves. Batches without a producer id cost one
     header field comparison.

  8. A truncation below the recovery point lowers it, and the lowered value reaches
     ``recovery-point-offset-checkpoint`` (the LogManager's listener, called under the log's
     lock) BEFORE any new data can be appended past it. Otherwise a crash could leave the
     old, higher checkpoint in charge: recovery would trust the re-appended (unflushed,
     possibly torn) range below it without validating it. Kafka's LogManager.truncateTo and
     truncateFullyAndStartAt checkpoint the affected log dir's recovery points right after
     truncating (checkpointRecoveryOffsetsInDir) for the same reason.

  9. Transactions (KIP-98). Control batches with a producer id are transaction markers
     (``tidelog.storage.transactions``); they reach ``producer_state`` with transactional
     data batches (its rules 6-8). On the leader path a control batch with a producer id
     that is not a well-formed marker (compressed, not one record, another control type)
     is refused with INVALID_RECORD before anything is written; followers and replays
     ignore such a batch (the leader accepted it, e.g. a version before transactions).
       a. ``last_stable_offset(hw)`` = min(hw, first offset of every ongoing transaction,
          first offset of every completed one whose marker is not below hw), never below
          the log start offset (Kafka's ``UnifiedLog.lastStableOffset``); O(1) amortised,
          it runs on every fetch.
       b. Each ABORT that ended a transaction is indexed in the ``.txnindex`` of the
          segment holding its marker, on the leader and follower paths and during replays;
          what an open does not trust is rebuilt by the producer state replay
          (``tidelog.storage.txn_index`` invariants 1 and 3, ``log_loader.
          prepare_txn_indexes``); a truncation drops the entries of markers it cuts; a
          deleted segment's index goes with its other files (rule 6).
       c. ``collect_aborted_transactions(start, upper)`` reads those entries from memory.

Thread-safety: every public method takes the log's lock; the server calls appends and reads
from its event loop thread and may run ``flush`` in a worker thread.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable
from pathlib import Path

from tidelog.storage.append_plan import (
    AppendInfo,
    Refusal,
    WritePlan,
    answer_without_write,
    empty_append_info,
    plan_follower_append,
    plan_leader_append,
    refused,
)
from tidelog.storage.batch_validation import (
    ValidatedBatch,
    check_crcs,
    validate_follower_append,
    validate_leader_append,
)
from tidelog.storage.checkpoints import LEADER_EPOCH_CHECKPOINT, fsync_directory, fsync_files
from tidelog.storage.crc_helper import can_check_beside, write_checking_crcs
from tidelog.storage.epoch_cache import LeaderEpochFileCache
from tidelog.storage.errors import OffsetOutOfRangeError
from tidelog.storage.local_log import LocalLog, remove_log_directory
from tidelog.storage.log_config import LogConfig
from tidelog.storage.log_flush import FlushSchedule, RecoveryPoint, periodic_flush_target
from tidelog.storage.log_loader import (
    FUTURE_DIR_SUFFIX,
    load_segments,
    parse_topic_partition,
    rebuild_producer_state,
    restore_state,
)
from tidelog.storage.log_reads import (
    FetchSlice,
    check_fetch_offset,
    collect_aborted_transactions,
    latest_timestamp,
    offset_for_timestamp,
    read_slice,
    uncached_range,
)
from tidelog.storage.log_retention import below_log_start, excess_by_size, expired_by_time
from tidelog.storage.log_truncation import Truncations
from tidelog.storage.log_validator import max_decompressed_bytes
from tidelog.storage.page_cache import Uncached
from tidelog.storage.producer_state import AppendOrigin, ProducerStateManager
from tidelog.storage.segment import LogSegment


class Log:
    """One partition's log. Open with ``Log.open``; see the module docstring for the rules."""

    def __init__(
        self,
        directory: Path,
        config: LogConfig,
        segments: list[LogSegment],
        *,
        log_start_offset: int,
        recovery_point: int,
        now_ms: int,
    ) -> None:
        self.directory = directory
        self.topic_partition = parse_topic_partition(directory)
        self._config = config
        self._local = LocalLog(directory, config, segments)
        self._log_start_offset = log_start_offset
        #: Its listener (``set_recovery_point_listener``) runs when a truncation lowers it.
        self._recovery_point = RecoveryPoint(recovery_point)
        self._lock = threading.RLock()
        self._flush_schedule = FlushSchedule(now_ms)
        self._now_ms = now_ms
        self._closed = False
        self._truncations = Truncations()
        self.leader_epoch_cache = LeaderEpochFileCache(
            directory / LEADER_EPOCH_CHECKPOINT, lambda: self._local.log_end_offset
        )
        #: Idempotent-producer state (tidelog.storage.producer_state); loaded by ``open``.
        self.producer_state = ProducerStateManager(directory)

    # ------------------------------------------------------------------ opening

    @classmethod
    def open(
        cls,
        directory: Path,
        config: LogConfig,
        *,
        now_ms: int,
        recovery_point: int = 0,
        log_start_offset: int | None = None,
    ) -> Log:
        """Open (creating if absent) and recover the log in ``directory``.

        Segments entirely below ``recovery_point`` with sound indexes are trusted as Kafka
        does; every batch at or above it is re-validated. A torn or corrupt tail there is
        truncated (and later segments deleted); a failure below it raises CorruptLogError
        (``tidelog.storage.log_loader``).
        """
        segments, epoch_starts = load_segments(
            directory,
            config,
            now_ms=now_ms,
            recovery_point=recovery_point,
            log_start_offset=log_start_offset,
        )
        log_end_offset = segments[-1].next_offset
        start = max(segments[0].base_offset, log_start_offset or 0)
        log = cls(
            directory,
            config,
            segments,
            log_start_offset=min(start, log_end_offset),
            recovery_point=min(recovery_point, log_end_offset),
            now_ms=now_ms,
        )
        if restore_state(
            log._local,
            log.leader_epoch_cache,
            log.producer_state,
            epoch_starts,
            log_start_offset=log.log_start_offset,
            recovery_point=log.recovery_point,
            now_ms=now_ms,
            expiration_ms=config.producer_id_expiration_ms,
        ):
            fsync_directory(directory)  # txn_index invariant 2
        if log.recovery_point < log_end_offset:
            # Everything recovered was just validated; make it durable so it is trusted next
            # time (Kafka flushes after recovery too).
            log.flush()
        return log

    def _rebuild_producer_state(self, *, max_snapshot_offset: int) -> None:
        """``log_loader.rebuild_producer_state`` (producer_state rule 1) for this log."""
        rebuild_producer_state(
            self.producer_state,
            self._local,
            log_start_offset=self._log_start_offset,
            max_snapshot_offset=max_snapshot_offset,
            now_ms=self._now_ms,
            expiration_ms=self._config.producer_id_expiration_ms,
        )

    # ------------------------------------------------------------------ properties

    @property
    def config(self) -> LogConfig:
        return self._config

    def update_config(self, config: LogConfig) -> None:
        with self._lock:
            self._config = config
            self._local.update_config(config)

    @property
    def log_start_offset(self) -> int:
        return self._log_start_offset

    @property
    def log_end_offset(self) -> int:
        return self._local.segments[-1].next_offset

    @property
    def recovery_point(self) -> int:
        return self._recovery_point.offset

    @property
    def size_bytes(self) -> int:
        return self._local.size_bytes

    @property
    def segment_base_offsets(self) -> tuple[int, ...]:
        return tuple(self._local.bases)

    @property
    def unflushed_messages(self) -> int:
        return self._flush_schedule.unflushed_messages

    # ------------------------------------------------------------------ appends

    def append_as_leader(
        self,
        records: bytes | bytearray | memoryview,
        *,
        leader_epoch: int,
        now_ms: int,
        origin: AppendOrigin = AppendOrigin.CLIENT,
    ) -> AppendInfo:
        """Validate, assign offsets from the log end offset, stamp ``leader_epoch``, write.

        Raises CorruptRecordBatchError (CORRUPT_MESSAGE, or UNSUPPORTED_FOR_MESSAGE_FORMAT
        for magic 0/1) or RecordTooLargeError (MESSAGE_TOO_LARGE per batch,
        RECORD_LIST_TOO_LARGE for an append above segment.bytes); nothing is written then.
        Idempotent batches (rule 7) may instead be answered with ``AppendInfo.duplicate``
        or ``AppendInfo.error`` (see ``AppendInfo``); nothing is written then either. ``origin``
        COORDINATOR: a batch the broker's own coordinator writes, spared the duplicate and
        sequence checks (producer_state rule 9); only such appends may hold control batches
        (transaction markers): a CLIENT append with one is refused with INVALID_RECORD.
        """
        if leader_epoch < 0:
            raise ValueError(f"leader epoch {leader_epoch} must be >= 0")
        with self._lock:
            self._check_open()
            records, batches, total, parallel_crc = validate_leader_append(
                records, self._config, parallel_crc=can_check_beside(records), now_ms=now_ms
            )
            if not batches:
                return empty_append_info(self.log_end_offset)
            new_epoch = self.leader_epoch_cache.starts_new_epoch(leader_epoch, self.topic_partition)
            # Stamp: new offsets and the leader epoch, without copying the records.
            view = memoryview(records)
            compact = self._config.compact
            plan = plan_leader_append(
                view,
                batches,
                first_offset=self.log_end_offset,
                leader_epoch=leader_epoch,
                client=origin is AppendOrigin.CLIENT,
                compact=compact,
                max_decompressed=max_decompressed_bytes(self._config.max_message_bytes),
                crc_checked=not parallel_crc,
                topic_partition=self.topic_partition,
            )
            if isinstance(plan, Refusal):
                return refused(plan.error, plan.message)
            parallel_crc = parallel_crc and not compact  # a compacted log's were checked
            if parallel_crc and (new_epoch or plan.producer_batches is not None):
                # Rule 1a covers plain data appends only: a new epoch is recorded before
                # the data (rule 3), and a duplicate or refused idempotent batch is answered
                # without a write, so these check every CRC first, as smaller appends do.
                check_crcs(view, batches)
                parallel_crc = False
            # Rule 7: idempotent and transactional batches, checked before anything moves.
            check = None
            if plan.producer_batches is not None:
                check = self.producer_state.check_leader_append(
                    plan.producer_batches, origin=origin
                )
                answer = answer_without_write(check)
                if answer is not None:
                    return answer
            # Write: the new epoch first (rule 3), then the data, then the producer state.
            if new_epoch:
                self.leader_epoch_cache.assign(leader_epoch, plan.first_offset)
            self._write(plan, total, now_ms, unchecked=(view, batches) if parallel_crc else None)
            if check is not None:
                aborted = self.producer_state.commit(check.updates, check.txn_events)
                if aborted:
                    self._local.index_aborted(aborted)
            return plan.info(len(batches), total)

    def append_as_follower(
        self, records: bytes | bytearray | memoryview, *, now_ms: int
    ) -> AppendInfo:
        """Append the leader's batches unchanged (offsets and epochs kept).

        The first batch must start at the log end offset and each next batch where the
        previous ended (UnexpectedAppendOffsetError otherwise); a trailing incomplete batch
        is ignored. CRC and framing are checked as for the leader.
        """
        with self._lock:
            self._check_open()
            parallel_crc = can_check_beside(records)
            batches, total = validate_follower_append(
                records, self._config, parallel_crc=parallel_crc
            )
            if not batches:
                return empty_append_info(self.log_end_offset)
            latest = self.leader_epoch_cache.latest_epoch()
            view = memoryview(records)
            plan = plan_follower_append(
                view,
                batches,
                total,
                log_end_offset=self.log_end_offset,
                gaps=self._config.compact,
                latest_epoch=-1 if latest is None else latest,
                crc_checked=not parallel_crc,
                topic_partition=self.topic_partition,
            )
            new_epochs = plan.new_epochs
            if parallel_crc and new_epochs:
                check_crcs(view, batches)  # epochs are recorded before the data (rule 3)
                parallel_crc = False
            first_offset = plan.first_offset
            try:
                for epoch, offset in new_epochs:
                    self.leader_epoch_cache.assign(epoch, offset)
                self._write(
                    plan, total, now_ms, unchecked=(view, batches) if parallel_crc else None
                )
            except OSError:
                # A full or failing disk: nothing was published, so no epoch may start at
                # or past the log end (the cache describes this log's data; a broker that
                # keeps running after the disk has room again truncates and fetches by it,
                # rule 3). In memory at least: the file is trimmed the same way at open.
                if new_epochs:
                    with contextlib.suppress(OSError):
                        self.leader_epoch_cache.truncate_from_end(first_offset)
                raise
            if plan.producer_batches is not None:
                # Unchecked (producer_state rule 3).
                aborted = self.producer_state.update(plan.producer_batches)
                if aborted:
                    self._local.index_aborted(aborted)
            return plan.info(len(batches), total)

    def _write(
        self,
        plan: WritePlan,
        size: int,
        now_ms: int,
        *,
        unchecked: tuple[memoryview, list[ValidatedBatch]] | None,
    ) -> None:
        """Write ``plan`` (rolling first if needed) and publish. ``unchecked``: batches whose
        CRC-32Cs are still to be checked, beside the write (rule 1a)."""
        self._now_ms = now_ms
        segment = self._local.segments[-1]
        if self._local.roll_needed(size, plan.last_offset, now_ms):
            if unchecked is not None:
                check_crcs(*unchecked)  # a roll is not undone: check before it, as usual
                unchecked = None
            segment = self._roll(plan.first_offset, now_ms)
        if unchecked is None:
            segment.append(plan.pieces, size, plan.meta, now_ms)
        else:
            write_checking_crcs(
                segment, plan.pieces, size, plan.meta, now_ms=now_ms, unchecked=unchecked
            )
        if self._config.page_cache_keep_bytes >= 0:
            self._local.keep_page_cache_to_tail(segment)
        schedule = self._flush_schedule
        schedule.unflushed_messages += plan.num_records
        if schedule.due(now_ms, self._config):
            self._flush_upto(self.log_end_offset, now_ms)

    def _roll(self, base_offset: int, now_ms: int) -> LogSegment:
        self._local.seal_active()
        # Kafka snapshots at every roll: a restart replays at most the newer segments.
        self.producer_state.take_snapshot_at_roll(base_offset)
        return self._local.add_segment(base_offset, now_ms)

    def roll(self, now_ms: int) -> None:
        """Start a new segment at the log end offset (no-op if the active one is empty)."""
        with self._lock:
            self._check_open()
            if not self._local.segments[-1].is_empty:
                self._roll(self.log_end_offset, now_ms)

    # ------------------------------------------------------------------ reads

    def read(
        self,
        fetch_offset: int,
        max_bytes: int,
        *,
        max_offset: int | None = None,
        min_one_batch: bool = True,
    ) -> FetchSlice | None:
        """Whole batches from the one containing ``fetch_offset`` (rule 4).

        None at the log end offset, when the first batch is not below ``max_offset``
        (exclusive bound, e.g. the high watermark), or when it exceeds ``max_bytes`` and
        ``min_one_batch`` is false. OffsetOutOfRangeError outside [log start, log end].
        """
        with self._lock:
            self._check_open()
            leo = self.log_end_offset
            check_fetch_offset(self.topic_partition, fetch_offset, self._log_start_offset, leo)
            if fetch_offset == leo or (max_offset is not None and fetch_offset >= max_offset):
                return None
            return read_slice(
                self._local.segments,
                self._local.bases,
                fetch_offset,
                max_bytes,
                max_offset=max_offset,
                min_one_batch=min_one_batch,
            )

    def uncached_range(self, fetch_offset: int, max_bytes: int) -> Uncached | None:
        """``log_reads.uncached_range`` of this log (never waits for the disk)."""
        with self._lock:
            return uncached_range(self._local, fetch_offset, max_bytes, self._config)

    def read_records(self, fetch_offset: int, max_bytes: int, **kwargs: object) -> bytes:
        """``read`` copied into bytes (b"" when empty); for tests and non-sendfile callers."""
        fetched = self.read(fetch_offset, max_bytes, **kwargs)  # type: ignore[arg-type]
        return b"" if fetched is None else fetched.read_bytes()

    def latest_timestamp(self) -> tuple[int, int] | None:
        """``(offset, timestamp)`` of the first record carrying the largest timestamp at or
        after the log start offset (ListOffsets -3, KIP-734), or None if there is none."""
        with self._lock:
            self._check_open()
            return latest_timestamp(self._local.segments, self._log_start_offset)

    def offset_for_timestamp(self, timestamp_ms: int) -> tuple[int, int] | None:
        """``(offset, timestamp)`` of the first record with timestamp >= ``timestamp_ms``
        at or after the log start offset, or None."""
        with self._lock:
            self._check_open()
            return offset_for_timestamp(self._local.segments, self._log_start_offset, timestamp_ms)

    # ------------------------------------------------------------------ transactions

    def first_unstable_offset(self) -> int | None:
        """First offset of the earliest ongoing or not yet replicated transaction (Kafka's
        ``UnifiedLog.firstUnstableOffset``), at least the log start offset; None if none."""
        with self._lock:
            first = self.producer_state.first_unstable_offset()
            return None if first is None else max(first, self._log_start_offset)

    def last_stable_offset(self, high_watermark: int) -> int:
        """KIP-98's last stable offset for this high watermark (rule 9a): what read_committed
        consumers may read below. Completed transactions whose marker the high watermark
        passed are forgotten here (the high watermark only grows)."""
        with self._lock:
            return self.producer_state.last_stable_offset(high_watermark, self._log_start_offset)

    def collect_aborted_transactions(
        self, start_offset: int, upper_bound_offset: int
    ) -> list[tuple[int, int]]:
        """``(producer_id, first_offset)`` of every aborted transaction with a marker at or
        after ``start_offset`` and a first offset below ``upper_bound_offset``, in first
        offset order (Kafka's ``UnifiedLog.collectAbortedTransactions``, rule 9c)."""
        with self._lock:
            return collect_aborted_transactions(
                self._local.segments, self._local.bases, start_offset, upper_bound_offset
            )

    # ------------------------------------------------------------------ truncation

    def truncate_to(self, offset: int) -> None:
        """Drop every batch whose last offset is >= ``offset`` (follower truncation).

        The new log end offset is the base of the first dropped batch (``offset`` itself
        when it falls on a batch boundary). The epoch cache forgets epochs starting at or
        after it. Below the log start offset this is ``truncate_fully_and_start_at``.
        """
        if offset < 0:
            raise ValueError(f"cannot truncate to negative offset {offset}")
        with self._lock:
            self._check_open()
            if offset < self._log_start_offset:
                self._truncate_fully_locked(offset)
                return
            if offset < self.log_end_offset:
                self._truncations.generation += 1
                self._local.truncate_to(offset, self._now_ms)
                if self.log_end_offset < self._log_start_offset:
                    # The cut batch straddled the log start: nothing readable is left.
                    self._truncate_fully_locked(self._log_start_offset)
                    return
                self._recovery_point.lower(self.log_end_offset)
                # The producer state is rebuilt only if a producer's batch was cut.
                if self.producer_state.truncate_tail(self.log_end_offset):
                    self._rebuild_producer_state(max_snapshot_offset=self.log_end_offset)
                self._truncations.note_floor(self.log_end_offset)
            self.leader_epoch_cache.truncate_from_end(self.log_end_offset)

    def take_truncation_floor(self) -> int | None:
        """The lowest log end offset any truncation left since the previous call (-1 when
        the log was emptied by ``truncate_fully_and_start_at``), or None when nothing was
        truncated; resets it. Everything below it is unchanged since the previous call,
        which lets a copy of this log (a future log) keep what it copied below it and drop
        the rest (``tidelog.storage.log_truncation``)."""
        with self._lock:
            return self._truncations.take_floor()

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Delete everything; the log restarts empty at ``offset`` (start = end = offset)."""
        if offset < 0:
            raise ValueError(f"cannot start a log at negative offset {offset}")
        with self._lock:
            self._check_open()
            self._truncate_fully_locked(offset)

    def _truncate_fully_locked(self, offset: int) -> None:
        self._truncations.generation += 1
        self._truncations.note_floor(-1)
        self._local.retire_all(self._now_ms)
        self.producer_state.reset()
        self._local.start_at(offset, self._now_ms)
        self._log_start_offset = offset
        self._recovery_point.restart_at(offset)
        self.leader_epoch_cache.clear()

    def set_recovery_point_listener(self, listener: Callable[[], None] | None) -> None:
        """Register what must run when a truncation lowers the recovery point (rule 8): the
        LogManager rewrites recovery-point-offset-checkpoint. It runs under the log's lock,
        so no append can land past the new recovery point before it returns."""
        with self._lock:
            self._recovery_point.listener = listener

    # ------------------------------------------------------------------ compaction

    def segments_for_cleaning(self) -> tuple[list[LogSegment], int, dict[int, int]]:
        """A copy of the segment list, the truncation generation and each producer id's
        last offset, for the cleaner (``tidelog.storage.cleaner``): segments below the
        active one do not change while the generation holds."""
        with self._lock:
            self._check_open()
            producers = {pid: e.last_offset for pid, e in self.producer_state.producers.items()}
            return list(self._local.segments), self._truncations.generation, producers

    def replace_segments(
        self, old: list[LogSegment], generation: int, install: Callable[[], LogSegment]
    ) -> bool:
        """Replace ``old`` (consecutive segments below the active one) by the segment
        ``install`` opens, as one step for readers (the cleaner's swap, its rule 6): the old
        files are renamed ``*.deleted`` first (rule 6). False, ``install`` not called, when
        the log was closed, truncated or lost one of them meanwhile."""
        with self._lock:
            if self._closed or generation != self._truncations.generation:
                return False
            return self._local.replace(old, install, self._now_ms)

    # ------------------------------------------------------------------ retention

    def delete_records_before(self, offset: int) -> None:
        """Move the log start offset up to ``offset`` (DeleteRecords); whole segments
        below it are removed now, the rest become unreadable below the new start."""
        with self._lock:
            self._check_open()
            if offset > self.log_end_offset:
                raise OffsetOutOfRangeError(
                    f"{self.topic_partition}: cannot delete records before {offset}, beyond "
                    f"the log end offset {self.log_end_offset}"
                )
            if offset <= self._log_start_offset:
                return
            self._log_start_offset = offset
            self.leader_epoch_cache.truncate_from_start(offset)
            self.producer_state.truncate_head(offset)
            self._delete_segments(below_log_start(self._local, offset, None))

    def apply_retention(self, now_ms: int, *, high_watermark: int | None = None) -> int:
        """Delete whole old segments by ``retention.ms`` and ``retention.bytes``; returns
        how many were deleted. Only segments entirely below ``high_watermark`` (if given)
        may go, as in Kafka. Also closes files of segments deleted long enough ago."""
        with self._lock:
            self._check_open()
            self._now_ms = now_ms
            config = self._config
            local = self._local
            # One after the other: each deletion changes the segments the next one reads.
            deleted = self._delete_segments(expired_by_time(local, config, now_ms, high_watermark))
            deleted += self._delete_segments(excess_by_size(local, config, high_watermark))
            deleted += self._delete_segments(
                below_log_start(local, self._log_start_offset, high_watermark)
            )
            local.close_pending_deletes(now_ms)
            # producer.id.expiration.ms (producer_state rule 5), on leaders and followers alike,
            # checked as often as retention (Kafka: a separate 10-minute task).
            self.producer_state.remove_expired(now_ms, config.producer_id_expiration_ms)
            if high_watermark is not None:
                # Bounds the completed transactions kept for the LSO on a log nobody fetches.
                self.producer_state.on_high_watermark(high_watermark)
            return deleted

    def _delete_segments(self, count: int) -> int:
        """Delete the first ``count`` segments (``tidelog.storage.log_retention`` chose
        them); deleting every segment first rolls a new empty one at the log end offset."""
        if count == 0:
            return 0
        if count == len(self._local.segments):
            self._roll(self.log_end_offset, self._now_ms)
        self._local.remove_prefix(count, self._now_ms)
        self._log_start_offset = max(self._log_start_offset, self._local.segments[0].base_offset)
        self.leader_epoch_cache.truncate_from_start(self._log_start_offset)
        self.producer_state.truncate_head(self._log_start_offset)
        # Snapshots of deleted segments go with them (Kafka 2.8+).
        self.producer_state.delete_snapshots(below=self._local.segments[0].base_offset)
        return count

    # ------------------------------------------------------------------ durability

    def flush(self) -> None:
        """fsync everything written so far; the recovery point becomes that log end offset.
        The fsyncs run without the lock held (appends on the event loop are not blocked)."""
        with self._lock:
            target = self.log_end_offset
        self._flush_upto(target, self._now_ms)

    def maybe_flush(self, now_ms: int) -> bool:
        """Flush what ``tidelog.storage.log_flush`` says is due; returns whether it fsynced
        anything (may fsync: call it from a worker thread); closes the files of segments
        deleted ``file.delete.delay.ms`` ago. Read unlocked first: nothing due, no lock."""
        if self._local.segments[-1].base_offset <= self._recovery_point.offset and not (
            self._flush_schedule.unflushed_messages or self._local.has_pending_deletes
        ):
            return False  # a racing append or roll is seen by the next call
        with self._lock:
            if self._closed:
                return False
            self._now_ms = now_ms
            self._local.close_pending_deletes(now_ms)
            target = periodic_flush_target(
                self._flush_schedule,
                now_ms,
                self._config,
                log_end_offset=self.log_end_offset,
                active_base=self._local.segments[-1].base_offset,
                recovery_point=self._recovery_point.offset,
            )
            if target is None:
                return False
        self._flush_upto(target, now_ms)
        return True

    def _flush_upto(self, target: int, now_ms: int) -> None:
        """fsync the segments holding offsets below ``target``, then move the recovery
        point there unless a truncation happened meanwhile."""
        with self._lock:
            if self._closed:
                return  # closed or deleted meanwhile (a flush thread racing with close)
            segments = self._local.segments_to_flush(target, self._recovery_point.offset)
            snapshots = self.producer_state.take_unsynced()
            dir_dirty = self._local.take_dir_dirty() or bool(snapshots)
            generation = self._truncations.generation
            if target >= self.log_end_offset:
                self._flush_schedule.flushed(now_ms)
        try:
            for seg in dict.fromkeys(segments):
                seg.flush()
            fsync_files(snapshots)
            if dir_dirty:
                fsync_directory(self.directory)
        except OSError:
            if self._is_closed():  # another thread closed the log meanwhile
                return  # the files went away under us: nothing left to make durable
            raise
        with self._lock:
            if generation == self._truncations.generation:
                self._recovery_point.flushed(target, self.log_end_offset)

    def close(self) -> None:
        """Flush and close every file; the log object is unusable afterwards."""
        with self._lock:
            if self._closed:
                return
            self._local.segments[-1].on_become_inactive()
            # Only a new snapshot makes the directory worth an fsync (~1 ms each per log).
            leo = self.log_end_offset
            empty = leo == self._local.segments[0].base_offset
            if self.producer_state.snapshot_at_close(leo, nothing_to_replay=empty):
                self._local.mark_dir_dirty()
            self.flush()
            self._local.close(delete_pending=True)
            self._closed = True

    def retire(self) -> None:
        """Stop serving this log without closing its files: every later call refuses (or
        does nothing) as on a closed log, but FetchSlices handed out before stay valid
        (rule 6) until ``release_files``. A log replaced by its future log (a replica
        moved to another log dir) is retired, its directory renamed away, and released
        ``file.delete.delay.ms`` later; nothing is written to it any more."""
        with self._lock:
            self._closed = True

    def release_files(self) -> None:
        """Close the files of a retired log (no flush: it is about to be deleted)."""
        with self._lock:
            self._closed = True
            self._local.close(delete_pending=False)

    def close_without_flush(self) -> None:
        """Close the files without flushing (tests use it to simulate a crash)."""
        with self._lock:
            if self._closed:
                return
            self._local.close(delete_pending=False)
            self._closed = True

    def delete(self) -> None:
        """Close and remove the whole directory (topic deletion)."""
        with self._lock:
            if not self._closed:
                self._local.close(delete_pending=False)
                self._closed = True
            self.remove_directory(self.directory)

    #: Delete a partition directory (``local_log.remove_log_directory``).
    remove_directory = staticmethod(remove_log_directory)

    @property
    def closed(self) -> bool:
        return self._closed

    def _is_closed(self) -> bool:
        return self._closed

    def _check_open(self) -> None:
        if self._closed:
            raise ValueError(f"log {self.directory} is closed")

    def __repr__(self) -> str:
        return (
            f"Log({self.topic_partition}, start={self._log_start_offset}, "
            f"end={self.log_end_offset}, segments={len(self._local.segments)})"
        )


__all__ = [
    "FUTURE_DIR_SUFFIX",
    "AppendInfo",
    "AppendOrigin",
    "FetchSlice",
    "Log",
    "LogConfig",
    "parse_topic_partition",
]
