"""The web console: the replication, live, in a browser.

Every broker with ``metrics.listener`` set serves it beside ``/metrics`` (the metrics
endpoint routes ``/console`` and ``/api/`` here,
``tidelog.server.observability.metrics.endpoint``):

- ``GET /console``: one HTML page (``console.html``, package data: plain HTML, vanilla JS
  and inline SVG/CSS; nothing is loaded from anywhere else);
- ``GET /api/snapshot``: the cluster as this broker sees it, as JSON (below);
- ``GET /api/history``: the controller's decision history (``tidelog.controller.history``);
- ``GET /api/events``: Server-Sent Events: a ``snapshot`` event every ``interval_ms``
  (default 1,000, 100..60,000) and a ``history`` event with each batch of new decisions,
  at once when this broker is the active controller, otherwise with the next snapshot.

Where the data comes from (theory of operation; rules 1, 2 and 5 are carried out by the
``SnapshotSource`` the broker is composed with, ``console_sources``: its cache and peers in
a cluster, its replica manager alone):

1. Brokers, topics, partitions, leaders, leader epochs, ISRs and the controller's id and
   epoch: this broker's metadata cache (what the controller last sent it in UpdateMetadata,
   as Kafka's MetadataCache). A replica of a broker not in the live list is shown dead.
2. Per-replica LEO, the HW, and lag: only a partition's leader knows them (Kafka keeps them
   in the leader's ``Partition.remoteReplicas``). For each leader, the console sends ONE
   DescribeQuorum (API 55, several topics and partitions per request) through tidelog's
   own client on the inter-broker listener, or reads its own replica manager for the
   partitions it leads. Lag in records is the leader's LEO minus the replica's; lag in ms
   is the time since the replica was last caught up (Kafka's ``lastCaughtUpTimeMs``, what
   ``replica.lag.time.max.ms`` is checked against). Each leader is asked with a timeout
   (``QUORUM_TIMEOUT_S``), all at once: a slow or dead leader makes its partitions show
   ``unreachable`` and never holds up the rest.
3. The decision history: the controller's own list when this broker is the active
   controller, else the znode it persists (read with a timeout; the last good read is kept
   when ZooKeeper is slow).
4. Snapshots are built on the loop, asynchronously, at most one at a time: connections that
   ask while one is being built share it, and one younger than ``SNAPSHOT_MAX_AGE_S`` is
   reused. ``build_ms`` in each snapshot says how long it took.
5. Consumer groups: ListGroups to every live broker, then OffsetFetch of each group's
   committed offsets from its coordinator (FindCoordinator), lag = the partition's HW minus
   the committed offset. Refreshed at most every ``GROUPS_MAX_AGE_S``, with a timeout; a
   group whose coordinator does not answer keeps its last known offsets, marked stale.

Errors: a method other than GET/HEAD is answered 405 by the metrics endpoint; an unknown
path under ``/api/`` or ``/console`` 404; a bad query value (``interval_ms`` not an
integer in range) 400. Without ``zookeeper.connect`` (a single-node broker) the page shows
that broker alone and no controller history.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import Callable, Mapping
from importlib import resources
from typing import Any, Final
from urllib.parse import parse_qs, urlsplit

from tidelog.controller.history import read_history
from tidelog.server.observability.console_sources import (
    QUORUM_TIMEOUT_S,
    SnapshotSource,
)
from tidelog.server.observability.metrics.broker_collector import ClusterSide
from tidelog.zk import ZkError

log = logging.getLogger(__name__)

#: How long it waits for ZooKeeper (the history znode).
HISTORY_TIMEOUT_S: Final = 1.0
#: A snapshot this young is served again instead of building another.
SNAPSHOT_MAX_AGE_S: Final = 0.5
#: Consumer groups are asked for at most this often.
GROUPS_MAX_AGE_S: Final = 5.0
GROUPS_TIMEOUT_S: Final = 3.0
#: History events sent in a snapshot (the newest).
SNAPSHOT_HISTORY: Final = 300
DEFAULT_INTERVAL_MS: Final = 1000
MIN_INTERVAL_MS: Final = 100
MAX_INTERVAL_MS: Final = 60_000

_REASONS: Final = {200: "OK", 400: "Bad Request", 404: "Not Found"}


def _http(status: int, body: bytes, content_type: str, *, head: bool) -> bytes:
    lines = [
        f"HTTP/1.1 {status} {_REASONS[status]}",
        f"Content-Type: {content_type}",
        f"Content-Length: {len(body)}",
        "Cache-Control: no-store",
        "Connection: close",
    ]
    header = ("\r\n".join(lines) + "\r\n\r\n").encode("ascii")
    return header if head else header + body


def _json(obj: Any, *, head: bool) -> bytes:
    body = json.dumps(obj, separators=(",", ":")).encode()
    return _http(200, body, "application/json", head=head)


def _error(status: int, message: str, *, head: bool) -> bytes:
    return _http(status, (message + "\n").encode(), "text/plain; charset=utf-8", head=head)


def page() -> bytes:
    """The console's HTML (package data)."""
    return resources.files("tidelog.server.observability").joinpath("console.html").read_bytes()


