"""Broker and topic configuration: Kafka's property names, defaults and validation.

A broker is configured by a ``server.properties`` file (Java properties syntax) plus
``--override key=value`` pairs, exactly as ``kafka-server-start.sh`` takes them. Every key
must be known and every value valid, or start-up stops with a ``ConfigError`` naming the key
(DESIGN.md "Configuration"). Keys Kafka has but tidelog does not act on (thread counts,
socket buffer sizes) are accepted and listed in ``BrokerConfig.ignored`` so that a real
Kafka ``server.properties`` still starts.

Topic-level overrides (CreateTopics configs, AlterConfigs, IncrementalAlterConfigs) use
Kafka's topic names (``retention.ms``, ``segment.bytes``, ``max.message.bytes``,
``min.insync.replicas``, ...). A topic's effective config is the broker's defaults
(``log.retention.ms`` -> ``retention.ms``, ``message.max.bytes`` -> ``max.message.bytes``,
...) overlaid with the topic's overrides; ``validate_topic_configs`` returns an error
message instead of raising so the handler can answer INVALID_CONFIG (40).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from tidelog.errors import ConfigError
from tidelog.server.replica.quota import (
    FOLLOWER_THROTTLED_REPLICAS,
    LEADER_THROTTLED_REPLICAS,
    throttled_replicas_parser,
)
from tidelog.storage import page_cache
from tidelog.storage.compression import COMPRESSION_TYPES

LONG_MAX: Final = 2**63 - 1
INT_MAX: Final = 2**31 - 1

# --- value parsers: each takes the raw string and returns the value or raises ValueError ---


def _parse_int(raw: str) -> int:
    value = int(raw.strip())
    if not -(2**63) <= value <= LONG_MAX:
        raise ValueError("out of the range of a 64-bit integer")
    return value


def _parse_bool(raw: str) -> bool:
    text = raw.strip().lower()
    if text == "true":
        return True
    if text == "false":
        return False
    raise ValueError("expected true or false")


def _parse_str(raw: str) -> str:
    return raw.strip()


def _parse_double(raw: str) -> float:
    value = float(raw.strip())
    if not math.isfinite(value):
        raise ValueError("not a finite number")
    return value


def _cleanup_policy(raw: str) -> str:
    """Kafka's ``cleanup.policy``: a LIST of ``delete`` and ``compact`` (kafka-configs'
    ``[compact,delete]`` is CLI syntax; the broker sees ``compact,delete``)."""
    items = [item.strip() for item in raw.strip().split(",")]
    if not raw.strip() or any(item not in ("delete", "compact") for item in items):
        raise ValueError("must be a list of delete and compact")
    return ",".join(dict.fromkeys(items))


def _ratio(value: float) -> str | None:
    return None if 0.0 <= value <= 1.0 else "must be between 0.0 and 1.0"


@dataclass(frozen=True, slots=True)
class PeerAddresses:
    """``tidelog.testing.peer.addresses`` (testing only): where THIS broker reaches some peer
    brokers instead of the address each peer registered in ZooKeeper, e.g. a fault
    harness's proxy for the one link this broker -> that peer. Peers not listed are reached
    at their registered address."""

    by_broker: tuple[tuple[int, str, int], ...] = ()

    def __str__(self) -> str:
        return ",".join(f"{b}={host}:{port}" for b, host, port in self.by_broker)

    def peer_address(
        self, broker_id: int, registered_host: str, registered_port: int
    ) -> tuple[str, int]:
        """Where to connect to broker ``broker_id``, registered at host:port."""
        for listed, host, port in self.by_broker:
            if listed == broker_id:
                return host, port
        return registered_host, registered_port


_PEER_HOST = re.compile(r"[A-Za-z0-9._-]+")
_DIGITS = re.compile(r"[0-9]+")


def parse_peer_addresses(raw: str) -> PeerAddresses:
    """``brokerId=host:port[,brokerId=host:port...]`` (empty: none); ValueError says what is
    wrong with which entry."""
    entries: list[tuple[int, str, int]] = []
    for item in (part.strip() for part in raw.split(",")):
        if not item:
            continue
        broker, sep, address = (text.strip() for text in item.partition("="))
        if not sep:
            raise ValueError(f"entry {item!r} must look like brokerId=host:port")
        if _DIGITS.fullmatch(broker) is None or int(broker) > INT_MAX:
            raise ValueError(f"entry {item!r}: broker id {broker!r} must be a non-negative integer")
        host, colon, port = address.rpartition(":")
        if not colon or _PEER_HOST.fullmatch(host) is None:
            raise ValueError(f"entry {item!r}: address {address!r} must be host:port")
        if _DIGITS.fullmatch(port) is None or not 1 <= int(port) <= 65535:
            raise ValueError(f"entry {item!r}: port {port!r} must be between 1 and 65535")
        if any(listed == int(broker) for listed, _, _ in entries):
            raise ValueError(f"broker {int(broker)} is listed twice")
        entries.append((int(broker), host, int(port)))
    return PeerAddresses(tuple(entries))


@dataclass(frozen=True, slots=True)
class MetricsListener:
    """``metrics.listener``: where the Prometheus endpoint listens (``http://host:port``; port
    0 picks a free one). The path is always ``/metrics``
    (``tidelog.server.observability.metrics``)."""

    host: str
    port: int

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"


_METRICS_LISTENER = re.compile(
    r"http://(?:\[(?P<ipv6>[0-9A-Fa-f:.]+)\]|(?P<host>[A-Za-z0-9._-]+)):(?P<port>[0-9]+)/?"
)


def parse_metrics_listener(raw: str) -> MetricsListener | None:
    """``http://host:port`` (an IPv6 host in brackets) or empty (off); ValueError says what
    is wrong."""
    text = raw.strip()
    if not text:
        return None
    match = _METRICS_LISTENER.fullmatch(text)
    if match is None:
        raise ValueError("expected http://host:port (the path is always /metrics), or empty")
    port = int(match.group("port"))
    if port > 65535:
        raise ValueError(f"port {port} must be between 0 and 65535")
    return MetricsListener(match.group("ipv6") or match.group("host"), port)


def _metrics_listener_value(raw: str) -> str:
    """The key's value as stored: validated, kept as text (DescribeConfigs shows it)."""
    listener = parse_metrics_listener(raw)
    return "" if listener is None else str(listener)


