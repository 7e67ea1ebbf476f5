"""Prometheus metrics: what a broker does, in the names Kafka's dashboards already use.

With ``metrics.listener`` set (``http://host:port``; port 0 picks a free one, logged), the
broker answers ``GET /metrics`` there in Prometheus' text format (version 0.0.4), from a
registry of its own (never ``prometheus_client``'s global one: tests run several brokers in
one process). docs/metrics.md lists every metric.

1. Names. A Kafka MBean ``kafka.<domain>:type=<Type>,name=<Name>[,<tag>=<value>]`` becomes
   ``kafka_<domain>_<type>_<name>`` in lower case, each tag a lower-case label: what the
   Prometheus JMX exporter's Kafka rules produce, so existing dashboards and alerts map. A
   ``...PerSec`` meter is a counter without the ``PerSec`` (``_total`` added); a ``...Ms``
   timer is a histogram in milliseconds (``_bucket``/``_sum``/``_count``); the count of a
   ``...RateAndTimeMs`` timer is a counter named without ``RateAndTimeMs``. Each HELP text
   names the MBean. Python process figures come from ``prometheus_client``'s
   ``ProcessCollector`` (``process_*``).
2. Gauges derived from state (leaders, under-replicated partitions, the controller's
   offline partitions, purgatory sizes, the ZooKeeper session) are computed at scrape time
   by ``BrokerCollector`` from the replica manager, the controller and the ZooKeeper
   client: the request paths pay nothing for them.
3. Counters bumped where things happen are plain ints on the objects that own the event
   (``ReplicaManager.isr_shrinks``, ``Controller.leader_elections``, ...), read at scrape
   time. Per-API request counts and times are ``RequestMetrics``: one ``RequestStats`` per
   request name made up front, so a request costs a dict lookup, two clock reads and a
   bisect, with no lock (everything runs on the event loop) and no label lookup. Kafka's
   RequestMetrics also splits Fetch into FetchConsumer and FetchFollower; so does this.
   A request's time runs from the decode of its frame to its answer being ready (queued
   for its connection), the wait in a purgatory or behind the readiness gate included.
4. The endpoint is an asyncio server on the broker's loop (``MetricsEndpoint``), not
   ``prometheus_client``'s thread server: the collectors read state that belongs to the
   loop. One request per connection: ``GET /metrics`` (or ``HEAD``) answers 200, another
   path 404, another method 405, a request line that is not HTTP/1.x (or a line over
   8 KiB) 400; the connection closes after each answer (after an error answer, once the
   client has closed its side or 1 s has passed, so that it reads the answer), and without
   an answer when the client sends nothing for 10 s.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging
import time
from bisect import bisect_left
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any, Final

from prometheus_client import CollectorRegistry, ProcessCollector, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from tidelog.controller.zk import SessionEvent
from tidelog.protocol.apis import ApiKey
from tidelog.server.config import MetricsListener

if TYPE_CHECKING:
    from tidelog.server.cluster import ClusterNode
    from tidelog.server.replica_manager import ReplicaManager

log = logging.getLogger(__name__)

#: The text format ``generate_latest`` writes (Prometheus 0.0.4; newer clients of the
#: library advertise 1.0.0, which is the same text for names like ours).
CONTENT_TYPE: Final = "text/plain; version=0.0.4; charset=utf-8"
#: Upper bounds (ms) of the request time histogram's buckets; +Inf is added. Fetch
#: long-polls (replica.fetch.wait.max.ms: 500) and acks=all produces wait for followers.
TIME_BUCKETS_MS: Final = (
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    25.0,
    50.0,
    100.0,
    250.0,
    500.0,
    1000.0,
    2500.0,
    5000.0,
    10000.0,
    30000.0,
)
#: How long a scrape connection may take to send its request.
REQUEST_READ_TIMEOUT_S: Final = 10.0
#: Longest request line or header line read; a request has at most this many header lines.
MAX_LINE_BYTES: Final = 8192
MAX_HEADER_LINES: Final = 100

FETCH_CONSUMER: Final = "FetchConsumer"
FETCH_FOLLOWER: Final = "FetchFollower"


def request_name(api_key: int) -> str:
    """Kafka's name of an API (``ApiKeys.name``): ``LIST_OFFSETS`` -> ``ListOffsets``."""
    try:
        name = ApiKey(api_key).name
    except ValueError:
        return str(api_key)
    return "".join(word.capitalize() for word in name.split("_"))


