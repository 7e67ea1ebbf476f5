"""The aborted-transaction index of one segment (Kafka's ``TransactionIndex``, KIP-98).

``<20-digit base offset>.txnindex`` lies next to the segment's ``.log``, ``.index`` and
``.timeindex``. It lists the transactions ABORTED by a marker in this segment, as 34-byte
big-endian entries (Kafka's ``AbortedTxn`` layout)::

    version int16 (0) | producer_id int64 | first_offset int64 | last_offset int64
    | last_stable_offset int64

``first_offset`` is the offset of the transaction's first batch (possibly in an earlier
segment), ``last_offset`` the offset of its ABORT marker, ``last_stable_offset`` the first
unstable offset of the partition once this transaction ended (the first offset of the
earliest transaction still ongoing then, or ``last_offset + 1`` when none was): no
transaction starting below it can end after this marker, which is what lets
``collect`` stop early (Kafka's ``TxnIndexSearchResult.isComplete``).

Invariants:
  1. One entry per ABORT marker that ended an ongoing transaction, in the index of the
     segment holding the marker, in marker order: ``last_offset`` strictly increases and lies
     in ``[base_offset, segment's next offset)``. Appending an entry whose marker is not past
     the last one is a no-op (``append`` returns False): a replay of markers already indexed
     (open, rebuild after a truncation) changes nothing.
  2. ``entries`` (in memory) always equals the file, except while the index is being
     rebuilt (``rebuilding``): then the file is absent and is written whole once the rebuild
     is done (tmp + fsync + rename, ``finish_rebuild``), so a crash during a rebuild never
     leaves a partial file that a later open would trust.
  3. Derived data: appends are ``pwrite``s without fsync; the file is fsynced with its
     segment (``LogSegment.flush``), so entries below the recovery point are durable. At
     open, entries at or above the recovery point are dropped and rebuilt by the producer
     state replay, as is a missing or corrupt (size not a multiple of 34, bad version,
     invariant 1 broken) file.
  4. Every segment has the file, empty when nothing in it was aborted: a missing file means
     a lost one, never an empty one. It is created with the segment; its fd is opened only
     at the first append (most segments never get one).
"""

from __future__ import annotations

import contextlib
import os
import struct
from pathlib import Path
from typing import Final, NamedTuple

TXN_INDEX_SUFFIX: Final = ".txnindex"
#: Kafka's AbortedTxn.CURRENT_VERSION.
TXN_INDEX_VERSION: Final = 0
_ENTRY: Final = struct.Struct(">hqqqq")
TXN_ENTRY_SIZE: Final = _ENTRY.size  # 34
_TMP_SUFFIX: Final = ".tmp"


class AbortedTxn(NamedTuple):
    """One aborted transaction (Kafka's ``AbortedTxn``)."""

    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int


class TxnIndexCorruptError(Exception):
    """A ``.txnindex`` file failed its load check (it is rebuilt)."""


def encode_entries(entries: list[AbortedTxn]) -> bytes:
    return b"".join(_ENTRY.pack(TXN_INDEX_VERSION, *entry) for entry in entries)


def decode_entries(data: bytes, base_offset: int) -> list[AbortedTxn]:
    """The entries of a file's bytes; TxnIndexCorruptError unless invariant 1 holds."""
    if len(data) % TXN_ENTRY_SIZE:
        raise TxnIndexCorruptError(f"size {len(data)} is not a multiple of {TXN_ENTRY_SIZE}")
    entries: list[AbortedTxn] = []
    previous = base_offset - 1
    for version, pid, first, last, lso in _ENTRY.iter_unpack(data):
        if version != TXN_INDEX_VERSION:
            raise TxnIndexCorruptError(f"entry {len(entries)} has version {version}")
        # The last stable offset may lie below first_offset (an older transaction was still
        # ongoing) but never past the marker.
        if pid < 0 or first < 0 or first > last or last <= previous or not 0 <= lso <= last + 1:
            raise TxnIndexCorruptError(
                f"entry {len(entries)} ({pid}, {first}, {last}, {lso}) is out of order"
            )
        previous = last
        entries.append(AbortedTxn(pid, first, last, lso))
    return entries


