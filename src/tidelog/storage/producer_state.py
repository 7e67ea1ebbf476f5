"""Per-partition idempotent-producer state (Kafka's ProducerStateManager, without transactions).

Theory of operation
-------------------
Every v2 batch written by an idempotent producer carries ``producer_id`` (>= 0),
``producer_epoch`` and ``base_sequence``; its records have sequences ``base_sequence ..
base_sequence + last_offset_delta`` (wrapping from Int32 max to 0, as Kafka's
``DefaultRecordBatch.incrementSequence``). For each producer id the partition keeps a
``ProducerStateEntry``: the epoch of its latest batch and the metadata (first/last sequence,
first/last offset, max timestamp) of its last ``MAX_BATCHES_TO_RETAIN`` = 5 batches of that
epoch — the producer has at most five requests in flight (``max.in.flight.requests.
per.connection`` <= 5 with idempotence), so any retry is one of them (KIP-98, KAFKA-5494).

Rules:
  1. The state is a pure function of the batches in ``[log_start_offset, log_end_offset)``:
     ``fold`` them in offset order with ``ProducerStateEntry.with_batch`` (a new epoch
     clears the retained batches; at most five are kept), then ``trim`` at the log start
     offset (batch metadata below it is dropped; an entry left with none is removed — Kafka's
     ``isProducerRetained``). Trimming commutes with folding, so the incremental state, a
     snapshot plus a replay, and a replay of the whole log all agree; that is what makes the
     state after an unclean stop equal to the state of a clean run.
  2. Leader appends are checked batch by batch against the state (``validate``), in this
     order (Kafka's ``UnifiedLog.analyzeAndValidateProducerState`` + ``ProducerAppendInfo``):
       a. same epoch, same first and last sequence as a retained batch -> DUPLICATE: the
          append writes nothing and answers with that batch's ORIGINAL offsets;
       b. epoch older than the entry's -> INVALID_PRODUCER_EPOCH (47) (fencing);
       c. epoch newer than the entry's -> the sequence must be 0, else
          OUT_OF_ORDER_SEQUENCE_NUMBER (45);
       d. same epoch -> the sequence must follow the last one (``in_sequence``), else 45 —
          this includes a retry of a batch older than the five retained;
       e. unknown producer id -> accepted with any sequence (Kafka >= 2.5, KIP-360), EXCEPT
          when this broker itself removed the producer's state because the log start offset
          passed its last batch (retention / DeleteRecords): then UNKNOWN_PRODUCER_ID (59)
          for a non-zero sequence, which tells the client (librdkafka, the Java client) to
          bump its epoch / reset its sequences rather than treating the gap as data loss.
          See docs/idempotence.md for why.
  3. Follower appends and replays from disk apply batches unchecked (Kafka's
     ``AppendOrigin.Replication``): the leader already validated them.
  4. Snapshots: ``<20-digit offset>.snapshot`` holds the state of every batch below that
     offset (binary, versioned, CRC-32C; written tmp + fsync + rename). A snapshot that fails
     its checks is deleted and an older one (or the log itself) is used instead.
  5. Expiration (Kafka's ``producer.id.expiration.ms``, default 86400000 = 24 h; KIP-98):
     an entry whose newest batch's max timestamp is at least that old (``now_ms -
     timestamp >= producer_id_expiration_ms``, Kafka's ``isProducerExpired``) is removed by
     ``remove_expired`` — periodically, on leaders and followers alike (it depends only on
     the replicated batches and the clock), and after every rebuild from snapshot + replay so
     a restart does not bring expired producers back. Later snapshots simply no longer hold
     them. Rule 1 then reads "a pure function of the batches in the log and of the time of
     the last expiry check". An expired producer is NOT remembered as evicted: its next batch
     is accepted with any sequence (rule 2e; Kafka >= 2.5 answers neither
     UNKNOWN_PRODUCER_ID nor OUT_OF_ORDER_SEQUENCE_NUMBER there: ``ProducerAppendInfo.
     checkSequence`` accepts any sequence when there is no current producer epoch). A retry
     of a batch older than the expiration is therefore no longer recognised — the reason
     the default is a whole day.

Batches without a producer id (-1) and control batches never reach this module.
"""

from __future__ import annotations

import logging
import os
import struct
from collections import OrderedDict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Final, NamedTuple

import crc32c

from tidelog.errors import ErrorCode

logger = logging.getLogger(__name__)

