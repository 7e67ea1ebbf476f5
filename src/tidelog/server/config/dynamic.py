"""Dynamic broker configs (KIP-226): the broker's live config and where each value comes from.

``DynamicBrokerConfig`` is Kafka's ``DynamicBrokerConfig`` for the keys tidelog applies at
runtime (``config_docs.DYNAMIC_BROKER_KEYS``). Rules:

1. Precedence, highest first: DYNAMIC_BROKER_CONFIG (``/config/brokers/<id>``),
   DYNAMIC_DEFAULT_BROKER_CONFIG (``/config/brokers/<default>``), STATIC_BROKER_CONFIG
   (``server.properties`` and ``--override``: ``BrokerConfig.explicit``), DEFAULT_CONFIG.
2. The broker's ``BrokerConfig`` object is shared by every component (API handlers,
   replica manager, cluster node); a change replaces its ``values`` with the merged view,
   as Kafka's ``KafkaConfig.updateCurrentConfig`` swaps its current config, so everything
   that reads a key reads the live value. Components that copied a value at start-up are
   told through ``listeners`` (topic log configs, the controller's unclean default). The
   KIP-73 replication throttle rates (``leader.replication.throttled.rate``,
   ``follower.replication.throttled.rate``) need no listener: the replica manager reads
   them at every replica fetch (``ReplicaManager.replication_throttles``).
3. A dynamic entry that is unknown, not dynamic here, or invalid is logged and ignored (a
   Kafka broker sharing the ZooKeeper may have written it); the rest apply.
4. ``check_alteration`` answers an alteration of an entity's whole dynamic config before
   anything is written: an unknown key is INVALID_CONFIG naming it; a key tidelog cannot
   change at runtime is INVALID_REQUEST with Kafka's "Cannot update these configs
   dynamically: Set(...)"; an invalid value is INVALID_CONFIG naming the key.
5. Describing (Kafka's ``ConfigHelper.createBrokerConfigEntry``/``createTopicConfigEntry``):
   a key's synonyms are listed by source then by ``broker_synonyms`` order; a broker key
   drops the synonyms ahead of itself (Kafka's ``dropWhile``). A topic key keeps its whole
   chain: Kafka drops it there too, which hides a static ``log.retention.hours`` behind a
   DEFAULT_CONFIG ``retention.ms`` - tidelog shows the real source instead. Sensitive values
   are null everywhere; a key whose Kafka default is null has no DEFAULT_CONFIG synonym.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Final

from tidelog.errors import ErrorCode
from tidelog.server.config.broker_config import BrokerConfig, config_to_string
from tidelog.server.config.broker_keys import BROKER_KEYS
from tidelog.server.config.docs import (
    DYNAMIC_BROKER_KEYS,
    TOPIC_SYNONYMS,
    ConfigSource,
    broker_doc,
    broker_synonyms,
    topic_doc,
)

log = logging.getLogger(__name__)

#: The entity name of the cluster-wide default in ZooKeeper (``<default>``); on the wire
#: a broker resource with an empty name.
DEFAULT_ENTITY: Final = "<default>"


@dataclass(frozen=True, slots=True)
class Synonym:
    """One DescribeConfigs synonym: a key, its value at that source (None: sensitive), and
    the source."""

    name: str
    value: str | None
    source: ConfigSource


def parse_broker_value(key: str, text: str) -> tuple[object, str]:
    """``(value, "")`` or ``(None, message naming the key)`` for a broker key's text."""
    spec = BROKER_KEYS[key]
    try:
        value = spec.parse(text)
    except ValueError as exc:
        return None, f"Invalid value {text} for configuration {key}: {exc}"
    if spec.check is not None and (problem := spec.check(value)) is not None:
        return None, f"Invalid value {text} for configuration {key}: {problem}"
    return value, ""


def _scala_set(names: Iterable[str]) -> str:
    return "Set(" + ", ".join(sorted(names)) + ")"


def check_alteration(resource_name: str, new: Mapping[str, str]) -> tuple[ErrorCode, str | None]:
    """Rule 4 for the whole new dynamic config of broker ``resource_name`` ("" = default)."""
    for key in sorted(new):
        if key not in BROKER_KEYS and broker_doc(key) is None:
            return ErrorCode.INVALID_CONFIG, f"Unknown broker config name: {key}"
    fixed = [k for k in new if k not in DYNAMIC_BROKER_KEYS or k not in BROKER_KEYS]
    if fixed:
        return ErrorCode.INVALID_REQUEST, (
            f"Invalid config value for resource ConfigResource(type=BROKER, "
            f"name='{resource_name}'): Cannot update these configs dynamically: "
            f"{_scala_set(fixed)}"
        )
    for key, text in sorted(new.items()):
        _value, problem = parse_broker_value(key, text)
        if problem:
            return ErrorCode.INVALID_CONFIG, problem
    return ErrorCode.NONE, None