class TransactionIndex:
    """One segment's aborted-transaction index (see the module docstring)."""

    __slots__ = ("_dirty", "_fd", "base_offset", "entries", "path", "rebuilding")

    def __init__(self, path: Path, base_offset: int, *, create: bool) -> None:
        """``create``: a new segment, whose empty file is created now (invariant 4);
        otherwise ``load`` reads the existing one."""
        self.path = path
        self.base_offset = base_offset
        #: In marker order (invariant 1).
        self.entries: list[AbortedTxn] = []
        self._fd = -1
        self._dirty = False
        #: Invariant 2: entries are collected in memory, the file is written at the end.
        self.rebuilding = False
        if create:
            os.close(os.open(path, os.O_WRONLY | os.O_CREAT, 0o644))

    def load(self) -> bool:
        """Read the file. False if it is missing or corrupt: the index is then empty and
        ``rebuilding`` (a corrupt file is deleted; ``finish_rebuild`` writes the new one)."""
        try:
            self.entries = decode_entries(self.path.read_bytes(), self.base_offset)
            return True
        except FileNotFoundError:
            pass
        except TxnIndexCorruptError:
            self.path.unlink()
        self.entries = []
        self.rebuilding = True
        return False

    def append(self, txn: AbortedTxn) -> bool:
        """Add the entry of an ABORT marker of this segment; False (nothing done) if it is
        already indexed (invariant 1)."""
        entries = self.entries
        if entries and txn.last_offset <= entries[-1].last_offset:
            return False
        entries.append(txn)
        if not self.rebuilding:
            if self._fd < 0:
                self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT, 0o644)
            data = _ENTRY.pack(TXN_INDEX_VERSION, *txn)
            position = (len(entries) - 1) * TXN_ENTRY_SIZE
            # Aborted entries are rare and tiny: written at once (no buffering), like Kafka.
            written = os.pwrite(self._fd, data, position)
            if written != len(data):
                del entries[-1]
                with contextlib.suppress(OSError):
                    os.ftruncate(self._fd, position)
                raise OSError(f"short write of {self.path}: {written} of {len(data)} bytes")
            self._dirty = True
        return True

    def truncate_to(self, offset: int) -> None:
        """Drop the entries whose marker is at or after ``offset`` (a log truncation)."""
        entries = self.entries
        keep = len(entries)
        while keep and entries[keep - 1].last_offset >= offset:
            keep -= 1
        if keep == len(entries):
            return
        del entries[keep:]
        if not self.rebuilding:
            if self._fd >= 0:
                os.ftruncate(self._fd, keep * TXN_ENTRY_SIZE)
            else:
                # A file lost meanwhile is rebuilt at the next open (invariant 4).
                with contextlib.suppress(FileNotFoundError):
                    os.truncate(self.path, keep * TXN_ENTRY_SIZE)
            self._dirty = True

    def collect(self, start_offset: int, upper_bound_offset: int, out: list[AbortedTxn]) -> bool:
        """Append to ``out`` the entries with ``last_offset >= start_offset`` and
        ``first_offset < upper_bound_offset``; True when no later segment can hold another
        (Kafka's ``collectAbortedTxns``): an entry whose ``last_stable_offset`` is >= the
        bound was written when every transaction starting below it had ended, i.e. every
        such transaction's marker (and entry) lies at or before this one."""
        for txn in self.entries:
            if txn.last_offset < start_offset:
                continue
            if txn.first_offset < upper_bound_offset:
                out.append(txn)
            if txn.last_stable_offset >= upper_bound_offset:
                return True
        return False

    def discard(self) -> None:
        """Treat the file as corrupt: forget its entries, delete it, rebuild (invariant 3)."""
        self.close()
        self.entries = []
        self.path.unlink(missing_ok=True)
        self.rebuilding = True

    def finish_rebuild(self) -> bool:
        """Write a rebuilt index whole (invariant 2). Returns whether the directory needs an
        fsync for it: an empty index is just created (lost again in a crash, it is only
        rebuilt again, and an empty file cannot be torn), a non-empty one is written to a
        temporary file, fsynced and renamed, so it is either whole or missing."""
        if not self.rebuilding:
            return False
        if not self.entries:
            os.close(os.open(self.path, os.O_WRONLY | os.O_CREAT, 0o644))
            self.rebuilding = False
            return False
        tmp = self.path.with_name(self.path.name + _TMP_SUFFIX)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            view = memoryview(encode_entries(self.entries))
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, self.path)
        self.rebuilding = False
        return True

    def flush(self) -> None:
        if self._dirty:
            self._dirty = False
            if self._fd >= 0:
                os.fsync(self._fd)
            else:
                try:
                    fd = os.open(self.path, os.O_RDONLY)
                except FileNotFoundError:
                    return  # lost meanwhile: rebuilt at the next open (invariant 4)
                try:
                    os.fsync(fd)
                finally:
                    os.close(fd)

    def close(self) -> None:
        """Close the fd (the index stays usable: an append reopens it, a flush of unsynced
        entries fsyncs through a new one)."""
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def delete(self) -> None:
        self.close()
        self.path.unlink(missing_ok=True)


__all__ = [
    "TXN_ENTRY_SIZE",
    "TXN_INDEX_SUFFIX",
    "TXN_INDEX_VERSION",
    "AbortedTxn",
    "TransactionIndex",
    "TxnIndexCorruptError",
    "decode_entries",
    "encode_entries",
]
