"""Broker and topic config: Kafka's names and defaults; bad keys and values name the key."""

from __future__ import annotations

from pathlib import Path

import pytest

from tidelog.errors import ConfigError, ErrorCode
from tidelog.server.config.broker_config import (
    load_broker_config,
    load_broker_config_file,
    parse_override,
    parse_properties,
    topic_name_error,
    validate_topic_configs,
)
from tidelog.server.config.dynamic import check_alteration
from tidelog.server.config.values import LONG_MAX

BASE = {"log.dirs": "/tmp/x"}


def test_defaults_are_kafkas() -> None:
    config = load_broker_config(BASE)
    assert config.broker_id == 0
    assert config.get_int("num.partitions") == 1
    assert config.get_int("message.max.bytes") == 1048588
    assert config.get_int("socket.request.max.bytes") == 104857600
    assert config.get_bool("auto.create.topics.enable") is True
    assert config.log_retention_ms == 168 * 3_600_000
    topic = config.topic_defaults()
    assert topic["max.message.bytes"] == 1048588
    assert topic["retention.ms"] == 604800000
    assert topic["flush.ms"] == LONG_MAX


def test_transactional_id_expiry_keys_are_kafkas_and_read_only() -> None:
    config = load_broker_config(BASE)
    assert config.get_int("transactional.id.expiration.ms") == 604800000
    assert config.get_int("transaction.remove.expired.transaction.cleanup.interval.ms") == 3600000
    for key in (
        "transactional.id.expiration.ms",
        "transaction.remove.expired.transaction.cleanup.interval.ms",
    ):
        error, message = check_alteration("0", {key: "1000"})
        assert error == ErrorCode.INVALID_REQUEST  # read-only, as in Kafka
        assert message is not None
        assert message.endswith(f"Cannot update these configs dynamically: Set({key})")


def test_properties_file_and_overrides(tmp_path: Path) -> None:
    path = tmp_path / "server.properties"
    path.write_text(
        "# comment\n! also a comment\nbroker.id = 3\nlog.dirs=/a,/b\n"
        "listeners=PLAINTEXT://127.0.0.1:9999\nlog.retention.hours: 1\nnum.io.threads=8\n"
    )
    config = load_broker_config_file(path, [parse_override("num.partitions=4")])
    assert config.broker_id == 3
    assert [str(d) for d in config.log_dirs] == ["/a", "/b"]
    assert (config.listener.host, config.listener.port) == ("127.0.0.1", 9999)
    assert config.get_int("num.partitions") == 4
    assert config.log_retention_ms == 3_600_000
    assert "num.io.threads" in config.ignored  # a Kafka key with no effect here is accepted
    assert "num.partitions" in config.explicit


def test_retention_precedence_ms_over_minutes_over_hours() -> None:
    assert load_broker_config({**BASE, "log.retention.minutes": "2"}).log_retention_ms == 120_000
    assert (
        load_broker_config(
            {**BASE, "log.retention.minutes": "2", "log.retention.ms": "5"}
        ).log_retention_ms
        == 5
    )
    assert load_broker_config({**BASE, "log.retention.hours": "-1"}).log_retention_ms == -1


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("log.retention.bytse", "1", "log.retention.bytse: unknown configuration key"),
        ("num.partitions", "zero", "num.partitions: invalid value 'zero'"),
        ("num.partitions", "0", "num.partitions: invalid value '0': must be at least 1"),
        ("auto.create.topics.enable", "yes", "auto.create.topics.enable: invalid value 'yes'"),
        (
            "listeners",
            "SECRET://h:1",
            "listeners: listener 'SECRET://h:1': SECRET is not in listener.security.protocol.map",
        ),
        ("listeners", "PLAINTEXT://h:1,SSL://h:1", "listeners: listener 'SSL://h:1': port 1"),
        ("inter.broker.listener.name", "SSL", "inter.broker.listener.name: SSL is not one of"),
        (
            "listener.security.protocol.map",
            "PLAINTEXT:TLS",
            "listener.security.protocol.map: invalid entry 'PLAINTEXT:TLS'",
        ),
        ("ssl.client.auth", "always", "ssl.client.auth: invalid value 'always'"),
        ("listeners", "nonsense", "listeners: invalid listener 'nonsense'"),
        ("broker.id", "-1", "broker.id: must be set"),
        ("log.dirs", "", "log.dirs: at least one log directory"),
        ("advertised.listeners", "PLAINTEXT://0.0.0.0:1", "advertised.listeners: must name"),
        ("message.max.bytes", "99999999999999999999", "message.max.bytes: invalid value"),
        (
            "tidelog.log.page.cache.keep.bytes",
            "4096",
            "tidelog.log.page.cache.keep.bytes: invalid value '4096'",
        ),
        (
            "transactional.id.expiration.ms",
            "0",
            "transactional.id.expiration.ms: invalid value '0': must be at least 1",
        ),
    ],
)
def test_bad_settings_name_the_key(key: str, value: str, message: str) -> None:
    props = {"log.dirs": "/tmp/x", "log.dir": "", key: value}
    with pytest.raises(ConfigError) as info:
        load_broker_config(props)
    assert info.value.key == key
    assert str(info.value).startswith(message)


def test_override_must_be_key_value() -> None:
    with pytest.raises(ConfigError, match="key=value"):
        parse_override("num.partitions")


def test_parse_properties_continuation_and_separators() -> None:
    assert parse_properties("a=1\nb : 2\nc 3\nd=x\\\n  y\n") == {
        "a": "1",
        "b": "2",
        "c": "3",
        "d": "xy",
    }


def test_topic_configs_validated_with_kafka_names() -> None:
    parsed, problem = validate_topic_configs(
        {
            "retention.ms": "1000",
            "max.message.bytes": "5000",
            "cleanup.policy": "delete",
            "unclean.leader.election.enable": "true",
            "min.insync.replicas": None,
        }
    )
    assert problem == ""
    assert parsed == {
        "retention.ms": 1000,
        "max.message.bytes": 5000,
        "cleanup.policy": "delete",
        "unclean.leader.election.enable": True,
        "min.insync.replicas": None,
    }
    for configs, fragment in [
        ({"retention.ms": "soon"}, "Invalid value soon for configuration retention.ms"),
        ({"segment.bytes": "1"}, "must be at least 14"),
        ({"cleanup.policy": "compact,shred"}, "must be a list of delete and compact"),
        ({"min.cleanable.dirty.ratio": "1.5"}, "must be between 0.0 and 1.0"),
        # Kafka 3.x's BrokerCompressionType has no "none", and names are case-sensitive.
        ({"compression.type": "none"}, "must be one of uncompressed, zstd, lz4"),
        ({"compression.type": "GZIP"}, "must be one of uncompressed"),
        ({"compression.zstd.level": "23"}, "must be between -131072 and 22"),
        ({"no.such": "1"}, "Unknown topic config name: no.such"),
    ]:
        parsed, problem = validate_topic_configs(configs)
        assert parsed == {}
        assert fragment in problem


@pytest.mark.parametrize(
    ("name", "legal"),
    [
        ("orders", True),
        ("a.b_c-D9", True),
        ("", False),
        (".", False),
        ("..", False),
        ("x" * 249, True),
        ("x" * 250, False),
        ("bad name", False),
        ("bad/name", False),
    ],
)
def test_topic_names_follow_kafka(name: str, legal: bool) -> None:
    assert (topic_name_error(name) == "") is legal