def _at_least(minimum: int) -> Callable[[int], str | None]:
    def check(value: int) -> str | None:
        return None if value >= minimum else f"must be at least {minimum}"

    return check


def _between(low: int, high: int) -> Callable[[int], str | None]:
    def check(value: int) -> str | None:
        return None if low <= value <= high else f"must be between {low} and {high}"

    return check


def _minus_one_or_between(low: int, high: int) -> Callable[[int], str | None]:
    def check(value: int) -> str | None:
        ok = value == -1 or low <= value <= high
        return None if ok else f"must be -1 or between {low} and {high}"

    return check


def _minus_one_or_at_least(minimum: int) -> Callable[[int], str | None]:
    def check(value: int) -> str | None:
        return None if value == -1 or value >= minimum else f"must be -1 or at least {minimum}"

    return check


#: Kafka's four security protocols (``SecurityProtocol``).
SECURITY_PROTOCOLS: Final = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
#: Kafka's default ``listener.security.protocol.map``: each protocol names its own listener.
DEFAULT_PROTOCOL_MAP: Final = ",".join(f"{p}:{p}" for p in SECURITY_PROTOCOLS)


def _enum_value(*allowed: str) -> Callable[[str], str]:
    def parse(raw: str) -> str:
        value = raw.strip().lower()
        if value not in allowed:
            raise ValueError(f"must be one of {', '.join(allowed)}")
        return value

    return parse


def _compression_type(raw: str) -> str:
    """Kafka's ``compression.type`` (case-sensitive, as Kafka's ``ValidString``)."""
    value = raw.strip()
    if value not in COMPRESSION_TYPES:
        raise ValueError(f"must be one of {', '.join(COMPRESSION_TYPES)}")
    return value


@dataclass(frozen=True, slots=True)
class _Key:
    """One known property: how to parse it, its default, and a range check."""

    parse: Callable[[str], object]
    default: object
    check: Callable[[object], str | None] | None = None


def _k(
    parse: Callable[[str], object],
    default: object,
    check: Callable[[int], str | None] | None = None,
) -> _Key:
    return _Key(parse, default, check)  # type: ignore[arg-type]


