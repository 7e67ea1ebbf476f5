"""What a consumer sees of one partition's Fetch answer, at its isolation level (KIP-98).

Both isolation levels drop control batches (transaction markers): they take offsets but are
never records. read_committed also drops the records of aborted transactions
(``TransactionFilter``, the Java consumer's rules), from the (producer id, first offset)
list the broker sends with the records; the broker itself only returns records below the
last stable offset. ``decode_fetched`` also says where the next fetch starts: past the last
whole batch, dropped ones included, so a fetch that held only markers or aborted records
still moves the consumer on.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from tidelog.client.records import (
    CONTROL_TYPE_ABORT,
    ConsumerRecord,
    batch_records,
    decompress,
    whole_batches,
)
from tidelog.protocol.records import BATCH_HEADER_SIZE, CorruptRecordBatchError, iter_batches
from tidelog.protocol.varint import VarintError, read_varint

#: A v2 batch header: base offset, length, leader epoch, magic, crc, attributes, last offset
#: delta, base and max timestamp, producer id and epoch, base sequence, record count.
BATCH_HEAD: Final = struct.Struct(">qiibIhiqqqhii")
#: A control record's key: int16 version, int16 type (0 abort, 1 commit).
_CONTROL_KEY: Final = struct.Struct(">hh")


def _is_abort_marker(data: bytes, count: int) -> bool:
    """Whether a control batch's records (``data``, decompressed) start with an ABORT
    marker: key = int16 version, int16 type (0 abort, 1 commit)."""
    if count < 1:
        return False
    end = len(data)
    try:
        _length, p = read_varint(data, 0, end)
        p += 1  # record attributes
        _ts_delta, p = read_varint(data, p, end)
        _off_delta, p = read_varint(data, p, end)
        key_length, p = read_varint(data, p, end)
    except VarintError as exc:
        raise CorruptRecordBatchError(f"control record: {exc}") from exc
    if key_length < _CONTROL_KEY.size or p + key_length > end:
        raise CorruptRecordBatchError(f"control record key of {key_length} bytes")
    _version, kind = _CONTROL_KEY.unpack_from(data, p)
    return bool(kind == CONTROL_TYPE_ABORT)


class TransactionFilter:
    """Decides which transactional and control batches of one fetch response give no
    records (KIP-98, the Java consumer's rules).

    Control batches (transaction markers) are always dropped. Under read_committed
    (``aborted_transactions`` not None: the response's (producer id, first offset) list),
    the aborted transactions are taken in first-offset order: once a batch's last offset
    reaches an entry's first offset, that producer is in an aborted transaction, and its
    transactional data batches are dropped until its ABORT marker (a COMMIT marker ends
    nothing). Batches that are neither transactional nor control never get here: they are
    always kept.
    """

    __slots__ = ("_aborted", "_pending", "read_committed")

    def __init__(self, aborted_transactions: Sequence[tuple[int, int]] | None) -> None:
        self.read_committed = aborted_transactions is not None
        #: Not reached yet, latest first offset first (taken from the end).
        self._pending = sorted(aborted_transactions or (), key=lambda a: a[1], reverse=True)
        #: Producers inside an aborted transaction.
        self._aborted: set[int] = set()

    def skips(self, buf: bytes, pos: int, end: int) -> bool:
        """Whether the transactional or control batch ``buf[pos:end]`` is dropped (called
        for each such batch of the response, in log order)."""
        (base_offset, _, _, _, _, attributes, last_delta, _, _, producer_id, _, _, count) = (
            BATCH_HEAD.unpack_from(buf, pos)
        )
        if not self.read_committed:
            return bool(attributes & 0x20)
        pending = self._pending
        last_offset = base_offset + last_delta
        while pending and pending[-1][1] <= last_offset:
            self._aborted.add(pending.pop()[0])
        if producer_id not in self._aborted:
            return bool(attributes & 0x20)
        if attributes & 0x20 and _is_abort_marker(
            decompress(attributes & 0x07, buf[pos + BATCH_HEADER_SIZE : end]), count
        ):
            self._aborted.discard(producer_id)
        return True


@dataclass(frozen=True, slots=True)
class FetchedRecords:
    """The records a consumer sees, and the offset after the last whole batch (None when
    the answer held no whole batch: fetch from the same offset again)."""

    records: list[ConsumerRecord]
    next_offset: int | None


def decode_fetched(
    buf: bytes, *, aborted_transactions: Sequence[tuple[int, int]] | None = None
) -> FetchedRecords:
    """The records of one partition's Fetch answer (``buf``: its record batches) as a
    consumer sees them. ``aborted_transactions`` None is read_uncommitted; for
    read_committed it is the answer's (producer id, first offset) list."""
    view = whole_batches(buf)
    txn = TransactionFilter(aborted_transactions)
    records: list[ConsumerRecord] = []
    next_offset = None
    for pos, header in iter_batches(view):
        next_offset = header.next_offset
        if header.attributes & 0x30 and txn.skips(view, pos, pos + header.size):
            continue
        records += batch_records(view, pos, header)
    return FetchedRecords(records, next_offset)
