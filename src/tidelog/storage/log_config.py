"""A partition log's settings: Kafka's topic configs (``segment.bytes``, ``retention.ms``,
``cleanup.policy`` ...) with Kafka's defaults, plus the broker-level ones a log reads."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from tidelog.storage.index import OFFSET_ENTRY_SIZE
from tidelog.storage.producer_state import DEFAULT_PRODUCER_ID_EXPIRATION_MS

#: "Never" for the flush and compaction-lag settings (Kafka's Long.MAX_VALUE).
NEVER: Final = 2**63 - 1


@dataclass(frozen=True, slots=True, kw_only=True)
class LogConfig:
    """Per-log settings with Kafka's defaults (topic config names in comments)."""

    segment_bytes: int = 1 << 30  # segment.bytes
    segment_ms: int = 7 * 24 * 3600 * 1000  # segment.ms
    index_interval_bytes: int = 4096  # index.interval.bytes
    segment_index_bytes: int = 10 * 1024 * 1024  # segment.index.bytes
    retention_ms: int = 7 * 24 * 3600 * 1000  # retention.ms; -1 = forever
    retention_bytes: int = -1  # retention.bytes; -1 = unlimited
    flush_interval_messages: int = NEVER  # flush.messages
    flush_interval_ms: int = NEVER  # flush.ms
    max_message_bytes: int = 1048588  # max.message.bytes: max batch size
    #: compression.type: ``producer`` keeps the client's codec; uncompressed, gzip, snappy,
    #: lz4, zstd recompress leader appends (``tidelog.storage.log_validator``).
    compression_type: str = "producer"
    compression_gzip_level: int = -1  # compression.gzip.level (KIP-390; -1: zlib's 6)
    compression_lz4_level: int = 9  # compression.lz4.level
    compression_zstd_level: int = 3  # compression.zstd.level
    file_delete_delay_ms: int = 60_000  # file.delete.delay.ms
    #: segment.jitter.ms: each segment's time-based roll comes up to this much earlier, a
    #: random amount drawn when it is created (Kafka's ``LogSegment.rollJitterMs``).
    segment_jitter_ms: int = 0
    #: message.timestamp.type: ``CreateTime`` keeps the producer's timestamps;
    #: ``LogAppendTime``: the leader stamps each batch with its own time
    #: (``tidelog.storage.log_timestamps``).
    message_timestamp_type: str = "CreateTime"
    #: KIP-937: a CreateTime timestamp must lie in [now - before, now + after] (NEVER: no
    #: bound); message.timestamp.before.max.ms / after.max.ms, else the deprecated
    #: message.timestamp.difference.max.ms (``timestamp_window``).
    message_timestamp_before_max_ms: int = NEVER
    message_timestamp_after_max_ms: int = NEVER
    #: Broker-level only (Kafka has no topic override): producer_state rule 5.
    producer_id_expiration_ms: int = DEFAULT_PRODUCER_ID_EXPIRATION_MS  # producer.id.expiration.ms
    #: Broker-level only, tidelog's own (tidelog.log.page.cache.keep.bytes): the newest bytes
    #: of the log left in the page cache; older ones are written back and dropped from it
    #: (``tidelog.storage.page_cache``). -1 leaves the page cache to the kernel, as Kafka.
    page_cache_keep_bytes: int = -1
    #: cleanup.policy: "delete", "compact" or "compact,delete" (``tidelog.storage.cleaner``).
    cleanup_policy: str = "delete"
    min_cleanable_dirty_ratio: float = 0.5  # min.cleanable.dirty.ratio
    delete_retention_ms: int = 86_400_000  # delete.retention.ms (tombstones, markers)
    min_compaction_lag_ms: int = 0  # min.compaction.lag.ms
    max_compaction_lag_ms: int = NEVER  # max.compaction.lag.ms

    @property
    def compact(self) -> bool:
        """Whether the cleaner compacts this log (its offsets may then have gaps)."""
        return "compact" in self.cleanup_policy.split(",")

    @property
    def delete(self) -> bool:
        """Whether retention.ms / retention.bytes delete old segments."""
        return "delete" in self.cleanup_policy.split(",")

    @property
    def log_append_time(self) -> bool:
        """Whether the leader stamps appends with its own time (message.timestamp.type)."""
        return self.message_timestamp_type == "LogAppendTime"

    @property
    def max_index_entries(self) -> int:
        return max(1, self.segment_index_bytes // OFFSET_ENTRY_SIZE)


def timestamp_window(
    before_max_ms: int, after_max_ms: int, difference_max_ms: int
) -> tuple[int, int]:
    """KIP-937 (Kafka 3.6+ ``LogConfig``): each of before/after.max.ms still at its default
    (Long.MAX_VALUE) takes the deprecated message.timestamp.difference.max.ms instead."""
    return (
        difference_max_ms if before_max_ms == NEVER else before_max_ms,
        difference_max_ms if after_max_ms == NEVER else after_max_ms,
    )


__all__ = ["NEVER", "LogConfig", "timestamp_window"]