class RequestStats:
    """Count and time histogram of one request name (Kafka's RequestMetrics for it)."""

    __slots__ = ("buckets", "count", "name", "sum_ms")

    def __init__(self, name: str) -> None:
        self.name = name
        self.count = 0
        self.sum_ms = 0.0
        #: Per bucket (not cumulative), the last one +Inf.
        self.buckets = [0] * (len(TIME_BUCKETS_MS) + 1)

    def record(self, started: float) -> None:
        """One request done; ``started`` is its ``time.perf_counter()`` at arrival."""
        ms = (time.perf_counter() - started) * 1000.0
        self.count += 1
        self.sum_ms += ms
        self.buckets[bisect_left(TIME_BUCKETS_MS, ms)] += 1


def _fetch_replica_id(body: Any) -> int:
    # A top-level field before Fetch v15, inside replica_state from v15 (KIP-903).
    replica_state = getattr(body, "replica_state", None)
    if replica_state is not None:
        return int(replica_state.replica_id)
    return int(getattr(body, "replica_id", -1))


class RequestMetrics(Collector):
    """Per-API request counts and total times, recorded by the ``Dispatcher``."""

    def __init__(self, api_keys: Iterable[int]) -> None:
        self._by_key: dict[int, RequestStats] = {k: RequestStats(request_name(k)) for k in api_keys}
        self._fetch_consumer = RequestStats(FETCH_CONSUMER)
        self._fetch_follower = RequestStats(FETCH_FOLLOWER)

    def stats(self, name: str) -> RequestStats | None:
        """The stats of request ``name`` (``Produce``, ``FetchFollower``, ...), if kept."""
        return next((s for s in self._all() if s.name == name), None)

    def _all(self) -> list[RequestStats]:
        return [*self._by_key.values(), self._fetch_consumer, self._fetch_follower]

    def record(self, api_key: int, body: Any, result: object, started: float) -> None:
        """Request ``api_key`` was dispatched with ``result`` (an answer, or a future of
        one); it is counted when it is answered."""
        stats = self._by_key.get(api_key)
        if stats is None:
            return
        if api_key == ApiKey.FETCH:
            side = self._fetch_follower if _fetch_replica_id(body) >= 0 else self._fetch_consumer
            fetch = stats

            def both(_f: object = None) -> None:
                fetch.record(started)
                side.record(started)

            if isinstance(result, asyncio.Future):
                result.add_done_callback(both)
            else:
                both()
            return
        if isinstance(result, asyncio.Future):
            result.add_done_callback(lambda _f: stats.record(started))
        else:
            stats.record(started)

    def describe(self) -> Iterable[Metric]:
        return ()

    def collect(self) -> Iterable[Metric]:
        requests = CounterMetricFamily(
            "kafka_network_requestmetrics_requests",
            "Requests answered, by request name "
            "(kafka.network:type=RequestMetrics,name=RequestsPerSec,request=<name>)",
            labels=["request"],
        )
        times = HistogramMetricFamily(
            "kafka_network_requestmetrics_totaltimems",
            "Time from a request's arrival to its answer, in ms "
            "(kafka.network:type=RequestMetrics,name=TotalTimeMs,request=<name>)",
            labels=["request"],
        )
        for stats in self._all():
            requests.add_metric([stats.name], stats.count)
            cumulative = 0
            buckets: list[tuple[str, float]] = []
            for bound, n in zip((*TIME_BUCKETS_MS, float("inf")), stats.buckets, strict=True):
                cumulative += n
                buckets.append((_bound_text(bound), cumulative))
            times.add_metric([stats.name], buckets, stats.sum_ms)
        yield requests
        yield times


