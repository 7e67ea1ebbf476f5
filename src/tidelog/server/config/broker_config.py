"""Broker and topic configuration: Kafka's property names, defaults and validation.

A broker is configured by a ``server.properties`` file (Java properties syntax) plus
``--override key=value`` pairs, exactly as ``kafka-server-start.sh`` takes them. Every key
must be known and every value valid, or start-up stops with a ``ConfigError`` naming the key
(docs/design.md "Configuration"). Keys Kafka has but tidelog does not act on (thread counts,
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

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from tidelog.errors import ConfigError
from tidelog.server.config.broker_keys import BROKER_KEYS
from tidelog.server.config.keys import IGNORED_KEYS, TOPIC_KEYS
from tidelog.server.config.throttles import FOLLOWER_THROTTLED_REPLICAS, LEADER_THROTTLED_REPLICAS
from tidelog.server.config.values import (
    DEFAULT_PROTOCOL_MAP,
    LONG_MAX,
    SECURITY_PROTOCOLS,
    MetricsListener,
    PeerAddresses,
    parse_metrics_listener,
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

    @property
    def log_roll_jitter_ms(self) -> int:
        ms = self.get_int("log.roll.jitter.ms")
        return ms if ms != -1 else self.get_int("log.roll.jitter.hours") * 3_600_000

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
            "segment.jitter.ms": self.log_roll_jitter_ms,
            "file.delete.delay.ms": self.get_int("log.segment.delete.delay.ms"),
            "preallocate": self.get_bool("log.preallocate"),
            "message.timestamp.type": self.get_str("log.message.timestamp.type"),
            "message.timestamp.difference.max.ms": self.get_int(
                "log.message.timestamp.difference.max.ms"
            ),
            "message.timestamp.before.max.ms": self.get_int("log.message.timestamp.before.max.ms"),
            "message.timestamp.after.max.ms": self.get_int("log.message.timestamp.after.max.ms"),
            "message.downconversion.enable": self.get_bool("log.message.downconversion.enable"),
            "message.format.version": self.get_str("log.message.format.version"),
            "local.retention.ms": self.get_int("log.local.retention.ms"),
            "local.retention.bytes": self.get_int("log.local.retention.bytes"),
            # Kafka has no broker default for these (not in ServerTopicConfigSynonyms).
            "remote.storage.enable": False,
            "remote.log.copy.disable": False,
            "remote.log.delete.on.disable": False,
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
        explicit=frozenset(raw) - IGNORED_KEYS.keys(),
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
