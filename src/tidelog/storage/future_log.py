"""Future logs: copying a replica into another log dir while it is served (KIP-113, JBOD).

Theory of operation
-------------------
Kafka moves a replica between the log dirs of one broker (AlterReplicaLogDirs) without
stopping it: it creates a *future log* ``<topic>-<partition>.<uuid>-future`` in the target
dir, its ``ReplicaAlterLogDirsThread`` copies the current log into it the way a follower
copies its leader, and once the future log has caught up the two are swapped under the
partition's lock (``LogManager.replaceCurrentWithFutureLog``). tidelog does the same; this
module is the copy (blocking file IO, run by the server in a worker thread), and
``tidelog.storage.log_manager`` owns the directories, the swap and its crash recovery.

Rules of the copy (``FutureLogCopier``):

  1. The future log holds a prefix of the current log: every batch at offsets
     ``[future.log_start_offset, future.log_end_offset)`` is byte for byte the current log's
     batch at the same offsets, with its offsets, leader epochs and producer fields (it is
     appended with ``Log.append_as_follower``, which keeps them, validates every batch and
     records each epoch in the future's epoch cache).
  2. The copy starts at the batch holding the current log's start offset. Whenever the
     future log ends below the current log's start (retention or DeleteRecords ran past
     it) or past its end, it is emptied and starts again there.
  3. Truncations of the current log (a follower cutting its tail, ``truncate_fully_and_
     start_at``) break rule 1 above the point they cut to. Before every round the copier
     takes the current log's truncation floor (``Log.take_truncation_floor``: the lowest
     log end offset a truncation left since the previous round) and truncates the future
     log there; below it nothing changed, so rule 1 holds again. A round reads the current
     log without holding its lock while the event loop appends to or truncates it: a read
     that raced with a truncation may copy bytes the current log no longer holds, but only
     above the floor the next round (or the final catch-up) takes, so they never survive.
  4. The final catch-up runs on the event loop thread, which is the only thread that
     appends to or truncates the current log: nothing changes under it, so once the
     future's log end offset equals the current one and the last batches compare equal,
     the future log is an exact copy of the readable log. Only then may the swap begin.
  5. What the batches cannot carry is copied at the swap (``LogManager``): the current
     log's start offset (the future log deletes records below it), a leader epoch starting
     at the log end (a leader records its epoch before writing anything in it), and its
     producer state as a snapshot at the log end offset (e.g. a transaction still open
     whose first batch is below the log start, expiry already applied).

  6. A future log reloaded after a restart (``LogManager`` start-up rule R1) is resumed,
     as Kafka's ``ReplicaAlterLogDirsThread`` resumes from the future log's end after
     truncating it by leader epoch: the truncation history of rule 3 died with the old
     process, and the current log may itself have lost an unflushed tail, been truncated
     as a follower and refilled. Before its first round a resumed copier
     (``resumed=True``) keeps of the future log only what it can prove: offsets below
     the current log's end when the copier was made (the broker appends to it only
     after that, so nothing the future holds above it can be the current log's), and
     below the first offset where the two epoch caches disagree (KIP-101/279: a batch's
     leader epoch and offset name its contents and everything below it). Then the last
     batch kept must be byte for byte the current log's at the same offset; while it is
     not, it is dropped (at most ``MAX_RESUME_STEPS`` batches, then the copy starts
     again from rule 2). Rule 1 holds again and the rounds go on from there.

Like Kafka's future replica, a transaction that began below the current log's start
offset and was aborted above it leaves the future log's aborted-transaction index
without its start (the batches before the start are not copied).
"""

from __future__ import annotations

import logging
import os
import uuid
from pathlib import Path
from typing import Final

from tidelog.errors import KafkaError
from tidelog.model import TopicPartition
from tidelog.storage.checkpoints import TMP_SUFFIX, fsync_directory
from tidelog.storage.errors import OffsetOutOfRangeError, StorageError
from tidelog.storage.log import FUTURE_DIR_SUFFIX, FetchSlice, Log
from tidelog.storage.producer_state import encode_snapshot, snapshot_file_name

logger = logging.getLogger(__name__)

#: Written into the future log's directory at the swap's commit point
#: (``tidelog.storage.log_manager``, swap rule 2): from then on the future log is the replica.
SWAP_MARKER: Final = "swap-committed"
#: Bytes asked of the current log per read (one read returns batches of one segment).
READ_CHUNK_BYTES: Final = 1 << 20
#: Reads in a row that fail without progress before the copy gives up (a read racing with
#: a truncation fails once; the same failure again and again means a damaged log).
MAX_FAILED_READS: Final = 16
#: Batches a resumed copy drops one by one when its tail differs (rule 6) before it
#: starts over instead.
MAX_RESUME_STEPS: Final = 64


class FutureLogError(StorageError):
    """The copy cannot go on (the current log is damaged or the copy diverged)."""


def future_dir_name(tp: TopicPartition, unique: uuid.UUID) -> str:
    """Kafka's ``logFutureDirName``: ``<topic>-<partition>.<uuid hex>-future``."""
    return f"{tp}.{unique.hex}{FUTURE_DIR_SUFFIX}"


