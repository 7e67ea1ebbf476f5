"""What DescribeConfigs says about config keys beyond their declaration: where a value came
from, the topic <-> broker synonyms, and the entry of a listener-prefixed key.

Each key's type, documentation and dynamic flag are declared with it, once, in
``tidelog.server.config.keys``. Rules (Kafka's ``ConfigHelper``/``DynamicBrokerConfig``,
KIP-226):

1. ``ConfigSource`` is DescribeConfigs' wire number (the ``config_source`` field of v1+).
2. A sensitive key (type PASSWORD) never has its value returned (value null,
   ``is_sensitive`` true), in the entry and in every synonym.
3. A broker key is read-only unless tidelog applies it without a restart (``dynamic``): the
   topic defaults Kafka's ``DynamicLogConfig`` reconfigures, plus
   ``producer.id.expiration.ms`` and the KIP-73 replication throttle rates. Keys Kafka can
   reconfigure but tidelog cannot apply (thread pools, listeners, keystores) stay read-only,
   and an alteration of them is refused with Kafka's "Cannot update these configs
   dynamically". Topic keys are never read-only.
4. Synonyms: a topic key's broker default comes from ``TOPIC_SYNONYMS`` (Kafka's
   ``ServerTopicConfigSynonyms``), each broker key expanding to its own synonym list
   (``broker_synonyms``: ``log.retention.ms`` > ``.minutes`` > ``.hours``, ``log.roll.ms`` >
   ``.hours``, ``log.roll.jitter.ms`` > ``.hours``, ``log.flush.interval.ms`` >
   ``log.flush.scheduler.interval.ms``) in precedence order. Only keys present in
   ``BROKER_KEYS`` appear in an answer.
5. Listener-prefixed keys (``listener.name.<l>.<key>``, ``listener.name.<l>.<mechanism>.
   sasl.jaas.config``) take the type and sensitivity of ``<key>``; they are read-only.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Mapping
from dataclasses import replace
from typing import Final

from tidelog.server.config.broker_keys import BROKER_KEYS
from tidelog.server.config.keys import IGNORED_KEYS, TOPIC_KEYS, ConfigKey


class ConfigSource(enum.IntEnum):
    """DescribeConfigs v1+ ``config_source`` (Kafka's ``DescribeConfigsResponse.ConfigSource``)."""

    UNKNOWN = 0
    DYNAMIC_TOPIC_CONFIG = 1
    DYNAMIC_BROKER_CONFIG = 2
    DYNAMIC_DEFAULT_BROKER_CONFIG = 3
    STATIC_BROKER_CONFIG = 4
    DEFAULT_CONFIG = 5
    DYNAMIC_BROKER_LOGGER_CONFIG = 6


#: Rule 4: a topic key's broker synonym (Kafka's ``ServerTopicConfigSynonyms``), expanded
#: by ``broker_synonyms``.
TOPIC_SYNONYMS: Final[Mapping[str, str]] = {
    "cleanup.policy": "log.cleanup.policy",
    "min.cleanable.dirty.ratio": "log.cleaner.min.cleanable.ratio",
    "delete.retention.ms": "log.cleaner.delete.retention.ms",
    "min.compaction.lag.ms": "log.cleaner.min.compaction.lag.ms",
    "max.compaction.lag.ms": "log.cleaner.max.compaction.lag.ms",
    "compression.type": "compression.type",
    "compression.gzip.level": "compression.gzip.level",
    "compression.lz4.level": "compression.lz4.level",
    "compression.zstd.level": "compression.zstd.level",
    "retention.ms": "log.retention.ms",
    "retention.bytes": "log.retention.bytes",
    "segment.bytes": "log.segment.bytes",
    "segment.ms": "log.roll.ms",
    "segment.index.bytes": "log.index.size.max.bytes",
    "index.interval.bytes": "log.index.interval.bytes",
    "max.message.bytes": "message.max.bytes",
    "min.insync.replicas": "min.insync.replicas",
    "unclean.leader.election.enable": "unclean.leader.election.enable",
    "flush.messages": "log.flush.interval.messages",
    "flush.ms": "log.flush.interval.ms",
    "message.timestamp.type": "log.message.timestamp.type",
    "segment.jitter.ms": "log.roll.jitter.ms",
    "file.delete.delay.ms": "log.segment.delete.delay.ms",
    "preallocate": "log.preallocate",
    "message.timestamp.difference.max.ms": "log.message.timestamp.difference.max.ms",
    "message.timestamp.before.max.ms": "log.message.timestamp.before.max.ms",
    "message.timestamp.after.max.ms": "log.message.timestamp.after.max.ms",
    "message.downconversion.enable": "log.message.downconversion.enable",
    "message.format.version": "log.message.format.version",
    "local.retention.ms": "log.local.retention.ms",
    "local.retention.bytes": "log.local.retention.bytes",
}

_RETENTION = ("log.retention.ms", "log.retention.minutes", "log.retention.hours")
_ROLL = ("log.roll.ms", "log.roll.hours")
_ROLL_JITTER = ("log.roll.jitter.ms", "log.roll.jitter.hours")
_FLUSH = ("log.flush.interval.ms", "log.flush.scheduler.interval.ms")


def broker_synonyms(name: str) -> tuple[str, ...]:
    """Rule 4: Kafka's ``DynamicBrokerConfig.brokerConfigSynonyms``, highest precedence
    first (without the listener-prefix expansion)."""
    for group in (_RETENTION, _ROLL, _ROLL_JITTER):
        if name in group:
            return group
    if name == _FLUSH[0]:
        return _FLUSH
    return (name,)


#: Rule 5.
_LISTENER_PREFIX = re.compile(
    r"^listener\.name\.[A-Za-z0-9_]+\.(?:(?:plain|scram-sha-256|scram-sha-512)\.)?(?P<key>.+)$"
)


def broker_doc(name: str) -> ConfigKey | None:
    """The entry of broker key ``name`` (rule 5); None for a key tidelog does not know."""
    doc = BROKER_KEYS.get(name) or IGNORED_KEYS.get(name)
    if doc is not None:
        return doc
    match = _LISTENER_PREFIX.match(name)
    if match is None:
        return None
    base = BROKER_KEYS.get(match.group("key"))
    if base is None:
        return None
    return replace(
        base,
        documentation=f"{base.documentation} (for one listener)",
        dynamic=False,
        unset_default=False,
    )


def topic_doc(name: str) -> ConfigKey | None:
    return TOPIC_KEYS.get(name)


#: Rule 3: the broker keys an alteration may change.
DYNAMIC_BROKER_KEYS: Final = frozenset(k for k, d in BROKER_KEYS.items() if d.dynamic)


__all__ = [
    "DYNAMIC_BROKER_KEYS",
    "TOPIC_SYNONYMS",
    "ConfigSource",
    "broker_doc",
    "broker_synonyms",
    "topic_doc",
]
