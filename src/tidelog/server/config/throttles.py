"""Replication throttle configs (KIP-73): the config names, and the throttled-replicas lists
of a topic (``leader.replication.throttled.replicas``, ``follower...``) parsed and read.

The throttles themselves (the windowed rates) are ``tidelog.server.replica.quota``'s; its
docstring has the rules this module's names refer to.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Final, Literal

#: Topic configs naming the throttled replicas (rule 2).
LEADER_THROTTLED_REPLICAS: Final = "leader.replication.throttled.replicas"
FOLLOWER_THROTTLED_REPLICAS: Final = "follower.replication.throttled.replicas"
#: Broker configs with the rates (rule 1).
LEADER_THROTTLED_RATE: Final = "leader.replication.throttled.rate"
FOLLOWER_THROTTLED_RATE: Final = "follower.replication.throttled.rate"
#: Static broker configs of the windows (rule 3), with Kafka's defaults.
WINDOW_NUM: Final = "replication.quota.window.num"
WINDOW_SIZE_SECONDS: Final = "replication.quota.window.size.seconds"
DEFAULT_WINDOW_NUM: Final = 11
DEFAULT_WINDOW_SIZE_SECONDS: Final = 1

#: Every replica of a topic (the config value ``*``).
ALL_REPLICAS: Final = "*"
AllReplicas = Literal["*"]

_PAIR = re.compile(r"(?:[0-9]+:[0-9]+)?")


def parse_throttled_replicas(key: str, text: str) -> str:
    """The normalised value of throttled-replicas config ``key`` (items trimmed, joined by
    ","), or ValueError with Kafka's message naming ``key``. Kafka's LIST parsing splits on
    commas; its validator accepts items matching ``([0-9]+:[0-9]+)?`` or the list ``*``."""
    items = [item.strip() for item in text.split(",")] if text.strip() else []
    if "".join(items) == ALL_REPLICAS:
        return ALL_REPLICAS
    if not all(_PAIR.fullmatch(item) for item in items):
        raise ValueError(
            f"{key} must be the literal '*' or a list of replicas in the following format: "
            "[partitionId]:[brokerId],[partitionId]:[brokerId],..."
        )
    return ",".join(item for item in items if item)


def throttled_replicas_parser(key: str) -> Callable[[str], str]:
    """``parse_throttled_replicas`` for one key, as a config table's parse function."""

    def parse(text: str) -> str:
        return parse_throttled_replicas(key, text)

    return parse


def throttled_partitions(text: str, broker_id: int) -> frozenset[int] | AllReplicas:
    """Rule 2: the partitions of a topic whose ``text`` list throttles ``broker_id`` (Kafka's
    ``parseThrottledPartitions``); ``ALL_REPLICAS`` for ``*``. ``text`` is valid."""
    value = text.strip()
    if value == ALL_REPLICAS:
        return ALL_REPLICAS
    partitions: set[int] = set()
    for item in value.split(","):
        partition, sep, broker = item.strip().partition(":")
        if sep and int(broker) == broker_id:
            partitions.add(int(partition))
    return frozenset(partitions)