def is_future_dir(path: Path) -> bool:
    return path.name.endswith(FUTURE_DIR_SUFFIX)


def unique_of(future_dir: Path) -> str:
    """The uuid part of a future log's directory name."""
    return future_dir.name[: -len(FUTURE_DIR_SUFFIX)].rpartition(".")[2]


def write_bytes_atomically(path: Path, data: bytes) -> None:
    """Replace ``path`` with ``data``: temp file, fsync, rename, fsync of the directory."""
    tmp = path.with_name(path.name + TMP_SUFFIX)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    fsync_directory(path.parent)


def write_producer_snapshot(current: Log, directory: Path) -> None:
    """Rule 5: ``current``'s producer state as a snapshot at its log end offset, written
    into ``directory`` (the future log's, which loads it when reopened). Called on the
    event loop thread, where the state cannot change meanwhile."""
    state = current.producer_state
    leo = current.log_end_offset
    data = encode_snapshot(
        leo,
        state.producers.values(),
        unreplicated=state.unreplicated_txns,
        last_marker_offset=state.last_marker_offset,
    )
    write_bytes_atomically(directory / snapshot_file_name(leo), data)


class FutureLogCopier:
    """Copies ``current`` into ``future`` (rules 1-4). ``copy`` may run in a worker thread;
    ``finish`` must run on the thread that appends to and truncates ``current``, and never
    at the same time as ``copy``."""

    def __init__(self, current: Log, future: Log, *, now_ms: int, resumed: bool = False) -> None:
        """``resumed``: ``future`` was reloaded from disk after a restart (rule 6); make
        the copier on the thread that appends to ``current``, before it appends again."""
        self.current = current
        self.future = future
        self._now_ms = now_ms
        self._failed_reads = 0
        #: Rule 6: the current log's end when a resumed copy began (None: checked already).
        self._resume_limit: int | None = current.log_end_offset if resumed else None
        # Truncations before the copy began do not matter: nothing was copied yet (or, when
        # resumed, rule 6 checks what was).
        current.take_truncation_floor()

    @property
    def lag(self) -> int:
        """Offsets the future log is behind the current one (DescribeLogDirs' offset lag
        of a future replica: current log end offset minus the future's)."""
        return self.current.log_end_offset - self.future.log_end_offset

    def remaining_bytes(self) -> int:
        """About how many bytes are left to copy (segment layouts differ; an estimate)."""
        return max(0, self.current.size_bytes - self.future.size_bytes)

    def copy(self, max_bytes: int, *, now_ms: int | None = None) -> int:
        """One round: rule 3's truncation, then up to about ``max_bytes`` copied; returns
        the bytes appended. Raises ``ValueError`` when either log was closed meanwhile
        (the partition was deleted or the move aborted), ``OSError`` when a disk failed,
        ``FutureLogError`` when the current log keeps failing to read."""
        if now_ms is not None:
            self._now_ms = now_ms
        current, future = self.current, self.future
        if self._resume_limit is not None:
            self._check_resumed(self._resume_limit)
            self._resume_limit = None
        self._reconcile()
        copied = 0
        while copied < max_bytes:
            leo = future.log_end_offset
            if leo >= current.log_end_offset:
                break
            # Below the start only the batch holding it is readable (rule 2).
            fetch_offset = max(leo, current.log_start_offset)
            piece = self._read(fetch_offset, min(READ_CHUNK_BYTES, max_bytes - copied))
            if piece is None:
                break
            try:
                data = piece.read_bytes()
            except OSError as exc:
                if exc.errno is not None:
                    raise  # a disk error, not a short read
                self._failed(f"reading the current log: {exc}")
                break  # truncated under the read (rule 3): try again next round
            if piece.first_offset != leo:
                # The current log's batch boundaries changed below our end (a follower that
                # re-fetched a tail whole): take its batch whole (rule 1).
                future.truncate_to(piece.first_offset)
                continue
            try:
                info = future.append_as_follower(data, now_ms=self._now_ms)
            except KafkaError as exc:
                # Bytes of a batch that was truncated (and maybe replaced) under the read:
                # the next round's floor removes whatever of it would be wrong.
                self._failed(f"appending to the future log: {exc}")
                break
            if info.num_batches == 0:
                break
            self._failed_reads = 0
            copied += info.size_bytes
        return copied

    def flush(self) -> None:
        """fsync the future log (worker thread), so the swap's own flush is short."""
        self.future.flush()

    def finish(self, max_bytes: int, *, now_ms: int | None = None) -> bool:
        """Rule 4, on the event loop thread: copy what is left if it is at most about
        ``max_bytes`` and verify; True when the future log is an exact copy of the
        current one (nothing can change until the caller's next await)."""
        self.copy(max_bytes, now_ms=now_ms)
        current, future = self.current, self.future
        if future.log_end_offset != current.log_end_offset:
            return False
        if future.log_start_offset > current.log_start_offset:
            raise FutureLogError(
                f"{current.topic_partition}: the future log starts at "
                f"{future.log_start_offset}, after the current log's start "
                f"{current.log_start_offset}"
            )
        self.verify_tail()
        return True

    def verify_tail(self) -> None:
        """The last batch of both logs must be the same bytes (a cheap check of rule 1 at
        the point the copy ends; ``FutureLogError`` if not)."""
        current, future = self.current, self.future
        leo = current.log_end_offset
        if leo <= max(current.log_start_offset, future.log_start_offset):
            return
        mine = current.read(leo - 1, 1)
        theirs = future.read(leo - 1, 1)
        if (mine is None) != (theirs is None) or (
            mine is not None
            and theirs is not None
            and (
                mine.first_offset != theirs.first_offset or mine.read_bytes() != theirs.read_bytes()
            )
        ):
            raise FutureLogError(
                f"{current.topic_partition}: the future log's last batch differs from the "
                "current log's"
            )

    # ------------------------------------------------------------------ rule 6

    def _check_resumed(self, limit: int) -> None:
        """Rule 6: keep of a reloaded future log only the prefix it shares with the
        current log. Reads of the current log may race with the event loop's truncations;
        those leave a floor that the next ``_reconcile`` applies."""
        current, future = self.current, self.future
        tp = current.topic_partition
        before = future.log_end_offset
        keep = min(before, limit, self._epochs_agree_below(limit))
        if keep < future.log_end_offset:
            future.truncate_to(max(keep, 0))
        for _ in range(MAX_RESUME_STEPS):
            leo = future.log_end_offset
            if leo <= max(future.log_start_offset, current.log_start_offset):
                break  # nothing comparable is left; rule 2 places the copy
            theirs = future.read(leo - 1, 1)
            try:
                mine = current.read(leo - 1, 1)
            except OffsetOutOfRangeError:
                mine = None
            if (
                theirs is not None
                and mine is not None
                and mine.first_offset == theirs.first_offset
                and mine.read_bytes() == theirs.read_bytes()
            ):
                break
            future.truncate_to(theirs.first_offset if theirs is not None else leo - 1)
        else:
            logger.warning(
                "%s: the reloaded future log differs from the current log in its last %d "
                "batches; copying it again from the start",
                tp,
                MAX_RESUME_STEPS,
            )
            future.truncate_fully_and_start_at(self._start_base())
        logger.info(
            "%s: resuming its copy into %s at offset %d (reloaded up to %d, current log end %d)",
            tp,
            future.directory.parent,
            future.log_end_offset,
            before,
            limit,
        )

    def _epochs_agree_below(self, limit: int) -> int:
        """The first offset below ``limit`` at which the two logs' epoch caches name
        different leader epochs (``limit`` when none; only offsets both logs hold count)."""
        current, future = self.current, self.future
        low = max(current.log_start_offset, future.log_start_offset)
        high = min(limit, future.log_end_offset, current.log_end_offset)
        if high <= low:
            return high
        mine, theirs = current.leader_epoch_cache, future.leader_epoch_cache
        starts = {e.start_offset for e in (*mine.entries, *theirs.entries)}
        for offset in sorted({low} | {s for s in starts if low < s < high}):
            if mine.epoch_for_offset(offset) != theirs.epoch_for_offset(offset):
                return offset
        return high

    # ------------------------------------------------------------------ rules 2 and 3

    def _reconcile(self) -> None:
        current, future = self.current, self.future
        floor = current.take_truncation_floor()
        if floor is not None and floor < future.log_end_offset:
            future.truncate_to(max(floor, 0))
        leo = future.log_end_offset
        if leo > current.log_end_offset:
            future.truncate_fully_and_start_at(self._start_base())
        elif leo < current.log_start_offset:
            base = self._start_base()
            if leo != base:
                future.truncate_fully_and_start_at(base)

    def _start_base(self) -> int:
        """Rule 2: where the copy starts, the base offset of the batch holding the current
        log's start offset (the start itself when the log is empty)."""
        current = self.current
        start = current.log_start_offset
        if start < current.log_end_offset:
            piece = current.read(start, 1)
            if piece is not None:
                return piece.first_offset
        return start

    def _read(self, offset: int, max_bytes: int) -> FetchSlice | None:
        try:
            return self.current.read(offset, max_bytes, min_one_batch=True)
        except OffsetOutOfRangeError as exc:
            # Retention or a truncation moved the current log's bounds since _reconcile.
            self._failed(str(exc))
            return None

    def _failed(self, what: str) -> None:
        self._failed_reads += 1
        logger.debug("%s: copy round failed (%s)", self.current.topic_partition, what)
        if self._failed_reads >= MAX_FAILED_READS:
            raise FutureLogError(
                f"{self.current.topic_partition}: copying into the future log failed "
                f"{self._failed_reads} times in a row: {what}"
            )


__all__ = [
    "MAX_FAILED_READS",
    "MAX_RESUME_STEPS",
    "READ_CHUNK_BYTES",
    "SWAP_MARKER",
    "FutureLogCopier",
    "FutureLogError",
    "future_dir_name",
    "is_future_dir",
    "unique_of",
    "write_bytes_atomically",
    "write_producer_snapshot",
]
