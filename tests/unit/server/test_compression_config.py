"""compression.type and KIP-390's levels: the broker key is the default of new topics, a
topic override wins, both reach the log's LogConfig; Kafka 3.x's values only."""

from __future__ import annotations

import pytest

from tidelog.errors import ConfigError
from tidelog.server.config.broker_config import load_broker_config, validate_topic_configs
from tidelog.server.config.topic_config import effective_topic_config
from tidelog.server.replica.manager import log_config_for

BASE = {"log.dirs": "/tmp/x"}


def test_defaults_are_kafkas() -> None:
    log = log_config_for(effective_topic_config(load_broker_config(BASE), {}))
    assert log.compression_type == "producer"
    assert (log.compression_gzip_level, log.compression_lz4_level) == (-1, 9)
    assert log.compression_zstd_level == 3


def test_broker_key_is_the_topic_default_and_an_override_wins() -> None:
    config = load_broker_config(
        {**BASE, "compression.type": "zstd", "compression.zstd.level": "-3"}
    )
    assert config.topic_defaults()["compression.type"] == "zstd"
    log = log_config_for(effective_topic_config(config, {}))
    assert (log.compression_type, log.compression_zstd_level) == ("zstd", -3)
    overrides, problem = validate_topic_configs(
        {"compression.type": "lz4", "compression.lz4.level": "1"}
    )
    assert problem == ""
    log = log_config_for(effective_topic_config(config, overrides))
    assert (log.compression_type, log.compression_lz4_level) == ("lz4", 1)


@pytest.mark.parametrize("value", ["uncompressed", "zstd", "lz4", "snappy", "gzip", "producer"])
def test_every_kafka_value_is_accepted(value: str) -> None:
    assert (
        load_broker_config({**BASE, "compression.type": value}).topic_defaults()["compression.type"]
        == value
    )
    assert validate_topic_configs({"compression.type": value}) == ({"compression.type": value}, "")


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("compression.type", "none", "must be one of uncompressed, zstd, lz4, snappy, gzip"),
        ("compression.type", "LZ4", "must be one of"),
        ("compression.gzip.level", "0", "must be -1 or between 1 and 9"),
        ("compression.lz4.level", "18", "must be between 1 and 17"),
        ("compression.zstd.level", "23", "must be between -131072 and 22"),
    ],
)
def test_bad_values_name_the_key(key: str, value: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message) as info:
        load_broker_config({**BASE, key: value})
    assert key in str(info.value)
    parsed, problem = validate_topic_configs({key: value})
    assert parsed == {}
    assert f"configuration {key}" in problem
