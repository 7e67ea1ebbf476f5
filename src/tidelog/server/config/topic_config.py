"""A topic's effective configuration: its overrides over the broker's topic defaults.

Kafka's ``LogConfig.fromProps(defaults, overrides)``: every topic-level key takes the
topic's override when one is set, else the broker's default (``log.retention.ms`` for
``retention.ms``, ...); ``flush.ms = -1`` means "never", which the log reads as LONG_MAX.
``log_config_for`` turns that into storage's ``LogConfig``.
"""

from __future__ import annotations

from collections.abc import Mapping

from tidelog.server.config.broker_config import BrokerConfig
from tidelog.server.config.values import LONG_MAX
from tidelog.storage.log_config import LogConfig, timestamp_window
from tidelog.storage.producer_state import DEFAULT_PRODUCER_ID_EXPIRATION_MS


def effective_topic_config(
    config: BrokerConfig, overrides: Mapping[str, object]
) -> dict[str, object]:
    """The broker's topic defaults with the topic's non-null ``overrides`` on top."""
    merged = config.topic_defaults()
    merged.update({k: v for k, v in overrides.items() if v is not None})
    if merged.get("flush.ms") == -1:
        merged["flush.ms"] = LONG_MAX
    return merged


def log_config_for(
    topic_config: Mapping[str, object], broker_config: BrokerConfig | None = None
) -> LogConfig:
    """Storage's ``LogConfig`` from a topic's effective (defaults + overrides) config, plus
    the broker-only ``producer.id.expiration.ms`` and ``tidelog.log.page.cache.keep.bytes``
    when ``broker_config`` is given."""

    def get(key: str) -> int:
        value = topic_config[key]
        assert isinstance(value, int)
        return value

    before_max_ms, after_max_ms = timestamp_window(
        get("message.timestamp.before.max.ms"),
        get("message.timestamp.after.max.ms"),
        get("message.timestamp.difference.max.ms"),
    )
    return LogConfig(
        segment_bytes=get("segment.bytes"),
        segment_jitter_ms=get("segment.jitter.ms"),
        file_delete_delay_ms=get("file.delete.delay.ms"),
        message_timestamp_type=str(topic_config["message.timestamp.type"]),
        message_timestamp_before_max_ms=before_max_ms,
        message_timestamp_after_max_ms=after_max_ms,
        segment_ms=get("segment.ms"),
        index_interval_bytes=get("index.interval.bytes"),
        segment_index_bytes=get("segment.index.bytes"),
        retention_ms=get("retention.ms"),
        retention_bytes=get("retention.bytes"),
        flush_interval_messages=get("flush.messages"),
        flush_interval_ms=get("flush.ms"),
        max_message_bytes=get("max.message.bytes"),
        compression_type=str(topic_config["compression.type"]),
        compression_gzip_level=get("compression.gzip.level"),
        compression_lz4_level=get("compression.lz4.level"),
        compression_zstd_level=get("compression.zstd.level"),
        cleanup_policy=str(topic_config["cleanup.policy"]),
        min_cleanable_dirty_ratio=float(topic_config["min.cleanable.dirty.ratio"]),  # type: ignore[arg-type]
        delete_retention_ms=get("delete.retention.ms"),
        min_compaction_lag_ms=get("min.compaction.lag.ms"),
        max_compaction_lag_ms=get("max.compaction.lag.ms"),
        producer_id_expiration_ms=(
            broker_config.get_int("producer.id.expiration.ms")
            if broker_config is not None
            else DEFAULT_PRODUCER_ID_EXPIRATION_MS
        ),
        page_cache_keep_bytes=(
            broker_config.get_int("tidelog.log.page.cache.keep.bytes")
            if broker_config is not None
            else -1
        ),
    )