#: Retained batch metadata per producer (Kafka's ProducerStateEntry.NumBatchesToRetain).
MAX_BATCHES_TO_RETAIN: Final = 5
INT32_MAX: Final = 2**31 - 1
NO_SEQUENCE: Final = -1
SNAPSHOT_SUFFIX: Final = ".snapshot"
SNAPSHOT_VERSION: Final = 1
#: How many producer ids evicted by the log start offset are remembered (rule 2e).
DEFAULT_MAX_EVICTED_REMEMBERED: Final = 10_000
#: Kafka's producer.id.expiration.ms default (rule 5).
DEFAULT_PRODUCER_ID_EXPIRATION_MS: Final = 86_400_000

_SNAPSHOT_MAGIC: Final = b"TLPS"
#: magic, version, crc32c of everything after this header
_SNAP_HEADER: Final = struct.Struct(">4shI")
#: end offset, entry count
_SNAP_BODY_HEAD: Final = struct.Struct(">qi")
#: producer id, epoch, number of batches
_SNAP_ENTRY: Final = struct.Struct(">qhB")
#: first seq, last seq, first offset, last offset, timestamp
_SNAP_BATCH: Final = struct.Struct(">iiqqq")
_TMP_SUFFIX: Final = ".tmp"


def increment_sequence(sequence: int, increment: int) -> int:
    """``sequence + increment`` wrapping past Int32 max to 0 (DefaultRecordBatch)."""
    if sequence > INT32_MAX - increment:
        return increment - (INT32_MAX - sequence) - 1
    return sequence + increment


def decrement_sequence(sequence: int, decrement: int) -> int:
    """Inverse of ``increment_sequence``."""
    if sequence < decrement:
        return INT32_MAX - (decrement - sequence) + 1
    return sequence - decrement


def in_sequence(last_sequence: int, next_sequence: int) -> bool:
    """Does a batch starting at ``next_sequence`` follow one ending at ``last_sequence``?"""
    return next_sequence == last_sequence + 1 or (next_sequence == 0 and last_sequence == INT32_MAX)


@dataclass(frozen=True, slots=True)
class BatchMetadata:
    """What is remembered of one appended batch (Kafka's BatchMetadata)."""

    first_seq: int
    last_seq: int
    first_offset: int
    last_offset: int
    timestamp: int


@dataclass(frozen=True, slots=True)
class ProducerStateEntry:
    """One producer's state: its epoch and its last (up to five) batches of that epoch,
    oldest first. Never empty while in a ProducerStateManager (rule 1)."""

    producer_id: int
    producer_epoch: int
    batches: tuple[BatchMetadata, ...]

    @property
    def last_seq(self) -> int:
        return self.batches[-1].last_seq if self.batches else NO_SEQUENCE

    @property
    def last_offset(self) -> int:
        return self.batches[-1].last_offset if self.batches else -1

    @property
    def last_timestamp(self) -> int:
        """Max timestamp of the newest batch (Kafka's ``lastTimestamp``), -1 if none."""
        return self.batches[-1].timestamp if self.batches else -1

    def is_expired(self, now_ms: int, producer_id_expiration_ms: int) -> bool:
        """Rule 5 (Kafka's ``ProducerStateManager.isProducerExpired``)."""
        return now_ms - self.last_timestamp >= producer_id_expiration_ms

    def find_duplicate(self, epoch: int, first_seq: int, last_seq: int) -> BatchMetadata | None:
        """The retained batch with exactly this epoch and sequence range (Kafka's
        ``findDuplicateBatch``), or None."""
        if epoch != self.producer_epoch:
            return None
        for meta in self.batches:
            if meta.first_seq == first_seq and meta.last_seq == last_seq:
                return meta
        return None

    def with_batch(self, epoch: int, meta: BatchMetadata) -> ProducerStateEntry:
        """The entry after appending ``meta`` with ``epoch`` (rule 1): another epoch clears
        the retained batches; only the newest five are kept."""
        kept = self.batches if epoch == self.producer_epoch else ()
        if len(kept) >= MAX_BATCHES_TO_RETAIN:
            kept = kept[len(kept) - MAX_BATCHES_TO_RETAIN + 1 :]
        return ProducerStateEntry(self.producer_id, epoch, (*kept, meta))


class ProducerBatch(NamedTuple):
    """The header fields of one written (or to-be-written) batch that the state needs."""

    producer_id: int
    producer_epoch: int
    base_sequence: int
    first_offset: int
    last_offset: int
    max_timestamp: int

    def metadata(self) -> BatchMetadata:
        last_seq = increment_sequence(self.base_sequence, self.last_offset - self.first_offset)
        return BatchMetadata(
            self.base_sequence, last_seq, self.first_offset, self.last_offset, self.max_timestamp
        )


