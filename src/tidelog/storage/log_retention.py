"""Which leading segments a log's retention deletes (Kafka's ``UnifiedLog.deleteOldSegments``:
``retention.ms``, ``retention.bytes``, the log start offset). Each function reads the segment
list and answers a count; nothing here changes the log. ``Log`` asks these under its lock,
one after the other, and deletes each prefix before asking the next (a deletion changes the
list the next one reads: its size, and a new empty segment when all of them went).

A prefix never holds an empty active segment nor a segment reaching past the high watermark
(``LocalLog.deletable_prefix``).
"""

from __future__ import annotations

import os

from tidelog.storage.local_log import LocalLog
from tidelog.storage.log_config import LogConfig
from tidelog.storage.segment import LogSegment


def largest_timestamp(seg: LogSegment) -> int:
    """Kafka's LogSegment.largestTimestamp: max batch timestamp, else the file's mtime."""
    if seg.max_timestamp >= 0:
        return seg.max_timestamp
    return os.fstat(seg.fd).st_mtime_ns // 1_000_000


def expired_by_time(
    local: LocalLog, config: LogConfig, now_ms: int, high_watermark: int | None
) -> int:
    """How many leading segments are older than ``retention.ms`` (by their largest
    timestamp); 0 when time retention is off (``retention.ms`` -1 or no ``delete`` in
    ``cleanup.policy``)."""
    retention_ms = config.retention_ms
    if retention_ms < 0 or not config.delete:
        return 0
    return local.deletable_prefix(
        lambda seg, upper: now_ms - largest_timestamp(seg) > retention_ms, high_watermark
    )


def excess_by_size(local: LocalLog, config: LogConfig, high_watermark: int | None) -> int:
    """How many leading segments can go, oldest first, while the log stays at or above
    ``retention.bytes`` without them; 0 when size retention is off (``retention.bytes`` -1
    or no ``delete`` in ``cleanup.policy``)."""
    if config.retention_bytes < 0 or not config.delete:
        return 0
    excess = local.size_bytes - config.retention_bytes

    def too_big(seg: LogSegment, upper: int) -> bool:
        nonlocal excess
        if excess - seg.size < 0:
            return False
        excess -= seg.size
        return True

    return local.deletable_prefix(too_big, high_watermark)


def below_log_start(local: LocalLog, log_start_offset: int, high_watermark: int | None) -> int:
    """How many leading segments end at or below ``log_start_offset`` (DeleteRecords moved
    the start past them)."""
    return local.deletable_prefix(lambda seg, upper: upper <= log_start_offset, high_watermark)
