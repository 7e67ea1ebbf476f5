"""Every topic config key Kafka 3.9 has (``tests.kafka_topic_configs``) is known to tidelog
with Kafka's type and default, parses its default and another valid value, and reaches the
log where it changes behaviour (issue 30 point 2)."""

from __future__ import annotations

import pytest

from tests.kafka_topic_configs import KAFKA_TOPIC_CONFIGS
from tidelog.server.config.broker_config import (
    config_to_string,
    load_broker_config,
    validate_topic_configs,
)
from tidelog.server.config.keys import TIERED_STORAGE_DISABLED, TOPIC_KEYS
from tidelog.server.config.topic_config import effective_topic_config, log_config_for
from tidelog.storage.log_config import NEVER

BASE = {"log.dirs": "/tmp/x"}


def test_tidelog_knows_exactly_kafkas_topic_keys() -> None:
    assert sorted(TOPIC_KEYS) == sorted(KAFKA_TOPIC_CONFIGS)


@pytest.mark.parametrize("key", sorted(KAFKA_TOPIC_CONFIGS))
def test_each_key_has_kafkas_type_and_default(key: str) -> None:
    kafka = KAFKA_TOPIC_CONFIGS[key]
    assert TOPIC_KEYS[key].type.name == kafka.type
    defaults = effective_topic_config(load_broker_config(BASE), {})
    assert config_to_string(defaults[key]) == kafka.default


@pytest.mark.parametrize("key", sorted(KAFKA_TOPIC_CONFIGS))
def test_each_key_takes_its_default_and_another_value(key: str) -> None:
    kafka = KAFKA_TOPIC_CONFIGS[key]
    for value in (kafka.default, kafka.other):
        parsed, problem = validate_topic_configs({key: value})
        assert problem == ""
        assert config_to_string(parsed[key]) == value
        merged = effective_topic_config(load_broker_config(BASE), parsed)
        log_config_for(merged)  # every key set reaches a LogConfig


def test_every_key_at_once_reaches_the_log() -> None:
    parsed, problem = validate_topic_configs({k: c.other for k, c in KAFKA_TOPIC_CONFIGS.items()})
    assert problem == ""
    log = log_config_for(effective_topic_config(load_broker_config(BASE), parsed))
    assert log.message_timestamp_type == "LogAppendTime"
    assert log.log_append_time
    assert log.segment_jitter_ms == 1000
    assert log.file_delete_delay_ms == 1000
    assert log.message_timestamp_before_max_ms == 86400000
    assert log.message_timestamp_after_max_ms == 3600000


def test_unknown_key_is_refused() -> None:
    assert validate_topic_configs({"no.such.key": "1"}) == (
        {},
        "Unknown topic config name: no.such.key",
    )


@pytest.mark.parametrize(
    ("key", "value", "problem"),
    [
        (
            "message.timestamp.type",
            "BrokerTime",
            "Invalid value BrokerTime for configuration message.timestamp.type: "
            "must be one of CreateTime, LogAppendTime",
        ),
        (
            "message.timestamp.before.max.ms",
            "-1",
            "Invalid value -1 for configuration message.timestamp.before.max.ms: "
            "must be at least 0",
        ),
        ("segment.jitter.ms", "-1", "must be at least 0"),
        ("local.retention.ms", "-3", "must be at least -2"),
        ("preallocate", "yes", "expected true or false"),
        ("message.format.version", "latest", "must be a Kafka version such as 3.0-IV1"),
        (
            "remote.storage.enable",
            "true",
            f"Invalid value true for configuration remote.storage.enable: "
            f"{TIERED_STORAGE_DISABLED}",
        ),
    ],
)
def test_bad_values_are_refused_naming_the_key(key: str, value: str, problem: str) -> None:
    parsed, message = validate_topic_configs({key: value})
    assert parsed == {}
    assert problem in message


def test_empty_cleanup_policy_is_the_empty_list() -> None:
    # Kafka stores what an IncrementalAlterConfigs SUBTRACT of every policy leaves.
    parsed, problem = validate_topic_configs({"cleanup.policy": ""})
    assert (parsed, problem) == ({"cleanup.policy": ""}, "")
    log = log_config_for(effective_topic_config(load_broker_config(BASE), parsed))
    assert (log.compact, log.delete) == (False, False)
    assert validate_topic_configs({"cleanup.policy": "delete,"})[1].endswith(
        "must be a list of delete and compact"
    )


@pytest.mark.parametrize(
    ("overrides", "window"),
    [
        ({}, (NEVER, NEVER)),
        ({"message.timestamp.difference.max.ms": "5000"}, (5000, 5000)),
        (
            {
                "message.timestamp.difference.max.ms": "5000",
                "message.timestamp.before.max.ms": "1000",
            },
            (1000, 5000),
        ),
        (
            {
                "message.timestamp.difference.max.ms": "5000",
                "message.timestamp.after.max.ms": "2000",
            },
            (5000, 2000),
        ),
    ],
)
def test_difference_max_ms_is_kip_937s_deprecated_alias(
    overrides: dict[str, str], window: tuple[int, int]
) -> None:
    parsed, problem = validate_topic_configs(dict(overrides))
    assert problem == ""
    log = log_config_for(effective_topic_config(load_broker_config(BASE), parsed))
    assert (log.message_timestamp_before_max_ms, log.message_timestamp_after_max_ms) == window


def test_broker_keys_are_the_topic_defaults() -> None:
    config = load_broker_config(
        {
            **BASE,
            "log.message.timestamp.type": "LogAppendTime",
            "log.message.timestamp.before.max.ms": "7000",
            "log.roll.jitter.hours": "2",
            "log.segment.delete.delay.ms": "10",
            "log.preallocate": "true",
        }
    )
    defaults = effective_topic_config(config, {})
    assert defaults["message.timestamp.type"] == "LogAppendTime"
    assert defaults["message.timestamp.before.max.ms"] == 7000
    assert defaults["segment.jitter.ms"] == 2 * 3_600_000
    assert defaults["file.delete.delay.ms"] == 10
    assert defaults["preallocate"] is True
    ms = load_broker_config({**BASE, "log.roll.jitter.ms": "5", "log.roll.jitter.hours": "2"})
    assert effective_topic_config(ms, {})["segment.jitter.ms"] == 5