#: Broker properties tidelog acts on, with Kafka's defaults.
BROKER_KEYS: Final[Mapping[str, _Key]] = {
    "broker.id": _k(_parse_int, 0, _between(-1, INT_MAX)),
    "listeners": _k(_parse_str, "PLAINTEXT://127.0.0.1:9092"),
    "advertised.listeners": _k(_parse_str, ""),
    "log.dirs": _k(_parse_str, ""),
    "log.dir": _k(_parse_str, "/tmp/kafka-logs"),
    "zookeeper.connect": _k(_parse_str, ""),
    "zookeeper.session.timeout.ms": _k(_parse_int, 18000, _at_least(1)),
    "zookeeper.connection.timeout.ms": _k(_parse_int, 18000, _at_least(1)),
    "num.partitions": _k(_parse_int, 1, _at_least(1)),
    "default.replication.factor": _k(_parse_int, 1, _between(1, 32767)),
    "min.insync.replicas": _k(_parse_int, 1, _at_least(1)),
    "unclean.leader.election.enable": _k(_parse_bool, False),
    "replica.lag.time.max.ms": _k(_parse_int, 30000, _at_least(1)),
    "replica.fetch.wait.max.ms": _k(_parse_int, 500, _at_least(0)),
    "replica.fetch.min.bytes": _k(_parse_int, 1, _at_least(1)),
    "replica.fetch.max.bytes": _k(_parse_int, 1048576, _at_least(0)),
    "replica.fetch.response.max.bytes": _k(_parse_int, 10485760, _at_least(0)),
    "replica.fetch.backoff.ms": _k(_parse_int, 1000, _at_least(0)),
    "num.replica.fetchers": _k(_parse_int, 1, _at_least(1)),
    "message.max.bytes": _k(_parse_int, 1048588, _at_least(0)),
    # The codec leader appends are stored with, and new topics' default (KIP-110 for zstd;
    # tidelog.storage.log_validator): producer keeps the client's.
    "compression.type": _k(_compression_type, "producer"),
    # KIP-390: the levels the broker compresses with when it recompresses.
    "compression.gzip.level": _k(_parse_int, -1, _minus_one_or_between(1, 9)),
    "compression.lz4.level": _k(_parse_int, 9, _between(1, 17)),
    "compression.zstd.level": _k(_parse_int, 3, _between(-131072, 22)),
    "socket.request.max.bytes": _k(_parse_int, 104857600, _at_least(1)),
    "log.segment.bytes": _k(_parse_int, 1073741824, _at_least(14)),
    "log.roll.ms": _k(_parse_int, -1, _minus_one_or_at_least(1)),
    "log.roll.hours": _k(_parse_int, 168, _at_least(1)),
    "log.retention.ms": _k(_parse_int, -2, _minus_one_or_at_least(-2)),
    "log.retention.minutes": _k(_parse_int, -2, _minus_one_or_at_least(-2)),
    "log.retention.hours": _k(_parse_int, 168, _minus_one_or_at_least(-1)),
    "log.retention.bytes": _k(_parse_int, -1, _minus_one_or_at_least(0)),
    "log.retention.check.interval.ms": _k(_parse_int, 300000, _at_least(1)),
    # Log compaction (tidelog.storage.cleaner); the log.cleaner.* topic defaults.
    "log.cleanup.policy": _k(_cleanup_policy, "delete"),
    "log.cleaner.enable": _k(_parse_bool, True),
    "log.cleaner.min.cleanable.ratio": _k(_parse_double, 0.5, _ratio),
    "log.cleaner.delete.retention.ms": _k(_parse_int, 86400000, _at_least(0)),
    "log.cleaner.min.compaction.lag.ms": _k(_parse_int, 0, _at_least(0)),
    "log.cleaner.max.compaction.lag.ms": _k(_parse_int, LONG_MAX, _at_least(1)),
    "log.cleaner.backoff.ms": _k(_parse_int, 15000, _at_least(0)),
    "log.cleaner.threads": _k(_parse_int, 1, _at_least(0)),
    "log.cleaner.dedupe.buffer.size": _k(_parse_int, 134217728, _at_least(1024)),
    "log.cleaner.io.buffer.load.factor": _k(_parse_double, 0.9, _ratio),
    "log.cleaner.io.max.bytes.per.second": _k(_parse_double, 1.7976931348623157e308),
    # KIP-113: how fast replicas move between log dirs (tidelog.server.replica.alter_log_dirs).
    "replica.alter.log.dirs.io.max.bytes.per.second": _k(_parse_int, LONG_MAX, _at_least(1)),
    # KIP-73 replication throttles (tidelog.server.replica.quota); the rates are dynamic.
    "leader.replication.throttled.rate": _k(_parse_int, LONG_MAX, _at_least(0)),
    "follower.replication.throttled.rate": _k(_parse_int, LONG_MAX, _at_least(0)),
    "replication.quota.window.num": _k(_parse_int, 11, _at_least(1)),
    "replication.quota.window.size.seconds": _k(_parse_int, 1, _at_least(1)),
    "producer.id.expiration.ms": _k(_parse_int, 86400000, _at_least(1)),
    # tidelog's own: the newest bytes of each log kept in the page cache, the rest written
    # back and dropped (tidelog.storage.page_cache); -1 leaves it to the kernel, as Kafka.
    # At least one step of the hints.
    "tidelog.log.page.cache.keep.bytes": _k(
        _parse_int, page_cache.DEFAULT_KEEP, _minus_one_or_at_least(page_cache.STEP)
    ),
    # tidelog's own: how long a client request waits for a broker that has not received
    # the cluster's metadata yet (just started, or re-registered) before its connection
    # is closed (tidelog.server.cluster.readiness).
    "tidelog.not.ready.request.hold.ms": _k(_parse_int, 10000, _at_least(0)),
    "log.index.interval.bytes": _k(_parse_int, 4096, _at_least(0)),
    "log.index.size.max.bytes": _k(_parse_int, 10485760, _at_least(4)),
    "log.flush.interval.messages": _k(_parse_int, LONG_MAX, _at_least(1)),
    "log.flush.interval.ms": _k(_parse_int, -1, _minus_one_or_at_least(0)),
    "log.flush.scheduler.interval.ms": _k(_parse_int, LONG_MAX, _at_least(1)),
    "log.flush.offset.checkpoint.interval.ms": _k(_parse_int, 60000, _at_least(0)),
    "replica.high.watermark.checkpoint.interval.ms": _k(_parse_int, 5000, _at_least(1)),
    "auto.create.topics.enable": _k(_parse_bool, True),
    "auto.leader.rebalance.enable": _k(_parse_bool, True),
    "controlled.shutdown.enable": _k(_parse_bool, True),
    "delete.topic.enable": _k(_parse_bool, True),
    "group.initial.rebalance.delay.ms": _k(_parse_int, 3000, _at_least(0)),
    "group.min.session.timeout.ms": _k(_parse_int, 6000, _at_least(1)),
    "group.max.session.timeout.ms": _k(_parse_int, 1800000, _at_least(1)),
    "group.max.size": _k(_parse_int, INT_MAX, _at_least(1)),
    "offsets.topic.num.partitions": _k(_parse_int, 50, _at_least(1)),
    "offsets.topic.replication.factor": _k(_parse_int, 3, _between(1, 32767)),
    "offsets.commit.timeout.ms": _k(_parse_int, 5000, _at_least(1)),
    # Offset expiry (KIP-211; tidelog.server.coordinators.group) and the topic's segments.
    "offsets.retention.minutes": _k(_parse_int, 10080, _at_least(1)),
    "offsets.retention.check.interval.ms": _k(_parse_int, 600000, _at_least(1)),
    "offsets.topic.segment.bytes": _k(_parse_int, 104857600, _at_least(1)),
    # tidelog's own test knob: offsets.retention.minutes in milliseconds (-1: unset).
    "tidelog.offsets.retention.ms": _k(_parse_int, -1, _minus_one_or_at_least(1)),
    # Transactions (KIP-98; tidelog.server.coordinators.txn).
    "transaction.state.log.num.partitions": _k(_parse_int, 50, _at_least(1)),
    "transaction.state.log.replication.factor": _k(_parse_int, 3, _between(1, 32767)),
    "transaction.state.log.min.isr": _k(_parse_int, 2, _at_least(1)),
    "transaction.max.timeout.ms": _k(_parse_int, 900000, _at_least(1)),
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": _k(
        _parse_int, 10000, _at_least(1)
    ),
    "connections.max.idle.ms": _k(_parse_int, 600000, _at_least(-1)),
    "broker.rack": _k(_parse_str, ""),
    "cluster.id": _k(_parse_str, ""),
    # tidelog's own: the Prometheus endpoint (``MetricsListener``,
    # tidelog.server.observability.metrics);
    # empty: off.
    "metrics.listener": _k(_metrics_listener_value, ""),
    # tidelog's own: the broker's log lines as text or JSON objects
    # (tidelog.server.observability.log_format).
    "log.format": _k(_enum_value("text", "json"), "text"),
    # Security (issue 20, docs/security.md): listeners and their protocols.
    "listener.security.protocol.map": _k(_parse_str, DEFAULT_PROTOCOL_MAP),
    "inter.broker.listener.name": _k(_parse_str, ""),
    "security.inter.broker.protocol": _k(_parse_str, "PLAINTEXT"),
    # TLS (PEM only: Python's ssl reads no JKS). Per listener with ``listener.name.<l>.``.
    "ssl.keystore.type": _k(_parse_str, "PEM"),
    "ssl.keystore.location": _k(_parse_str, ""),
    "ssl.keystore.password": _k(_parse_str, ""),
    "ssl.keystore.key": _k(_parse_str, ""),
    "ssl.keystore.certificate.chain": _k(_parse_str, ""),
    "ssl.key.password": _k(_parse_str, ""),
    "ssl.truststore.type": _k(_parse_str, "PEM"),
    "ssl.truststore.location": _k(_parse_str, ""),
    "ssl.truststore.password": _k(_parse_str, ""),
    "ssl.truststore.certificates": _k(_parse_str, ""),
    "ssl.client.auth": _k(_enum_value("none", "requested", "required"), "none"),
    "ssl.endpoint.identification.algorithm": _k(_parse_str, "https"),
    "ssl.enabled.protocols": _k(_parse_str, "TLSv1.2,TLSv1.3"),
    "ssl.protocol": _k(_parse_str, "TLSv1.3"),
    "ssl.cipher.suites": _k(_parse_str, ""),
    "ssl.principal.mapping.rules": _k(_parse_str, "DEFAULT"),
    # SASL. Kafka's default mechanism list is GSSAPI, which tidelog does not offer.
    "sasl.enabled.mechanisms": _k(_parse_str, "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512"),
    "sasl.mechanism.inter.broker.protocol": _k(_parse_str, "PLAIN"),
    "sasl.jaas.config": _k(_parse_str, ""),
    "sasl.server.max.receive.size": _k(_parse_int, 524288, _at_least(1)),
    # Authorization.
    "authorizer.class.name": _k(_parse_str, ""),
    # KIP-108 / KIP-133 policies, as Python classes (tidelog.server.config.policies).
    "create.topic.policy.class.name": _k(_parse_str, ""),
    "alter.config.policy.class.name": _k(_parse_str, ""),
    "tidelog.policy.min.replication.factor": _k(_parse_int, 2),
    "super.users": _k(_parse_str, ""),
    "allow.everyone.if.no.acl.found": _k(_parse_bool, False),
    # ZooKeeper: whether the znodes the broker creates are closed to others, and its digest
    # credentials (tidelog's own key: Kafka reads them from a JAAS file).
    "zookeeper.set.acl": _k(_parse_bool, False),
    "tidelog.zookeeper.digest": _k(_parse_str, ""),
    # Testing only (the fault harness's per-link proxies): see ``PeerAddresses``.
    "tidelog.testing.peer.addresses": _k(parse_peer_addresses, PeerAddresses()),
}

