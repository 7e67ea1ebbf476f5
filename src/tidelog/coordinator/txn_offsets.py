"""Transactional offset commits (KIP-98, KIP-447): offsets pending until their marker.

Theory of operation (Kafka's ``GroupMetadata.pendingTransactionalOffsetCommits`` and the
loader of ``GroupMetadataManager``). A transactional producer commits a consumer group's
offsets with TxnOffsetCommit: they are written to the group's ``__consumer_offsets``
partition as one *transactional* batch (attributes bit 4) carrying the producer id, and stay
*pending* there, invisible to OffsetFetch, until the transaction coordinator writes a control
batch (a marker, bit 5) for that producer id into the same partition:

1. Pending state is kept per producer id, per group, per partition; within a producer the
   latest TxnOffsetCommit of a partition wins (one transaction commits one offset per
   partition of a group).
2. A COMMIT marker moves every pending offset of the producer into the committed offsets,
   but a pending offset replaces the committed one only if its record lies *later in the log*
   (Kafka compares the offsets of the batches that hold the records, ``olderThan``): a plain
   OffsetCommit written after the transactional one wins even though the marker came later.
   An ABORT marker drops the producer's pending offsets.
3. Every committed and pending offset therefore carries the log offset of its batch
   (``LoggedOffset``); -1 means unknown (an offset committed without one counts as oldest).
4. Deleting an offset (OffsetDelete tombstone) or a group (DeleteGroups) drops the pending
   offsets written before it, so that what a broker holds in memory is what replaying the
   partition rebuilds (``PartitionReplay``, which applies the same rules in log order).
   Pending offsets left at the end of a replay belong to transactions still open: their
   marker comes later and is applied like a live one.

Control records (Kafka's ``ControlRecordType``): key ``version int16, type int16`` with type
0 = ABORT, 1 = COMMIT; other types are not transaction markers and are ignored here.
Pure: no IO, no clock.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from tidelog.coordinator.records import (
    GroupRecord,
    OffsetAndMetadata,
    OffsetKey,
    decode_group_value,
    decode_key,
    decode_offset_value,
)
from tidelog.model import TopicPartition

_CONTROL_KEY = struct.Struct(">hh")
#: Kafka's ControlRecordType ids.
CONTROL_ABORT = 0
CONTROL_COMMIT = 1


def marker_commits(key: bytes | None) -> bool | None:
    """What the control record with this key does: True = COMMIT, False = ABORT, None = not a
    transaction marker (unknown type or too short a key)."""
    if key is None or len(key) < _CONTROL_KEY.size:
        return None
    _version, kind = _CONTROL_KEY.unpack_from(key)
    if kind == CONTROL_COMMIT:
        return True
    if kind == CONTROL_ABORT:
        return False
    return None


@dataclass(frozen=True, slots=True)
class LoggedOffset:
    """An offset with the log offset of the ``__consumer_offsets`` batch holding it."""

    value: OffsetAndMetadata
    #: Base offset of the batch its record is in; -1 when unknown (older than any known).
    log_offset: int = -1

    def supersedes(self, current: LoggedOffset | None) -> bool:
        """May this offset replace ``current``? Yes unless both positions are known and
        ``current`` lies later in the log (rule 2)."""
        return current is None or self.log_offset < 0 or current.log_offset <= self.log_offset


@dataclass(slots=True)
class PendingTxnOffsets:
    """The pending transactional offsets of one ``__consumer_offsets`` partition (rule 1)."""

    #: producer id -> group id -> partition -> pending offset.
    by_producer: dict[int, dict[str, dict[TopicPartition, LoggedOffset]]] = field(
        default_factory=dict
    )

    def __bool__(self) -> bool:
        return bool(self.by_producer)

    def add(
        self,
        producer_id: int,
        group_id: str,
        offsets: Mapping[TopicPartition, OffsetAndMetadata],
        log_offset: int,
    ) -> None:
        by_tp = self.by_producer.setdefault(producer_id, {}).setdefault(group_id, {})
        for tp, value in offsets.items():
            by_tp[tp] = LoggedOffset(value, log_offset)

    def remove(self, producer_id: int, group_id: str, tp: TopicPartition) -> None:
        """A tombstone inside a transactional batch: the producer's pending offset goes."""
        by_group = self.by_producer.get(producer_id, {})
        by_group.get(group_id, {}).pop(tp, None)
        self._prune(producer_id, group_id)

    def discard_batch(self, producer_id: int, group_id: str, log_offset: int) -> None:
        """The batch at ``log_offset`` failed (not replicated): its entries go, later ones of
        the same producer stay (Kafka's ``failPendingTxnOffsetCommit``)."""
        by_tp = self.by_producer.get(producer_id, {}).get(group_id, {})
        for tp in [tp for tp, o in by_tp.items() if o.log_offset == log_offset]:
            del by_tp[tp]
        self._prune(producer_id, group_id)

    def drop(self, group_id: str, tps: Iterable[TopicPartition] | None, before: int) -> None:
        """Rule 4: a tombstone at log offset ``before`` (-1: unknown, drop all) removes the
        group's pending offsets of ``tps`` (None: every partition) written before it."""
        wanted = None if tps is None else set(tps)
        for producer_id, by_group in list(self.by_producer.items()):
            by_tp = by_group.get(group_id)
            if by_tp is None:
                continue
            for tp, o in list(by_tp.items()):
                if (wanted is None or tp in wanted) and (before < 0 or o.log_offset < before):
                    del by_tp[tp]
            self._prune(producer_id, group_id)

    def take(self, producer_id: int) -> dict[str, dict[TopicPartition, LoggedOffset]]:
        """The producer's pending offsets per group, removed (its marker arrived)."""
        return self.by_producer.pop(producer_id, {})

    def is_pending(self, group_id: str, tp: TopicPartition) -> bool:
        return any(tp in by_group.get(group_id, {}) for by_group in self.by_producer.values())

    def groups(self) -> set[str]:
        return {g for by_group in self.by_producer.values() for g in by_group}

    def _prune(self, producer_id: int, group_id: str) -> None:
        by_group = self.by_producer.get(producer_id)
        if by_group is None:
            return
        if not by_group.get(group_id, True):
            del by_group[group_id]
        if not by_group:
            del self.by_producer[producer_id]


