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

Where the data comes from (theory of operation):

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
from collections.abc import Callable, Iterable, Mapping
from importlib import resources
from typing import TYPE_CHECKING, Any, Final
from urllib.parse import parse_qs, urlsplit

from kio.schema.describe_quorum.v2 import request as dq_request
from kio.schema.list_groups.v4 import request as lg_request
from kio.schema.offset_fetch.v7 import request as of_request
from kio.schema.types import GroupId, TopicName
from kio.static.primitive import i32

from tidelog.client import Client
from tidelog.controller.history import read_history
from tidelog.model import TopicPartition
from tidelog.server.observability.metrics.broker_collector import ClusterSide
from tidelog.server.observability.metrics.zk_session import ZkSessionTracker, session_state
from tidelog.zk import ZkError

if TYPE_CHECKING:
    from tidelog.server.cluster.node import ClusterNode
    from tidelog.server.replica.manager import ReplicaManager

log = logging.getLogger(__name__)

#: How long the console waits for one leader's DescribeQuorum.
QUORUM_TIMEOUT_S: Final = 2.0
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


def _replica_row(
    broker: int,
    leo: int,
    caught_up_ms: int,
    *,
    leader_leo: int,
    now_ms: int,
    in_isr: bool,
    is_leader: bool,
) -> dict[str, Any]:
    lag = None if leo < 0 else max(0, leader_leo - leo)
    if is_leader:
        lag_ms: int | None = 0
    elif caught_up_ms > 0:
        lag_ms = max(0, now_ms - caught_up_ms)
    else:
        lag_ms = None
    return {
        "id": broker,
        "leo": leo,
        "lag": lag,
        "lag_ms": lag_ms,
        "in_isr": in_isr,
        "leader": is_leader,
    }