def _bound_text(bound: float) -> str:
    if bound == float("inf"):
        return "+Inf"
    return repr(bound)


class BrokerState(enum.IntEnum):
    """Kafka's ``BrokerState`` values (kafka.server:type=KafkaServer,name=BrokerState)."""

    NOT_RUNNING = 0
    STARTING = 1
    RUNNING = 3
    PENDING_CONTROLLED_SHUTDOWN = 6
    SHUTTING_DOWN = 7


class ZkSessionTracker:
    """Counts ZooKeeper session losses (a ``ZkClient`` session listener) and remembers
    whether the last one was an expiry not yet followed by a new session."""

    def __init__(self) -> None:
        self.disconnects = 0
        self.expires = 0
        self.expired = False

    def __call__(self, event: SessionEvent, _broker_epoch: int | None) -> None:
        if event is SessionEvent.SUSPENDED:
            self.disconnects += 1
        elif event is SessionEvent.EXPIRED:
            self.expires += 1
            self.expired = True
        elif event is SessionEvent.REESTABLISHED:
            self.expired = False


#: kafka.server:type=SessionExpireListener,name=SessionState values shown (ZooKeeper's
#: CONNECTED and CONNECTING, and EXPIRED for a lost session not re-established yet).
SESSION_STATES: Final = ("CONNECTED", "CONNECTING", "EXPIRED")


def _gauge(name: str, help_text: str, value: float) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, help_text, value=value)


def _counter(name: str, help_text: str, value: float) -> CounterMetricFamily:
    return CounterMetricFamily(name, help_text, value=value)


