"""The broker properties tidelog acts on, each declared once with Kafka's default, its range and
what DescribeConfigs says of it (``tidelog.server.config.keys`` defines ``ConfigKey`` and
its rules; the topic-level keys are declared there).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from tidelog.server.config.keys import COMPRESSION_LEVEL_KEYS, ConfigKey, T, _enum, _key
from tidelog.server.config.values import (
    DEFAULT_PROTOCOL_MAP,
    INT_MAX,
    LONG_MAX,
    PeerAddresses,
    _at_least,
    _between,
    _cleanup_policy,
    _compression_type,
    _enum_value,
    _message_format_version,
    _metrics_listener_value,
    _minus_one_or_at_least,
    _parse_bool,
    _parse_double,
    _parse_int,
    _parse_str,
    _ratio,
    _replica_selector,
    parse_peer_addresses,
)
from tidelog.storage import page_cache

#: Rule 1: the broker properties tidelog acts on, with Kafka's defaults.
BROKER_KEYS: Final[Mapping[str, ConfigKey]] = {
    "broker.id": _key(
        T.INT, "This broker's id, unique in the cluster.", _parse_int, 0, _between(-1, INT_MAX)
    ),
    "listeners": _key(
        T.STRING,
        "Where the broker listens: NAME://host:port, comma-separated.",
        _parse_str,
        "PLAINTEXT://127.0.0.1:9092",
    ),
    "advertised.listeners": _key(
        T.STRING,
        "The addresses registered in ZooKeeper for clients, by listener name.",
        _parse_str,
        "",
    ),
    "log.dirs": _key(
        T.STRING, "The directories holding the partition logs, comma-separated.", _parse_str, ""
    ),
    "log.dir": _key(
        T.STRING, "The log directory used when log.dirs is not set.", _parse_str, "/tmp/kafka-logs"
    ),
    "zookeeper.connect": _key(
        T.STRING, "The ZooKeeper ensemble (host:port list, with chroot).", _parse_str, ""
    ),
    "zookeeper.session.timeout.ms": _key(
        T.INT, "The ZooKeeper session timeout.", _parse_int, 18000, _at_least(1)
    ),
    "zookeeper.connection.timeout.ms": _key(
        T.INT,
        "How long the broker waits to connect to ZooKeeper at start-up.",
        _parse_int,
        18000,
        _at_least(1),
    ),
    "num.partitions": _key(
        T.INT,
        "Partitions of an auto-created topic or one created without.",
        _parse_int,
        1,
        _at_least(1),
    ),
    "default.replication.factor": _key(
        T.INT,
        "Replication factor of auto-created topics and topics created without one.",
        _parse_int,
        1,
        _between(1, 32767),
    ),
    "min.insync.replicas": _key(
        T.INT,
        "The fewest in-sync replicas an acks=all produce needs; the default for topics.",
        _parse_int,
        1,
        _at_least(1),
        dynamic=True,
    ),
    "unclean.leader.election.enable": _key(
        T.BOOLEAN,
        "Whether a replica outside the ISR may become leader (data loss); topic default.",
        _parse_bool,
        False,
        dynamic=True,
    ),
    "replica.lag.time.max.ms": _key(
        T.LONG,
        "A follower that has not caught up for this long leaves the ISR.",
        _parse_int,
        30000,
        _at_least(1),
    ),
    "replica.fetch.wait.max.ms": _key(
        T.INT, "The longest a follower's fetch waits at the leader.", _parse_int, 500, _at_least(0)
    ),
    "replica.fetch.min.bytes": _key(
        T.INT, "Bytes a follower's fetch waits for before answering.", _parse_int, 1, _at_least(1)
    ),
    "replica.fetch.max.bytes": _key(
        T.INT, "Bytes a follower fetches per partition at most.", _parse_int, 1048576, _at_least(0)
    ),
    "replica.fetch.response.max.bytes": _key(
        T.INT,
        "Bytes a follower's whole fetch response may hold at most.",
        _parse_int,
        10485760,
        _at_least(0),
    ),
    "replica.fetch.backoff.ms": _key(
        T.INT, "The pause after a follower's fetch failed.", _parse_int, 1000, _at_least(0)
    ),
    "max.incremental.fetch.session.cache.slots": _key(
        T.INT,
        "The maximum number of incremental fetch sessions that we will maintain.",
        _parse_int,
        1000,
        _at_least(0),
    ),
    "min.incremental.fetch.session.eviction.ms": _key(
        T.INT,
        "The minimum amount of time we will wait before evicting an incremental fetch session.",
        _parse_int,
        120000,
        _at_least(0),
    ),
    "num.replica.fetchers": _key(
        T.INT, "Fetcher connections per source broker (accepted).", _parse_int, 1, _at_least(1)
    ),
    "message.max.bytes": _key(
        T.INT,
        "The largest record batch a topic accepts; the default for topics.",
        _parse_int,
        1048588,
        _at_least(0),
        dynamic=True,
    ),
    # The codec leader appends are stored with, and new topics' default (KIP-110 for zstd;
    # tidelog.storage.log_validator): producer keeps the client's.
    "compression.type": _key(
        T.STRING,
        "Compression of stored batches (producer: as sent); topic default.",
        _compression_type,
        "producer",
        dynamic=True,
    ),
    # KIP-390: the levels the broker compresses with when it recompresses.
    **COMPRESSION_LEVEL_KEYS,
    "socket.request.max.bytes": _key(
        T.INT, "The largest request the broker reads.", _parse_int, 104857600, _at_least(1)
    ),
    "log.segment.bytes": _key(
        T.INT,
        "A log segment rolls over at this size; the default for topics.",
        _parse_int,
        1073741824,
        _at_least(14),
        dynamic=True,
    ),
    "log.roll.ms": _key(
        T.LONG,
        "A segment rolls over at this age; overrides log.roll.hours.",
        _parse_int,
        -1,
        _minus_one_or_at_least(1),
        dynamic=True,
        unset=True,
    ),
    "log.roll.hours": _key(
        T.INT,
        "A segment rolls over at this age, in hours.",
        _parse_int,
        168,
        _at_least(1),
        dynamic=True,
    ),
    # The broker defaults of the topic keys below (Kafka 3.9's ServerTopicConfigSynonyms;
    # dynamic as Kafka's DynamicLogConfig, but for the format version).
    "log.roll.jitter.ms": _key(
        T.LONG,
        "The most a random jitter brings a roll forward; overrides log.roll.jitter.hours.",
        _parse_int,
        -1,
        _minus_one_or_at_least(0),
        dynamic=True,
        unset=True,
    ),
    "log.roll.jitter.hours": _key(
        T.INT,
        "The most a random jitter brings a roll forward, in hours.",
        _parse_int,
        0,
        _at_least(0),
        dynamic=True,
    ),
    "log.segment.delete.delay.ms": _key(
        T.LONG,
        "How long a deleted segment's files stay; the default for topics.",
        _parse_int,
        60000,
        _at_least(0),
        dynamic=True,
    ),
    "log.preallocate": _key(
        T.BOOLEAN,
        "Accepted for compatibility; segment files are not preallocated.",
        _parse_bool,
        False,
        dynamic=True,
    ),
    "log.message.timestamp.type": _key(
        T.STRING,
        "CreateTime or LogAppendTime; the default for topics.",
        _enum("CreateTime", "LogAppendTime"),
        "CreateTime",
        dynamic=True,
    ),
    "log.message.timestamp.difference.max.ms": _key(
        T.LONG,
        "Deprecated (KIP-937): both bounds of the CreateTime window; topic default.",
        _parse_int,
        LONG_MAX,
        _at_least(0),
        dynamic=True,
    ),
    "log.message.timestamp.before.max.ms": _key(
        T.LONG,
        "How far a CreateTime may lie before the broker's time; topic default.",
        _parse_int,
        LONG_MAX,
        _at_least(0),
        dynamic=True,
    ),
    "log.message.timestamp.after.max.ms": _key(
        T.LONG,
        "How far a CreateTime may lie after the broker's time; topic default.",
        _parse_int,
        LONG_MAX,
        _at_least(0),
        dynamic=True,
    ),
    "log.message.downconversion.enable": _key(
        T.BOOLEAN,
        "Accepted for compatibility; tidelog serves only magic 2.",
        _parse_bool,
        True,
        dynamic=True,
    ),
    "log.message.format.version": _key(
        T.STRING,
        "Accepted for compatibility; ignored since Kafka 3.0 (KIP-724).",
        _message_format_version,
        "3.0-IV1",
    ),
    "log.local.retention.ms": _key(
        T.LONG,
        "Accepted for compatibility; tiered storage's local retention time.",
        _parse_int,
        -2,
        _at_least(-2),
        dynamic=True,
    ),
    "log.local.retention.bytes": _key(
        T.LONG,
        "Accepted for compatibility; tiered storage's local retention size.",
        _parse_int,
        -2,
        _at_least(-2),
        dynamic=True,
    ),
    "log.retention.ms": _key(
        T.LONG,
        "Segments older than this are deleted (-1: never); overrides .minutes and .hours.",
        _parse_int,
        -2,
        _minus_one_or_at_least(-2),
        dynamic=True,
        unset=True,
    ),
    "log.retention.minutes": _key(
        T.INT,
        "Retention time in minutes; overrides log.retention.hours.",
        _parse_int,
        -2,
        _minus_one_or_at_least(-2),
        dynamic=True,
        unset=True,
    ),
    "log.retention.hours": _key(
        T.INT,
        "Retention time in hours (-1: forever).",
        _parse_int,
        168,
        _minus_one_or_at_least(-1),
        dynamic=True,
    ),
    "log.retention.bytes": _key(
        T.LONG,
        "Each partition log is cut back to this size (-1: no limit).",
        _parse_int,
        -1,
        _minus_one_or_at_least(0),
        dynamic=True,
    ),
    "log.retention.check.interval.ms": _key(
        T.LONG, "How often segments are checked for deletion.", _parse_int, 300000, _at_least(1)
    ),
    # Log compaction (tidelog.storage.cleaner); the log.cleaner.* topic defaults.
    "log.cleanup.policy": _key(
        T.LIST,
        "The default cleanup.policy: delete, compact or both.",
        _cleanup_policy,
        "delete",
        dynamic=True,
    ),
    "log.cleaner.enable": _key(
        T.BOOLEAN, "Whether the log cleaner compacts compacted topics.", _parse_bool, True
    ),
    "log.cleaner.min.cleanable.ratio": _key(
        T.DOUBLE, "The default min.cleanable.dirty.ratio.", _parse_double, 0.5, _ratio, dynamic=True
    ),
    "log.cleaner.delete.retention.ms": _key(
        T.LONG,
        "The default delete.retention.ms (tombstones kept).",
        _parse_int,
        86400000,
        _at_least(0),
        dynamic=True,
    ),
    "log.cleaner.min.compaction.lag.ms": _key(
        T.LONG, "The default min.compaction.lag.ms.", _parse_int, 0, _at_least(0), dynamic=True
    ),
    "log.cleaner.max.compaction.lag.ms": _key(
        T.LONG,
        "The default max.compaction.lag.ms.",
        _parse_int,
        LONG_MAX,
        _at_least(1),
        dynamic=True,
    ),
    "log.cleaner.backoff.ms": _key(
        T.LONG,
        "How long the cleaner sleeps when nothing is dirty.",
        _parse_int,
        15000,
        _at_least(0),
    ),
    "log.cleaner.threads": _key(
        T.INT, "Cleaner threads; tidelog runs one (0: no cleaning).", _parse_int, 1, _at_least(0)
    ),
    "log.cleaner.dedupe.buffer.size": _key(
        T.LONG,
        "Memory for the cleaner's key map (24 bytes a key, as Kafka).",
        _parse_int,
        134217728,
        _at_least(1024),
    ),
    "log.cleaner.io.buffer.load.factor": _key(
        T.DOUBLE, "How full the cleaner's key map may get.", _parse_double, 0.9, _ratio
    ),
    "log.cleaner.io.max.bytes.per.second": _key(
        T.DOUBLE,
        "Bytes a second the cleaner reads and writes at most.",
        _parse_double,
        1.7976931348623157e308,
    ),
    # KIP-113: how fast replicas move between log dirs (tidelog.server.replica.alter_log_dirs).
    "replica.alter.log.dirs.io.max.bytes.per.second": _key(
        T.LONG,
        "Bytes a second replicas moving between log dirs copy at most.",
        _parse_int,
        LONG_MAX,
        _at_least(1),
        dynamic=True,
    ),
    # KIP-73 replication throttles (tidelog.server.replica.quota); the rates are dynamic.
    "leader.replication.throttled.rate": _key(
        T.LONG,
        "Bytes a second this broker sends to throttled followers at most.",
        _parse_int,
        LONG_MAX,
        _at_least(0),
        dynamic=True,
    ),
    "follower.replication.throttled.rate": _key(
        T.LONG,
        "Bytes a second this broker fetches for throttled replicas at most.",
        _parse_int,
        LONG_MAX,
        _at_least(0),
        dynamic=True,
    ),
    "replication.quota.window.num": _key(
        T.INT, "Samples the replication throttle rates span.", _parse_int, 11, _at_least(1)
    ),
    "replication.quota.window.size.seconds": _key(
        T.INT,
        "The length of one replication throttle sample, in seconds.",
        _parse_int,
        1,
        _at_least(1),
    ),
    # Client quotas (KIP-13, KIP-124; tidelog.server.quotas): the sensors' windows.
    "quota.window.num": _key(
        T.INT, "Samples the client quota rates span.", _parse_int, 11, _at_least(1)
    ),
    "quota.window.size.seconds": _key(
        T.INT, "The length of one client quota sample, in seconds.", _parse_int, 1, _at_least(1)
    ),
    "producer.id.expiration.ms": _key(
        T.INT,
        "A producer id idle for this long is forgotten.",
        _parse_int,
        86400000,
        _at_least(1),
        dynamic=True,
    ),
    # tidelog's own: the newest bytes of each log kept in the page cache, the rest written
    # back and dropped (tidelog.storage.page_cache); -1 leaves it to the kernel, as Kafka.
    # At least one step of the hints.
    "tidelog.log.page.cache.keep.bytes": _key(
        T.LONG,
        "tidelog: newest bytes of each log kept in the page cache (-1: the kernel's).",
        _parse_int,
        page_cache.DEFAULT_KEEP,
        _minus_one_or_at_least(page_cache.STEP),
    ),
    # tidelog's own: how long a client request waits for a broker that has not received
    # the cluster's metadata yet (just started, or re-registered) before its connection
    # is closed (tidelog.server.cluster.readiness).
    "tidelog.not.ready.request.hold.ms": _key(
        T.LONG,
        "tidelog: how long a request waits for a broker without cluster metadata yet.",
        _parse_int,
        10000,
        _at_least(0),
    ),
    "log.index.interval.bytes": _key(
        T.INT,
        "Bytes between two offset index entries; the default for topics.",
        _parse_int,
        4096,
        _at_least(0),
        dynamic=True,
    ),
    "log.index.size.max.bytes": _key(
        T.INT,
        "The largest offset index of a segment; the default for topics.",
        _parse_int,
        10485760,
        _at_least(4),
        dynamic=True,
    ),
    "log.flush.interval.messages": _key(
        T.LONG,
        "Records appended before the log is fsynced; the default for topics.",
        _parse_int,
        LONG_MAX,
        _at_least(1),
        dynamic=True,
    ),
    "log.flush.interval.ms": _key(
        T.LONG,
        "The longest unflushed data waits for fsync; the default for topics.",
        _parse_int,
        -1,
        _minus_one_or_at_least(0),
        dynamic=True,
        unset=True,
    ),
    "log.flush.scheduler.interval.ms": _key(
        T.LONG,
        "How often logs are checked for a time-based flush.",
        _parse_int,
        LONG_MAX,
        _at_least(1),
    ),
    "log.flush.offset.checkpoint.interval.ms": _key(
        T.INT, "How often the recovery points are checkpointed.", _parse_int, 60000, _at_least(0)
    ),
    "replica.high.watermark.checkpoint.interval.ms": _key(
        T.LONG, "How often the high watermarks are checkpointed.", _parse_int, 5000, _at_least(1)
    ),
    "auto.create.topics.enable": _key(
        T.BOOLEAN, "Whether Metadata creates a missing topic.", _parse_bool, True
    ),
    "auto.leader.rebalance.enable": _key(
        T.BOOLEAN,
        "Whether the controller moves leadership back to preferred replicas.",
        _parse_bool,
        True,
    ),
    "controlled.shutdown.enable": _key(
        T.BOOLEAN, "Whether a stopping broker hands its leaderships over first.", _parse_bool, True
    ),
    "delete.topic.enable": _key(
        T.BOOLEAN, "Whether DeleteTopics may delete topics.", _parse_bool, True
    ),
    "group.initial.rebalance.delay.ms": _key(
        T.INT,
        "How long a new group waits for more members before its first rebalance.",
        _parse_int,
        3000,
        _at_least(0),
    ),
    "group.min.session.timeout.ms": _key(
        T.INT, "The smallest session timeout a member may ask.", _parse_int, 6000, _at_least(1)
    ),
    "group.max.session.timeout.ms": _key(
        T.INT, "The largest session timeout a member may ask.", _parse_int, 1800000, _at_least(1)
    ),
    "group.max.size": _key(
        T.INT, "The most members a consumer group may have.", _parse_int, INT_MAX, _at_least(1)
    ),
    "offsets.topic.num.partitions": _key(
        T.INT, "Partitions of __consumer_offsets.", _parse_int, 50, _at_least(1)
    ),
    "offsets.topic.replication.factor": _key(
        T.SHORT, "Replication factor of __consumer_offsets.", _parse_int, 3, _between(1, 32767)
    ),
    "offsets.commit.timeout.ms": _key(
        T.INT, "How long an offset commit waits for replication.", _parse_int, 5000, _at_least(1)
    ),
    # Offset expiry (KIP-211; tidelog.server.coordinators.group) and the topic's segments.
    "offsets.retention.minutes": _key(
        T.INT,
        "How long an empty group's (or unsubscribed topic's) offsets are kept.",
        _parse_int,
        10080,
        _at_least(1),
    ),
    "offsets.retention.check.interval.ms": _key(
        T.LONG, "How often expired offsets are removed.", _parse_int, 600000, _at_least(1)
    ),
    "offsets.topic.segment.bytes": _key(
        T.INT, "segment.bytes of __consumer_offsets.", _parse_int, 104857600, _at_least(1)
    ),
    # tidelog's own test knob: offsets.retention.minutes in milliseconds (-1: unset).
    "tidelog.offsets.retention.ms": _key(
        T.LONG,
        "Test knob: offsets.retention.minutes in milliseconds; -1 (default) unset.",
        _parse_int,
        -1,
        _minus_one_or_at_least(1),
    ),
    # Transactions (KIP-98; tidelog.server.coordinators.txn).
    "transaction.state.log.num.partitions": _key(
        T.INT, "Partitions of __transaction_state.", _parse_int, 50, _at_least(1)
    ),
    "transaction.state.log.replication.factor": _key(
        T.SHORT, "Replication factor of __transaction_state.", _parse_int, 3, _between(1, 32767)
    ),
    "transaction.state.log.min.isr": _key(
        T.INT, "min.insync.replicas of __transaction_state.", _parse_int, 2, _at_least(1)
    ),
    "transaction.max.timeout.ms": _key(
        T.INT,
        "The longest transaction timeout a producer may ask.",
        _parse_int,
        900000,
        _at_least(1),
    ),
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": _key(
        T.INT,
        "How often timed-out transactions are looked for and aborted.",
        _parse_int,
        10000,
        _at_least(1),
    ),
    # Transactional id expiry (Kafka's removeExpiredTransactionalIds); read-only, as Kafka's.
    "transactional.id.expiration.ms": _key(
        T.INT,
        "How long an idle transactional id is kept after its last update.",
        _parse_int,
        604800000,
        _at_least(1),
    ),
    "transaction.remove.expired.transaction.cleanup.interval.ms": _key(
        T.INT,
        "How often expired transactional ids are looked for and removed.",
        _parse_int,
        3600000,
        _at_least(1),
    ),
    "connections.max.idle.ms": _key(
        T.LONG, "Idle connections are closed after this long.", _parse_int, 600000, _at_least(-1)
    ),
    "broker.rack": _key(T.STRING, "The rack of this broker.", _parse_str, ""),
    # KIP-392 (tidelog.server.replica.selector): empty, Kafka's default, keeps consumers on
    # the leader.
    "replica.selector.class": _key(
        T.CLASS,
        "Which replica consumers read from (empty: the leader; KIP-392's rack-aware one).",
        _replica_selector,
        "",
    ),
    "cluster.id": _key(T.STRING, "The cluster's id (empty: the one in ZooKeeper).", _parse_str, ""),
    # tidelog's own: the Prometheus endpoint (``MetricsListener``,
    # tidelog.server.observability.metrics);
    # empty: off.
    "metrics.listener": _key(
        T.STRING, "tidelog: where the Prometheus endpoint listens.", _metrics_listener_value, ""
    ),
    # tidelog's own: the broker's log lines as text or JSON objects
    # (tidelog.server.observability.log_format).
    "log.format": _key(
        T.STRING,
        "tidelog: the log lines as text, or json (one object a line).",
        _enum_value("text", "json"),
        "text",
    ),
    # Security (issue 20, docs/security.md): listeners and their protocols.
    "listener.security.protocol.map": _key(
        T.STRING,
        "Listener name to security protocol, NAME:PROTOCOL comma-separated.",
        _parse_str,
        DEFAULT_PROTOCOL_MAP,
    ),
    "inter.broker.listener.name": _key(
        T.STRING, "The listener brokers use to reach each other.", _parse_str, ""
    ),
    "security.inter.broker.protocol": _key(
        T.STRING,
        "The security protocol between brokers (when no listener name is given).",
        _parse_str,
        "PLAINTEXT",
    ),
    # TLS (PEM only: Python's ssl reads no JKS). Per listener with ``listener.name.<l>.``.
    "ssl.keystore.type": _key(T.STRING, "The key store format (PEM only).", _parse_str, "PEM"),
    "ssl.keystore.location": _key(
        T.STRING, "The file holding the private key and certificate.", _parse_str, ""
    ),
    "ssl.keystore.password": _key(
        T.PASSWORD, "The password of the key store file.", _parse_str, ""
    ),
    "ssl.keystore.key": _key(T.PASSWORD, "The private key, PEM, given inline.", _parse_str, ""),
    "ssl.keystore.certificate.chain": _key(
        T.PASSWORD, "The certificate chain, PEM, inline.", _parse_str, ""
    ),
    "ssl.key.password": _key(T.PASSWORD, "The password of the private key.", _parse_str, ""),
    "ssl.truststore.type": _key(T.STRING, "The trust store format (PEM only).", _parse_str, "PEM"),
    "ssl.truststore.location": _key(
        T.STRING, "The file holding the trusted certificates.", _parse_str, ""
    ),
    "ssl.truststore.password": _key(
        T.PASSWORD, "The password of the trust store file.", _parse_str, ""
    ),
    "ssl.truststore.certificates": _key(
        T.PASSWORD, "The trusted certificates, PEM, inline.", _parse_str, ""
    ),
    "ssl.client.auth": _key(
        T.STRING,
        "Whether TLS clients must present a certificate.",
        _enum_value("none", "requested", "required"),
        "none",
    ),
    "ssl.endpoint.identification.algorithm": _key(
        T.STRING, "Host name verification of peers (https, or empty: off).", _parse_str, "https"
    ),
    "ssl.enabled.protocols": _key(
        T.LIST, "The TLS versions accepted.", _parse_str, "TLSv1.2,TLSv1.3"
    ),
    "ssl.protocol": _key(T.STRING, "The TLS protocol of the SSL context.", _parse_str, "TLSv1.3"),
    "ssl.cipher.suites": _key(
        T.LIST, "The cipher suites accepted (empty: the defaults).", _parse_str, ""
    ),
    "ssl.principal.mapping.rules": _key(
        T.STRING, "Rules turning a certificate's name into a principal.", _parse_str, "DEFAULT"
    ),
    # SASL. Kafka's default mechanism list is GSSAPI, which tidelog does not offer.
    "sasl.enabled.mechanisms": _key(
        T.LIST,
        "The SASL mechanisms clients may log in with.",
        _parse_str,
        "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
    ),
    "sasl.mechanism.inter.broker.protocol": _key(
        T.STRING, "The SASL mechanism brokers log in to each other with.", _parse_str, "PLAIN"
    ),
    "sasl.jaas.config": _key(
        T.PASSWORD, "JAAS login module settings (may hold passwords).", _parse_str, ""
    ),
    "sasl.server.max.receive.size": _key(
        T.INT, "The largest frame before a SASL login is done.", _parse_int, 524288, _at_least(1)
    ),
    # Authorization.
    "authorizer.class.name": _key(
        T.STRING, "The ACL authorizer (empty: everything allowed).", _parse_str, ""
    ),
    # KIP-108 / KIP-133 policies, as Python classes (tidelog.server.config.policies).
    "create.topic.policy.class.name": _key(
        T.CLASS,
        "A Python CreateTopicPolicy, package.module.Class (tidelog.server.config.policies).",
        _parse_str,
        "",
    ),
    "alter.config.policy.class.name": _key(
        T.CLASS,
        "A Python AlterConfigPolicy, package.module.Class (tidelog.server.config.policies).",
        _parse_str,
        "",
    ),
    "tidelog.policy.min.replication.factor": _key(
        T.INT,
        "The minimum of tidelog.server.config.policies.MinReplicationFactorPolicy.",
        _parse_int,
        2,
    ),
    "super.users": _key(
        T.STRING, "Principals every ACL check allows, ';'-separated.", _parse_str, ""
    ),
    "allow.everyone.if.no.acl.found": _key(
        T.BOOLEAN, "Whether a resource without ACLs is open to everyone.", _parse_bool, False
    ),
    # ZooKeeper: whether the znodes the broker creates are closed to others, and its digest
    # credentials (tidelog's own key: Kafka reads them from a JAAS file).
    "zookeeper.set.acl": _key(
        T.BOOLEAN, "Whether znodes the broker creates are closed to others.", _parse_bool, False
    ),
    "tidelog.zookeeper.digest": _key(
        T.PASSWORD,
        "tidelog: the broker's ZooKeeper digest credentials, user:password.",
        _parse_str,
        "",
    ),
    # Testing only (the fault harness's per-link proxies): see ``PeerAddresses``.
    "tidelog.testing.peer.addresses": _key(
        T.STRING,
        "tidelog, testing only: where this broker reaches some peers instead.",
        parse_peer_addresses,
        PeerAddresses(),
    ),
}
