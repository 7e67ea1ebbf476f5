"""Per-partition producer state: idempotence and transactions (Kafka's ProducerStateManager).

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
Transactional producers (KIP-98) add, per entry, the first offset of the producer's ongoing
transaction (``current_txn_first_offset``, -1: none), the coordinator epoch of its latest
marker (``coordinator_epoch``, -1: none) and that marker's offset and timestamp; the
partition adds the ongoing and not yet replicated transactions (``TxnTracker``,
``tidelog.storage.transactions``) that give the last stable offset.

Rules:
  1. The state is a pure function of the log: ``fold`` its batches in offset order with
     ``apply_batch`` (a data batch: ``ProducerStateEntry.with_batch``, where a new epoch
     clears the retained batches and at most five are kept, plus rule 6a; a marker: rule
     6b-c), then ``trim`` at the log start offset (``ProducerStateEntry.trimmed``): batch
     metadata below it is dropped; an entry with no batch, no marker at or above it and no
     ongoing transaction is removed (Kafka's ``isProducerRetained``); a marker below it is
     forgotten with its coordinator epoch. An ongoing transaction survives any trim (as in
     Kafka; the last stable offset counts it from the log start), and so does the epoch of
     an entry that stays; nothing else from below the log start does (an entry trimmed
     early may have been removed and made anew by a later batch: a later trim must give
     the same). Trimming commutes with folding, so the incremental state, a snapshot plus a
     replay, and a replay of the whole log all agree; that is what makes the state after an
     unclean stop equal to the state of a clean run. Except for ongoing transactions this
     depends only on the batches in ``[log_start_offset, log_end_offset)``; what an ongoing
     transaction that started in an already deleted segment needs comes from the snapshot
     at the first segment's base (rule 4), which is kept with that segment.
  2. Leader appends are checked batch by batch against the state (``validate``), in this
     order (Kafka's ``UnifiedLog.analyzeAndValidateProducerState`` + ``ProducerAppendInfo``):
       a. same epoch, same first and last sequence as a retained batch -> DUPLICATE: the
          append writes nothing and answers with that batch's ORIGINAL offsets;
       b. epoch older than the entry's -> INVALID_PRODUCER_EPOCH (47) (fencing);
       c. epoch newer than the entry's -> the sequence must be 0, else
          OUT_OF_ORDER_SEQUENCE_NUMBER (45);
       d. same epoch -> the sequence must follow the last one (``in_sequence``), else 45 —
          this includes a retry of a batch older than the five retained; an entry without
          retained batches (a marker of a new epoch cleared them, rule 6c) has last
          sequence -1, so the next batch must have sequence 0;
       e. unknown producer id -> accepted with any sequence (Kafka >= 2.5, KIP-360), EXCEPT
          when this broker itself removed the producer's state because the log start offset
          passed its last batch (retention / DeleteRecords): then UNKNOWN_PRODUCER_ID (59)
          for a non-zero sequence, which tells the client (librdkafka, the Java client) to
          bump its epoch / reset its sequences rather than treating the gap as data loss.
          See docs/idempotence.md for why.
       f. a non-transactional data batch while the producer has an ongoing transaction ->
          INVALID_TXN_STATE (48);
       g. an entry left without batches by the log start (kept only by its marker or its
          ongoing transaction) cannot check a same-epoch sequence: while this broker
          remembers evicting the producer's batches, a non-zero sequence gets
          UNKNOWN_PRODUCER_ID as in 2e; otherwise an entry with a marker expects sequence 0
          (2d) and one with only an ongoing transaction accepts any sequence (as for an
          unknown producer, 2e; Kafka would have dropped the entry at its next reload).
  3. Follower appends and replays from disk apply batches unchecked (Kafka's
     ``AppendOrigin.Replication``): the leader already validated them. Markers too, with
     the same effects as on the leader (rule 6).
  4. Snapshots: ``<20-digit offset>.snapshot`` holds the state of every batch below that
     offset (binary, versioned, CRC-32C; written tmp + fsync + rename): the entries with
     their transaction fields, the not yet replicated transactions and the newest marker's
     offset (version 2). Version-1 snapshots (written before transactions) still load:
     no ongoing transaction, coordinator epochs -1. A snapshot that fails its checks is
     deleted and an older one (or the log itself) is used instead.
  5. Expiration (Kafka's ``producer.id.expiration.ms``, default 86400000 = 24 h; KIP-98):
     an entry WITHOUT an ongoing transaction whose newest batch or marker has a timestamp
     at least that old (``now_ms - timestamp >= producer_id_expiration_ms``, Kafka's
     ``isProducerExpired``) is removed by ``remove_expired`` — periodically, on leaders and
     followers alike (it depends only on the replicated batches and the clock), and after
     every rebuild from snapshot + replay so a restart does not bring expired producers
     back. Later snapshots simply no longer hold them. Rule 1 then reads "a pure function of
     the batches in the log and of the time of the last expiry check". An expired producer
     is NOT remembered as evicted: its next batch is accepted with any sequence (rule 2e;
     Kafka >= 2.5 answers neither UNKNOWN_PRODUCER_ID nor OUT_OF_ORDER_SEQUENCE_NUMBER
     there: ``ProducerAppendInfo.checkSequence`` accepts any sequence when there is no
     current producer epoch). A retry of a batch older than the expiration is therefore no
     longer recognised — the reason the default is a whole day.
  6. Transactions (KIP-98; Kafka's ``ProducerAppendInfo.appendDataBatch`` and
     ``appendEndTxnMarker``):
       a. a transactional data batch (attributes bit 4) from a producer with no ongoing
          transaction starts one at its base offset (``current_txn_first_offset``);
       b. a COMMIT or ABORT marker (a control batch with a producer id,
          ``tidelog.storage.transactions``) ends the producer's ongoing transaction, if
          any: it becomes completed (producer id, first offset, last offset = the marker's
          offset) and stays in the last stable offset until the high watermark passes the
          marker (Kafka's ``unreplicatedTxns``); an ABORT also yields an ``AbortedTxn``
          (producer id, first offset, marker offset, last stable offset = the first offset
          of the earliest transaction still ongoing after this one ended, or the marker
          offset + 1 when none is), which the log writes to the ``.txnindex`` of the segment
          holding the marker (``tidelog.storage.txn_index``). A marker with no ongoing
          transaction ends nothing and indexes nothing (Kafka does the same);
       c. every marker sets the entry's epoch (another epoch clears the retained batches, as
          for a data batch), its coordinator epoch and its last marker offset and timestamp.
  7. Leader checks of a marker, in Kafka's order: producer epoch below the entry's ->
     INVALID_PRODUCER_EPOCH (47); coordinator epoch below the entry's ->
     TRANSACTION_COORDINATOR_FENCED (52). Markers carry no sequence (base sequence -1) and
     are never duplicates; an unknown producer's marker is accepted.
  8. A truncation that cuts a producer's batch, a marker (``TxnTracker.last_marker_offset``
     notices it even when the producer expired) or the start of an ongoing transaction
     reloads the state from a snapshot at or below the new log end plus a replay, which is
     what the state of the shorter log is (rule 1): a transaction whose marker was cut is
     ongoing again.
  9. Appends by the broker's own coordinators (``AppendOrigin.COORDINATOR``, Kafka's
     ``AppendOrigin.Coordinator``; e.g. the transactional offset-commit batches the group
     coordinator writes for a producer) skip duplicate detection and the sequence checks
     (2a, 2c-2e, 2g; a base sequence of -1 is fine): only the epoch (2b), the transaction
     state (2f) and, for markers, rule 7 apply. Their batches then enter the state like
     any other (rule 1).

Batches without a producer id (-1) never reach this module (nor do control batches without
one); a plain data append pays one header field comparison for all of this.
"""

