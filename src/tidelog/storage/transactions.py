"""Transaction markers and the partition's open transactions (KIP-98).

Markers
-------
A transaction ends with a control batch (attributes bit 5; the coordinator also sets the
transactional bit 4) of the transaction's producer id and epoch, never compressed, holding
one record (Kafka's ``EndTransactionMarker``)::

    key   = version int16 (0) | type int16 (0 = ABORT, 1 = COMMIT)   (ControlRecordType)
    value = version int16 (0) | coordinator_epoch int32

``parse_end_txn_marker`` reads it from the batch bytes (storage never decodes data records;
this is the one record it does decode, and only for control batches with a producer id).
Newer key/value versions are accepted as Kafka does: the fields above come first.

Open transactions (``TxnTracker``)
----------------------------------
What the last stable offset needs, kept so ``last_stable_offset`` is O(1) amortised (it
runs on every fetch). Invariants:
  1. ``ongoing`` maps the first offset of every ongoing transaction to its producer id, in
     ascending first-offset order: a transaction starts at a batch appended at the log end,
     above every ongoing one's start, so inserting keeps the order and the first unstable
     offset is the first key (Kafka's ``ProducerStateManager.ongoingTxns``, a TreeMap).
  2. ``unreplicated`` holds completed transactions whose marker may not be below the high
     watermark yet (Kafka's ``unreplicatedTxns``) as ``(marker offset, first offset)`` in
     marker order, reduced to a sliding-window minimum: an entry is dropped when a later
     one (a later marker) has a first offset <= its own, since it could never be the
     minimum while that later one is still unreplicated. So first offsets strictly increase
     from left to right and the minimum is the leftmost. Entries leave from the left once
     the high watermark (or the log start offset) passes their marker; as in Kafka the high
     watermark is taken to only grow (a truncation lowers it only below markers that the
     truncation cuts, and those come back through a rebuild).
  3. ``last_marker_offset``: the offset of the newest marker applied (-1: none), so a
     truncation that cuts a marker is noticed even when its producer expired.
  4. The tracker is derived from the producer state (``tidelog.storage.producer_state``
     rules 6-8) and changes only with it.
"""

from __future__ import annotations

import struct
from collections import OrderedDict, deque
from collections.abc import Iterable, Mapping
from types import MappingProxyType
from typing import Final, NamedTuple

from tidelog.protocol.records import BATCH_HEADER_SIZE, LOG_OVERHEAD
from tidelog.protocol.varint import read_varint
from tidelog.storage.txn_index import AbortedTxn

#: ControlRecordType (the key's type field).
CONTROL_TYPE_ABORT: Final = 0
CONTROL_TYPE_COMMIT: Final = 1
#: attributes: compression codec bits, control bit.
_COMPRESSION_MASK: Final = 0x07
_CONTROL_FLAG: Final = 0x20
_KEY: Final = struct.Struct(">hh")
_VALUE: Final = struct.Struct(">hi")
#: attributes int16 at byte 21, records count int32 at byte 57, batchLength at byte 8.
_ATTRIBUTES: Final = struct.Struct(">h")
_INT32: Final = struct.Struct(">i")


class EndTxnMarker(NamedTuple):
    """What a transaction marker says (``ProducerBatch.marker``)."""

    commit: bool
    coordinator_epoch: int


def parse_end_txn_marker(buf: bytes | bytearray | memoryview, pos: int = 0) -> EndTxnMarker | None:
    """The marker of the whole control batch at ``pos`` in ``buf``, or None when the batch
    is not a well-formed transaction marker (not a control batch, compressed, not exactly
    one record, another control type, short key or value). Header framing is the caller's
    (the batch was validated or read from the log)."""
    try:
        (attributes,) = _ATTRIBUTES.unpack_from(buf, pos + 21)
        (count,) = _INT32.unpack_from(buf, pos + 57)
        (length,) = _INT32.unpack_from(buf, pos + 8)
        if not attributes & _CONTROL_FLAG or attributes & _COMPRESSION_MASK or count != 1:
            return None
        end = min(len(buf), pos + length + LOG_OVERHEAD)
        p = pos + BATCH_HEADER_SIZE
        record_length, p = read_varint(buf, p, end)
        record_end = p + record_length
        if record_end > end:
            return None
        p += 1  # record attributes
        _, p = read_varint(buf, p, record_end)  # timestamp delta
        _, p = read_varint(buf, p, record_end)  # offset delta
        key_length, p = read_varint(buf, p, record_end)
        if key_length < _KEY.size or p + key_length > record_end:
            return None
        key_version, control_type = _KEY.unpack_from(buf, p)
        p += key_length
        if key_version < 0 or control_type not in (CONTROL_TYPE_ABORT, CONTROL_TYPE_COMMIT):
            return None
        value_length, p = read_varint(buf, p, record_end)
        if value_length < _VALUE.size or p + value_length > record_end:
            return None
        value_version, coordinator_epoch = _VALUE.unpack_from(buf, p)
        if value_version < 0:
            return None
        return EndTxnMarker(control_type == CONTROL_TYPE_COMMIT, coordinator_epoch)
    except (ValueError, IndexError, struct.error):
        return None


