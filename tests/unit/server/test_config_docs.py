"""The config metadata table (``tidelog.server.config.docs``): every key has Kafka's type,
documentation, sensitivity and read-only-ness, and the topic <-> broker synonyms."""

from __future__ import annotations

import pytest

from tidelog.server.config.broker_keys import BROKER_KEYS
from tidelog.server.config.docs import (
    DYNAMIC_BROKER_KEYS,
    TOPIC_SYNONYMS,
    broker_doc,
    broker_synonyms,
    topic_doc,
)
from tidelog.server.config.keys import IGNORED_KEYS, TOPIC_KEYS, ConfigType

T = ConfigType


@pytest.mark.parametrize("key", sorted(BROKER_KEYS))
def test_every_broker_key_is_described(key: str) -> None:
    doc = broker_doc(key)
    assert doc is not None
    assert doc.type is not T.UNKNOWN
    assert doc.documentation.endswith(".")
    assert len(doc.documentation) <= 100


@pytest.mark.parametrize("key", sorted(TOPIC_KEYS))
def test_every_topic_key_is_described_with_a_synonym(key: str) -> None:
    doc = topic_doc(key)
    assert doc is not None
    assert doc.type is not T.UNKNOWN
    assert doc.documentation
    # KIP-73's throttled-replicas lists and KIP-405's remote.* keys have no broker default
    # (Kafka's ServerTopicConfigSynonyms, LogConfig.CONFIGS_WITH_NO_SERVER_DEFAULTS).
    assert (
        key in TOPIC_SYNONYMS
        or key.endswith(".replication.throttled.replicas")
        or key.startswith("remote.")
    )


def test_ignored_keys_are_described() -> None:
    assert all(broker_doc(k) is not None for k in IGNORED_KEYS)


@pytest.mark.parametrize(
    ("key", "kind"),
    [
        ("broker.id", T.INT),
        ("unclean.leader.election.enable", T.BOOLEAN),
        ("log.retention.ms", T.LONG),
        ("offsets.topic.replication.factor", T.SHORT),
        ("sasl.enabled.mechanisms", T.LIST),
        ("listeners", T.STRING),
        ("ssl.key.password", T.PASSWORD),
        ("ssl.keystore.password", T.PASSWORD),
        ("ssl.truststore.password", T.PASSWORD),
        ("sasl.jaas.config", T.PASSWORD),
        ("tidelog.zookeeper.digest", T.PASSWORD),
        ("listener.name.sasl_ssl.scram-sha-256.sasl.jaas.config", T.PASSWORD),
        ("listener.name.ssl.ssl.key.password", T.PASSWORD),
        ("listener.name.ssl.ssl.client.auth", T.STRING),
    ],
)
def test_kafka_types_and_sensitivity(key: str, kind: ConfigType) -> None:
    doc = broker_doc(key)
    assert doc is not None
    assert doc.type is kind
    assert doc.sensitive == (kind is T.PASSWORD)


def test_unknown_and_prefixed_keys() -> None:
    assert broker_doc("no.such.key") is None
    assert broker_doc("listener.name.x.no.such") is None
    prefixed = broker_doc("listener.name.ssl.ssl.keystore.location")
    assert prefixed is not None
    assert not prefixed.dynamic


def test_read_only_is_what_tidelog_cannot_apply_live() -> None:
    assert {
        "log.retention.ms",
        "log.retention.minutes",
        "log.retention.hours",
        "log.segment.bytes",
        "message.max.bytes",
        "min.insync.replicas",
        "unclean.leader.election.enable",
        "log.flush.interval.messages",
        "log.flush.interval.ms",
        "compression.type",
    } <= DYNAMIC_BROKER_KEYS
    for fixed in ("broker.id", "listeners", "num.partitions", "log.dirs", "ssl.key.password"):
        assert fixed not in DYNAMIC_BROKER_KEYS
    assert not any(BROKER_KEYS[k].sensitive for k in DYNAMIC_BROKER_KEYS)
    assert not any(d.dynamic for d in TOPIC_KEYS.values())


@pytest.mark.parametrize(
    ("name", "synonyms"),
    [
        (
            "log.retention.hours",
            ("log.retention.ms", "log.retention.minutes", "log.retention.hours"),
        ),
        ("log.roll.ms", ("log.roll.ms", "log.roll.hours")),
        ("log.flush.interval.ms", ("log.flush.interval.ms", "log.flush.scheduler.interval.ms")),
        ("message.max.bytes", ("message.max.bytes",)),
    ],
)
def test_broker_synonyms(name: str, synonyms: tuple[str, ...]) -> None:
    assert broker_synonyms(name) == synonyms


def test_topic_synonyms_name_broker_keys() -> None:
    assert TOPIC_SYNONYMS["retention.ms"] == "log.retention.ms"
    assert TOPIC_SYNONYMS["segment.bytes"] == "log.segment.bytes"
    assert TOPIC_SYNONYMS["max.message.bytes"] == "message.max.bytes"
    assert TOPIC_SYNONYMS["segment.ms"] == "log.roll.ms"
    for topic_key, broker_key in TOPIC_SYNONYMS.items():
        if topic_key in TOPIC_KEYS and broker_key not in ("log.cleanup.policy",):
            assert broker_key in BROKER_KEYS