from __future__ import annotations

import enum
import logging
import os
import struct
from collections import OrderedDict
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from types import MappingProxyType
from typing import Final, NamedTuple

import crc32c

from tidelog.errors import ErrorCode
from tidelog.storage.transactions import EndTxnMarker, TxnTracker
from tidelog.storage.txn_index import AbortedTxn

logger = logging.getLogger(__name__)

#: Retained batch metadata per producer (Kafka's ProducerStateEntry.NumBatchesToRetain).
MAX_BATCHES_TO_RETAIN: Final = 5
INT32_MAX: Final = 2**31 - 1
NO_SEQUENCE: Final = -1
SNAPSHOT_SUFFIX: Final = ".snapshot"
#: 2: transactions (rule 4); version 1 files still load.
SNAPSHOT_VERSION: Final = 2
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
#: version 2, after _SNAP_ENTRY: current txn first offset, coordinator epoch, last marker
#: offset, last marker timestamp
_SNAP_ENTRY_TXN: Final = struct.Struct(">qiqq")
#: first seq, last seq, first offset, last offset, timestamp
_SNAP_BATCH: Final = struct.Struct(">iiqqq")
#: version 2, after the entries: last marker offset, unreplicated transaction count
_SNAP_TAIL: Final = struct.Struct(">qi")
#: version 2: marker offset, first offset of one unreplicated transaction
_SNAP_UNREPLICATED: Final = struct.Struct(">qq")
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