def validate(
    entry: ProducerStateEntry | None,
    batch: ProducerBatch,
    *,
    evicted_by_retention: bool = False,
) -> tuple[ErrorCode, str | None]:
    """Rules 2b-2e for one leader batch against its producer's current entry.

    Returns ``(ErrorCode.NONE, None)`` when the batch may be appended, else the error and a
    message for the log. Duplicates (rule 2a) are found separately with ``find_duplicate``.
    """
    epoch = batch.producer_epoch
    first_seq = batch.base_sequence
    pid = batch.producer_id
    if first_seq < 0:
        # Kafka's LogValidator: an idempotent batch must carry a sequence.
        return ErrorCode.INVALID_RECORD, (
            f"invalid sequence number {first_seq} in a batch with producer id {pid}"
        )
    if entry is None:
        if first_seq != 0 and evicted_by_retention:
            return ErrorCode.UNKNOWN_PRODUCER_ID, (
                f"no state for producer id {pid}: its last batch was removed by retention; "
                f"sequence {first_seq} cannot be checked"
            )
        return ErrorCode.NONE, None
    if epoch < entry.producer_epoch:
        return ErrorCode.INVALID_PRODUCER_EPOCH, (
            f"producer {pid} epoch {epoch} is older than the current epoch {entry.producer_epoch}"
        )
    if epoch > entry.producer_epoch:
        if first_seq != 0:
            return ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER, (
                f"producer {pid} new epoch {epoch} must start at sequence 0, not {first_seq}"
            )
        return ErrorCode.NONE, None
    if not in_sequence(entry.last_seq, first_seq):
        return ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER, (
            f"producer {pid} epoch {epoch}: sequence {first_seq} does not follow {entry.last_seq}"
        )
    return ErrorCode.NONE, None


@dataclass(frozen=True, slots=True)
class LeaderAppendCheck:
    """Outcome of ``ProducerStateManager.check_leader_append``.

    Exactly one of: ``duplicate`` set (write nothing, answer with its offsets); ``error`` not
    NONE (write nothing, answer with the error); otherwise ``updates`` is what to ``commit``
    once the batches are written.
    """

    error: ErrorCode = ErrorCode.NONE
    message: str | None = None
    duplicate: BatchMetadata | None = None
    updates: Mapping[int, ProducerStateEntry] = field(default_factory=dict)


class CorruptSnapshotError(Exception):
    """A snapshot file failed its checks (local fault; the snapshot is discarded)."""


def snapshot_file_name(offset: int) -> str:
    return f"{offset:020d}{SNAPSHOT_SUFFIX}"


def encode_snapshot(end_offset: int, producers: Iterable[ProducerStateEntry]) -> bytes:
    """The snapshot file format (rule 4)::

    "TLPS" | version int16 | crc32c uint32 of the rest
    end_offset int64 | entry count int32
    per entry: producer_id int64 | epoch int16 | batch count uint8
               per batch: first_seq int32 | last_seq int32 | first_offset int64
                          | last_offset int64 | timestamp int64
    """
    entries = list(producers)
    parts = [_SNAP_BODY_HEAD.pack(end_offset, len(entries))]
    for entry in entries:
        parts.append(_SNAP_ENTRY.pack(entry.producer_id, entry.producer_epoch, len(entry.batches)))
        for m in entry.batches:
            parts.append(
                _SNAP_BATCH.pack(
                    m.first_seq, m.last_seq, m.first_offset, m.last_offset, m.timestamp
                )
            )
    body = b"".join(parts)
    return _SNAP_HEADER.pack(_SNAPSHOT_MAGIC, SNAPSHOT_VERSION, crc32c.crc32c(body)) + body