class DynamicBrokerConfig:
    """The live config of one broker (rules 1-3) and the describing of its keys (rule 5)."""

    def __init__(self, config: BrokerConfig) -> None:
        self.config = config
        #: What the broker started with (rule 1's STATIC and DEFAULT layers).
        self.static_values: dict[str, object] = dict(config.values)
        #: Valid dynamic entries, as text: the default entity's and this broker's.
        self.dynamic_default: dict[str, str] = {}
        self.dynamic_broker: dict[str, str] = {}
        self._parsed_default: dict[str, object] = {}
        self._parsed_broker: dict[str, object] = {}
        #: Called after the live values changed (rule 2).
        self.listeners: list[Callable[[], None]] = []

    # -- updates (rules 2, 3) ------------------------------------------------------------

    def update(self, *, per_broker: bool, raw: Mapping[str, str]) -> bool:
        """A new dynamic config of this broker (``per_broker``) or of the default entity;
        whether the live values changed."""
        text: dict[str, str] = {}
        parsed: dict[str, object] = {}
        for key, value in sorted(raw.items()):
            if key not in DYNAMIC_BROKER_KEYS or key not in BROKER_KEYS:
                log.warning("dynamic broker config %s ignored: not dynamically updatable", key)
                continue
            result, problem = parse_broker_value(key, value)
            if problem:
                log.warning("dynamic broker config ignored: %s", problem)
                continue
            text[key], parsed[key] = value, result
        if per_broker:
            self.dynamic_broker, self._parsed_broker = text, parsed
        else:
            self.dynamic_default, self._parsed_default = text, parsed
        merged = dict(self.static_values)
        merged.update(self._parsed_default)
        merged.update(self._parsed_broker)
        if merged == dict(self.config.values):
            return False
        # Rule 2: the frozen object everyone holds gets the new view (as load_broker_config
        # itself settles inter.broker.listener.name).
        object.__setattr__(self.config, "values", merged)
        log.info(
            "dynamic broker configs now: default %s, broker %s",
            self.dynamic_default,
            self.dynamic_broker,
        )
        for listener in list(self.listeners):
            try:
                listener()
            except Exception:
                log.exception("applying the dynamic broker configs failed")
        return True

    # -- describing (rule 5) -------------------------------------------------------------

    def static_text(self, name: str) -> str | None:
        """``name``'s value in server.properties / the overrides, or None when not given."""
        config = self.config
        if name in config.ignored:
            return config.ignored[name]
        if name not in config.explicit:
            return None
        if name in config.prefixed:
            return config.prefixed[name]
        if name in self.static_values:
            return config_to_string(self.static_values[name])
        return None

    @staticmethod
    def default_text(name: str) -> str | None:
        """Kafka's default of ``name`` as text, None when it has none (rule 6 of
        ``config_docs``) or is not a broker key."""
        spec = BROKER_KEYS.get(name)
        doc = broker_doc(name)
        if spec is None or (doc is not None and doc.unset_default):
            return None
        return config_to_string(spec.default)

    def synonyms(
        self, names: Sequence[str], *, sensitive: bool, per_broker: bool = True
    ) -> list[Synonym]:
        """Rule 5: ``names`` at every source where they have a value."""
        out: list[Synonym] = []
        layers: list[tuple[ConfigSource, Callable[[str], str | None]]] = [
            (ConfigSource.DYNAMIC_BROKER_CONFIG, self.dynamic_broker.get),
            (ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG, self.dynamic_default.get),
            (ConfigSource.STATIC_BROKER_CONFIG, self.static_text),
            (ConfigSource.DEFAULT_CONFIG, self.default_text),
        ]
        for source, lookup in layers:
            if source is ConfigSource.DYNAMIC_BROKER_CONFIG and not per_broker:
                continue
            for name in names:
                value = lookup(name)
                if value is not None:
                    out.append(Synonym(name, None if sensitive else value, source))
        return out

    def broker_names(self) -> list[str]:
        """Every broker key DescribeConfigs lists for this broker: the known keys, the
        listener-prefixed keys given, and ignored keys given."""
        names = set(BROKER_KEYS) | set(self.config.prefixed) | set(self.config.ignored)
        return sorted(n for n in names if broker_doc(n) is not None)

    def broker_value(self, name: str) -> str | None:
        """The current text value of a broker key (None: Kafka's null)."""
        config = self.config
        if name in config.prefixed:
            return config.prefixed[name]
        if name in config.ignored:
            return config.ignored[name]
        if name not in config.values:
            return None
        doc = broker_doc(name)
        spec = BROKER_KEYS.get(name)
        value = config.values[name]
        if doc is not None and doc.unset_default and spec is not None and value == spec.default:
            return None
        return config_to_string(value)

    def broker_entry_synonyms(self, name: str, *, per_broker: bool = True) -> list[Synonym]:
        doc = broker_doc(name)
        sensitive = doc is not None and doc.sensitive
        chain = self.synonyms(broker_synonyms(name), sensitive=sensitive, per_broker=per_broker)
        while chain and chain[0].name != name:
            chain.pop(0)
        return chain

    def topic_entry_synonyms(self, name: str, override: str | None) -> list[Synonym]:
        """A topic key's chain: its override (when set), then its broker synonyms."""
        doc = topic_doc(name)
        sensitive = doc is not None and doc.sensitive
        chain: list[Synonym] = []
        if override is not None:
            chain.append(
                Synonym(name, None if sensitive else override, ConfigSource.DYNAMIC_TOPIC_CONFIG)
            )
        broker_name = TOPIC_SYNONYMS.get(name)
        if broker_name is not None:
            names = [n for n in broker_synonyms(broker_name) if n in BROKER_KEYS]
            chain.extend(self.synonyms(names, sensitive=sensitive))
        return chain


__all__ = [
    "DEFAULT_ENTITY",
    "DynamicBrokerConfig",
    "Synonym",
    "check_alteration",
    "parse_broker_value",
]