class TxnTracker:
    """Ongoing and not yet replicated transactions of one partition (module docstring)."""

    __slots__ = ("_ongoing", "_unreplicated", "last_marker_offset")

    def __init__(self) -> None:
        self._ongoing: OrderedDict[int, int] = OrderedDict()
        self._unreplicated: deque[tuple[int, int]] = deque()
        self.last_marker_offset = -1

    @property
    def ongoing(self) -> Mapping[int, int]:
        """Read-only: first offset -> producer id of each ongoing transaction, ascending."""
        return MappingProxyType(self._ongoing)

    @property
    def unreplicated(self) -> tuple[tuple[int, int], ...]:
        """``(marker offset, first offset)`` kept for the last stable offset (invariant 2)."""
        return tuple(self._unreplicated)

    def start(self, producer_id: int, first_offset: int) -> None:
        """A transaction starts at ``first_offset`` (the log end: invariant 1)."""
        self._ongoing[first_offset] = producer_id

    def end(
        self, producer_id: int, first_offset: int, marker_offset: int, commit: bool
    ) -> AbortedTxn | None:
        """A marker at ``marker_offset``; ``first_offset`` is the producer's ongoing
        transaction's start, or -1 when it had none (the marker then ends nothing, as in
        Kafka). Returns the aborted-index entry of an ABORT that ended a transaction."""
        self.last_marker_offset = marker_offset
        if first_offset < 0:
            return None
        self._ongoing.pop(first_offset, None)
        unreplicated = self._unreplicated
        while unreplicated and unreplicated[-1][1] >= first_offset:
            unreplicated.pop()
        unreplicated.append((marker_offset, first_offset))
        if commit:
            return None
        # Kafka's ProducerStateManager.lastStableOffset(completedTxn): the first offset of
        # the earliest transaction still ongoing (necessarily another producer's), else
        # just past the marker.
        lso = next(iter(self._ongoing), marker_offset + 1)
        return AbortedTxn(producer_id, first_offset, marker_offset, lso)

    def first_unstable_offset(self) -> int | None:
        """The smallest first offset of an ongoing or unreplicated transaction, or None."""
        first = next(iter(self._ongoing), None)
        if self._unreplicated:
            candidate = self._unreplicated[0][1]
            if first is None or candidate < first:
                first = candidate
        return first

    def on_high_watermark(self, high_watermark: int) -> None:
        """Forget completed transactions whose marker is below the high watermark."""
        unreplicated = self._unreplicated
        while unreplicated and unreplicated[0][0] < high_watermark:
            unreplicated.popleft()

    def last_stable_offset(self, high_watermark: int, log_start_offset: int) -> int:
        """KIP-98: min(high watermark, first offset of every ongoing transaction and of
        every completed one whose marker is not below the high watermark); a transaction
        starting below the log start offset counts from there (Kafka's
        ``UnifiedLog.maybeIncrementFirstUnstableOffset``)."""
        self.on_high_watermark(high_watermark)
        if not self._ongoing and not self._unreplicated:
            return high_watermark
        first = self.first_unstable_offset()
        assert first is not None
        return min(high_watermark, max(first, log_start_offset))

    def on_log_start(self, log_start_offset: int) -> None:
        """The log start moved: a completed transaction whose marker is below it can no
        longer lower the last stable offset (that is clamped to the log start anyway;
        Kafka's ``removeUnreplicatedTransactions``)."""
        self.on_high_watermark(log_start_offset)

    def load(
        self,
        ongoing: Iterable[tuple[int, int]],
        unreplicated: Iterable[tuple[int, int]],
        last_marker_offset: int,
    ) -> None:
        """Replace the state: ``ongoing`` as (first offset, producer id) in any order,
        ``unreplicated`` as (marker offset, first offset) in marker order."""
        self._ongoing = OrderedDict(sorted(ongoing))
        self._unreplicated = deque()
        for marker_offset, first_offset in unreplicated:
            while self._unreplicated and self._unreplicated[-1][1] >= first_offset:
                self._unreplicated.pop()
            self._unreplicated.append((marker_offset, first_offset))
        self.last_marker_offset = last_marker_offset

    def clear(self) -> None:
        self._ongoing.clear()
        self._unreplicated.clear()
        self.last_marker_offset = -1


__all__ = [
    "CONTROL_TYPE_ABORT",
    "CONTROL_TYPE_COMMIT",
    "EndTxnMarker",
    "TxnTracker",
    "parse_end_txn_marker",
]