class Console:
    """Serves the console's paths for one broker (module docstring)."""

    def __init__(
        self,
        broker_id: int,
        replica_manager: ReplicaManager,
        cluster: ClusterSide,
        node: ClusterNode | None,
        zk_session: ZkSessionTracker | None = None,
    ) -> None:
        self.broker_id = broker_id
        self.replica_manager = replica_manager
        self.cluster = cluster
        self.node = node
        self.zk_session = zk_session
        self._client: Client | None = None
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
        if self._client is not None:
            await self._client.close()
            self._client = None

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
        node = self.node
        if node is None:
            snap = self._single_node(now_ms)
        else:
            self._watch_history()
            quorum, _ = await asyncio.gather(self._quorums(node), self._refresh_history())
            snap = self._cluster(node, quorum, now_ms)
            self._maybe_refresh_groups()
        snap["groups"] = _with_lag(self._groups, snap["topics"])
        snap["history"] = self._history[-SNAPSHOT_HISTORY:]
        snap["time_ms"] = now_ms
        snap["build_ms"] = round((time.perf_counter() - started) * 1000.0, 2)
        return snap

    def _single_node(self, now_ms: int) -> dict[str, Any]:
        topics: dict[str, list[dict[str, Any]]] = {}
        for tp, hosted in sorted(self.replica_manager.partitions.items()):
            q = self._local_quorum(tp, now_ms)
            topics.setdefault(tp.topic, []).append(
                {
                    "partition": tp.partition,
                    "leader": self.broker_id,
                    "leader_epoch": hosted.partition.leader_epoch,
                    "isr": [self.broker_id],
                    "replicas": [self.broker_id],
                    **(q or {"hw": None, "replica_states": [], "status": "unknown"}),
                }
            )
        return {
            "broker": self.broker_id,
            "cluster_id": "",
            "brokers": [{"id": self.broker_id, "alive": True, "host": "", "port": 0}],
            "controller": {"id": self.broker_id, "epoch": -1, "active_here": True},
            "zookeeper": {"state": "NONE"},
            "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()],
        }

    def _cluster(
        self, node: ClusterNode, quorum: Mapping[TopicPartition, dict[str, Any]], now_ms: int
    ) -> dict[str, Any]:
        cache = node.metadata
        live = cache.brokers
        replica_ids: set[int] = set()
        topics: dict[str, list[dict[str, Any]]] = {}
        for tp, state in sorted(cache.partitions.items()):
            replica_ids.update(state.replicas)
            found = quorum.get(tp)
            row: dict[str, Any] = {
                "partition": tp.partition,
                "leader": state.leader,
                "leader_epoch": state.leader_epoch,
                "isr": list(state.isr),
                "replicas": list(state.replicas),
                "hw": None,
                "replica_states": [
                    {"id": r, "leo": None, "lag": None, "lag_ms": None, "in_isr": r in state.isr}
                    for r in state.replicas
                ],
                "status": "offline" if state.leader < 0 else "unreachable",
            }
            if found is not None:
                row.update(found)
            topics.setdefault(tp.topic, []).append(row)
        ids = sorted(set(live) | replica_ids)
        brokers = []
        for b in ids:
            info = live.get(b)
            brokers.append(
                {
                    "id": b,
                    "alive": info is not None,
                    "host": info.host if info else "",
                    "port": info.port if info else 0,
                    "rack": info.rack if info else None,
                }
            )
        zk = self.cluster.zk
        zk_state = (
            "NONE" if zk is None else session_state(connected=zk.connected, tracker=self.zk_session)
        )
        return {
            "broker": self.broker_id,
            "cluster_id": cache.cluster_id,
            "brokers": brokers,
            "controller": {
                "id": cache.controller_id,
                "epoch": cache.controller_epoch,
                "active_here": self.cluster.is_active_controller(),
            },
            "zookeeper": {
                "state": zk_state,
                "connect": zk.connect_string if zk is not None else "",
                "session_id": f"0x{zk.session_id:x}" if zk and zk.session_id else None,
            },
            "topics": [{"name": t, "partitions": ps} for t, ps in sorted(topics.items())],
        }

    def _local_quorum(self, tp: TopicPartition, now_ms: int) -> dict[str, Any] | None:
        """What DescribeQuorum would answer for ``tp`` if this broker leads it."""
        hosted = self.replica_manager.partitions.get(tp)
        if hosted is None or not hosted.partition.is_leader:
            return None
        p = hosted.partition
        leader_leo = hosted.log.log_end_offset
        rows = []
        for r in p.replicas:
            if r == p.local_broker_id:
                rows.append(
                    _replica_row(
                        r,
                        leader_leo,
                        now_ms,
                        leader_leo=leader_leo,
                        now_ms=now_ms,
                        in_isr=r in p.isr,
                        is_leader=True,
                    )
                )
            else:
                rs = p.replica_states.get(r)
                rows.append(
                    _replica_row(
                        r,
                        -1 if rs is None else rs.log_end_offset,
                        0 if rs is None else rs.last_caught_up_time_ms,
                        leader_leo=leader_leo,
                        now_ms=now_ms,
                        in_isr=r in p.isr,
                        is_leader=False,
                    )
                )
        return {
            "hw": p.high_watermark,
            "leo": leader_leo,
            "replica_states": rows,
            "status": "ok",
            "source": "local",
        }

    async def _quorums(self, node: ClusterNode) -> dict[TopicPartition, dict[str, Any]]:
        """Rule 2: one DescribeQuorum per leader, all at once, each with a timeout."""
        now_ms = int(time.time() * 1000)
        by_leader: dict[int, list[TopicPartition]] = {}
        for tp, state in node.metadata.partitions.items():
            if state.leader >= 0:
                by_leader.setdefault(state.leader, []).append(tp)
        out: dict[TopicPartition, dict[str, Any]] = {}
        remote = []
        for leader, tps in by_leader.items():
            if leader == self.broker_id:
                for tp in tps:
                    q = self._local_quorum(tp, now_ms)
                    if q is not None:
                        out[tp] = q
            else:
                remote.append(self._remote_quorum(node, leader, tps, now_ms))
        for found in await asyncio.gather(*remote):
            out.update(found)
        return out

    def _peer_client(self, node: ClusterNode) -> Client:
        if self._client is None:
            self._client = Client(
                [f"{host}:{port}" for host, port in node.client.bootstrap],
                client_id=f"console-{self.broker_id}",
                request_timeout_s=QUORUM_TIMEOUT_S,
                connect_timeout_s=QUORUM_TIMEOUT_S,
                security=node.peer_security,
            )
        return self._client

    async def _remote_quorum(
        self, node: ClusterNode, leader: int, tps: Iterable[TopicPartition], now_ms: int
    ) -> dict[TopicPartition, dict[str, Any]]:
        broker = node.metadata.brokers.get(leader)
        address = None if broker is None else broker.address_on(node.listener_name)
        if address is None:
            return {}
        by_topic: dict[str, list[int]] = {}
        for tp in tps:
            by_topic.setdefault(tp.topic, []).append(tp.partition)
        request = dq_request.DescribeQuorumRequest(
            topics=tuple(
                dq_request.TopicData(
                    topic_name=TopicName(t),
                    partitions=tuple(dq_request.PartitionData(partition_index=i32(p)) for p in ps),
                )
                for t, ps in sorted(by_topic.items())
            )
        )
        try:
            async with asyncio.timeout(QUORUM_TIMEOUT_S):
                conn = await self._peer_client(node).connection_to(*address)
                response = await conn.send(request, timeout_s=QUORUM_TIMEOUT_S)
        except Exception as exc:  # any failure: its partitions show unreachable
            log.debug("console: DescribeQuorum to broker %s failed: %r", leader, exc)
            return {}
        out: dict[TopicPartition, dict[str, Any]] = {}
        for topic in response.topics:
            for part in topic.partitions:
                if int(part.error_code) != 0:
                    continue
                replicas = [(r, True) for r in part.current_voters] + [
                    (r, False) for r in part.observers
                ]
                leader_leo = next(
                    (int(r.log_end_offset) for r, _ in replicas if int(r.replica_id) == leader),
                    -1,
                )
                rows = [
                    _replica_row(
                        int(r.replica_id),
                        int(r.log_end_offset),
                        int(r.last_caught_up_timestamp),
                        leader_leo=leader_leo,
                        now_ms=now_ms,
                        in_isr=in_isr,
                        is_leader=int(r.replica_id) == leader,
                    )
                    for r, in_isr in replicas
                ]
                tp = TopicPartition(topic.topic_name, int(part.partition_index))
                cached = node.metadata.partitions.get(tp)
                order = {b: i for i, b in enumerate(cached.replicas if cached else ())}
                rows.sort(key=lambda row: order.get(row["id"], len(order)))
                out[tp] = {
                    "hw": int(part.high_watermark),
                    "leo": leader_leo,
                    "replica_states": rows,
                    "status": "ok",
                    "source": f"DescribeQuorum from broker {leader}",
                }
        return out

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
        node = self.node
        if node is None:
            return
        try:
            async with asyncio.timeout(GROUPS_TIMEOUT_S):
                self._groups = await _describe_groups(self._peer_client(node), node, self._groups)
        except Exception as exc:
            log.debug("console: consumer groups failed: %r", exc)