#: Kafka properties accepted for compatibility with existing files; tidelog has no use for
#: them (one event loop, the OS's socket buffers), so they are recorded and otherwise ignored.
IGNORED_KEYS: Final = frozenset(
    {
        "num.network.threads",
        "num.io.threads",
        "num.recovery.threads.per.data.dir",
        "socket.send.buffer.bytes",
        "socket.receive.buffer.bytes",
        # KIP-368 re-authentication is not built: sessions last as long as the connection.
        "connections.max.reauth.ms",
        "queued.max.requests",
    }
)

_LISTENER = re.compile(r"^(?:(?P<name>[A-Za-z_][A-Za-z0-9_]*)://)?(?P<host>[^:,]*):(?P<port>\d+)$")


@dataclass(frozen=True, slots=True)
class Endpoint:
    """One listener: ``NAME://host:port`` and the security protocol its name maps to."""

    name: str
    host: str
    port: int
    security_protocol: str = "PLAINTEXT"

    @property
    def uses_tls(self) -> bool:
        return self.security_protocol in ("SSL", "SASL_SSL")

    @property
    def uses_sasl(self) -> bool:
        return self.security_protocol.startswith("SASL_")


def parse_protocol_map(raw: str) -> dict[str, str]:
    """``listener.security.protocol.map``: ``NAME:PROTOCOL[,NAME:PROTOCOL...]``."""
    mapping: dict[str, str] = {}
    for item in (part.strip() for part in raw.split(",")):
        if not item:
            continue
        name, sep, protocol = (text.strip() for text in item.partition(":"))
        if not sep or not name or protocol.upper() not in SECURITY_PROTOCOLS:
            raise ConfigError(
                "listener.security.protocol.map",
                f"invalid entry {item!r}: expected NAME:PROTOCOL with PROTOCOL one of "
                + ", ".join(SECURITY_PROTOCOLS),
            )
        if name.upper() in mapping:
            raise ConfigError("listener.security.protocol.map", f"listener {name} is mapped twice")
        mapping[name.upper()] = protocol.upper()
    return mapping