class Console:
    """Serves the console's paths for one broker (module docstring)."""

    def __init__(self, cluster: ClusterSide, source: SnapshotSource) -> None:
        #: The controller candidate and ZooKeeper client, for the decision history.
        self.cluster = cluster
        #: The snapshot's topology and the consumer groups (``console_sources``).
        self.source = source
        self._snapshot: dict[str, Any] | None = None
        self._snapshot_at = 0.0
        self._encoded_snapshot: tuple[dict[str, Any], bytes] | None = None
        self._building: asyncio.Task[dict[str, Any]] | None = None
        self._history: list[dict[str, Any]] = []
        self._groups: list[dict[str, Any]] = []
        self._groups_at = 0.0
        self._groups_task: asyncio.Task[None] | None = None
        self._streams: set[asyncio.Event] = set()
        self._unsubscribe: Callable[[], None] | None = None
        self._watch_history()

    def _watch_history(self) -> None:
        controller = self.cluster.controller()
        if controller is None or self._unsubscribe is not None:
            return
        self._unsubscribe = controller.history.subscribe(lambda _e: self._wake_streams())

    def _wake_streams(self) -> None:
        for event in self._streams:
            event.set()

    async def close(self) -> None:
        if self._unsubscribe is not None:
            self._unsubscribe()
        for task in (self._building, self._groups_task):
            if task is not None and not task.done():
                task.cancel()
        await self.source.close()

    # -- routing (called by MetricsEndpoint) -----------------------------------------------

    async def route(self, head: bool, target: bytes, writer: asyncio.StreamWriter) -> bytes | None:
        """The answer to ``GET``/``HEAD target``; None once an event stream has ended."""
        try:
            url = urlsplit(target.decode("ascii"))
            query = parse_qs(url.query, keep_blank_values=True, strict_parsing=False)
        except (UnicodeDecodeError, ValueError):
            return _error(400, "bad request target", head=head)
        path = url.path
        if path in ("/console", "/console/"):
            return _http(200, page(), "text/html; charset=utf-8", head=head)
        if path == "/api/snapshot":
            return _json(await self.snapshot(), head=head)
        if path == "/api/history":
            await self._refresh_history()
            return _json({"events": self._history}, head=head)
        if path == "/api/events":
            interval = _int_param(query, "interval_ms", DEFAULT_INTERVAL_MS)
            if interval is None or not MIN_INTERVAL_MS <= interval <= MAX_INTERVAL_MS:
                return _error(
                    400,
                    f"interval_ms must be an integer from {MIN_INTERVAL_MS} to {MAX_INTERVAL_MS}",
                    head=head,
                )
            if head:
                return _http(200, b"", "text/event-stream", head=True)
            await self._stream(writer, interval / 1000.0)
            return None
        return _error(404, "not found: the console is at /console, its data under /api/", head=head)

    async def _stream(self, writer: asyncio.StreamWriter, interval_s: float) -> None:
        """Server-Sent Events until the client goes away (module docstring)."""
        writer.write(
            b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
            b"Cache-Control: no-store\r\nConnection: close\r\n\r\nretry: 1000\n\n"
        )
        wake = asyncio.Event()
        self._streams.add(wake)
        sent: set[str] = set()
        next_snapshot = 0.0
        try:
            while not writer.is_closing():
                now = time.monotonic()
                if now >= next_snapshot:
                    snap = await self.snapshot()
                    next_snapshot = now + interval_s
                    # The snapshot carries the newest history: all of it is sent now.
                    sent = {e.get("id", "") for e in snap["history"]}
                    writer.write(self._encoded(snap))
                elif (controller := self.cluster.controller()) is not None:
                    events = list(controller.history.events)[-SNAPSHOT_HISTORY:]
                    fresh = [e for e in events if e.get("id") not in sent]
                    sent.update(e.get("id", "") for e in fresh)
                    if fresh:
                        writer.write(_sse("history", fresh))
                async with asyncio.timeout(10.0):  # a client that stopped reading
                    await writer.drain()
                wake.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(wake.wait(), max(0.0, next_snapshot - time.monotonic()))
        except (ConnectionError, TimeoutError):
            pass
        finally:
            self._streams.discard(wake)

    # -- the snapshot ----------------------------------------------------------------------

    def _encoded(self, snap: dict[str, Any]) -> bytes:
        """``snap`` as an SSE ``snapshot`` event, encoded once for every stream."""
        cached = self._encoded_snapshot
        if cached is not None and cached[0] is snap:
            return cached[1]
        data = _sse("snapshot", snap)
        self._encoded_snapshot = (snap, data)
        return data

    async def snapshot(self) -> dict[str, Any]:
        """The current snapshot: a young one again, or a new one (shared by all askers)."""
        if self._snapshot is not None and time.monotonic() - self._snapshot_at < SNAPSHOT_MAX_AGE_S:
            return self._snapshot
        if self._building is None or self._building.done():
            self._building = asyncio.get_running_loop().create_task(self._build())
        snap = await asyncio.shield(self._building)
        self._snapshot, self._snapshot_at = snap, time.monotonic()
        return snap

    async def _build(self) -> dict[str, Any]:
        started = time.perf_counter()
        now_ms = int(time.time() * 1000)
        # A lone broker has no controller candidate nor ZooKeeper: no history to watch or
        # read, and its source keeps the (empty) groups list.
        self._watch_history()
        snap: dict[str, Any]
        snap, _ = await asyncio.gather(self.source.topology(now_ms), self._refresh_history())
        self._maybe_refresh_groups()
        snap["groups"] = _with_lag(self._groups, snap["topics"])
        snap["history"] = self._history[-SNAPSHOT_HISTORY:]
        snap["time_ms"] = now_ms
        snap["build_ms"] = round((time.perf_counter() - started) * 1000.0, 2)
        return snap

    # -- history and groups ---------------------------------------------------------------

    async def _refresh_history(self) -> None:
        # A lone broker has neither a controller candidate nor ZooKeeper: no history.
        controller = self.cluster.controller()
        if controller is not None and controller.is_active:
            self._history = list(controller.history.events)
            return
        zk = self.cluster.zk
        if zk is None:
            return
        try:
            async with asyncio.timeout(HISTORY_TIMEOUT_S):
                self._history = await read_history(zk)
        except (ZkError, TimeoutError):
            pass  # the last good read stays

    def _maybe_refresh_groups(self) -> None:
        if time.monotonic() - self._groups_at < GROUPS_MAX_AGE_S:
            return
        if self._groups_task is not None and not self._groups_task.done():
            return
        self._groups_at = time.monotonic()
        self._groups_task = asyncio.get_running_loop().create_task(self._refresh_groups())

    async def _refresh_groups(self) -> None:
        try:
            async with asyncio.timeout(GROUPS_TIMEOUT_S):
                self._groups = await self.source.groups(self._groups)
        except Exception as exc:
            log.debug("console: consumer groups failed: %r", exc)


def _with_lag(groups: list[dict[str, Any]], topics: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each group's committed offsets with their lag: the partition's HW minus the offset."""
    hws = {(t["name"], p["partition"]): p.get("hw") for t in topics for p in t["partitions"]}
    out = []
    for g in groups:
        rows = []
        for row in g["partitions"]:
            hw = hws.get((row["topic"], row["partition"]))
            committed = row["committed"]
            lag = None if hw is None or committed < 0 else max(0, hw - committed)
            rows.append({**row, "hw": hw, "lag": lag})
        out.append({**g, "partitions": rows, "lag": sum(r["lag"] or 0 for r in rows)})
    return out


def _int_param(query: Mapping[str, list[str]], name: str, default: int) -> int | None:
    values = query.get(name)
    if not values:
        return default
    try:
        return int(values[-1])
    except ValueError:
        return None


def _sse(event: str, data: Any) -> bytes:
    return f"event: {event}\ndata: {json.dumps(data, separators=(',', ':'))}\n\n".encode()


__all__ = ["QUORUM_TIMEOUT_S", "Console", "page"]