class BatchMetadata(NamedTuple):
    """What is remembered of one appended batch (Kafka's BatchMetadata). A NamedTuple, as
    ``ProducerStateEntry``: one is made per idempotent batch."""

    first_seq: int
    last_seq: int
    first_offset: int
    last_offset: int
    timestamp: int


class ProducerStateEntry(NamedTuple):
    """One producer's state: its epoch and its last (up to five) batches of that epoch,
    oldest first, plus its transaction fields (rule 6). While in a ProducerStateManager it
    has a retained batch, a marker or an ongoing transaction (rule 1). Immutable; a
    NamedTuple because one is made per idempotent batch (a frozen dataclass of these seven
    fields cost twice as much to build)."""

    producer_id: int
    producer_epoch: int
    batches: tuple[BatchMetadata, ...]
    #: First offset of the ongoing transaction (Kafka's currentTxnFirstOffset), -1: none.
    current_txn_first_offset: int = -1
    #: Coordinator epoch of the newest marker still at or above the log start, -1: none.
    coordinator_epoch: int = -1
    #: Offset and (max) timestamp of that marker, -1: none.
    last_marker_offset: int = -1
    last_marker_timestamp: int = -1

    @property
    def last_seq(self) -> int:
        return self.batches[-1].last_seq if self.batches else NO_SEQUENCE

    @property
    def last_offset(self) -> int:
        """Offset of the newest retained batch or marker, -1 if none."""
        last = self.batches[-1].last_offset if self.batches else -1
        return max(last, self.last_marker_offset)

    @property
    def last_timestamp(self) -> int:
        """Max timestamp of the newest batch or marker (Kafka's ``lastTimestamp``), -1 if
        none."""
        if self.batches and self.batches[-1].last_offset > self.last_marker_offset:
            return self.batches[-1].timestamp
        return self.last_marker_timestamp

    @property
    def has_ongoing_txn(self) -> bool:
        return self.current_txn_first_offset >= 0

    def is_expired(self, now_ms: int, producer_id_expiration_ms: int) -> bool:
        """Rule 5 (Kafka's ``ProducerStateManager.isProducerExpired``: no ongoing
        transaction, newest timestamp old enough)."""
        return (
            self.current_txn_first_offset < 0
            and now_ms - self.last_timestamp >= producer_id_expiration_ms
        )

    def find_duplicate(self, epoch: int, first_seq: int, last_seq: int) -> BatchMetadata | None:
        """The retained batch with exactly this epoch and sequence range (Kafka's
        ``findDuplicateBatch``), or None."""
        if epoch != self.producer_epoch:
            return None
        for meta in self.batches:
            if meta.first_seq == first_seq and meta.last_seq == last_seq:
                return meta
        return None

    def with_batch(
        self, epoch: int, meta: BatchMetadata, *, transactional: bool = False
    ) -> ProducerStateEntry:
        """The entry after appending data batch ``meta`` with ``epoch`` (rule 1): another
        epoch clears the retained batches; only the newest five are kept. A transactional
        batch starts a transaction unless one is ongoing (rule 6a); the ongoing one
        survives an epoch change (only a marker ends it, as in Kafka)."""
        kept = self.batches if epoch == self.producer_epoch else ()
        if len(kept) >= MAX_BATCHES_TO_RETAIN:
            kept = kept[len(kept) - MAX_BATCHES_TO_RETAIN + 1 :]
        txn_first = self.current_txn_first_offset
        if transactional and txn_first < 0:
            txn_first = meta.first_offset
        return ProducerStateEntry(
            self.producer_id,
            epoch,
            (*kept, meta),
            txn_first,
            self.coordinator_epoch,
            self.last_marker_offset,
            self.last_marker_timestamp,
        )

    def with_marker(
        self, epoch: int, offset: int, timestamp: int, coordinator_epoch: int
    ) -> ProducerStateEntry:
        """The entry after a marker at ``offset`` (rule 6b-c): no ongoing transaction; the
        marker's epoch (another one clears the retained batches) and coordinator epoch."""
        kept = self.batches if epoch == self.producer_epoch else ()
        return ProducerStateEntry(
            self.producer_id, epoch, kept, -1, coordinator_epoch, offset, timestamp
        )

    def trimmed(self, log_start_offset: int) -> ProducerStateEntry | None:
        """Rule 1's trim at the log start offset: the same entry, a smaller one, or None
        (removed). Only what lies at or above the log start survives, plus an ongoing
        transaction and the epoch of a surviving entry: anything else taken from below
        would differ between a state trimmed early (whose entry was removed, then made
        anew by a later batch) and one trimmed late."""
        batches = self.batches
        marker = self.last_marker_offset
        marker_kept = marker >= log_start_offset
        if (not batches or batches[0].last_offset >= log_start_offset) and (
            marker_kept or marker < 0
        ):
            if batches or marker_kept or self.current_txn_first_offset >= 0:
                return self  # nothing below the log start (the common case)
            return None
        kept = tuple(m for m in batches if m.last_offset >= log_start_offset)
        if not kept and not marker_kept and self.current_txn_first_offset < 0:
            return None
        if marker_kept:
            return ProducerStateEntry(
                self.producer_id,
                self.producer_epoch,
                kept,
                self.current_txn_first_offset,
                self.coordinator_epoch,
                marker,
                self.last_marker_timestamp,
            )
        # The marker is gone: so is what it set (a replay from the log start would not see
        # it either; rule 1).
        return ProducerStateEntry(
            self.producer_id, self.producer_epoch, kept, self.current_txn_first_offset
        )