def parse_listeners(
    key: str, raw: str, protocol_map: Mapping[str, str] | None = None
) -> list[Endpoint]:
    """Parse a comma-separated listener list (``NAME://host:port``; a bare ``host:port`` is
    PLAINTEXT). Each name must be in ``protocol_map`` (Kafka's default map when None) and
    appear once; ports must differ unless 0."""
    mapping = protocol_map if protocol_map is not None else parse_protocol_map(DEFAULT_PROTOCOL_MAP)
    endpoints: list[Endpoint] = []
    for item in (part.strip() for part in raw.split(",")):
        if not item:
            continue
        match = _LISTENER.match(item)
        if match is None:
            raise ConfigError(key, f"invalid listener {item!r}: expected NAME://host:port")
        name = (match.group("name") or "PLAINTEXT").upper()
        protocol = mapping.get(name)
        if protocol is None:
            raise ConfigError(
                key,
                f"listener {item!r}: {name} is not in listener.security.protocol.map "
                f"({', '.join(sorted(mapping))})",
            )
        port = int(match.group("port"))
        if not 0 <= port <= 65535:
            raise ConfigError(key, f"listener {item!r}: port out of range")
        if any(e.name == name for e in endpoints):
            raise ConfigError(key, f"listener name {name} is given twice")
        if port and any(e.port == port for e in endpoints):
            raise ConfigError(key, f"listener {item!r}: port {port} is used by another listener")
        endpoints.append(Endpoint(name, match.group("host") or "0.0.0.0", port, protocol))
    if not endpoints:
        raise ConfigError(key, "at least one listener is required")
    return endpoints


#: ``listener.name.<listener>.<key>``: a per-listener value of a security key (Kafka's
#: listener prefix). ``<key>`` may itself start with a SASL mechanism
#: (``scram-sha-256.sasl.jaas.config``).
_LISTENER_PREFIXED = re.compile(r"^listener\.name\.(?P<listener>[A-Za-z0-9_]+)\.(?P<key>.+)$")
#: The keys a listener prefix may carry.
_PREFIXABLE = re.compile(
    r"^(ssl\..+|sasl\..+|(plain|scram-sha-256|scram-sha-512)\.sasl\.jaas\.config)$"
)


