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

This module holds ``ProducerStateManager`` (the state of one partition and its snapshot
files); the entries with ``validate`` and ``apply_batch`` are
``tidelog.storage.producer_entry``, the snapshot format ``tidelog.storage.producer_snapshot``.
"""

from __future__ import annotations

import logging
import os
from collections import OrderedDict
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from types import MappingProxyType
from typing import Final

from tidelog.errors import ErrorCode
from tidelog.storage.checkpoints import fsync_directory
from tidelog.storage.producer_entry import (
    MAX_BATCHES_TO_RETAIN,
    AppendOrigin,
    BatchMetadata,
    LeaderAppendCheck,
    ProducerBatch,
    ProducerStateEntry,
    TxnEvent,
    apply_batch,
    decrement_sequence,
    in_sequence,
    increment_sequence,
    validate,
)
from tidelog.storage.producer_snapshot import (
    SNAPSHOT_SUFFIX,
    SNAPSHOT_VERSION,
    CorruptSnapshotError,
    ProducerSnapshot,
    decode_snapshot,
    decode_snapshot_file,
    encode_snapshot,
    snapshot_file_name,
)
from tidelog.storage.transactions import TxnTracker
from tidelog.storage.txn_index import AbortedTxn

logger = logging.getLogger(__name__)

#: How many producer ids evicted by the log start offset are remembered (rule 2e).
DEFAULT_MAX_EVICTED_REMEMBERED: Final = 10_000
#: Kafka's producer.id.expiration.ms default (rule 5).
DEFAULT_PRODUCER_ID_EXPIRATION_MS: Final = 86_400_000
_TMP_SUFFIX: Final = ".tmp"
#: Above every offset (``delete_snapshots(below=_EVERY_OFFSET)`` deletes them all).
_EVERY_OFFSET: Final = 2**63 - 1


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
        #: Snapshots written without fsync at a roll, for the next flush to fsync.
        self._unsynced: list[Path] = []

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

    def truncate_tail(self, log_end_offset: int) -> bool:
        """After its log was truncated to ``log_end_offset``: the snapshots beyond it are
        deleted, durably before new data can land below their offsets (a stale snapshot
        back after a crash would describe batches that no longer exist). True when the state
        must be rebuilt (``needs_reload_after_truncation``; a cheap check, never for a log
        without producers)."""
        if self.delete_snapshots(above=log_end_offset):
            fsync_directory(self.directory)
        return self.needs_reload_after_truncation(log_end_offset)

    def reset(self) -> None:
        """After its log was emptied: no producer, and no snapshot (deleted durably, as in
        ``truncate_tail``)."""
        self.clear()
        if self.delete_snapshots(below=_EVERY_OFFSET):
            fsync_directory(self.directory)

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

    def snapshot_at_close(self, end_offset: int, *, nothing_to_replay: bool) -> bool:
        """When its log closes: a snapshot at the log end, so a clean restart replays
        nothing, written without an fsync (the caller fsyncs the directory). None when one is
        there already (nothing appended since the last close or roll), nor for a log with
        ``nothing_to_replay`` and no producer. True when one was written."""
        if (nothing_to_replay and not self.producers) or end_offset in self.snapshot_offsets():
            return False
        self.take_snapshot(end_offset, durable=False)
        return True

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

    def take_snapshot_at_roll(self, end_offset: int) -> None:
        """Kafka's roll: the snapshot is written at once and fsynced later, in the
        background (``take_unsynced`` hands it to the log's next flush). Until then a power
        loss may tear or lose it, which fails its CRC-32C at the next open and only means a
        longer replay; on the append path the fsync held the event loop 4-60 ms under write
        load on the 2-CPU VM."""
        self._unsynced.append(self.take_snapshot(end_offset, durable=False))

    def take_unsynced(self) -> list[Path]:
        """The snapshots written at rolls since the last call, for the caller to fsync."""
        unsynced, self._unsynced = self._unsynced, []
        return unsynced

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