class ProducerBatch(NamedTuple):
    """The header fields of one written (or to-be-written) batch that the state needs.

    ``marker`` is None for a data batch, else what its transaction marker says (the batch
    is then a control batch: one record, offset ``first_offset == last_offset``)."""

    producer_id: int
    producer_epoch: int
    base_sequence: int
    first_offset: int
    last_offset: int
    max_timestamp: int
    is_transactional: bool = False
    marker: EndTxnMarker | None = None

    def metadata(self) -> BatchMetadata:
        last_seq = increment_sequence(self.base_sequence, self.last_offset - self.first_offset)
        return BatchMetadata(
            self.base_sequence, last_seq, self.first_offset, self.last_offset, self.max_timestamp
        )


class TxnEvent(NamedTuple):
    """What one batch did to the partition's transactions: a start (``marker_offset`` -1)
    or a marker (``first_offset`` -1 when the producer had no ongoing transaction)."""

    producer_id: int
    first_offset: int
    marker_offset: int
    commit: bool


def apply_batch(
    entry: ProducerStateEntry | None, batch: ProducerBatch
) -> tuple[ProducerStateEntry, TxnEvent | None]:
    """Fold one batch into its producer's entry (rules 1 and 6), unchecked."""
    if entry is None:
        entry = ProducerStateEntry(batch.producer_id, -1, ())
    marker = batch.marker
    if marker is None:
        updated = entry.with_batch(
            batch.producer_epoch, batch.metadata(), transactional=batch.is_transactional
        )
        if updated.current_txn_first_offset != entry.current_txn_first_offset:
            return updated, TxnEvent(batch.producer_id, batch.first_offset, -1, False)
        return updated, None
    event = TxnEvent(
        batch.producer_id, entry.current_txn_first_offset, batch.last_offset, marker.commit
    )
    updated = entry.with_marker(
        batch.producer_epoch, batch.last_offset, batch.max_timestamp, marker.coordinator_epoch
    )
    return updated, event


class AppendOrigin(enum.Enum):
    """Who wrote a leader append (Kafka's ``AppendOrigin``; rule 9)."""

    #: A producer's Produce request: every check of rules 2 and 7.
    CLIENT = "client"
    #: The broker's own coordinators (e.g. the group coordinator's TxnOffsetCommit batches
    #: of a transactional producer): no duplicate or sequence check.
    COORDINATOR = "coordinator"


