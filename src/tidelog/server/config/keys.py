"""Every config key tidelog knows, declared once: how to parse it, its default, its range,
and what DescribeConfigs says of it (Kafka's type, one line of documentation, whether it
changes at runtime, whether Kafka's default is null).

Rules (Kafka's ``KafkaConfig``/``LogConfig`` definitions, KIP-226, KIP-133 config types):

1. ``tidelog.server.config.broker_keys.BROKER_KEYS`` are the broker properties tidelog
   acts on, with Kafka's defaults; ``TOPIC_KEYS`` the topic-level keys, by Kafka's
   topic-level names; ``IGNORED_KEYS`` the Kafka properties accepted so a real
   ``server.properties`` starts, and otherwise unused.
2. ``ConfigType`` is DescribeConfigs' wire number (the ``config_type`` field of v3+). A key
   of type PASSWORD is sensitive: its value is never returned.
3. ``dynamic``: a broker key tidelog applies without a restart (KIP-226); topic keys are
   never read-only, so the flag is for broker keys only.
4. ``unset_default``: Kafka's default is null (the key is "not set" and a lower synonym
   decides); tidelog's sentinel (-2 / -1) is not shown as a DEFAULT_CONFIG value.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Final

from tidelog.server.config.throttles import (
    FOLLOWER_THROTTLED_REPLICAS,
    LEADER_THROTTLED_REPLICAS,
    throttled_replicas_parser,
)
from tidelog.server.config.values import (
    LONG_MAX,
    _at_least,
    _between,
    _cleanup_policy,
    _compression_type,
    _message_format_version,
    _minus_one_or_between,
    _parse_bool,
    _parse_double,
    _parse_int,
    _parse_str,
    _ratio,
)


class ConfigType(enum.IntEnum):
    """DescribeConfigs v3+ ``config_type`` (Kafka's ``DescribeConfigsResponse.ConfigType``)."""

    UNKNOWN = 0
    BOOLEAN = 1
    STRING = 2
    INT = 3
    SHORT = 4
    LONG = 5
    DOUBLE = 6
    LIST = 7
    CLASS = 8
    PASSWORD = 9


@dataclass(frozen=True, slots=True)
class ConfigKey:
    """One key: parsing and range (rule 1) and what DescribeConfigs says of it (rules 2-4)."""

    type: ConfigType
    documentation: str
    parse: Callable[[str], object]
    default: object
    check: Callable[[object], str | None] | None = None
    dynamic: bool = False
    unset_default: bool = False

    @property
    def sensitive(self) -> bool:
        """Rule 2."""
        return self.type is ConfigType.PASSWORD


T = ConfigType


def _key(
    kind: ConfigType,
    doc: str,
    parse: Callable[[str], object],
    default: object,
    check: Callable[[int], str | None] | None = None,
    *,
    dynamic: bool = False,
    unset: bool = False,
) -> ConfigKey:
    return ConfigKey(kind, doc, parse, default, check, dynamic, unset)  # type: ignore[arg-type]


def _ignored(kind: ConfigType, doc: str) -> ConfigKey:
    return ConfigKey(kind, doc, _parse_str, "")


def _enum(*allowed: str) -> Callable[[str], object]:
    def parse(raw: str) -> str:
        value = raw.strip()
        if value not in allowed:
            raise ValueError(f"must be one of {', '.join(allowed)}")
        return value

    return parse


#: Kafka properties accepted for compatibility with existing files; tidelog has no use for
#: them (one event loop, the OS's socket buffers), so they are recorded and otherwise ignored.
IGNORED_KEYS: Final[Mapping[str, ConfigKey]] = {
    "num.network.threads": _ignored(
        T.INT, "Accepted for compatibility; tidelog has one event loop."
    ),
    "num.io.threads": _ignored(T.INT, "Accepted for compatibility; tidelog has one event loop."),
    "num.recovery.threads.per.data.dir": _ignored(T.INT, "Accepted for compatibility; not used."),
    "socket.send.buffer.bytes": _ignored(T.INT, "Accepted for compatibility; the OS's buffers."),
    "socket.receive.buffer.bytes": _ignored(T.INT, "Accepted for compatibility; the OS's buffers."),
    "connections.max.reauth.ms": _ignored(
        T.LONG, "Accepted for compatibility; no re-authentication."
    ),
    "queued.max.requests": _ignored(T.INT, "Accepted for compatibility; not used."),
}

#: KIP-390: the levels the broker compresses with, the same keys at broker and topic level.
COMPRESSION_LEVEL_KEYS: Final[Mapping[str, ConfigKey]] = {
    "compression.gzip.level": _key(
        T.INT,
        "The gzip level when the broker compresses.",
        _parse_int,
        -1,
        _minus_one_or_between(1, 9),
    ),
    "compression.lz4.level": _key(
        T.INT, "The lz4 level when the broker compresses.", _parse_int, 9, _between(1, 17)
    ),
    "compression.zstd.level": _key(
        T.INT, "The zstd level when the broker compresses.", _parse_int, 3, _between(-131072, 22)
    ),
}

#: KIP-405: tidelog has no tiered storage, as a Kafka broker with
#: ``remote.log.storage.system.enable=false`` (its default); Kafka's ``LogConfig`` then
#: refuses a topic with remote storage, with this message.
TIERED_STORAGE_DISABLED: Final = (
    "Tiered Storage functionality is disabled in the broker. "
    "Topic cannot be configured with remote log storage."
)


def _no_remote_storage(value: object) -> str | None:
    return TIERED_STORAGE_DISABLED if value is True else None


#: Topic configs, by Kafka's topic-level name: Kafka 3.9's ``LogConfig`` key list with its
#: defaults (docs/broker.md "Topic configs" says which are accepted and stored without
#: effect). A key not listed is refused with INVALID_CONFIG.
TOPIC_KEYS: Final[Mapping[str, ConfigKey]] = {
    "cleanup.policy": _key(
        T.LIST,
        "What happens to old segments: delete, compact (latest value per key) or both.",
        _cleanup_policy,
        "delete",
    ),
    "min.cleanable.dirty.ratio": _key(
        T.DOUBLE,
        "The dirty share of the log at which the cleaner compacts it.",
        _parse_double,
        0.5,
        _ratio,
    ),
    "delete.retention.ms": _key(
        T.LONG,
        "How long tombstones and markers outlive compaction.",
        _parse_int,
        86400000,
        _at_least(0),
    ),
    "min.compaction.lag.ms": _key(
        T.LONG, "The least time a record stays uncompacted.", _parse_int, 0, _at_least(0)
    ),
    "max.compaction.lag.ms": _key(
        T.LONG, "The longest a record stays uncompacted.", _parse_int, LONG_MAX, _at_least(1)
    ),
    "compression.type": _key(
        T.STRING, "Compression of the topic's stored batches.", _compression_type, "producer"
    ),
    **COMPRESSION_LEVEL_KEYS,
    "retention.ms": _key(
        T.LONG,
        "Segments older than this are deleted (-1: never).",
        _parse_int,
        604800000,
        _at_least(-1),
    ),
    "retention.bytes": _key(
        T.LONG,
        "Each partition is cut back to this size (-1: no limit).",
        _parse_int,
        -1,
        _at_least(-1),
    ),
    "segment.bytes": _key(
        T.INT, "A segment rolls over at this size.", _parse_int, 1073741824, _at_least(14)
    ),
    "segment.ms": _key(
        T.LONG, "A segment rolls over at this age.", _parse_int, 604800000, _at_least(1)
    ),
    "segment.index.bytes": _key(
        T.INT, "The largest offset index of a segment.", _parse_int, 10485760, _at_least(4)
    ),
    "index.interval.bytes": _key(
        T.INT, "Bytes between two offset index entries.", _parse_int, 4096, _at_least(0)
    ),
    "max.message.bytes": _key(
        T.INT, "The largest record batch the topic accepts.", _parse_int, 1048588, _at_least(0)
    ),
    "min.insync.replicas": _key(
        T.INT, "The fewest in-sync replicas an acks=all produce needs.", _parse_int, 1, _at_least(1)
    ),
    "unclean.leader.election.enable": _key(
        T.BOOLEAN,
        "Whether a replica outside the ISR may become leader (data loss).",
        _parse_bool,
        False,
    ),
    "flush.messages": _key(
        T.LONG, "Records appended before the log is fsynced.", _parse_int, LONG_MAX, _at_least(1)
    ),
    "flush.ms": _key(
        T.LONG, "The longest unflushed data waits for fsync.", _parse_int, LONG_MAX, _at_least(0)
    ),
    "segment.jitter.ms": _key(
        T.LONG,
        "The most a random jitter brings a segment's time-based roll forward.",
        _parse_int,
        0,
        _at_least(0),
    ),
    "file.delete.delay.ms": _key(
        T.LONG,
        "How long a deleted segment's files stay before they are removed.",
        _parse_int,
        60000,
        _at_least(0),
    ),
    "preallocate": _key(
        T.BOOLEAN,
        "Accepted for compatibility; segment files are not preallocated.",
        _parse_bool,
        False,
    ),
    "message.timestamp.type": _key(
        T.STRING,
        "Which timestamp records keep: the producer's (CreateTime) or the broker's.",
        _enum("CreateTime", "LogAppendTime"),
        "CreateTime",
    ),
    # KIP-937: the CreateTime window [now - before, now + after]; difference.max.ms is the
    # deprecated key both sides fall back to while they are unset (Long.MAX_VALUE).
    "message.timestamp.difference.max.ms": _key(
        T.LONG,
        "Deprecated: both bounds of the CreateTime window, unless the new keys are set.",
        _parse_int,
        LONG_MAX,
        _at_least(0),
    ),
    "message.timestamp.before.max.ms": _key(
        T.LONG,
        "How far a CreateTime timestamp may lie before the broker's time.",
        _parse_int,
        LONG_MAX,
        _at_least(0),
    ),
    "message.timestamp.after.max.ms": _key(
        T.LONG,
        "How far a CreateTime timestamp may lie after the broker's time.",
        _parse_int,
        LONG_MAX,
        _at_least(0),
    ),
    "message.downconversion.enable": _key(
        T.BOOLEAN,
        "Accepted for compatibility; tidelog serves only magic 2 (no down-conversion).",
        _parse_bool,
        True,
    ),
    "message.format.version": _key(
        T.STRING,
        "Accepted for compatibility; ignored since Kafka 3.0 (KIP-724).",
        _message_format_version,
        "3.0-IV1",
    ),
    "remote.storage.enable": _key(
        T.BOOLEAN,
        "Tiered storage (KIP-405); tidelog has none, so only false is accepted.",
        _parse_bool,
        False,
        _no_remote_storage,
    ),
    "local.retention.ms": _key(
        T.LONG,
        "Accepted for compatibility; local retention under tiered storage (-2: retention.ms).",
        _parse_int,
        -2,
        _at_least(-2),
    ),
    "local.retention.bytes": _key(
        T.LONG,
        "Accepted for compatibility; local size under tiered storage (-2: retention.bytes).",
        _parse_int,
        -2,
        _at_least(-2),
    ),
    "remote.log.copy.disable": _key(
        T.BOOLEAN, "Accepted for compatibility; tidelog has no tiered storage.", _parse_bool, False
    ),
    "remote.log.delete.on.disable": _key(
        T.BOOLEAN, "Accepted for compatibility; tidelog has no tiered storage.", _parse_bool, False
    ),
    # KIP-73: the replicas throttled while they lead / follow (partition:broker list or *).
    LEADER_THROTTLED_REPLICAS: _key(
        T.LIST,
        "Replicas throttled while they lead: partitionId:brokerId,... or *.",
        throttled_replicas_parser(LEADER_THROTTLED_REPLICAS),
        "",
    ),
    FOLLOWER_THROTTLED_REPLICAS: _key(
        T.LIST,
        "Replicas throttled while they follow: partitionId:brokerId,... or *.",
        throttled_replicas_parser(FOLLOWER_THROTTLED_REPLICAS),
        "",
    ),
}
