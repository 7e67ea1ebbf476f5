"""The cleaner's crash-safe segment swap (``tidelog.storage.cleaner`` rule 6, Kafka's
``.cleaned`` / ``.swap`` files): ``CleanedSegment`` writes one group's new segment and swaps
it in; ``complete_swaps`` finishes or drops an interrupted swap when a log opens.

Every file of a cleaned segment is written as ``<name>.cleaned`` and fsynced, then renamed
``<name>.swap`` (indexes first, the ``.log`` last, so a ``<base>.log.swap`` means every
file is there), then, under the log's lock, renamed to its final name once the old segments
were renamed ``*.deleted``.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Final

from tidelog.protocol.records import BATCH_HEADER_SIZE, parse_header
from tidelog.storage.checkpoints import fsync_directory
from tidelog.storage.index import OffsetIndex, TimeIndex
from tidelog.storage.segment import (
    CLEANED_SUFFIX,
    INDEX_SUFFIX,
    LOG_SUFFIX,
    SWAP_SUFFIX,
    TIME_INDEX_SUFFIX,
    LogSegment,
    segment_file_name,
)
from tidelog.storage.txn_index import TXN_INDEX_SUFFIX, AbortedTxn, encode_entries

logger = logging.getLogger(__name__)

_SUFFIXES: Final = (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX)
#: The order of the renames: the .log last, so a ``.log.swap`` means all are there.
_SWAP_ORDER: Final = (INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX, LOG_SUFFIX)
#: Bytes buffered before a cleaned segment's pending batches are written.
_WRITE_CHUNK: Final = 1 << 20


def complete_swaps(directory: Path) -> None:
    """Rule 6 at open, before the segments are listed: drop ``.cleaned`` files, finish
    every ``<base>.log.swap`` and drop index ``.swap`` files left without one."""
    names = [p.name for p in directory.iterdir()]
    for name in names:
        if name.endswith(CLEANED_SUFFIX):
            (directory / name).unlink(missing_ok=True)
    swaps = sorted(
        int(n[: -len(LOG_SUFFIX + SWAP_SUFFIX)])
        for n in names
        if n.endswith(LOG_SUFFIX + SWAP_SUFFIX) and n[: -len(LOG_SUFFIX + SWAP_SUFFIX)].isdigit()
    )
    for base in swaps:
        swap_log = directory / (segment_file_name(base, LOG_SUFFIX) + SWAP_SUFFIX)
        upper = max(_next_offset_of(swap_log, base), base + 1)
        for p in list(directory.iterdir()):
            stem, _, suffix = p.name.partition(".")
            if stem.isdigit() and base <= int(stem) < upper and "." + suffix in _SUFFIXES:
                p.unlink()
        for suffix in _SWAP_ORDER:
            swap = directory / (segment_file_name(base, suffix) + SWAP_SUFFIX)
            if swap.exists():
                os.rename(swap, directory / segment_file_name(base, suffix))
        logger.info("%s: completed the cleaner's swap of segment %d", directory.name, base)
    for p in list(directory.iterdir()):
        if p.name.endswith(SWAP_SUFFIX):
            p.unlink()  # an index whose .log was never renamed to .swap
    if swaps:
        fsync_directory(directory)


def _next_offset_of(path: Path, base: int) -> int:
    """One past the last offset of the whole batches in a ``.log`` file (``base`` if none)."""
    next_offset = base
    with open(path, "rb") as f:
        data = f.read()
    pos = 0
    while len(data) - pos >= BATCH_HEADER_SIZE:
        header = parse_header(data, pos, whole=False)
        if pos + header.size > len(data):
            break
        next_offset = header.next_offset
        pos += header.size
    return next_offset


class CleanedSegment:
    """Rule 6's ``.cleaned`` files of one group, written as appends would write them."""

    def __init__(self, directory: Path, base_offset: int, index_interval_bytes: int) -> None:
        self.directory = directory
        self.base_offset = base_offset
        self.index_interval_bytes = index_interval_bytes
        self.log_path = self._path(LOG_SUFFIX, CLEANED_SUFFIX)
        self.fd = os.open(self.log_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        self.offset_index = OffsetIndex(
            self._path(INDEX_SUFFIX, CLEANED_SUFFIX), base_offset, 2**31
        )
        self.time_index = TimeIndex(self._path(TIME_INDEX_SUFFIX, CLEANED_SUFFIX), base_offset)
        self.aborted: list[AbortedTxn] = []
        self.size = 0
        self.max_timestamp = -1
        self.offset_of_max_timestamp = -1
        self._since_entry = 0
        self._pending: list[bytes] = []
        self._pending_bytes = 0

    def _path(self, suffix: str, state: str) -> Path:
        return self.directory / (segment_file_name(self.base_offset, suffix) + state)

    def append(self, batch: bytes, last_offset: int, max_timestamp: int) -> None:
        """Add one batch (the index rule of ``LogSegment._account``)."""
        if max_timestamp > self.max_timestamp:
            self.max_timestamp = max_timestamp
            self.offset_of_max_timestamp = last_offset
        if self._since_entry > self.index_interval_bytes:
            self.offset_index.append(last_offset, self.size)
            self.time_index.maybe_append(self.max_timestamp, self.offset_of_max_timestamp)
            self._since_entry = 0
        self._since_entry += len(batch)
        self._pending.append(batch)
        self._pending_bytes += len(batch)
        self.size += len(batch)
        if self._pending_bytes >= _WRITE_CHUNK:
            self._write_pending()

    def _write_pending(self) -> None:
        if self._pending:
            data = b"".join(self._pending)
            view = memoryview(data)
            position = self.size - len(data)
            while view:
                written = os.pwrite(self.fd, view, position)
                view = view[written:]
                position += written
            self._pending = []
            self._pending_bytes = 0

    def finish(self) -> None:
        """Everything written and fsynced (rule 6), files closed."""
        self._write_pending()
        if self.max_timestamp >= 0:
            self.time_index.maybe_append(self.max_timestamp, self.offset_of_max_timestamp)
        os.fsync(self.fd)
        os.close(self.fd)
        self.fd = -1
        for index in (self.offset_index, self.time_index):
            index.flush()
            index.close()
        txn_path = self._path(TXN_INDEX_SUFFIX, CLEANED_SUFFIX)
        fd = os.open(txn_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            data = encode_entries(self.aborted)
            if data:
                os.pwrite(fd, data, 0)
            os.fsync(fd)
        finally:
            os.close(fd)

    def to_swap(self) -> None:
        """Rule 6: ``.cleaned`` -> ``.swap``, the ``.log`` last."""
        for suffix in _SWAP_ORDER:
            os.rename(self._path(suffix, CLEANED_SUFFIX), self._path(suffix, SWAP_SUFFIX))
        fsync_directory(self.directory)

    def install(
        self, upper: int, *, index_interval_bytes: int, max_index_entries: int
    ) -> LogSegment:
        """Under the log's lock, after the old segments were renamed ``*.deleted``: the
        ``.swap`` files take their final names and open as an inactive segment."""
        for suffix in _SWAP_ORDER:
            os.rename(self._path(suffix, SWAP_SUFFIX), self._path(suffix, ""))
        fsync_directory(self.directory)
        seg = LogSegment(
            self.directory,
            self.base_offset,
            index_interval_bytes=index_interval_bytes,
            max_index_entries=max_index_entries,
            now_ms=0,
        )
        seg.txn_index.load()
        if not seg.load_indexes():
            seg.scan(verify_from_offset=2**63, full=True)
        seg.trust_up_to(upper)
        return seg

    def discard(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
        self.offset_index.close()
        self.time_index.close()
        for suffix in _SUFFIXES:
            for state in (CLEANED_SUFFIX, SWAP_SUFFIX):
                self._path(suffix, state).unlink(missing_ok=True)


__all__ = ["CleanedSegment", "complete_swaps"]