@dataclass(frozen=True, slots=True, kw_only=True)
class BrokerConfig:
    """A validated broker configuration. ``values`` holds every known key (defaults filled)."""

    values: Mapping[str, object]
    #: Keys given explicitly (file or override), for DescribeConfigs' ``is_default``.
    explicit: frozenset[str] = frozenset()
    ignored: Mapping[str, str] = field(default_factory=dict)
    #: ``listener.name.<listener>.<key>`` values, verbatim (``listener_value``).
    prefixed: Mapping[str, str] = field(default_factory=dict)

    def __getitem__(self, key: str) -> object:
        return self.values[key]

    def get_int(self, key: str) -> int:
        value = self.values[key]
        assert isinstance(value, int)
        return value

    def get_bool(self, key: str) -> bool:
        value = self.values[key]
        assert isinstance(value, bool)
        return value

    def get_str(self, key: str) -> str:
        value = self.values[key]
        assert isinstance(value, str)
        return value

    @property
    def broker_id(self) -> int:
        return self.get_int("broker.id")

    @property
    def protocol_map(self) -> dict[str, str]:
        return parse_protocol_map(self.get_str("listener.security.protocol.map"))

    @property
    def listeners(self) -> list[Endpoint]:
        """Every listener the broker serves (``listeners``), in the order given."""
        return parse_listeners("listeners", self.get_str("listeners"), self.protocol_map)

    @property
    def advertised_listeners(self) -> list[Endpoint]:
        """What the broker registers: ``advertised.listeners`` by name, falling back to the
        listener itself for names it does not list (Kafka's rule)."""
        raw = self.get_str("advertised.listeners")
        advertised = (
            {e.name: e for e in parse_listeners("advertised.listeners", raw, self.protocol_map)}
            if raw
            else {}
        )
        return [advertised.get(e.name, e) for e in self.listeners]

    @property
    def inter_broker_listener_name(self) -> str:
        """``inter.broker.listener.name``, else the listener named like
        ``security.inter.broker.protocol`` (Kafka's rule)."""
        return (
            self.get_str("inter.broker.listener.name")
            or self.get_str("security.inter.broker.protocol")
        ).upper()

    @property
    def inter_broker_listener(self) -> Endpoint:
        """The advertised endpoint peers reach this broker on."""
        name = self.inter_broker_listener_name
        return next(e for e in self.advertised_listeners if e.name == name)

    @property
    def listener(self) -> Endpoint:
        """The first listener (single-listener callers and tools)."""
        return self.listeners[0]

    @property
    def advertised_listener(self) -> Endpoint:
        """The inter-broker listener's advertised endpoint (what the cluster's own clients
        use)."""
        return self.inter_broker_listener

    def listener_value(self, listener: str, key: str) -> str:
        """A security key for one listener: ``listener.name.<listener lower>.<key>`` first,
        then the broker-wide ``key`` ("" when neither is set), as Kafka resolves them."""
        prefixed = self.prefixed.get(f"listener.name.{listener.lower()}.{key}")
        if prefixed is not None:
            return prefixed
        value = self.values.get(key, "")
        return value if isinstance(value, str) else config_to_string(value)

    @property
    def metrics_listener(self) -> MetricsListener | None:
        """Where the Prometheus endpoint listens; None: no endpoint (the default)."""
        return parse_metrics_listener(self.get_str("metrics.listener"))

    def peer_address(
        self, broker_id: int, registered_host: str, registered_port: int
    ) -> tuple[str, int]:
        """Where this broker connects to peer ``broker_id`` registered at host:port (the
        registered address unless ``tidelog.testing.peer.addresses`` lists the peer)."""
        peers = self.values["tidelog.testing.peer.addresses"]
        assert isinstance(peers, PeerAddresses)
        return peers.peer_address(broker_id, registered_host, registered_port)

    @property
    def log_dirs(self) -> list[Path]:
        raw = self.get_str("log.dirs") or self.get_str("log.dir")
        return [Path(part.strip()) for part in raw.split(",") if part.strip()]

    @property
    def log_retention_ms(self) -> int:
        """Kafka's precedence: log.retention.ms, then .minutes, then .hours (-1 = forever)."""
        ms = self.get_int("log.retention.ms")
        if ms != -2:
            return ms
        minutes = self.get_int("log.retention.minutes")
        if minutes != -2:
            return -1 if minutes == -1 else minutes * 60_000
        hours = self.get_int("log.retention.hours")
        return -1 if hours == -1 else hours * 3_600_000

    @property
    def log_roll_ms(self) -> int:
        ms = self.get_int("log.roll.ms")
        return ms if ms != -1 else self.get_int("log.roll.hours") * 3_600_000

    def topic_defaults(self) -> dict[str, object]:
        """The topic-level config every topic starts from, derived from broker keys."""
        flush_ms = self.get_int("log.flush.interval.ms")
        return {
            "cleanup.policy": self.get_str("log.cleanup.policy"),
            "min.cleanable.dirty.ratio": self.values["log.cleaner.min.cleanable.ratio"],
            "delete.retention.ms": self.get_int("log.cleaner.delete.retention.ms"),
            "min.compaction.lag.ms": self.get_int("log.cleaner.min.compaction.lag.ms"),
            "max.compaction.lag.ms": self.get_int("log.cleaner.max.compaction.lag.ms"),
            "compression.type": self.get_str("compression.type"),
            "compression.gzip.level": self.get_int("compression.gzip.level"),
            "compression.lz4.level": self.get_int("compression.lz4.level"),
            "compression.zstd.level": self.get_int("compression.zstd.level"),
            "retention.ms": self.log_retention_ms,
            "retention.bytes": self.get_int("log.retention.bytes"),
            "segment.bytes": self.get_int("log.segment.bytes"),
            "segment.ms": self.log_roll_ms,
            "segment.index.bytes": self.get_int("log.index.size.max.bytes"),
            "index.interval.bytes": self.get_int("log.index.interval.bytes"),
            "max.message.bytes": self.get_int("message.max.bytes"),
            "min.insync.replicas": self.get_int("min.insync.replicas"),
            "unclean.leader.election.enable": self.get_bool("unclean.leader.election.enable"),
            "flush.messages": self.get_int("log.flush.interval.messages"),
            "flush.ms": LONG_MAX if flush_ms == -1 else flush_ms,
            "message.timestamp.type": "CreateTime",
            LEADER_THROTTLED_REPLICAS: "",
            FOLLOWER_THROTTLED_REPLICAS: "",
        }