async def _ask(client: Client, address: tuple[str, int], request: Any) -> Any:
    """``request`` to ``address``; None when it fails or takes over ``QUORUM_TIMEOUT_S``."""
    try:
        async with asyncio.timeout(QUORUM_TIMEOUT_S):
            conn = await client.connection_to(*address)
            return await conn.send(request)
    except Exception:
        return None


async def _describe_groups(
    client: Client, node: ClusterNode, previous: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    """Module rule 5. A group of a coordinator that did not answer keeps its last known
    offsets, marked ``stale``."""
    cache = node.metadata
    names: dict[str, int] = {}
    addresses = {
        b: address
        for b, broker in list(cache.brokers.items())
        if (address := broker.address_on(node.listener_name)) is not None
    }
    answers = await asyncio.gather(
        *(
            _ask(client, address, lg_request.ListGroupsRequest(states_filter=()))
            for address in addresses.values()
        )
    )
    silent = {b for b, answer in zip(addresses, answers, strict=True) if answer is None}
    for broker_id, answer in zip(addresses, answers, strict=True):
        for g in answer.groups if answer is not None else ():
            names[str(g.group_id)] = broker_id
    groups = [
        {**g, "stale": True}
        for g in previous
        if g["group"] not in names
        and (g["coordinator"] in silent or g["coordinator"] not in addresses)
    ]
    for group, coordinator in sorted(names.items()):
        response = await _ask(
            client,
            addresses[coordinator],
            of_request.OffsetFetchRequest(
                group_id=GroupId(group), topics=None, require_stable=False
            ),
        )
        if response is None:
            continue
        rows = []
        for topic in response.topics:
            for part in topic.partitions:
                tp = TopicPartition(str(topic.name), int(part.partition_index))
                rows.append(
                    {
                        "topic": tp.topic,
                        "partition": tp.partition,
                        "committed": int(part.committed_offset),
                    }
                )
        groups.append({"group": group, "coordinator": coordinator, "partitions": rows})
    return sorted(groups, key=lambda g: str(g["group"]))


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
