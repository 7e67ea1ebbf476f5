"""Committed offsets of the groups of one ``__consumer_offsets`` partition, and their expiry.

``GroupOffsets`` holds what ``GroupManager`` (``tidelog.coordinator.group``) needs of
offsets: the committed ones with the log offset of their batch (``txn_offsets`` rule 3),
plain commits appended but not yet replicated (Kafka's ``pendingOffsetCommits``), and
transactional offsets awaiting their marker (``txn_offsets.PendingTxnOffsets``). It keeps
no groups: the manager creates and removes those around it.

Offset expiry (Kafka's ``GroupMetadata.removeExpiredOffsets`` and
``GroupMetadataManager.cleanupGroupMetadata``, KIP-211), run by the coordinator every
``offsets.retention.check.interval.ms``:

6. An offset committed with an explicit expire timestamp (OffsetCommit v2-v4
   ``retention_time_ms``) expires at that time, whatever the group does. Otherwise:
7. Empty group that used the group protocol (protocol type set): every offset expires once
   the retention has passed since the group became Empty (its ``state_timestamp_ms``, kept
   in the group metadata record; unknown, e.g. an old record: since the offset's commit).
8. Group that never used the group protocol (no protocol type: a standalone consumer with
   ``assign()``, or known only from its offsets): each offset expires once the retention
   has passed since its commit.
9. Stable ``consumer`` group whose subscriptions can be read: only offsets of topics no
   member subscribes to expire, retention counted from their commit. Any other group with
   members keeps everything.
10. Never expired: an offset with an OffsetCommit in flight (appended, not yet replicated)
    and transactional offsets still pending.
11. A group left Empty with no offsets (committed, in flight or pending) is Dead and
    removed; the caller writes its group tombstone when it had a generation (Kafka skips
    generation 0: such a group only stored offsets).

Rules 6-10 are ``GroupOffsets.expired``; rule 11 is ``GroupManager.remove_expired_offsets``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from tidelog.coordinator.group_state import Group, GroupState
from tidelog.coordinator.records import OffsetAndMetadata
from tidelog.coordinator.txn_offsets import LoggedOffset, PendingTxnOffsets, commit_pending
from tidelog.model import TopicPartition

#: Kafka's ``offset.metadata.max.bytes``.
OFFSET_METADATA_MAX_BYTES = 4096


@dataclass(frozen=True, slots=True)
class ExpiredOffsets:
    """What one expiry round removed from memory, for the caller to tombstone."""

    #: group id -> partitions whose offsets expired.
    offsets: dict[str, list[TopicPartition]]
    #: Groups that became Dead and were removed, with their generation then.
    dead_groups: dict[str, int]

    @property
    def count(self) -> int:
        return sum(len(tps) for tps in self.offsets.values())


class GroupOffsets:
    """Committed, in-flight and pending transactional offsets per group; see the module
    docstring."""

    def __init__(self) -> None:
        #: Committed offsets with the log offset of their batch (txn_offsets rule 3).
        self.offsets: dict[str, dict[TopicPartition, LoggedOffset]] = {}
        #: Transactional offsets awaiting their marker (txn_offsets rule 1).
        self.pending_txn = PendingTxnOffsets()
        #: Plain commits appended but not yet replicated, per group and partition (rule 10).
        self.pending_commits: dict[str, dict[TopicPartition, int]] = {}

    def load(
        self,
        offsets: Mapping[str, Mapping[TopicPartition, OffsetAndMetadata | LoggedOffset]],
        pending_txn: PendingTxnOffsets | None,
    ) -> None:
        """Offsets replayed from the partition."""
        for group_id, by_tp in offsets.items():
            self.offsets[group_id] = {
                tp: o if isinstance(o, LoggedOffset) else LoggedOffset(o) for tp, o in by_tp.items()
            }
        if pending_txn is not None:
            self.pending_txn = pending_txn

    def clear(self) -> None:
        self.offsets.clear()
        self.pending_txn = PendingTxnOffsets()
        self.pending_commits.clear()

    def has_committed(self, group_id: str) -> bool:
        """Does the group have committed offsets (in memory, at least one partition)?"""
        return group_id in self.offsets

    def has_any(self, group_id: str) -> bool:
        """Committed, in flight or pending offsets (rule 11)."""
        return (
            bool(self.offsets.get(group_id))
            or group_id in self.pending_commits
            or group_id in self.pending_txn.groups()
        )

    # --- plain commits ---------------------------------------------------------------------

    def apply(
        self,
        group_id: str,
        offsets: Mapping[TopicPartition, OffsetAndMetadata | None],
        log_offset: int,
    ) -> bool:
        """Replicated commits or tombstones (None) of the batch at ``log_offset`` (-1:
        unknown); an offset already there from later in the log stays. A tombstone also
        drops the pending transactional offsets written before it (txn_offsets rule 4).
        Whether the group has committed offsets afterwards."""
        by_tp = self.offsets.setdefault(group_id, {})
        for tp, value in offsets.items():
            current = by_tp.get(tp)
            if value is None:
                if current is not None and (log_offset < 0 or current.log_offset <= log_offset):
                    del by_tp[tp]
            else:
                logged = LoggedOffset(value, log_offset)
                if logged.supersedes(current):
                    by_tp[tp] = logged
        tombstoned = [tp for tp, value in offsets.items() if value is None]
        if tombstoned:
            self.pending_txn.drop(group_id, tombstoned, log_offset)
        if not by_tp:
            del self.offsets[group_id]
            return False
        return True

    def committed(self, group_id: str) -> dict[TopicPartition, OffsetAndMetadata]:
        return {tp: o.value for tp, o in self.offsets.get(group_id, {}).items()}

    def prepare_commit(self, group_id: str, tps: Iterable[TopicPartition]) -> None:
        """A plain OffsetCommit of ``tps`` was appended; until ``commit_done`` they are not
        expired (rule 10, Kafka's ``prepareOffsetCommit``)."""
        by_tp = self.pending_commits.setdefault(group_id, {})
        for tp in tps:
            by_tp[tp] = by_tp.get(tp, 0) + 1

    def commit_done(self, group_id: str, tps: Iterable[TopicPartition]) -> None:
        """The commit ``prepare_commit`` announced is replicated or failed."""
        by_tp = self.pending_commits.get(group_id)
        if by_tp is None:
            return
        for tp in tps:
            left = by_tp.get(tp, 0) - 1
            if left > 0:
                by_tp[tp] = left
            else:
                by_tp.pop(tp, None)
        if not by_tp:
            del self.pending_commits[group_id]

    def drop_group(self, group_id: str) -> list[TopicPartition]:
        """A deleted group's offsets leave memory; the partitions to tombstone. Its pending
        transactional offsets die with it (Kafka deletes a group with open transactions)."""
        tps = list(self.offsets.pop(group_id, {}))
        self.pending_txn.drop(group_id, None, -1)
        return tps

    # --- expiry (rules 6-10) ---------------------------------------------------------------

    def remove_expired(self, group: Group, now_ms: int, retention_ms: int) -> list[TopicPartition]:
        """The group's expired offsets leave memory; the partitions that went."""
        gone = self.expired(group, now_ms, retention_ms)
        if gone:
            by_tp = self.offsets[group.group_id]
            for tp in gone:
                del by_tp[tp]
            if not by_tp:
                del self.offsets[group.group_id]
        return gone

    def expired(self, group: Group, now_ms: int, retention_ms: int) -> list[TopicPartition]:
        """The group's offsets that expired by ``now_ms`` (rules 6-10)."""
        by_tp = self.offsets.get(group.group_id)
        if not by_tp:
            return []
        since_empty = -1
        subscribed: set[str] = set()
        if group.state == GroupState.EMPTY and group.protocol_type:
            since_empty = group.state_timestamp_ms  # rule 7
        elif group.state == GroupState.STABLE and group.protocol_type == "consumer":
            topics = group.subscribed_topics()  # rule 9
            if topics is None:
                return []
            subscribed = topics
        elif group.protocol_type or group.members:
            return []  # a group with members mid-rebalance, or of another protocol
        in_flight = self.pending_commits.get(group.group_id, {})
        gone = []
        for tp, logged in by_tp.items():
            if tp.topic in subscribed or tp in in_flight:
                continue
            value = logged.value
            if value.expire_timestamp_ms >= 0:  # rule 6
                if now_ms >= value.expire_timestamp_ms:
                    gone.append(tp)
                continue
            base = since_empty if since_empty >= 0 else value.commit_timestamp_ms
            if now_ms - base >= retention_ms:
                gone.append(tp)
        return gone

    # --- transactional offsets (KIP-98, KIP-447; see tidelog.coordinator.txn_offsets) ----

    def add_txn(
        self,
        group_id: str,
        producer_id: int,
        offsets: Mapping[TopicPartition, OffsetAndMetadata],
        log_offset: int,
    ) -> None:
        """Offsets of a transactional batch appended at ``log_offset``: pending (invisible
        to OffsetFetch) until ``complete_txn`` for ``producer_id``."""
        self.pending_txn.add(producer_id, group_id, offsets, log_offset)

    def fail_txn(self, group_id: str, producer_id: int, log_offset: int) -> None:
        """The batch at ``log_offset`` was not replicated: its pending offsets go."""
        self.pending_txn.discard_batch(producer_id, group_id, log_offset)

    def complete_txn(self, producer_id: int, commit: bool) -> list[str]:
        """The producer's COMMIT (offsets become committed, each unless a later one is
        already there: txn_offsets rule 2) or ABORT marker (dropped); the groups that got
        committed offsets."""
        taken = self.pending_txn.take(producer_id)
        if not commit:
            return []
        commit_pending(self.offsets, taken)
        return list(taken)

    def has_pending_txn(self, group_id: str, tp: TopicPartition) -> bool:
        return self.pending_txn.is_pending(group_id, tp)


__all__ = ["OFFSET_METADATA_MAX_BYTES", "ExpiredOffsets", "GroupOffsets"]