class BrokerCollector(Collector):
    """The gauges and counters read from broker state at scrape time (module rules 2, 3).

    ``node`` is the cluster side (None for a broker on its own: it is its own controller);
    ``state`` says the broker's ``BrokerState``."""

    def __init__(
        self,
        replica_manager: ReplicaManager,
        node: ClusterNode | None = None,
        *,
        state: Callable[[], BrokerState] = lambda: BrokerState.RUNNING,
        zk_session: ZkSessionTracker | None = None,
    ) -> None:
        self.replica_manager = replica_manager
        self.node = node
        self.state = state
        self.zk_session = zk_session

    def describe(self) -> Iterable[Metric]:
        return ()

    def collect(self) -> Iterator[Metric]:
        yield _gauge(
            "kafka_server_kafkaserver_brokerstate",
            "The broker's state: 1 starting, 3 running, 6 in a controlled shutdown, "
            "7 shutting down (kafka.server:type=KafkaServer,name=BrokerState)",
            int(self.state()),
        )
        yield from self._replica_manager()
        yield from self._controller()
        yield from self._zookeeper()

    def _replica_manager(self) -> Iterator[Metric]:
        rm = self.replica_manager
        offline_dirs = rm.offline_log_dirs
        leaders = under_replicated = under_min_isr = at_min_isr = offline = 0
        for hosted in rm.partitions.values():
            partition = hosted.partition
            if offline_dirs and hosted.log.directory.parent in offline_dirs:
                offline += 1
            if not partition.is_leader:
                continue
            leaders += 1
            isr_size = len(partition.isr)
            if isr_size < len(partition.replicas):
                under_replicated += 1
            if isr_size < partition.min_insync_replicas:
                under_min_isr += 1
            elif isr_size == partition.min_insync_replicas:
                at_min_isr += 1
        prefix = "kafka_server_replicamanager_"
        mbean = "kafka.server:type=ReplicaManager,name="
        yield _gauge(
            prefix + "leadercount",
            f"Partitions this broker leads ({mbean}LeaderCount)",
            leaders,
        )
        yield _gauge(
            prefix + "partitioncount",
            f"Partitions this broker hosts, as leader or follower ({mbean}PartitionCount)",
            len(rm.partitions),
        )
        yield _gauge(
            prefix + "underreplicatedpartitions",
            f"Partitions led here whose ISR is smaller than their replica set "
            f"({mbean}UnderReplicatedPartitions)",
            under_replicated,
        )
        yield _gauge(
            prefix + "underminisrpartitioncount",
            f"Partitions led here whose ISR is below min.insync.replicas: acks=all "
            f"produces fail ({mbean}UnderMinIsrPartitionCount)",
            under_min_isr,
        )
        yield _gauge(
            prefix + "atminisrpartitioncount",
            f"Partitions led here whose ISR is exactly min.insync.replicas "
            f"({mbean}AtMinIsrPartitionCount)",
            at_min_isr,
        )
        yield _gauge(
            prefix + "offlinereplicacount",
            f"Partitions hosted here whose log dir is offline ({mbean}OfflineReplicaCount)",
            offline,
        )
        yield _counter(
            prefix + "isrshrinks",
            f"Committed ISR changes removing replicas, of partitions led here "
            f"({mbean}IsrShrinksPerSec)",
            rm.isr_shrinks,
        )
        yield _counter(
            prefix + "isrexpands",
            f"Committed ISR changes adding replicas, of partitions led here "
            f"({mbean}IsrExpandsPerSec)",
            rm.isr_expands,
        )
        yield _counter(
            prefix + "failedisrupdates",
            f"AlterPartition attempts answered with an error or not answered "
            f"({mbean}FailedIsrUpdatesPerSec)",
            rm.failed_isr_updates,
        )
        for side, quota in (
            ("Leader", rm.replication_quotas.leader),
            ("Follower", rm.replication_quotas.follower),
        ):
            yield _gauge(
                f"kafka_server_{side.lower()}replication_byte_rate",
                f"Bytes a second moved for throttled replicas, {side.lower()} side, KIP-73 "
                f"(kafka.server:type={side}Replication,name=byte-rate)",
                quota.rate(),
            )
        yield _gauge(
            "kafka_log_logmanager_offlinelogdirectorycount",
            "Log dirs offline after a write error "
            "(kafka.log:type=LogManager,name=OfflineLogDirectoryCount)",
            len(offline_dirs),
        )
        purgatory_size = GaugeMetricFamily(
            "kafka_server_delayedoperationpurgatory_purgatorysize",
            "Entries in a purgatory's watch lists, completed ones not purged yet included "
            "(kafka.server:type=DelayedOperationPurgatory,name=PurgatorySize,"
            "delayedOperation=<Produce|Fetch>)",
            labels=["delayedoperation"],
        )
        delayed = GaugeMetricFamily(
            "kafka_server_delayedoperationpurgatory_numdelayedoperations",
            "Parked requests: acks=all produces waiting for the ISR, fetches long-polling "
            "(kafka.server:type=DelayedOperationPurgatory,name=NumDelayedOperations,"
            "delayedOperation=<Produce|Fetch>)",
            labels=["delayedoperation"],
        )
        for purgatory in (rm.produce_purgatory, rm.fetch_purgatory):
            purgatory_size.add_metric([purgatory.name], purgatory.watch_entries())
            delayed.add_metric([purgatory.name], purgatory.watched())
        yield purgatory_size
        yield delayed

    def _controller(self) -> Iterator[Metric]:
        controller = self.node.controller if self.node is not None else None
        # A broker on its own is its own controller, with every partition led.
        active = controller.is_active if controller is not None else self.node is None
        offline = imbalance = topics = partitions = 0
        elections = unclean = 0
        if controller is not None:
            offline = controller.offline_partition_count()
            imbalance = controller.preferred_replica_imbalance_count()
            topics, partitions = controller.global_counts()
            elections = controller.leader_elections
            unclean = controller.unclean_leader_elections
        prefix = "kafka_controller_kafkacontroller_"
        mbean = "kafka.controller:type=KafkaController,name="
        yield _gauge(
            prefix + "activecontrollercount",
            f"1 on the active controller, else 0 ({mbean}ActiveControllerCount)",
            1 if active else 0,
        )
        yield _gauge(
            prefix + "offlinepartitionscount",
            f"Partitions without a leader; active controller only ({mbean}OfflinePartitionsCount)",
            offline,
        )
        yield _gauge(
            prefix + "preferredreplicaimbalancecount",
            f"Partitions not led by their first replica; active controller only "
            f"({mbean}PreferredReplicaImbalanceCount)",
            imbalance,
        )
        yield _gauge(
            prefix + "globaltopiccount",
            f"Topics in the cluster; active controller only ({mbean}GlobalTopicCount)",
            topics,
        )
        yield _gauge(
            prefix + "globalpartitioncount",
            f"Partitions in the cluster; active controller only ({mbean}GlobalPartitionCount)",
            partitions,
        )
        stats = "kafka.controller:type=ControllerStats,name="
        yield _counter(
            "kafka_controller_controllerstats_leaderelections",
            f"Leaders elected while this broker was the active controller "
            f"({stats}LeaderElectionRateAndTimeMs, its count)",
            elections,
        )
        yield _counter(
            "kafka_controller_controllerstats_uncleanleaderelections",
            f"Leaders elected from outside the ISR while this broker was the active "
            f"controller ({stats}UncleanLeaderElectionsPerSec)",
            unclean,
        )

    def _zookeeper(self) -> Iterator[Metric]:
        zk = self.node.zk if self.node is not None else None
        if zk is None:
            return
        tracker = self.zk_session
        if zk.connected:
            current = "CONNECTED"
        elif tracker is not None and tracker.expired:
            current = "EXPIRED"
        else:
            current = "CONNECTING"
        mbean = "kafka.server:type=SessionExpireListener,name="
        session = GaugeMetricFamily(
            "kafka_server_sessionexpirelistener_sessionstate",
            f"1 for the ZooKeeper session's current state ({mbean}SessionState)",
            labels=["state"],
        )
        for state in SESSION_STATES:
            session.add_metric([state], 1 if state == current else 0)
        yield session
        if tracker is not None:
            yield _counter(
                "kafka_server_sessionexpirelistener_zookeeperdisconnects",
                f"ZooKeeper connection losses ({mbean}ZooKeeperDisconnectsPerSec)",
                tracker.disconnects,
            )
            yield _counter(
                "kafka_server_sessionexpirelistener_zookeeperexpires",
                f"ZooKeeper session expiries ({mbean}ZooKeeperExpiresPerSec)",
                tracker.expires,
            )