def decode_snapshot(data: bytes) -> tuple[int, dict[int, ProducerStateEntry]]:
    """``(end_offset, producers)`` of a snapshot; CorruptSnapshotError on any defect."""
    if len(data) < _SNAP_HEADER.size + _SNAP_BODY_HEAD.size:
        raise CorruptSnapshotError(f"{len(data)} bytes is too short for a snapshot")
    magic, version, crc = _SNAP_HEADER.unpack_from(data, 0)
    if magic != _SNAPSHOT_MAGIC:
        raise CorruptSnapshotError(f"bad magic {magic!r}")
    if version != SNAPSHOT_VERSION:
        raise CorruptSnapshotError(f"unsupported snapshot version {version}")
    body = memoryview(data)[_SNAP_HEADER.size :]
    if crc32c.crc32c(body) != crc:
        raise CorruptSnapshotError("CRC-32C mismatch")
    try:
        end_offset, count = _SNAP_BODY_HEAD.unpack_from(body, 0)
        pos = _SNAP_BODY_HEAD.size
        producers: dict[int, ProducerStateEntry] = {}
        for _ in range(count):
            pid, epoch, n = _SNAP_ENTRY.unpack_from(body, pos)
            pos += _SNAP_ENTRY.size
            batches = []
            for _ in range(n):
                batches.append(BatchMetadata(*_SNAP_BATCH.unpack_from(body, pos)))
                pos += _SNAP_BATCH.size
            if not 0 < n <= MAX_BATCHES_TO_RETAIN or pid < 0 or pid in producers:
                raise CorruptSnapshotError(f"bad entry for producer id {pid}")
            producers[pid] = ProducerStateEntry(pid, epoch, tuple(batches))
    except struct.error as exc:
        raise CorruptSnapshotError(f"truncated: {exc}") from exc
    if pos != len(body):
        raise CorruptSnapshotError(f"{len(body) - pos} trailing bytes")
    return end_offset, producers