def validate(
    entry: ProducerStateEntry | None,
    batch: ProducerBatch,
    *,
    evicted_by_retention: bool = False,
    origin: AppendOrigin = AppendOrigin.CLIENT,
) -> tuple[ErrorCode, str | None]:
    """Rules 2b-2g, 7 and 9 for one leader batch against its producer's current entry.

    Returns ``(ErrorCode.NONE, None)`` when the batch may be appended, else the error and a
    message for the log. Duplicates (rule 2a) are found separately with ``find_duplicate``.
    """
    epoch = batch.producer_epoch
    pid = batch.producer_id
    marker = batch.marker
    if marker is not None:
        if entry is None:
            return ErrorCode.NONE, None
        if epoch < entry.producer_epoch:
            return ErrorCode.INVALID_PRODUCER_EPOCH, (
                f"marker of producer {pid} has epoch {epoch}, older than the current epoch "
                f"{entry.producer_epoch}"
            )
        if marker.coordinator_epoch < entry.coordinator_epoch:
            return ErrorCode.TRANSACTION_COORDINATOR_FENCED, (
                f"marker of producer {pid} has coordinator epoch {marker.coordinator_epoch}, "
                f"older than {entry.coordinator_epoch}"
            )
        return ErrorCode.NONE, None
    if origin is AppendOrigin.COORDINATOR:
        return _validate_coordinator_batch(entry, batch)
    first_seq = batch.base_sequence
    if first_seq < 0:
        # Kafka's LogValidator: an idempotent batch must carry a sequence.
        return ErrorCode.INVALID_RECORD, (
            f"invalid sequence number {first_seq} in a batch with producer id {pid}"
        )
    if entry is None:
        if first_seq != 0 and evicted_by_retention:
            return _unknown_producer(pid, first_seq)
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
    elif not entry.batches and (entry.last_marker_offset < 0 or evicted_by_retention):
        # Rule 2g: the log start passed the producer's batches; its sequence is unknown.
        if first_seq != 0 and evicted_by_retention:
            return _unknown_producer(pid, first_seq)
    elif not in_sequence(entry.last_seq, first_seq):
        return ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER, (
            f"producer {pid} epoch {epoch}: sequence {first_seq} does not follow {entry.last_seq}"
        )
    if not batch.is_transactional and entry.current_txn_first_offset >= 0:
        return ErrorCode.INVALID_TXN_STATE, (
            f"non-transactional batch of producer {pid} while its transaction from offset "
            f"{entry.current_txn_first_offset} is ongoing"
        )
    return ErrorCode.NONE, None


def _validate_coordinator_batch(
    entry: ProducerStateEntry | None, batch: ProducerBatch
) -> tuple[ErrorCode, str | None]:
    """Rule 9: a coordinator's data batch is checked for its epoch and transaction only."""
    if entry is None:
        return ErrorCode.NONE, None
    pid = batch.producer_id
    if batch.producer_epoch < entry.producer_epoch:
        return ErrorCode.INVALID_PRODUCER_EPOCH, (
            f"producer {pid} epoch {batch.producer_epoch} is older than the current epoch "
            f"{entry.producer_epoch}"
        )
    if not batch.is_transactional and entry.current_txn_first_offset >= 0:
        return ErrorCode.INVALID_TXN_STATE, (
            f"non-transactional batch of producer {pid} while its transaction from offset "
            f"{entry.current_txn_first_offset} is ongoing"
        )
    return ErrorCode.NONE, None


def _unknown_producer(pid: int, first_seq: int) -> tuple[ErrorCode, str]:
    return ErrorCode.UNKNOWN_PRODUCER_ID, (
        f"no batch of producer id {pid} left: the last one was removed by retention; "
        f"sequence {first_seq} cannot be checked"
    )


_NO_UPDATES: Final[Mapping[int, ProducerStateEntry]] = MappingProxyType({})


class LeaderAppendCheck(NamedTuple):
    """Outcome of ``ProducerStateManager.check_leader_append`` (one per idempotent append).

    Exactly one of: ``duplicate`` set (write nothing, answer with its offsets); ``error`` not
    NONE (write nothing, answer with the error); otherwise ``updates`` and ``txn_events``
    are what to ``commit`` once the batches are written.
    """

    error: ErrorCode = ErrorCode.NONE
    message: str | None = None
    duplicate: BatchMetadata | None = None
    updates: Mapping[int, ProducerStateEntry] = _NO_UPDATES
    txn_events: tuple[TxnEvent, ...] = ()


class CorruptSnapshotError(Exception):
    """A snapshot file failed its checks (local fault; the snapshot is discarded)."""


class ProducerSnapshot(NamedTuple):
    """A decoded snapshot file (rule 4)."""

    end_offset: int
    producers: dict[int, ProducerStateEntry]
    #: (marker offset, first offset) of the transactions not yet known to be replicated.
    unreplicated: tuple[tuple[int, int], ...]
    last_marker_offset: int