def broker_registry(
    replica_manager: ReplicaManager,
    node: ClusterNode | None = None,
    *,
    requests: RequestMetrics | None = None,
    state: Callable[[], BrokerState] = lambda: BrokerState.RUNNING,
    zk_session: ZkSessionTracker | None = None,
    process: bool = True,
) -> CollectorRegistry:
    """One broker's registry: its state collector, its request metrics, the process."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(BrokerCollector(replica_manager, node, state=state, zk_session=zk_session))
    if requests is not None:
        registry.register(requests)
    if process:
        ProcessCollector(registry=registry)
    return registry


# --- the HTTP endpoint -------------------------------------------------------------------

_REASONS: Final = {
    200: "OK",
    400: "Bad Request",
    404: "Not Found",
    405: "Method Not Allowed",
}


def _answer(
    status: int, body: bytes, *, content_type: str = "text/plain; charset=utf-8", head: bool
) -> bytes:
    lines = [
        f"HTTP/1.1 {status} {_REASONS[status]}",
        f"Content-Type: {content_type}",
        f"Content-Length: {len(body)}",
        "Connection: close",
    ]
    if status == 405:
        lines.append("Allow: GET, HEAD")
    header = ("\r\n".join(lines) + "\r\n\r\n").encode("ascii")
    return header if head else header + body


class MetricsEndpoint:
    """``GET /metrics`` on the broker's loop (module rule 4)."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.registry = registry
        self._server: asyncio.Server | None = None
        self._connections: set[asyncio.Task[None]] = set()
        self.bound_port = -1

    async def start(self, listener: MetricsListener) -> int:
        """Listen; return the bound port."""
        self._server = await asyncio.start_server(
            self._serve, listener.host, listener.port, reuse_address=True, limit=MAX_LINE_BYTES
        )
        sockets = self._server.sockets
        self.bound_port = sockets[0].getsockname()[1] if sockets else listener.port
        return self.bound_port

    async def stop(self) -> None:
        server = self._server
        if server is None:
            return
        self._server = None
        server.close()
        for task in list(self._connections):
            task.cancel()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(server.wait_closed(), 2.0)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._connections.add(task)
        try:
            answer = await self._answer(reader)
            if answer is not None:
                writer.write(answer)
                await writer.drain()
                if not answer.startswith(b"HTTP/1.1 200") and writer.can_write_eof():
                    # Bad input may have more behind it: closing with unread bytes would
                    # reset the connection, and the client might never read the answer.
                    writer.write_eof()
                    await self._discard(reader)
        except (ConnectionError, asyncio.CancelledError):
            pass
        finally:
            if task is not None:
                self._connections.discard(task)
            writer.close()
            with contextlib.suppress(ConnectionError, asyncio.CancelledError):
                await writer.wait_closed()

    @staticmethod
    async def _discard(reader: asyncio.StreamReader) -> None:
        """Read and drop what the client still sends, until it closes (at most 1 s and
        1 MiB: a lingering close)."""
        with contextlib.suppress(TimeoutError, ConnectionError):
            async with asyncio.timeout(1.0):
                left = 1 << 20
                while left > 0:
                    chunk = await reader.read(65536)
                    if not chunk:
                        return
                    left -= len(chunk)

    async def _answer(self, reader: asyncio.StreamReader) -> bytes | None:
        """The answer to the request ``reader`` brings; None: close without one (the peer
        went away or said nothing in time)."""
        try:
            async with asyncio.timeout(REQUEST_READ_TIMEOUT_S):
                line = await reader.readline()
                if not line:
                    return None
                parts = line.rstrip(b"\r\n").split(b" ")
                if len(parts) != 3 or not parts[2].startswith(b"HTTP/1."):
                    return _answer(400, b"bad request line\n", head=False)
                for _ in range(MAX_HEADER_LINES):
                    header = await reader.readline()
                    if header in (b"\r\n", b"\n"):
                        break
                    if not header:
                        return None
                else:
                    return _answer(400, b"too many header lines\n", head=False)
        except TimeoutError:
            return None
        except ValueError:  # a line longer than MAX_LINE_BYTES
            return _answer(400, b"line too long\n", head=False)
        method, target = parts[0], parts[1]
        head = method == b"HEAD"
        if method not in (b"GET", b"HEAD"):
            return _answer(405, b"only GET and HEAD\n", head=False)
        if target.split(b"?", 1)[0] != b"/metrics":
            return _answer(404, b"not found: the metrics are at /metrics\n", head=head)
        body = generate_latest(self.registry)
        return _answer(200, body, content_type=CONTENT_TYPE, head=head)


__all__ = [
    "CONTENT_TYPE",
    "TIME_BUCKETS_MS",
    "BrokerCollector",
    "BrokerState",
    "MetricsEndpoint",
    "RequestMetrics",
    "RequestStats",
    "ZkSessionTracker",
    "broker_registry",
    "request_name",
]
