"""Records regions the page cache does not hold are read off the event loop (connection
rule 5b).

A consumer catching up reads data the page cache no longer holds (a broker keeps only the
newest ``tidelog.log.page.cache.keep.bytes`` of each log cached, ``storage.page_cache``).
Read on the event loop, each ``pread`` or ``sendfile`` of it waits for the disk, and every
other produce and fetch the broker serves waits behind it: 2-89 ms per call in ``perf
trace`` of three brokers under the bench's catch-up rows (docs/performance.md, "What
stalled the event loop on the disk"). Kafka's network threads have the same problem with
``sendfile`` (KAFKA-7504).

Rules:

1. ``prepare`` runs on the loop when a response is ready. A region of at most
   ``SENDFILE_MIN_BYTES`` (which the write would copy anyway) is read now with
   ``RWF_NOWAIT``, which reads only from the page cache: read whole, it becomes bytes. A
   larger region (sent with ``sendfile``) is probed with one-byte ``RWF_NOWAIT`` reads of its
   first and last byte. The regions read short or probed absent are *cold*.
2. ``read_cold`` runs in a worker thread: a small cold region is read to bytes; a large one
   is read through a scratch buffer, which leaves its pages cached for the loop's
   ``sendfile``. The response is written in its turn once that is done (the connection's
   order rule holds: the responses behind it on its connection wait, nothing else does).
3. A read that fails (a file closed under it) leaves the region as it was: the write then
   reads it as it always did. Without ``RWF_NOWAIT`` (not Linux) nothing is cold.

The probe of a large region looks at two pages only: the page cache keeps and drops a log's
pages in contiguous stretches (``storage.page_cache``; readahead fills stretches too), so a
region whose two ends are cached is taken as cached. A miss in between costs a read on the
loop, as before.
"""

from __future__ import annotations

import os
import typing
from collections.abc import Sequence
from typing import Final, Protocol

from tidelog.storage import page_cache

#: Records regions up to this size are copied into the answer's one write rather than sent
#: with sendfile (connection rule 5): a follower or consumer fetch at a few thousand
#: records/s reads a few KiB per partition, and a write plus a sendfile plus a write per
#: partition cost a system call and a loopback TCP segment each, for the sender and the
#: receiver.
SENDFILE_MIN_BYTES: Final = 64 * 1024


class RecordsRegion(Protocol):
    """A contiguous byte range of an open file (storage's ``FetchSlice``)."""

    @property
    def fileno(self) -> int: ...
    @property
    def position(self) -> int: ...
    @property
    def length(self) -> int: ...


Part = bytes | memoryview | RecordsRegion


def has_regions(parts: Sequence[object]) -> bool:
    return any(not isinstance(part, (bytes, memoryview)) for part in parts)


def prepare(parts: Sequence[Part | object]) -> tuple[list[Part | object], list[int]]:
    """Rule 1: (the parts with the small cached regions read, the indexes of cold ones)."""
    out = list(parts)
    cold: list[int] = []
    if not page_cache.CAN_READ_CACHED:
        return out, cold
    for i, part in enumerate(out):
        if isinstance(part, (bytes, memoryview)):
            continue
        region = typing.cast(RecordsRegion, part)
        if region.length <= 0:
            continue
        if region.length <= SENDFILE_MIN_BYTES:
            data = page_cache.read_cached(region.fileno, region.position, region.length)
            if data is None:
                cold.append(i)
            else:
                out[i] = data
        elif not page_cache.ends_cached(region.fileno, region.position, region.length):
            cold.append(i)
    return out, cold


def read_cold(parts: list[Part | object], cold: Sequence[int]) -> list[Part | object]:
    """Rule 2 (a worker thread): the cold regions read to bytes (small) or into the page
    cache (large); ``parts`` is changed in place and returned."""
    for i in cold:
        region = typing.cast(RecordsRegion, parts[i])
        try:
            if region.length <= SENDFILE_MIN_BYTES:
                data = os.pread(region.fileno, region.length, region.position)
                if len(data) == region.length:
                    parts[i] = data
            else:
                page_cache.load(region.fileno, region.position, region.length)
        except OSError:
            continue  # rule 3
    return parts


__all__ = ["SENDFILE_MIN_BYTES", "RecordsRegion", "has_regions", "prepare", "read_cold"]