def snapshot_file_name(offset: int) -> str:
    return f"{offset:020d}{SNAPSHOT_SUFFIX}"


def encode_snapshot(
    end_offset: int,
    producers: Iterable[ProducerStateEntry],
    *,
    unreplicated: Iterable[tuple[int, int]] = (),
    last_marker_offset: int = -1,
) -> bytes:
    """The snapshot file format (rule 4), version 2::

    "TLPS" | version int16 | crc32c uint32 of the rest
    end_offset int64 | entry count int32
    per entry: producer_id int64 | epoch int16 | batch count uint8
               | current_txn_first_offset int64 | coordinator_epoch int32
               | last_marker_offset int64 | last_marker_timestamp int64
               per batch: first_seq int32 | last_seq int32 | first_offset int64
                          | last_offset int64 | timestamp int64
    last_marker_offset int64 | unreplicated count int32
    per unreplicated transaction: marker_offset int64 | first_offset int64

    Version 1 is the same without the transaction fields and without the tail.
    """
    entries = list(producers)
    pending = list(unreplicated)
    parts = [_SNAP_BODY_HEAD.pack(end_offset, len(entries))]
    for entry in entries:
        parts.append(_SNAP_ENTRY.pack(entry.producer_id, entry.producer_epoch, len(entry.batches)))
        parts.append(
            _SNAP_ENTRY_TXN.pack(
                entry.current_txn_first_offset,
                entry.coordinator_epoch,
                entry.last_marker_offset,
                entry.last_marker_timestamp,
            )
        )
        for m in entry.batches:
            parts.append(
                _SNAP_BATCH.pack(
                    m.first_seq, m.last_seq, m.first_offset, m.last_offset, m.timestamp
                )
            )
    parts.append(_SNAP_TAIL.pack(last_marker_offset, len(pending)))
    for marker_offset, first_offset in pending:
        parts.append(_SNAP_UNREPLICATED.pack(marker_offset, first_offset))
    body = b"".join(parts)
    return _SNAP_HEADER.pack(_SNAPSHOT_MAGIC, SNAPSHOT_VERSION, crc32c.crc32c(body)) + body


def decode_snapshot(data: bytes) -> tuple[int, dict[int, ProducerStateEntry]]:
    """``(end_offset, producers)`` of a snapshot; CorruptSnapshotError on any defect."""
    snapshot = decode_snapshot_file(data)
    return snapshot.end_offset, snapshot.producers


def decode_snapshot_file(data: bytes) -> ProducerSnapshot:
    """Everything in a snapshot (version 1 or 2); CorruptSnapshotError on any defect."""
    if len(data) < _SNAP_HEADER.size + _SNAP_BODY_HEAD.size:
        raise CorruptSnapshotError(f"{len(data)} bytes is too short for a snapshot")
    magic, version, crc = _SNAP_HEADER.unpack_from(data, 0)
    if magic != _SNAPSHOT_MAGIC:
        raise CorruptSnapshotError(f"bad magic {magic!r}")
    if version not in (1, SNAPSHOT_VERSION):
        raise CorruptSnapshotError(f"unsupported snapshot version {version}")
    body = memoryview(data)[_SNAP_HEADER.size :]
    if crc32c.crc32c(body) != crc:
        raise CorruptSnapshotError("CRC-32C mismatch")
    has_txns = version >= 2
    unreplicated: list[tuple[int, int]] = []
    last_marker_offset = -1
    try:
        end_offset, count = _SNAP_BODY_HEAD.unpack_from(body, 0)
        pos = _SNAP_BODY_HEAD.size
        producers: dict[int, ProducerStateEntry] = {}
        for _ in range(count):
            pid, epoch, n = _SNAP_ENTRY.unpack_from(body, pos)
            pos += _SNAP_ENTRY.size
            txn_first, coordinator_epoch, marker, marker_ts = -1, -1, -1, -1
            if has_txns:
                txn_first, coordinator_epoch, marker, marker_ts = _SNAP_ENTRY_TXN.unpack_from(
                    body, pos
                )
                pos += _SNAP_ENTRY_TXN.size
            batches = []
            for _ in range(n):
                batches.append(BatchMetadata(*_SNAP_BATCH.unpack_from(body, pos)))
                pos += _SNAP_BATCH.size
            # Never empty (rule 1): a batch, a marker or an ongoing transaction.
            if (
                n > MAX_BATCHES_TO_RETAIN
                or (n == 0 and marker < 0 and txn_first < 0)
                or pid < 0
                or pid in producers
                or txn_first < -1
                or marker < -1
            ):
                raise CorruptSnapshotError(f"bad entry for producer id {pid}")
            producers[pid] = ProducerStateEntry(
                pid, epoch, tuple(batches), txn_first, coordinator_epoch, marker, marker_ts
            )
        if has_txns:
            last_marker_offset, pending = _SNAP_TAIL.unpack_from(body, pos)
            pos += _SNAP_TAIL.size
            for _ in range(pending):
                unreplicated.append(_SNAP_UNREPLICATED.unpack_from(body, pos))
                pos += _SNAP_UNREPLICATED.size
    except struct.error as exc:
        raise CorruptSnapshotError(f"truncated: {exc}") from exc
    if pos != len(body):
        raise CorruptSnapshotError(f"{len(body) - pos} trailing bytes")
    return ProducerSnapshot(end_offset, producers, tuple(unreplicated), last_marker_offset)


