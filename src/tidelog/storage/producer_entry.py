"""A producer's state entry and the rules that check and fold its batches into it
(``tidelog.storage.producer_state`` rules 1-3, 6, 7 and 9; Kafka's ``ProducerStateEntry``
and ``ProducerAppendInfo``): sequences, batch metadata, ``validate`` for a leader's append
and ``apply_batch`` for every batch that enters the state. Pure values, no IO.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from types import MappingProxyType
from typing import Final, NamedTuple

from tidelog.errors import ErrorCode
from tidelog.storage.transactions import EndTxnMarker

#: Retained batch metadata per producer (Kafka's ProducerStateEntry.NumBatchesToRetain).
MAX_BATCHES_TO_RETAIN: Final = 5
INT32_MAX: Final = 2**31 - 1
NO_SEQUENCE: Final = -1


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
    if batch.marker is not None:
        return _validate_marker(entry, batch)
    if origin is AppendOrigin.COORDINATOR:
        return _validate_coordinator_batch(entry, batch)
    pid, first_seq = batch.producer_id, batch.base_sequence
    if first_seq < 0:
        # Kafka's LogValidator: an idempotent batch must carry a sequence.
        return ErrorCode.INVALID_RECORD, (
            f"invalid sequence number {first_seq} in a batch with producer id {pid}"
        )
    if entry is None:
        if first_seq != 0 and evicted_by_retention:
            return _unknown_producer(pid, first_seq)
        return ErrorCode.NONE, None
    error, message = _validate_epoch_and_sequence(entry, batch, evicted_by_retention)
    if error is not ErrorCode.NONE:
        return error, message
    if not batch.is_transactional and entry.current_txn_first_offset >= 0:
        return ErrorCode.INVALID_TXN_STATE, (
            f"non-transactional batch of producer {pid} while its transaction from offset "
            f"{entry.current_txn_first_offset} is ongoing"
        )
    return ErrorCode.NONE, None


def _validate_marker(
    entry: ProducerStateEntry | None, batch: ProducerBatch
) -> tuple[ErrorCode, str | None]:
    """Rule 7: a transaction marker is fenced by an older producer or coordinator epoch."""
    marker = batch.marker
    assert marker is not None
    if entry is None:
        return ErrorCode.NONE, None
    pid, epoch = batch.producer_id, batch.producer_epoch
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


def _validate_epoch_and_sequence(
    entry: ProducerStateEntry, batch: ProducerBatch, evicted_by_retention: bool
) -> tuple[ErrorCode, str | None]:
    """Rules 2b-2g: the batch's epoch against the entry's, then its first sequence."""
    pid, epoch, first_seq = batch.producer_id, batch.producer_epoch, batch.base_sequence
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


__all__ = [
    "INT32_MAX",
    "MAX_BATCHES_TO_RETAIN",
    "NO_SEQUENCE",
    "AppendOrigin",
    "BatchMetadata",
    "LeaderAppendCheck",
    "ProducerBatch",
    "ProducerStateEntry",
    "TxnEvent",
    "apply_batch",
    "decrement_sequence",
    "in_sequence",
    "increment_sequence",
    "validate",
]
