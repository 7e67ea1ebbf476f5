"""Kafka 3.9's topic config keys (``TopicConfig`` / ``LogConfig``), the reference the unit and
integration tests walk: each key's DescribeConfigs type, Kafka's default as DescribeConfigs
shows it, and another value Kafka accepts."""

from __future__ import annotations

from typing import Final, NamedTuple

LONG_MAX: Final = str(2**63 - 1)


class KafkaTopicConfig(NamedTuple):
    type: str  # DescribeConfigs' config_type name
    default: str
    other: str  # a valid value other than the default (but for remote.storage.enable)


#: Every topic-level key of Kafka 3.9 (docs/broker.md "Topic configs").
KAFKA_TOPIC_CONFIGS: Final[dict[str, KafkaTopicConfig]] = {
    "cleanup.policy": KafkaTopicConfig("LIST", "delete", "compact,delete"),
    "compression.gzip.level": KafkaTopicConfig("INT", "-1", "5"),
    "compression.lz4.level": KafkaTopicConfig("INT", "9", "10"),
    "compression.type": KafkaTopicConfig("STRING", "producer", "gzip"),
    "compression.zstd.level": KafkaTopicConfig("INT", "3", "5"),
    "delete.retention.ms": KafkaTopicConfig("LONG", "86400000", "1000"),
    "file.delete.delay.ms": KafkaTopicConfig("LONG", "60000", "1000"),
    "flush.messages": KafkaTopicConfig("LONG", LONG_MAX, "100000"),
    "flush.ms": KafkaTopicConfig("LONG", LONG_MAX, "100000"),
    "follower.replication.throttled.replicas": KafkaTopicConfig("LIST", "", "*"),
    "index.interval.bytes": KafkaTopicConfig("INT", "4096", "8192"),
    "leader.replication.throttled.replicas": KafkaTopicConfig("LIST", "", "*"),
    "local.retention.bytes": KafkaTopicConfig("LONG", "-2", "1000000"),
    "local.retention.ms": KafkaTopicConfig("LONG", "-2", "3600000"),
    "max.compaction.lag.ms": KafkaTopicConfig("LONG", LONG_MAX, "86400000"),
    "max.message.bytes": KafkaTopicConfig("INT", "1048588", "2000000"),
    "message.downconversion.enable": KafkaTopicConfig("BOOLEAN", "true", "false"),
    "message.format.version": KafkaTopicConfig("STRING", "3.0-IV1", "2.8"),
    "message.timestamp.after.max.ms": KafkaTopicConfig("LONG", LONG_MAX, "3600000"),
    "message.timestamp.before.max.ms": KafkaTopicConfig("LONG", LONG_MAX, "86400000"),
    "message.timestamp.difference.max.ms": KafkaTopicConfig("LONG", LONG_MAX, "86400000"),
    "message.timestamp.type": KafkaTopicConfig("STRING", "CreateTime", "LogAppendTime"),
    "min.cleanable.dirty.ratio": KafkaTopicConfig("DOUBLE", "0.5", "0.25"),
    "min.compaction.lag.ms": KafkaTopicConfig("LONG", "0", "1000"),
    "min.insync.replicas": KafkaTopicConfig("INT", "1", "2"),
    "preallocate": KafkaTopicConfig("BOOLEAN", "false", "true"),
    "remote.log.copy.disable": KafkaTopicConfig("BOOLEAN", "false", "true"),
    "remote.log.delete.on.disable": KafkaTopicConfig("BOOLEAN", "false", "true"),
    # A broker without tiered storage (remote.log.storage.system.enable=false) refuses true.
    "remote.storage.enable": KafkaTopicConfig("BOOLEAN", "false", "false"),
    "retention.bytes": KafkaTopicConfig("LONG", "-1", "1000000000"),
    "retention.ms": KafkaTopicConfig("LONG", "604800000", "3600000"),
    "segment.bytes": KafkaTopicConfig("INT", "1073741824", "1048576"),
    "segment.index.bytes": KafkaTopicConfig("INT", "10485760", "1048576"),
    "segment.jitter.ms": KafkaTopicConfig("LONG", "0", "1000"),
    "segment.ms": KafkaTopicConfig("LONG", "604800000", "3600000"),
    "unclean.leader.election.enable": KafkaTopicConfig("BOOLEAN", "false", "true"),
}
