"""What DescribeConfigs says about each config key: Kafka's type, one line of documentation,
sensitivity, whether it can change at runtime, and the topic <-> broker synonyms.

Rules (Kafka's ``ConfigHelper``/``DynamicBrokerConfig``, KIP-226, KIP-133 config types):

1. Every key of ``tidelog.server.config.broker_config.BROKER_KEYS`` and ``TOPIC_KEYS`` has an entry
here
   (a unit test holds that); keys tidelog accepts but ignores (``IGNORED_KEYS``) too.
2. ``ConfigType`` and ``ConfigSource`` are DescribeConfigs' wire numbers (the
   ``config_type`` field of v3+, ``config_source`` of v1+).
3. A key is sensitive when its type is PASSWORD: DescribeConfigs never returns its value
   (value null, ``is_sensitive`` true), in the entry and in every synonym.
4. A broker key is read-only unless tidelog applies it without a restart (``dynamic``): the
   topic defaults Kafka's ``DynamicLogConfig`` reconfigures, plus
   ``producer.id.expiration.ms`` and the KIP-73 replication throttle rates. Keys Kafka can
   reconfigure but tidelog cannot apply (thread pools, listeners, keystores) stay read-only,
   and an alteration of them is refused with Kafka's "Cannot update these configs
   dynamically". Topic keys are never read-only.
5. Synonyms: a topic key's broker default comes from ``TOPIC_SYNONYMS`` (Kafka's
   ``ServerTopicConfigSynonyms``), each broker key expanding to its own synonym list
   (``broker_synonyms``: ``log.retention.ms`` > ``.minutes`` > ``.hours``, ``log.roll.ms`` >
   ``.hours``, ``log.flush.interval.ms`` > ``log.flush.scheduler.interval.ms``) in
   precedence order. Only keys present in ``BROKER_KEYS`` appear in an answer.
6. ``unset_default``: Kafka's default is null (the key is "not set" and a lower synonym
   decides); tidelog's sentinel (-2 / -1) is not shown as a DEFAULT_CONFIG value.
7. Listener-prefixed keys (``listener.name.<l>.<key>``, ``listener.name.<l>.<mechanism>.
   sasl.jaas.config``) take the type and sensitivity of ``<key>``; they are read-only.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final


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


class ConfigSource(enum.IntEnum):
    """DescribeConfigs v1+ ``config_source`` (Kafka's ``DescribeConfigsResponse.ConfigSource``)."""

    UNKNOWN = 0
    DYNAMIC_TOPIC_CONFIG = 1
    DYNAMIC_BROKER_CONFIG = 2
    DYNAMIC_DEFAULT_BROKER_CONFIG = 3
    STATIC_BROKER_CONFIG = 4
    DEFAULT_CONFIG = 5
    DYNAMIC_BROKER_LOGGER_CONFIG = 6


@dataclass(frozen=True, slots=True)
class ConfigDoc:
    type: ConfigType
    documentation: str
    #: Rule 4: a broker key tidelog applies without a restart.
    dynamic: bool = False
    #: Rule 6: Kafka's default is null.
    unset_default: bool = False

    @property
    def sensitive(self) -> bool:
        """Rule 3."""
        return self.type is ConfigType.PASSWORD


T = ConfigType


def _d(kind: ConfigType, doc: str, *, dynamic: bool = False, unset: bool = False) -> ConfigDoc:
    return ConfigDoc(kind, doc, dynamic, unset)


#: Rule 1: every broker key.
BROKER_DOCS: Final[Mapping[str, ConfigDoc]] = {
    "broker.id": _d(T.INT, "This broker's id, unique in the cluster."),
    "listeners": _d(T.STRING, "Where the broker listens: NAME://host:port, comma-separated."),
    "advertised.listeners": _d(
        T.STRING, "The addresses registered in ZooKeeper for clients, by listener name."
    ),
    "log.dirs": _d(T.STRING, "The directories holding the partition logs, comma-separated."),
    "log.dir": _d(T.STRING, "The log directory used when log.dirs is not set."),
    "zookeeper.connect": _d(T.STRING, "The ZooKeeper ensemble (host:port list, with chroot)."),
    "zookeeper.session.timeout.ms": _d(T.INT, "The ZooKeeper session timeout."),
    "zookeeper.connection.timeout.ms": _d(
        T.INT, "How long the broker waits to connect to ZooKeeper at start-up."
    ),
    "num.partitions": _d(T.INT, "Partitions of an auto-created topic or one created without."),
    "default.replication.factor": _d(
        T.INT, "Replication factor of auto-created topics and topics created without one."
    ),
    "min.insync.replicas": _d(
        T.INT,
        "The fewest in-sync replicas an acks=all produce needs; the default for topics.",
        dynamic=True,
    ),
    "unclean.leader.election.enable": _d(
        T.BOOLEAN,
        "Whether a replica outside the ISR may become leader (data loss); topic default.",
        dynamic=True,
    ),
    "replica.lag.time.max.ms": _d(
        T.LONG, "A follower that has not caught up for this long leaves the ISR."
    ),
    "replica.fetch.wait.max.ms": _d(T.INT, "The longest a follower's fetch waits at the leader."),
    "replica.fetch.min.bytes": _d(T.INT, "Bytes a follower's fetch waits for before answering."),
    "replica.fetch.max.bytes": _d(T.INT, "Bytes a follower fetches per partition at most."),
    "replica.fetch.response.max.bytes": _d(
        T.INT, "Bytes a follower's whole fetch response may hold at most."
    ),
    "replica.fetch.backoff.ms": _d(T.INT, "The pause after a follower's fetch failed."),
    "num.replica.fetchers": _d(T.INT, "Fetcher connections per source broker (accepted)."),
    "message.max.bytes": _d(
        T.INT, "The largest record batch a topic accepts; the default for topics.", dynamic=True
    ),
    "socket.request.max.bytes": _d(T.INT, "The largest request the broker reads."),
    "log.segment.bytes": _d(
        T.INT, "A log segment rolls over at this size; the default for topics.", dynamic=True
    ),
    "log.roll.ms": _d(
        T.LONG,
        "A segment rolls over at this age; overrides log.roll.hours.",
        dynamic=True,
        unset=True,
    ),
    "log.roll.hours": _d(T.INT, "A segment rolls over at this age, in hours.", dynamic=True),
    "log.retention.ms": _d(
        T.LONG,
        "Segments older than this are deleted (-1: never); overrides .minutes and .hours.",
        dynamic=True,
        unset=True,
    ),
    "log.retention.minutes": _d(
        T.INT,
        "Retention time in minutes; overrides log.retention.hours.",
        dynamic=True,
        unset=True,
    ),
    "log.retention.hours": _d(T.INT, "Retention time in hours (-1: forever).", dynamic=True),
    "log.retention.bytes": _d(
        T.LONG, "Each partition log is cut back to this size (-1: no limit).", dynamic=True
    ),
    "log.retention.check.interval.ms": _d(T.LONG, "How often segments are checked for deletion."),
    "log.cleanup.policy": _d(
        T.LIST, "The default cleanup.policy: delete, compact or both.", dynamic=True
    ),
    "log.cleaner.enable": _d(T.BOOLEAN, "Whether the log cleaner compacts compacted topics."),
    "log.cleaner.min.cleanable.ratio": _d(
        T.DOUBLE, "The default min.cleanable.dirty.ratio.", dynamic=True
    ),
    "log.cleaner.delete.retention.ms": _d(
        T.LONG, "The default delete.retention.ms (tombstones kept).", dynamic=True
    ),
    "log.cleaner.min.compaction.lag.ms": _d(
        T.LONG, "The default min.compaction.lag.ms.", dynamic=True
    ),
    "log.cleaner.max.compaction.lag.ms": _d(
        T.LONG, "The default max.compaction.lag.ms.", dynamic=True
    ),
    "log.cleaner.backoff.ms": _d(T.LONG, "How long the cleaner sleeps when nothing is dirty."),
    "log.cleaner.threads": _d(T.INT, "Cleaner threads; tidelog runs one (0: no cleaning)."),
    "log.cleaner.dedupe.buffer.size": _d(
        T.LONG, "Memory for the cleaner's key map (24 bytes a key, as Kafka)."
    ),
    "log.cleaner.io.buffer.load.factor": _d(T.DOUBLE, "How full the cleaner's key map may get."),
    "log.cleaner.io.max.bytes.per.second": _d(
        T.DOUBLE, "Bytes a second the cleaner reads and writes at most."
    ),
    "replica.alter.log.dirs.io.max.bytes.per.second": _d(
        T.LONG, "Bytes a second replicas moving between log dirs copy at most.", dynamic=True
    ),
    "leader.replication.throttled.rate": _d(
        T.LONG, "Bytes a second this broker sends to throttled followers at most.", dynamic=True
    ),
    "follower.replication.throttled.rate": _d(
        T.LONG, "Bytes a second this broker fetches for throttled replicas at most.", dynamic=True
    ),
    "replication.quota.window.num": _d(T.INT, "Samples the replication throttle rates span."),
    "replication.quota.window.size.seconds": _d(
        T.INT, "The length of one replication throttle sample, in seconds."
    ),
    "producer.id.expiration.ms": _d(
        T.INT, "A producer id idle for this long is forgotten.", dynamic=True
    ),
    "tidelog.log.page.cache.keep.bytes": _d(
        T.LONG, "tidelog: newest bytes of each log kept in the page cache (-1: the kernel's)."
    ),
    "tidelog.not.ready.request.hold.ms": _d(
        T.LONG, "tidelog: how long a request waits for a broker without cluster metadata yet."
    ),
    "log.index.interval.bytes": _d(
        T.INT, "Bytes between two offset index entries; the default for topics.", dynamic=True
    ),
    "log.index.size.max.bytes": _d(
        T.INT, "The largest offset index of a segment; the default for topics.", dynamic=True
    ),
    "log.flush.interval.messages": _d(
        T.LONG, "Records appended before the log is fsynced; the default for topics.", dynamic=True
    ),
    "log.flush.interval.ms": _d(
        T.LONG,
        "The longest unflushed data waits for fsync; the default for topics.",
        dynamic=True,
        unset=True,
    ),
    "log.flush.scheduler.interval.ms": _d(
        T.LONG, "How often logs are checked for a time-based flush."
    ),
    "log.flush.offset.checkpoint.interval.ms": _d(
        T.INT, "How often the recovery points are checkpointed."
    ),
    "replica.high.watermark.checkpoint.interval.ms": _d(
        T.LONG, "How often the high watermarks are checkpointed."
    ),
    "auto.create.topics.enable": _d(T.BOOLEAN, "Whether Metadata creates a missing topic."),
    "auto.leader.rebalance.enable": _d(
        T.BOOLEAN, "Whether the controller moves leadership back to preferred replicas."
    ),
    "controlled.shutdown.enable": _d(
        T.BOOLEAN, "Whether a stopping broker hands its leaderships over first."
    ),
    "delete.topic.enable": _d(T.BOOLEAN, "Whether DeleteTopics may delete topics."),
    "group.initial.rebalance.delay.ms": _d(
        T.INT, "How long a new group waits for more members before its first rebalance."
    ),
    "group.min.session.timeout.ms": _d(T.INT, "The smallest session timeout a member may ask."),
    "group.max.session.timeout.ms": _d(T.INT, "The largest session timeout a member may ask."),
    "group.max.size": _d(T.INT, "The most members a consumer group may have."),
    "offsets.topic.num.partitions": _d(T.INT, "Partitions of __consumer_offsets."),
    "offsets.topic.replication.factor": _d(T.SHORT, "Replication factor of __consumer_offsets."),
    "offsets.commit.timeout.ms": _d(T.INT, "How long an offset commit waits for replication."),
    "offsets.retention.minutes": _d(
        T.INT, "How long an empty group's (or unsubscribed topic's) offsets are kept."
    ),
    "offsets.retention.check.interval.ms": _d(T.LONG, "How often expired offsets are removed."),
    "offsets.topic.segment.bytes": _d(T.INT, "segment.bytes of __consumer_offsets."),
    "tidelog.offsets.retention.ms": _d(
        T.LONG, "Test knob: offsets.retention.minutes in milliseconds; -1 (default) unset."
    ),
    "transaction.state.log.num.partitions": _d(T.INT, "Partitions of __transaction_state."),
    "transaction.state.log.replication.factor": _d(
        T.SHORT, "Replication factor of __transaction_state."
    ),
    "transaction.state.log.min.isr": _d(T.INT, "min.insync.replicas of __transaction_state."),
    "transaction.max.timeout.ms": _d(T.INT, "The longest transaction timeout a producer may ask."),
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": _d(
        T.INT, "How often timed-out transactions are looked for and aborted."
    ),
    "connections.max.idle.ms": _d(T.LONG, "Idle connections are closed after this long."),
    "broker.rack": _d(T.STRING, "The rack of this broker."),
    "cluster.id": _d(T.STRING, "The cluster's id (empty: the one in ZooKeeper)."),
    "metrics.listener": _d(T.STRING, "tidelog: where the Prometheus endpoint listens."),
    "log.format": _d(T.STRING, "tidelog: the log lines as text, or json (one object a line)."),
    "listener.security.protocol.map": _d(
        T.STRING, "Listener name to security protocol, NAME:PROTOCOL comma-separated."
    ),
    "inter.broker.listener.name": _d(T.STRING, "The listener brokers use to reach each other."),
    "security.inter.broker.protocol": _d(
        T.STRING, "The security protocol between brokers (when no listener name is given)."
    ),
    "ssl.keystore.type": _d(T.STRING, "The key store format (PEM only)."),
    "ssl.keystore.location": _d(T.STRING, "The file holding the private key and certificate."),
    "ssl.keystore.password": _d(T.PASSWORD, "The password of the key store file."),
    "ssl.keystore.key": _d(T.PASSWORD, "The private key, PEM, given inline."),
    "ssl.keystore.certificate.chain": _d(T.PASSWORD, "The certificate chain, PEM, inline."),
    "ssl.key.password": _d(T.PASSWORD, "The password of the private key."),
    "ssl.truststore.type": _d(T.STRING, "The trust store format (PEM only)."),
    "ssl.truststore.location": _d(T.STRING, "The file holding the trusted certificates."),
    "ssl.truststore.password": _d(T.PASSWORD, "The password of the trust store file."),
    "ssl.truststore.certificates": _d(T.PASSWORD, "The trusted certificates, PEM, inline."),
    "ssl.client.auth": _d(T.STRING, "Whether TLS clients must present a certificate."),
    "ssl.endpoint.identification.algorithm": _d(
        T.STRING, "Host name verification of peers (https, or empty: off)."
    ),
    "ssl.enabled.protocols": _d(T.LIST, "The TLS versions accepted."),
    "ssl.protocol": _d(T.STRING, "The TLS protocol of the SSL context."),
    "ssl.cipher.suites": _d(T.LIST, "The cipher suites accepted (empty: the defaults)."),
    "ssl.principal.mapping.rules": _d(
        T.STRING, "Rules turning a certificate's name into a principal."
    ),
    "sasl.enabled.mechanisms": _d(T.LIST, "The SASL mechanisms clients may log in with."),
    "sasl.mechanism.inter.broker.protocol": _d(
        T.STRING, "The SASL mechanism brokers log in to each other with."
    ),
    "sasl.jaas.config": _d(T.PASSWORD, "JAAS login module settings (may hold passwords)."),
    "sasl.server.max.receive.size": _d(T.INT, "The largest frame before a SASL login is done."),
    "authorizer.class.name": _d(T.STRING, "The ACL authorizer (empty: everything allowed)."),
    "create.topic.policy.class.name": _d(
        T.CLASS,
        "A Python CreateTopicPolicy, package.module.Class (tidelog.server.config.policies).",
    ),
    "alter.config.policy.class.name": _d(
        T.CLASS,
        "A Python AlterConfigPolicy, package.module.Class (tidelog.server.config.policies).",
    ),
    "tidelog.policy.min.replication.factor": _d(
        T.INT, "The minimum of tidelog.server.config.policies.MinReplicationFactorPolicy."
    ),
    "super.users": _d(T.STRING, "Principals every ACL check allows, ';'-separated."),
    "allow.everyone.if.no.acl.found": _d(
        T.BOOLEAN, "Whether a resource without ACLs is open to everyone."
    ),
    "zookeeper.set.acl": _d(T.BOOLEAN, "Whether znodes the broker creates are closed to others."),
    "tidelog.zookeeper.digest": _d(
        T.PASSWORD, "tidelog: the broker's ZooKeeper digest credentials, user:password."
    ),
    "tidelog.testing.peer.addresses": _d(
        T.STRING, "tidelog, testing only: where this broker reaches some peers instead."
    ),
    # Broker-side compression (KIP-390 levels); present once the broker keys have them.
    "compression.type": _d(
        T.STRING, "Compression of stored batches (producer: as sent); topic default.", dynamic=True
    ),
    "compression.gzip.level": _d(T.INT, "The gzip level when the broker compresses."),
    "compression.lz4.level": _d(T.INT, "The lz4 level when the broker compresses."),
    "compression.zstd.level": _d(T.INT, "The zstd level when the broker compresses."),
}