class ProducerStateManager:
    """The producer state of one partition plus its snapshot files (rules 1-4).

    Not thread-safe on its own: ``Log`` calls it under the log's lock.
    """

    def __init__(
        self, directory: Path, *, max_evicted_remembered: int = DEFAULT_MAX_EVICTED_REMEMBERED
    ) -> None:
        self.directory = directory
        self._producers: dict[int, ProducerStateEntry] = {}
        #: Producer ids whose state the log start offset removed, most recent last (rule 2e).
        #: In memory only: after a restart an unknown producer is simply accepted (Kafka 2.5+).
        self._evicted: OrderedDict[int, None] = OrderedDict()
        self._max_evicted = max_evicted_remembered

    # ------------------------------------------------------------------ queries

    @property
    def producers(self) -> Mapping[int, ProducerStateEntry]:
        """Read-only view: producer id -> entry."""
        return MappingProxyType(self._producers)

    def last_entry(self, producer_id: int) -> ProducerStateEntry | None:
        return self._producers.get(producer_id)

    def was_evicted(self, producer_id: int) -> bool:
        return producer_id in self._evicted

    # ------------------------------------------------------------------ appends

    def check_leader_append(self, batches: Sequence[ProducerBatch]) -> LeaderAppendCheck:
        """Rule 2 for every batch of one leader append (offsets already assigned).

        Duplicates are looked up in the committed state only (as Kafka does); sequence and
        epoch checks see the earlier batches of the same append.
        """
        updates: dict[int, ProducerStateEntry] = {}
        for batch in batches:
            pid = batch.producer_id
            committed = self._producers.get(pid)
            if committed is not None and batch.base_sequence >= 0:
                last_seq = increment_sequence(
                    batch.base_sequence, batch.last_offset - batch.first_offset
                )
                duplicate = committed.find_duplicate(
                    batch.producer_epoch, batch.base_sequence, last_seq
                )
                if duplicate is not None:
                    return LeaderAppendCheck(duplicate=duplicate)
            current = updates.get(pid, committed)
            error, message = validate(
                current,
                batch,
                evicted_by_retention=current is None and pid in self._evicted,
            )
            if error is not ErrorCode.NONE:
                return LeaderAppendCheck(error=error, message=message)
            base = current if current is not None else ProducerStateEntry(pid, -1, ())
            updates[pid] = base.with_batch(batch.producer_epoch, batch.metadata())
        return LeaderAppendCheck(updates=updates)

    def commit(self, updates: Mapping[int, ProducerStateEntry]) -> None:
        """Install the entries of a successful ``check_leader_append`` after the write."""
        self._producers.update(updates)
        if self._evicted:
            for pid in updates:
                self._evicted.pop(pid, None)

    def update(self, batches: Iterable[ProducerBatch]) -> None:
        """Apply written batches without checks (follower appends, replay; rule 3)."""
        producers = self._producers
        for batch in batches:
            pid = batch.producer_id
            entry = producers.get(pid)
            if entry is None:
                entry = ProducerStateEntry(pid, -1, ())
                self._evicted.pop(pid, None)
            producers[pid] = entry.with_batch(batch.producer_epoch, batch.metadata())

    # ------------------------------------------------------------------ log changes

    def truncate_head(self, log_start_offset: int) -> None:
        """Drop batch metadata below the log start offset; entries left empty are removed
        and remembered as evicted (rule 1, rule 2e)."""
        for pid, entry in list(self._producers.items()):
            if entry.batches[0].last_offset >= log_start_offset:
                continue
            kept = tuple(m for m in entry.batches if m.last_offset >= log_start_offset)
            if kept:
                self._producers[pid] = ProducerStateEntry(pid, entry.producer_epoch, kept)
            else:
                del self._producers[pid]
                self._evicted[pid] = None
                self._evicted.move_to_end(pid)
                while len(self._evicted) > self._max_evicted:
                    self._evicted.popitem(last=False)

    def remove_expired(self, now_ms: int, producer_id_expiration_ms: int) -> int:
        """Remove the entries expired at ``now_ms`` (rule 5); returns how many. Expired ids
        are not remembered as evicted (their next batch is accepted with any sequence)."""
        expired = [
            pid
            for pid, entry in self._producers.items()
            if entry.is_expired(now_ms, producer_id_expiration_ms)
        ]
        for pid in expired:
            del self._producers[pid]
        return len(expired)

    def needs_reload_after_truncation(self, log_end_offset: int) -> bool:
        """Did a truncation to ``log_end_offset`` remove any producer's batch? Each entry
        holds its producer's latest batch, so it did iff some entry ends at or above it."""
        return any(e.last_offset >= log_end_offset for e in self._producers.values())

    def clear(self) -> None:
        self._producers.clear()

    # ------------------------------------------------------------------ snapshots

    def snapshot_offsets(self) -> list[int]:
        """Offsets of the snapshot files present, ascending."""
        offsets = []
        for p in self.directory.iterdir():
            stem = p.name[: -len(SNAPSHOT_SUFFIX)]
            if p.name.endswith(SNAPSHOT_SUFFIX) and stem.isdigit():
                offsets.append(int(stem))
        return sorted(offsets)

    def snapshot_path(self, offset: int) -> Path:
        return self.directory / snapshot_file_name(offset)

    def take_snapshot(self, end_offset: int, *, durable: bool = True) -> Path:
        """Write the current state as ``<end_offset>.snapshot`` (tmp + fsync + rename).

        The caller guarantees the state covers exactly the batches below ``end_offset`` and
        fsyncs the directory later (the rename's durability is not needed for correctness:
        a missing snapshot only means a longer replay). ``durable=False`` skips the file's
        fsync as well: a snapshot torn by a power loss fails its CRC-32C at the next open and
        is deleted, which again only means a longer replay (used at close, where fsyncing a
        snapshot per partition made a broker with 1,000 partitions take seconds to stop).
        """
        path = self.snapshot_path(end_offset)
        tmp = path.with_name(path.name + _TMP_SUFFIX)
        data = encode_snapshot(end_offset, self._producers.values())
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            if durable:
                os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
        return path

    def load_latest_snapshot(self, *, min_offset: int, max_offset: int) -> int | None:
        """Replace the state by the newest sound snapshot with offset in
        ``[min_offset, max_offset]``; returns its offset, or None (state cleared).

        Snapshots that fail their checks are deleted (Kafka does the same).
        """
        self._producers.clear()
        for offset in reversed(self.snapshot_offsets()):
            if offset > max_offset:
                continue
            if offset < min_offset:
                break
            path = self.snapshot_path(offset)
            try:
                end_offset, producers = decode_snapshot(path.read_bytes())
                if end_offset != offset:
                    raise CorruptSnapshotError(f"names offset {offset} but holds {end_offset}")
            except (CorruptSnapshotError, OSError) as exc:
                logger.warning("ignoring producer snapshot %s: %s", path, exc)
                path.unlink(missing_ok=True)
                continue
            self._producers = producers
            return offset
        return None

    def delete_snapshots(self, *, below: int | None = None, above: int | None = None) -> int:
        """Delete snapshot files with offset < ``below`` or > ``above``; returns how many."""
        deleted = 0
        for offset in self.snapshot_offsets():
            if (below is not None and offset < below) or (above is not None and offset > above):
                self.snapshot_path(offset).unlink(missing_ok=True)
                deleted += 1
        return deleted


__all__ = [
    "DEFAULT_PRODUCER_ID_EXPIRATION_MS",
    "MAX_BATCHES_TO_RETAIN",
    "SNAPSHOT_SUFFIX",
    "BatchMetadata",
    "CorruptSnapshotError",
    "LeaderAppendCheck",
    "ProducerBatch",
    "ProducerStateEntry",
    "ProducerStateManager",
    "decode_snapshot",
    "decrement_sequence",
    "encode_snapshot",
    "in_sequence",
    "increment_sequence",
    "snapshot_file_name",
    "validate",
]
