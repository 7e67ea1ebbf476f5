"""A topic's effective configuration: its overrides over the broker's topic defaults.

Kafka's ``LogConfig.fromProps(defaults, overrides)``: every topic-level key takes the
topic's override when one is set, else the broker's default (``log.retention.ms`` for
``retention.ms``, ...); ``flush.ms = -1`` means "never", which the log reads as LONG_MAX.
"""

from __future__ import annotations

from collections.abc import Mapping

from tidelog.server.config.broker_config import BrokerConfig
from tidelog.server.config.values import LONG_MAX


def effective_topic_config(
    config: BrokerConfig, overrides: Mapping[str, object]
) -> dict[str, object]:
    """The broker's topic defaults with the topic's non-null ``overrides`` on top."""
    merged = config.topic_defaults()
    merged.update({k: v for k, v in overrides.items() if v is not None})
    if merged.get("flush.ms") == -1:
        merged["flush.ms"] = LONG_MAX
    return merged