def commit_pending(
    committed: dict[str, dict[TopicPartition, LoggedOffset]],
    pending: Mapping[str, Mapping[TopicPartition, LoggedOffset]],
) -> None:
    """Rule 2: a committed transaction's offsets into ``committed`` (in place), each only
    where it lies later in the log than the offset committed there."""
    for group_id, by_tp in pending.items():
        current = committed.setdefault(group_id, {})
        for tp, offset in by_tp.items():
            if offset.supersedes(current.get(tp)):
                current[tp] = offset


@dataclass(slots=True)
class PartitionReplay:
    """Rebuilds one partition's groups, committed and pending offsets from its records, fed
    in log order (the last record per key wins; tombstones delete; rules 1-4)."""

    groups: dict[str, GroupRecord] = field(default_factory=dict)
    offsets: dict[str, dict[TopicPartition, LoggedOffset]] = field(default_factory=dict)
    pending: PendingTxnOffsets = field(default_factory=PendingTxnOffsets)

    def record(self, batch_offset: int, producer_id: int, key: bytes, value: bytes | None) -> None:
        """One data record of the batch at ``batch_offset``; ``producer_id`` >= 0 only for a
        transactional batch. Raises ``RecordFormatError`` for a record not in Kafka's
        format (the caller skips it)."""
        decoded = decode_key(key)
        if isinstance(decoded, OffsetKey):
            group_id, tp = decoded.group_id, decoded.tp
            if producer_id >= 0:
                if value is None:
                    self.pending.remove(producer_id, group_id, tp)
                else:
                    offset = decode_offset_value(value)
                    self.pending.add(producer_id, group_id, {tp: offset}, batch_offset)
            elif value is None:
                self.offsets.get(group_id, {}).pop(tp, None)
                self.pending.drop(group_id, (tp,), batch_offset)
            else:
                logged = LoggedOffset(decode_offset_value(value), batch_offset)
                self.offsets.setdefault(group_id, {})[tp] = logged
        elif value is None:
            # Group metadata is never transactional: a tombstone deletes the whole group.
            self.groups.pop(decoded.group_id, None)
            self.offsets.pop(decoded.group_id, None)
            self.pending.drop(decoded.group_id, None, batch_offset)
        else:
            self.groups[decoded.group_id] = decode_group_value(value)

    def marker(self, producer_id: int, key: bytes | None) -> None:
        """The control record of a marker batch of ``producer_id``."""
        commits = marker_commits(key)
        if commits is None:
            return
        taken = self.pending.take(producer_id)
        if commits:
            commit_pending(self.offsets, taken)

    def committed(self) -> dict[str, dict[TopicPartition, LoggedOffset]]:
        """Committed offsets of the groups that have any."""
        return {g: by_tp for g, by_tp in self.offsets.items() if by_tp}


__all__ = [
    "CONTROL_ABORT",
    "CONTROL_COMMIT",
    "LoggedOffset",
    "PartitionReplay",
    "PendingTxnOffsets",
    "commit_pending",
    "marker_commits",
]
