"""The producer state's snapshot files (``tidelog.storage.producer_state`` rule 4):
``<offset>.snapshot``, the state covering exactly the offsets below ``offset``, CRC-32C
checked; ``encode_snapshot`` documents the format.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from typing import Final, NamedTuple

import crc32c

from tidelog.storage.producer_entry import MAX_BATCHES_TO_RETAIN, BatchMetadata, ProducerStateEntry

SNAPSHOT_SUFFIX: Final = ".snapshot"
#: 2: transactions (rule 4); version 1 files still load.
SNAPSHOT_VERSION: Final = 2

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


__all__ = [
    "SNAPSHOT_SUFFIX",
    "SNAPSHOT_VERSION",
    "CorruptSnapshotError",
    "ProducerSnapshot",
    "decode_snapshot",
    "decode_snapshot_file",
    "encode_snapshot",
    "snapshot_file_name",
]
