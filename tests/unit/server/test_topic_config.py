"""A topic's effective config: overrides over the broker's topic defaults."""

from __future__ import annotations

from tidelog.server.config.broker_config import load_broker_config
from tidelog.server.config.topic_config import effective_topic_config
from tidelog.server.config.values import LONG_MAX

BASE = {"log.dirs": "/tmp/x"}


def test_defaults_come_from_the_broker() -> None:
    config = load_broker_config({**BASE, "log.retention.ms": "1234"})
    assert effective_topic_config(config, {})["retention.ms"] == 1234


def test_an_override_wins_and_none_keeps_the_default() -> None:
    config = load_broker_config({**BASE, "log.retention.ms": "1234"})
    merged = effective_topic_config(config, {"retention.ms": 99, "segment.bytes": None})
    assert merged["retention.ms"] == 99
    assert merged["segment.bytes"] == config.topic_defaults()["segment.bytes"]


def test_flush_ms_minus_one_means_never() -> None:
    config = load_broker_config(BASE)
    assert effective_topic_config(config, {"flush.ms": -1})["flush.ms"] == LONG_MAX