#: Kafka keys accepted for compatibility and ignored (``IGNORED_KEYS``): listed when given.
IGNORED_DOCS: Final[Mapping[str, ConfigDoc]] = {
    "num.network.threads": _d(T.INT, "Accepted for compatibility; tidelog has one event loop."),
    "num.io.threads": _d(T.INT, "Accepted for compatibility; tidelog has one event loop."),
    "num.recovery.threads.per.data.dir": _d(T.INT, "Accepted for compatibility; not used."),
    "socket.send.buffer.bytes": _d(T.INT, "Accepted for compatibility; the OS's buffers."),
    "socket.receive.buffer.bytes": _d(T.INT, "Accepted for compatibility; the OS's buffers."),
    "connections.max.reauth.ms": _d(T.LONG, "Accepted for compatibility; no re-authentication."),
    "queued.max.requests": _d(T.INT, "Accepted for compatibility; not used."),
}

#: Rule 1: every topic key.
TOPIC_DOCS: Final[Mapping[str, ConfigDoc]] = {
    "cleanup.policy": _d(
        T.LIST, "What happens to old segments: delete, compact (latest value per key) or both."
    ),
    "min.cleanable.dirty.ratio": _d(
        T.DOUBLE, "The dirty share of the log at which the cleaner compacts it."
    ),
    "delete.retention.ms": _d(T.LONG, "How long tombstones and markers outlive compaction."),
    "min.compaction.lag.ms": _d(T.LONG, "The least time a record stays uncompacted."),
    "max.compaction.lag.ms": _d(T.LONG, "The longest a record stays uncompacted."),
    "compression.type": _d(T.STRING, "Compression of the topic's stored batches."),
    "compression.gzip.level": _d(T.INT, "The gzip level when the broker compresses."),
    "compression.lz4.level": _d(T.INT, "The lz4 level when the broker compresses."),
    "compression.zstd.level": _d(T.INT, "The zstd level when the broker compresses."),
    "retention.ms": _d(T.LONG, "Segments older than this are deleted (-1: never)."),
    "retention.bytes": _d(T.LONG, "Each partition is cut back to this size (-1: no limit)."),
    "segment.bytes": _d(T.INT, "A segment rolls over at this size."),
    "segment.ms": _d(T.LONG, "A segment rolls over at this age."),
    "segment.index.bytes": _d(T.INT, "The largest offset index of a segment."),
    "index.interval.bytes": _d(T.INT, "Bytes between two offset index entries."),
    "max.message.bytes": _d(T.INT, "The largest record batch the topic accepts."),
    "min.insync.replicas": _d(T.INT, "The fewest in-sync replicas an acks=all produce needs."),
    "unclean.leader.election.enable": _d(
        T.BOOLEAN, "Whether a replica outside the ISR may become leader (data loss)."
    ),
    "flush.messages": _d(T.LONG, "Records appended before the log is fsynced."),
    "flush.ms": _d(T.LONG, "The longest unflushed data waits for fsync."),
    "message.timestamp.type": _d(T.STRING, "Which timestamp records keep: CreateTime."),
    "leader.replication.throttled.replicas": _d(
        T.LIST, "Replicas throttled while they lead: partitionId:brokerId,... or *."
    ),
    "follower.replication.throttled.replicas": _d(
        T.LIST, "Replicas throttled while they follow: partitionId:brokerId,... or *."
    ),
}