class ProducerStateManager:
    """The producer state of one partition plus its snapshot files (rules 1-8).

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
        #: Ongoing / unreplicated transactions, derived from the entries (rule 6).
        self._txns = TxnTracker()

    # ------------------------------------------------------------------ queries

    @property
    def producers(self) -> Mapping[int, ProducerStateEntry]:
        """Read-only view: producer id -> entry."""
        return MappingProxyType(self._producers)

    def last_entry(self, producer_id: int) -> ProducerStateEntry | None:
        return self._producers.get(producer_id)

    def was_evicted(self, producer_id: int) -> bool:
        return producer_id in self._evicted

    @property
    def ongoing_txns(self) -> Mapping[int, int]:
        """Read-only: first offset -> producer id of every ongoing transaction, ascending."""
        return self._txns.ongoing

    @property
    def unreplicated_txns(self) -> tuple[tuple[int, int], ...]:
        """``(marker offset, first offset)`` of completed transactions still counted by the
        last stable offset (reduced to what can matter, ``TxnTracker`` invariant 2)."""
        return self._txns.unreplicated

    @property
    def last_marker_offset(self) -> int:
        return self._txns.last_marker_offset

    def first_unstable_offset(self) -> int | None:
        """Smallest first offset of an ongoing or not yet replicated transaction."""
        return self._txns.first_unstable_offset()

    def last_stable_offset(self, high_watermark: int, log_start_offset: int) -> int:
        """KIP-98's last stable offset (``TxnTracker.last_stable_offset``)."""
        return self._txns.last_stable_offset(high_watermark, log_start_offset)

    def on_high_watermark(self, high_watermark: int) -> None:
        self._txns.on_high_watermark(high_watermark)

    # ------------------------------------------------------------------ appends

    def check_leader_append(
        self, batches: Sequence[ProducerBatch], *, origin: AppendOrigin = AppendOrigin.CLIENT
    ) -> LeaderAppendCheck:
        """Rules 2, 7 and 9 for every batch of one leader append (offsets assigned).

        Duplicates are looked up in the committed state only (as Kafka does); sequence,
        epoch and transaction checks see the earlier batches of the same append.
        """
        updates: dict[int, ProducerStateEntry] = {}
        events: list[TxnEvent] = []
        client = origin is AppendOrigin.CLIENT
        for batch in batches:
            pid = batch.producer_id
            committed = self._producers.get(pid)
            if (
                client
                and committed is not None
                and batch.base_sequence >= 0
                and batch.marker is None
            ):
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
                evicted_by_retention=pid in self._evicted and pid not in updates,
                origin=origin,
            )
            if error is not ErrorCode.NONE:
                return LeaderAppendCheck(error=error, message=message)
            updates[pid], event = apply_batch(current, batch)
            if event is not None:
                events.append(event)
        return LeaderAppendCheck(updates=updates, txn_events=tuple(events))

    def commit(
        self, updates: Mapping[int, ProducerStateEntry], txn_events: Sequence[TxnEvent] = ()
    ) -> list[AbortedTxn]:
        """Install the outcome of a successful ``check_leader_append`` after the write;
        returns the aborted transactions to index (rule 6b), in marker order."""
        self._producers.update(updates)
        if self._evicted:
            for pid in updates:
                self._evicted.pop(pid, None)
        aborted: list[AbortedTxn] = []
        for event in txn_events:
            self._apply_event(event, aborted)
        return aborted

    def update(self, batches: Iterable[ProducerBatch]) -> list[AbortedTxn]:
        """Apply written batches without checks (follower appends, replay; rule 3); returns
        the aborted transactions to index (rule 6b), in marker order."""
        producers = self._producers
        evicted = self._evicted
        aborted: list[AbortedTxn] = []
        for batch in batches:
            pid = batch.producer_id
            if evicted:
                evicted.pop(pid, None)
            producers[pid], event = apply_batch(producers.get(pid), batch)
            if event is not None:
                self._apply_event(event, aborted)
        return aborted

    def _apply_event(self, event: TxnEvent, aborted: list[AbortedTxn]) -> None:
        if event.marker_offset < 0:
            self._txns.start(event.producer_id, event.first_offset)
            return
        txn = self._txns.end(
            event.producer_id, event.first_offset, event.marker_offset, event.commit
        )
        if txn is not None:
            aborted.append(txn)

    # ------------------------------------------------------------------ log changes

    def truncate_head(self, log_start_offset: int) -> None:
        """Trim every entry at the log start offset (rule 1); a producer left without any
        batch (entry removed, or kept only by its marker or ongoing transaction) is
        remembered as evicted (rules 2e, 2g)."""
        self._txns.on_log_start(log_start_offset)
        for pid, entry in list(self._producers.items()):
            trimmed = entry.trimmed(log_start_offset)
            if trimmed is entry:
                continue
            if trimmed is not None:
                self._producers[pid] = trimmed
                if trimmed.batches or not entry.batches:
                    continue
            else:
                del self._producers[pid]
            self._evicted[pid] = None
            self._evicted.move_to_end(pid)
            while len(self._evicted) > self._max_evicted:
                self._evicted.popitem(last=False)

    def remove_expired(self, now_ms: int, producer_id_expiration_ms: int) -> int:
        """Remove the entries expired at ``now_ms`` (rule 5; never one with an ongoing
        transaction); returns how many. Expired ids are not remembered as evicted (their
        next batch is accepted with any sequence)."""
        expired = [
            pid
            for pid, entry in self._producers.items()
            if entry.is_expired(now_ms, producer_id_expiration_ms)
        ]
        for pid in expired:
            del self._producers[pid]
        return len(expired)

    def needs_reload_after_truncation(self, log_end_offset: int) -> bool:
        """Did a truncation to ``log_end_offset`` remove a producer's batch, a marker or
        the start of an ongoing transaction (rule 8)? Each entry holds its producer's
        newest batch or marker (a transaction's start is at or below its newest batch), and
        the tracker the newest marker of all, so it did iff one of them is at or above it."""
        if self._txns.last_marker_offset >= log_end_offset:
            return True
        return any(e.last_offset >= log_end_offset for e in self._producers.values())

    def clear(self) -> None:
        self._producers.clear()
        self._txns.clear()

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
        data = encode_snapshot(
            end_offset,
            self._producers.values(),
            unreplicated=self._txns.unreplicated,
            last_marker_offset=self._txns.last_marker_offset,
        )
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
        self.clear()
        for offset in reversed(self.snapshot_offsets()):
            if offset > max_offset:
                continue
            if offset < min_offset:
                break
            path = self.snapshot_path(offset)
            try:
                snapshot = decode_snapshot_file(path.read_bytes())
                if snapshot.end_offset != offset:
                    raise CorruptSnapshotError(
                        f"names offset {offset} but holds {snapshot.end_offset}"
                    )
            except (CorruptSnapshotError, OSError) as exc:
                logger.warning("ignoring producer snapshot %s: %s", path, exc)
                path.unlink(missing_ok=True)
                continue
            self._producers = snapshot.producers
            self._txns.load(
                (
                    (e.current_txn_first_offset, pid)
                    for pid, e in snapshot.producers.items()
                    if e.current_txn_first_offset >= 0
                ),
                snapshot.unreplicated,
                snapshot.last_marker_offset,
            )
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
    "SNAPSHOT_VERSION",
    "AppendOrigin",
    "BatchMetadata",
    "CorruptSnapshotError",
    "LeaderAppendCheck",
    "ProducerBatch",
    "ProducerSnapshot",
    "ProducerStateEntry",
    "ProducerStateManager",
    "TxnEvent",
    "apply_batch",
    "decode_snapshot",
    "decode_snapshot_file",
    "decrement_sequence",
    "encode_snapshot",
    "in_sequence",
    "increment_sequence",
    "snapshot_file_name",
    "validate",
]
