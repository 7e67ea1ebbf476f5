"""The web console's HTTP side (tidelog.server.observability.console) behind the metrics endpoint,
on a broker without ZooKeeper (a fake replica manager): the page, the snapshot with each
replica's LEO, lag and the HW, the event stream, and the answers to bad requests."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import Awaitable, Callable
from types import SimpleNamespace
from typing import Any

from prometheus_client import CollectorRegistry

from tidelog.model import BrokerId, TopicPartition
from tidelog.security.client_config import PLAINTEXT
from tidelog.server.cluster.backend import ZkBackend
from tidelog.server.cluster.metadata_cache import CachedBroker, CachedPartition
from tidelog.server.config.values import MetricsListener
from tidelog.server.observability.console import QUORUM_TIMEOUT_S, Console
from tidelog.server.observability.console_sources import ClusterSource, LocalSource
from tidelog.server.observability.metrics.broker_collector import ALONE
from tidelog.server.observability.metrics.endpoint import MetricsEndpoint


def fake_replica_manager(now_ms: int) -> SimpleNamespace:
    replica_states = {
        BrokerId(1): SimpleNamespace(log_end_offset=90, last_caught_up_time_ms=now_ms - 2500),
        BrokerId(2): SimpleNamespace(log_end_offset=100, last_caught_up_time_ms=now_ms),
    }
    partition = SimpleNamespace(
        is_leader=True,
        isr=frozenset({BrokerId(0), BrokerId(2)}),
        replicas=(BrokerId(0), BrokerId(1), BrokerId(2)),
        local_broker_id=BrokerId(0),
        leader_epoch=4,
        high_watermark=95,
        replica_states=replica_states,
    )
    hosted = SimpleNamespace(partition=partition, log=SimpleNamespace(log_end_offset=100))
    return SimpleNamespace(partitions={TopicPartition("orders", 0): hosted})


def with_console(test: Callable[[int], Awaitable[None]]) -> None:
    async def body() -> None:
        console = Console(ALONE, LocalSource(0, fake_replica_manager(int(time.time() * 1000))))  # type: ignore[arg-type]
        endpoint = MetricsEndpoint(CollectorRegistry())
        endpoint.routes[b"/console"] = console.route
        endpoint.routes[b"/api/"] = console.route
        port = await endpoint.start(MetricsListener("127.0.0.1", 0))
        try:
            await test(port)
        finally:
            await endpoint.stop()
            await console.close()

    asyncio.run(body())


async def exchange(port: int, request: bytes) -> tuple[str, dict[str, str], bytes]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(request)
    await writer.drain()
    try:
        answer = await asyncio.wait_for(reader.read(), 5.0)
    finally:
        writer.close()
        with contextlib.suppress(ConnectionError):
            await writer.wait_closed()
    head, _, body = answer.partition(b"\r\n\r\n")
    status, *lines = head.decode("ascii").split("\r\n")
    headers = {k.lower(): v.strip() for k, _, v in (line.partition(":") for line in lines)}
    return status, headers, body


def get(path: str, method: str = "GET") -> bytes:
    return f"{method} {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode()


def test_the_page_is_one_file_that_loads_nothing_from_elsewhere() -> None:
    async def test(port: int) -> None:
        status, headers, body = await exchange(port, get("/console"))
        assert status == "HTTP/1.1 200 OK"
        assert headers["content-type"] == "text/html; charset=utf-8"
        assert int(headers["content-length"]) == len(body)
        assert b"<title>tidelog console</title>" in body
        assert b'new EventSource("/api/events")' in body
        for outside in (b"http://", b"https://", b"src=", b"@import"):
            assert outside not in body
        status, headers, body = await exchange(port, get("/console", "HEAD"))
        assert status == "HTTP/1.1 200 OK"
        assert body == b""

    with_console(test)


def test_snapshot_has_each_replicas_leo_lag_and_the_hw() -> None:
    async def test(port: int) -> None:
        status, headers, body = await exchange(port, get("/api/snapshot"))
        assert status == "HTTP/1.1 200 OK"
        assert headers["content-type"] == "application/json"
        snap = json.loads(body)
        assert snap["broker"] == 0
        assert snap["build_ms"] >= 0
        [topic] = snap["topics"]
        assert topic["name"] == "orders"
        [p] = topic["partitions"]
        assert (p["leader"], p["leader_epoch"], p["hw"]) == (0, 4, 95)
        rows = {r["id"]: r for r in p["replica_states"]}
        assert rows[0] == {
            "id": 0,
            "leo": 100,
            "lag": 0,
            "lag_ms": 0,
            "in_isr": True,
            "leader": True,
        }
        assert (rows[1]["leo"], rows[1]["lag"], rows[1]["in_isr"]) == (90, 10, False)
        assert 2500 <= rows[1]["lag_ms"] < 10_000
        assert (rows[2]["leo"], rows[2]["lag"], rows[2]["in_isr"]) == (100, 0, True)
        status, _, body = await exchange(port, get("/api/history"))
        assert status == "HTTP/1.1 200 OK"
        assert json.loads(body) == {"events": []}

    with_console(test)


def test_event_stream_sends_snapshots() -> None:
    async def test(port: int) -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(get("/api/events?interval_ms=100"))
        await writer.drain()
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5.0)
        assert head.startswith(b"HTTP/1.1 200 OK\r\n")
        assert b"Content-Type: text/event-stream" in head
        events: list[dict[str, Any]] = []
        started = time.monotonic()
        while len(events) < 3:
            block = await asyncio.wait_for(reader.readuntil(b"\n\n"), 5.0)
            lines = block.decode().strip().split("\n")
            if lines[0] == "event: snapshot":
                events.append(json.loads(lines[1].removeprefix("data: ")))
        assert 0.15 <= time.monotonic() - started < 3.0  # every 100 ms
        assert all(e["topics"][0]["name"] == "orders" for e in events)
        writer.close()
        with contextlib.suppress(ConnectionError):
            await writer.wait_closed()

    with_console(test)


def test_bad_requests_are_answered_like_the_metrics_endpoint() -> None:
    async def test(port: int) -> None:
        status, _, body = await exchange(port, get("/api/nothing"))
        assert status == "HTTP/1.1 404 Not Found"
        assert body == b"not found: the console is at /console, its data under /api/\n"
        status, _, _ = await exchange(port, get("/consoles"))
        assert status == "HTTP/1.1 404 Not Found"
        for bad in ("fast", "5", "100000"):
            status, _, body = await exchange(port, get(f"/api/events?interval_ms={bad}"))
            assert status == "HTTP/1.1 400 Bad Request"
            assert body == b"interval_ms must be an integer from 100 to 60000\n"
        status, headers, _ = await exchange(port, get("/console", "POST"))
        assert status == "HTTP/1.1 405 Method Not Allowed"
        assert headers["allow"] == "GET, HEAD"
        status, _, _ = await exchange(port, get("/metrics"))
        assert status == "HTTP/1.1 200 OK"  # still the metrics endpoint

    with_console(test)


def test_a_silent_or_dead_leader_shows_unreachable_without_holding_up_the_snapshot() -> None:
    """A leader that accepts and never answers, and one that is gone: their partitions show
    ``unreachable`` after the 2 s timeout; the broker's own partitions are there."""

    async def body() -> None:
        accepted: list[asyncio.StreamWriter] = []
        silent = await asyncio.start_server(lambda _r, w: accepted.append(w), "127.0.0.1", 0)
        silent_port = silent.sockets[0].getsockname()[1]
        gone = await asyncio.start_server(lambda _r, _w: None, "127.0.0.1", 0)
        gone_port = gone.sockets[0].getsockname()[1]
        gone.close()
        await gone.wait_closed()
        tps = {
            TopicPartition("orders", 0): CachedPartition(0, 4, (0, 2), (0, 1, 2), 7),
            TopicPartition("orders", 1): CachedPartition(1, 2, (1, 2), (1, 2, 0), 3),
            TopicPartition("orders", 2): CachedPartition(2, 1, (2, 0), (2, 0, 1), 2),
        }
        brokers = {
            0: CachedBroker(0, "127.0.0.1", 1),
            1: CachedBroker(1, "127.0.0.1", silent_port),
            2: CachedBroker(2, "127.0.0.1", gone_port),
        }
        node = SimpleNamespace(
            metadata=SimpleNamespace(
                partitions=tps,
                brokers=brokers,
                controller_id=1,
                controller_epoch=3,
                cluster_id="c1",
            ),
            controller=None,
            zk=None,
            listener_name="PLAINTEXT",
            peer_security=PLAINTEXT,
            client=SimpleNamespace(bootstrap=[("127.0.0.1", 1)]),
        )
        backend = ZkBackend(None, node)  # type: ignore[arg-type]
        console = Console(
            backend,
            ClusterSource(0, node, fake_replica_manager(int(time.time() * 1000)), backend, None),  # type: ignore[arg-type]
        )
        try:
            started = time.monotonic()
            snap = await console.snapshot()
            took = time.monotonic() - started
        finally:
            await console.close()
            silent.close()
            for w in accepted:
                w.close()
            await silent.wait_closed()
        assert took < QUORUM_TIMEOUT_S + 1.5
        assert snap["controller"] == {"id": 1, "epoch": 3, "active_here": False}
        assert snap["zookeeper"]["state"] == "NONE"
        assert [b["id"] for b in snap["brokers"]] == [0, 1, 2]
        rows = {p["partition"]: p for p in snap["topics"][0]["partitions"]}
        assert rows[0]["status"] == "ok"
        assert rows[0]["hw"] == 95
        for p in (1, 2):
            assert rows[p]["status"] == "unreachable"
            assert rows[p]["hw"] is None
            assert [r["leo"] for r in rows[p]["replica_states"]] == [None, None, None]

    asyncio.run(body())