#: Rule 5: a topic key's broker synonym (Kafka's ``ServerTopicConfigSynonyms``), expanded
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
}

_RETENTION = ("log.retention.ms", "log.retention.minutes", "log.retention.hours")
_ROLL = ("log.roll.ms", "log.roll.hours")
_FLUSH = ("log.flush.interval.ms", "log.flush.scheduler.interval.ms")


def broker_synonyms(name: str) -> tuple[str, ...]:
    """Rule 5: Kafka's ``DynamicBrokerConfig.brokerConfigSynonyms``, highest precedence
    first (without the listener-prefix expansion)."""
    for group in (_RETENTION, _ROLL):
        if name in group:
            return group
    if name == _FLUSH[0]:
        return _FLUSH
    return (name,)


#: Rule 7.
_LISTENER_PREFIX = re.compile(
    r"^listener\.name\.[A-Za-z0-9_]+\.(?:(?:plain|scram-sha-256|scram-sha-512)\.)?(?P<key>.+)$"
)


def broker_doc(name: str) -> ConfigDoc | None:
    """The entry of broker key ``name`` (rules 1, 7); None for a key tidelog does not know."""
    doc = BROKER_DOCS.get(name) or IGNORED_DOCS.get(name)
    if doc is not None:
        return doc
    match = _LISTENER_PREFIX.match(name)
    if match is None:
        return None
    base = BROKER_DOCS.get(match.group("key"))
    if base is None:
        return None
    return ConfigDoc(base.type, f"{base.documentation} (for one listener)")


def topic_doc(name: str) -> ConfigDoc | None:
    return TOPIC_DOCS.get(name)


#: Rule 4: the broker keys an alteration may change.
DYNAMIC_BROKER_KEYS: Final = frozenset(k for k, d in BROKER_DOCS.items() if d.dynamic)


__all__ = [
    "BROKER_DOCS",
    "DYNAMIC_BROKER_KEYS",
    "IGNORED_DOCS",
    "TOPIC_DOCS",
    "TOPIC_SYNONYMS",
    "ConfigDoc",
    "ConfigSource",
    "ConfigType",
    "broker_doc",
    "broker_synonyms",
    "topic_doc",
]