def parse_properties(text: str) -> dict[str, str]:
    """Java ``.properties`` lines: ``key=value`` or ``key: value``; ``#``/``!`` comments."""
    result: dict[str, str] = {}
    pending = ""
    for raw_line in text.splitlines():
        line = pending + raw_line.strip()
        pending = ""
        if not line or line[0] in "#!":
            continue
        if line.endswith("\\") and not line.endswith("\\\\"):
            pending = line[:-1]
            continue
        match = re.match(r"^([^=:\s]+)\s*[=:\s]\s*(.*)$", line)
        if match is None:
            result[line] = ""
        else:
            result[match.group(1)] = match.group(2)
    return result


def parse_override(item: str) -> tuple[str, str]:
    key, sep, value = item.partition("=")
    if not sep or not key.strip():
        raise ConfigError(item, "an override must look like key=value")
    return key.strip(), value


def load_broker_config(
    properties: Mapping[str, str], overrides: Iterable[tuple[str, str]] = ()
) -> BrokerConfig:
    """Validate ``properties`` + ``overrides`` (later wins) into a ``BrokerConfig``.

    Raises ``ConfigError`` naming the first unknown key or invalid value.
    """
    raw: dict[str, str] = dict(properties)
    for key, override in overrides:
        raw[key] = override
    values: dict[str, object] = {key: spec.default for key, spec in BROKER_KEYS.items()}
    ignored: dict[str, str] = {}
    prefixed: dict[str, str] = {}
    for key, text in raw.items():
        if key in IGNORED_KEYS:
            ignored[key] = text
            continue
        listener_key = _LISTENER_PREFIXED.match(key)
        if listener_key is not None and _PREFIXABLE.match(listener_key.group("key")):
            listener_name = listener_key.group("listener").lower()
            prefixed[f"listener.name.{listener_name}.{listener_key.group('key')}"] = text
            continue
        spec = BROKER_KEYS.get(key)
        if spec is None:
            raise ConfigError(key, "unknown configuration key")
        try:
            value = spec.parse(text)
        except ValueError as exc:
            raise ConfigError(key, f"invalid value {text!r}: {exc}") from None
        if spec.check is not None:
            problem = spec.check(value)
            if problem is not None:
                raise ConfigError(key, f"invalid value {text!r}: {problem}")
        values[key] = value
    config = BrokerConfig(
        values=values,
        explicit=frozenset(raw) - IGNORED_KEYS,
        ignored=ignored,
        prefixed=prefixed,
    )
    # Cross-key checks, each naming the key at fault.
    _check_listeners(config)
    digest = config.get_str("tidelog.zookeeper.digest")
    if digest and not all(digest.partition(":")[::2]):
        raise ConfigError("tidelog.zookeeper.digest", "must look like user:password")
    if config.get_bool("zookeeper.set.acl") and not digest:
        raise ConfigError(
            "zookeeper.set.acl",
            "closing znodes to others needs this broker's ZooKeeper credentials: set "
            "tidelog.zookeeper.digest=user:password",
        )
    if not config.log_dirs:
        raise ConfigError("log.dirs", "at least one log directory is required")
    if config.broker_id < 0:
        raise ConfigError("broker.id", "must be set to a non-negative id")
    return config


def _check_listeners(config: BrokerConfig) -> None:
    """Kafka's listener rules: every name mapped, advertised names among the listeners and
    reachable, one inter-broker listener that exists."""
    mapping = config.protocol_map
    listeners = parse_listeners("listeners", config.get_str("listeners"), mapping)
    names = {e.name for e in listeners}
    raw = config.get_str("advertised.listeners")
    if raw:
        for advertised in parse_listeners("advertised.listeners", raw, mapping):
            if advertised.name not in names:
                raise ConfigError(
                    "advertised.listeners",
                    f"{advertised.name} is not one of the listeners ({', '.join(sorted(names))})",
                )
            if advertised.host in ("", "0.0.0.0"):
                raise ConfigError("advertised.listeners", "must name a host clients can reach")
    explicit = config.explicit
    if "inter.broker.listener.name" in explicit and "security.inter.broker.protocol" in explicit:
        raise ConfigError(
            "inter.broker.listener.name",
            "only one of inter.broker.listener.name and security.inter.broker.protocol may be set",
        )
    if config.inter_broker_listener_name in names:
        return
    if "inter.broker.listener.name" in explicit:
        raise ConfigError(
            "inter.broker.listener.name",
            f"{config.inter_broker_listener_name} is not one of the listeners "
            f"({', '.join(sorted(names))})",
        )
    if "security.inter.broker.protocol" in explicit or len(listeners) > 1:
        raise ConfigError(
            "security.inter.broker.protocol",
            f"no listener is named {config.inter_broker_listener_name}: set "
            "inter.broker.listener.name to one of " + ", ".join(sorted(names)),
        )
    # One listener and nothing said: it is the inter-broker listener too.
    values = dict(config.values)
    values["inter.broker.listener.name"] = listeners[0].name
    object.__setattr__(config, "values", values)


