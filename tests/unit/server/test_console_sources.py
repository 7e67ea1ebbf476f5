"""The console's snapshot sources (tidelog.server.observability.console_sources): which one
a broker's metadata backend gets, and what a lone broker's source answers."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

from tidelog.model import BrokerId, TopicPartition
from tidelog.server.observability.console_sources import (
    LocalSource,
)


def lone_replica_manager() -> Any:
    partition = SimpleNamespace(
        is_leader=True,
        isr=frozenset({BrokerId(7)}),
        replicas=(BrokerId(7),),
        local_broker_id=BrokerId(7),
        leader_epoch=2,
        high_watermark=5,
        replica_states={},
    )
    hosted = SimpleNamespace(partition=partition, log=SimpleNamespace(log_end_offset=6))
    return SimpleNamespace(partitions={TopicPartition("t", 0): hosted})


def test_the_local_source_shows_the_broker_alone_and_keeps_the_groups() -> None:
    async def body() -> None:
        source = LocalSource(7, lone_replica_manager())
        snap = await source.topology(1_000)
        previous = [{"group": "g", "coordinator": 7, "partitions": []}]
        assert await source.groups(previous) is previous
        await source.close()
        assert snap["brokers"] == [{"id": 7, "alive": True, "host": "", "port": 0}]
        assert snap["controller"] == {"id": 7, "epoch": -1, "active_here": True}
        (row,) = snap["topics"][0]["partitions"]
        assert (row["leader"], row["hw"], row["leo"], row["status"]) == (7, 5, 6, "ok")

    asyncio.run(body())
