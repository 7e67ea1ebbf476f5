"""Fake broker state for the metrics tests, and helpers to scrape a registry and talk to
the metrics endpoint."""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from tidelog.histogram import Histogram
from tidelog.model import BrokerId, TopicPartition
from tidelog.server.replica.fetch_session import FetchSessionCache
from tidelog.server.replica.purgatory import Purgatory
from tidelog.server.replica.quota import ReplicationQuotas
from tidelog.server.replica.topic_stats import BrokerTopicStats

# --- fake broker state -------------------------------------------------------------------


def hosted(
    *,
    leader: bool,
    isr: set[int],
    replicas: tuple[int, ...] = (0, 1, 2),
    min_isr: int = 2,
    log_dir: str = "/logs/a",
    log_end: int = 0,
    log_start: int = 0,
    size: int = 0,
    segments: tuple[int, ...] = (0,),
) -> SimpleNamespace:
    partition = SimpleNamespace(
        is_leader=leader,
        isr=frozenset(BrokerId(b) for b in isr),
        replicas=tuple(BrokerId(b) for b in replicas),
        min_insync_replicas=min_isr,
    )
    the_log = SimpleNamespace(
        directory=Path(log_dir) / "t-0",
        log_end_offset=log_end,
        log_start_offset=log_start,
        size_bytes=size,
        segment_base_offsets=segments,
    )
    return SimpleNamespace(partition=partition, log=the_log)


def fake_replica_manager() -> SimpleNamespace:
    return SimpleNamespace(
        partitions={
            TopicPartition("t", 0): hosted(leader=True, isr={0, 1, 2}),
            TopicPartition("t", 1): hosted(leader=True, isr={0}),  # under min ISR
            TopicPartition("t", 2): hosted(leader=True, isr={0, 1}),  # at min ISR
            TopicPartition("u", 0): hosted(leader=False, isr={1, 2}, log_dir="/logs/b"),
        },
        offline_log_dirs={},
        produce_purgatory=Purgatory("Produce"),
        fetch_purgatory=Purgatory("Fetch"),
        fetch_sessions=FetchSessionCache(10, 120_000),
        isr_shrinks=4,
        isr_expands=3,
        failed_isr_updates=1,
        replication_quotas=ReplicationQuotas(0),
        topic_stats=BrokerTopicStats(),
    )


def election_times(*ms: float) -> Histogram:
    """A controller's LeaderElectionRateAndTimeMs timer after rounds of ``ms``."""
    timer = Histogram()
    for value in ms:
        timer.observe(value)
    return timer


def fake_node(*, active: bool = True, connected: bool = True) -> SimpleNamespace:
    controller = SimpleNamespace(
        is_active=active,
        offline_partition_count=lambda: 2 if active else 0,
        preferred_replica_imbalance_count=lambda: 1 if active else 0,
        global_counts=lambda: (5, 17) if active else (0, 0),
        leader_elections=9,
        unclean_leader_elections=1,
        election_times=election_times(3.0, 40.0),
    )
    return SimpleNamespace(
        controller=controller,
        zk=SimpleNamespace(connected=connected),
        fetchers=SimpleNamespace(fetchers={}),
    )


def scrape_text(text: bytes) -> dict[str, float]:
    """Every sample as ``name{label="v",...}`` -> value (labels sorted)."""
    samples: dict[str, float] = {}
    for family in text_string_to_metric_families(text.decode()):
        for s in family.samples:
            labels = ",".join(f'{k}="{v}"' for k, v in sorted(s.labels.items()))
            samples[f"{s.name}{{{labels}}}" if labels else s.name] = s.value
    return samples


def scrape(registry: Any) -> dict[str, float]:
    return scrape_text(generate_latest(registry))


async def exchange(port: int, request: bytes, *, eof: bool = False) -> bytes:
    """Send ``request`` (and close our side if ``eof``); everything the endpoint answers
    until it closes (it must)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(request)
    if eof:
        writer.write_eof()
    await writer.drain()
    try:
        return await asyncio.wait_for(reader.read(), 5.0)  # EOF: the endpoint closed
    finally:
        writer.close()
        with contextlib.suppress(ConnectionError):
            await writer.wait_closed()


def split(answer: bytes) -> tuple[str, dict[str, str], bytes]:
    head, _, body = answer.partition(b"\r\n\r\n")
    status, *lines = head.decode("ascii").split("\r\n")
    headers = {k.lower(): v.strip() for k, _, v in (line.partition(":") for line in lines)}
    return status, headers, body