def load_broker_config_file(path: Path, overrides: Iterable[tuple[str, str]] = ()) -> BrokerConfig:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError("--config", f"cannot read {path}: {exc.strerror}") from None
    return load_broker_config(parse_properties(text), overrides)


# --- topic-level configs ---------------------------------------------------------------


def _enum(*allowed: str) -> Callable[[str], object]:
    def parse(raw: str) -> str:
        value = raw.strip()
        if value not in allowed:
            raise ValueError(f"must be one of {', '.join(allowed)}")
        return value

    return parse


#: Topic configs tidelog applies, by Kafka's topic-level name. Values Kafka knows but
#: tidelog cannot honour (LogAppendTime) are
#: refused with INVALID_CONFIG rather than silently ignored.
TOPIC_KEYS: Final[Mapping[str, _Key]] = {
    "cleanup.policy": _k(_cleanup_policy, "delete"),
    "min.cleanable.dirty.ratio": _k(_parse_double, 0.5, _ratio),
    "delete.retention.ms": _k(_parse_int, 86400000, _at_least(0)),
    "min.compaction.lag.ms": _k(_parse_int, 0, _at_least(0)),
    "max.compaction.lag.ms": _k(_parse_int, LONG_MAX, _at_least(1)),
    "compression.type": _k(_compression_type, "producer"),
    "compression.gzip.level": _k(_parse_int, -1, _minus_one_or_between(1, 9)),
    "compression.lz4.level": _k(_parse_int, 9, _between(1, 17)),
    "compression.zstd.level": _k(_parse_int, 3, _between(-131072, 22)),
    "retention.ms": _k(_parse_int, 604800000, _at_least(-1)),
    "retention.bytes": _k(_parse_int, -1, _at_least(-1)),
    "segment.bytes": _k(_parse_int, 1073741824, _at_least(14)),
    "segment.ms": _k(_parse_int, 604800000, _at_least(1)),
    "segment.index.bytes": _k(_parse_int, 10485760, _at_least(4)),
    "index.interval.bytes": _k(_parse_int, 4096, _at_least(0)),
    "max.message.bytes": _k(_parse_int, 1048588, _at_least(0)),
    "min.insync.replicas": _k(_parse_int, 1, _at_least(1)),
    "unclean.leader.election.enable": _k(_parse_bool, False),
    "flush.messages": _k(_parse_int, LONG_MAX, _at_least(1)),
    "flush.ms": _k(_parse_int, LONG_MAX, _at_least(0)),
    "message.timestamp.type": _k(_enum("CreateTime"), "CreateTime"),
    # KIP-73: the replicas throttled while they lead / follow (partition:broker list or *).
    LEADER_THROTTLED_REPLICAS: _k(throttled_replicas_parser(LEADER_THROTTLED_REPLICAS), ""),
    FOLLOWER_THROTTLED_REPLICAS: _k(throttled_replicas_parser(FOLLOWER_THROTTLED_REPLICAS), ""),
}


def validate_topic_configs(configs: Mapping[str, str | None]) -> tuple[dict[str, object], str]:
    """Parse topic overrides. Returns ``(parsed, "")`` or ``({}, message naming the key)``.

    A value of ``None`` means "remove the override" and is kept as ``None``.
    """
    parsed: dict[str, object] = {}
    for key, raw in configs.items():
        spec = TOPIC_KEYS.get(key)
        if spec is None:
            return {}, f"Unknown topic config name: {key}"
        if raw is None:
            parsed[key] = None
            continue
        try:
            value = spec.parse(raw)
        except ValueError as exc:
            return {}, f"Invalid value {raw} for configuration {key}: {exc}"
        if spec.check is not None:
            problem = spec.check(value)
            if problem is not None:
                return {}, f"Invalid value {raw} for configuration {key}: {problem}"
        parsed[key] = value
    return parsed, ""


def config_to_string(value: object) -> str:
    """Kafka's string form of a config value (booleans lower-case)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


_TOPIC_NAME = re.compile(r"^[a-zA-Z0-9._-]+$")
MAX_TOPIC_NAME_LENGTH: Final = 249


def topic_name_error(name: str) -> str:
    """Kafka's ``Topic.validate``: empty string when the name is legal, else the reason."""
    if not name:
        return "Topic name is illegal, it can't be empty"
    if name in (".", ".."):
        return 'Topic name cannot be "." or ".."'
    if len(name) > MAX_TOPIC_NAME_LENGTH:
        return f"Topic name is illegal, it can't be longer than {MAX_TOPIC_NAME_LENGTH} characters"
    if _TOPIC_NAME.match(name) is None:
        return (
            f'Topic name "{name}" is illegal, it contains a character other than ASCII '
            "alphanumerics, '.', '_' and '-'"
        )
    return ""
