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
   offline partitions, purgatory sizes, the ZooKeeper session, each hosted partition's log
   size, segments and offsets, each followed partition's lag) are computed at scrape time
   by ``BrokerCollector`` from the replica manager, the fetchers, the controller and the
   ZooKeeper client: the request paths pay nothing for them. A scrape walks the hosted
   partitions once; with 5,000 of them the answer has ~25,000 samples (docs/metrics.md,
   "Cost", has the time it takes).
3. Counters bumped where things happen are plain ints on the objects that own the event
   (``ReplicaManager.isr_shrinks``, ``Controller.leader_elections``, ...), read at scrape
   time. The per-topic ``BrokerTopicMetrics`` are ``TopicStats`` in the replica manager's
   ``topic_stats``: a dict lookup and a few integer additions per partition appended or
   read. The all-topics series are summed at scrape time; a topic no longer hosted here
   leaves its counts in them (``BrokerTopicStats.retire``) and loses its own series.
   Follower lag is Kafka's: the leader's high watermark in the last fetch answer (kept by
   the fetcher) minus this replica's log end offset, not below 0.
4. The endpoint is an asyncio server on the broker's loop (``MetricsEndpoint``), not
   ``prometheus_client``'s thread server: the collectors read state that belongs to the
   loop. One request per connection: ``GET /metrics`` (or ``HEAD``) answers 200, another
   path 404, another method 405, a request line that is not HTTP/1.x (or a line over
   8 KiB) 400; the connection closes after each answer (after an error answer, once the
   client has closed its side or 1 s has passed, so that it reads the answer), and without
   an answer when the client sends nothing for 10 s.
5. Request times (Kafka's RequestMetrics), per API name, one ``RequestStats`` each made up
   front (no label lookup, no lock: everything runs on the event loop). A request is
   marked with ``time.monotonic()``: *received* (the connection's read that brought it),
   *started* (its handler called, after the decode and any wait behind the readiness
   gate), *local done* (the handler returned: an answer, or parked in a purgatory),
   *ready* (the parked request's answer is there), *dequeued* (the connection takes the
   answer, after the answers before it on the connection) and *sent* (written to the
   transport). RequestQueueTimeMs is started - received, LocalTimeMs local done - started,
   RemoteTimeMs ready - local done (the acks=all or long-poll wait), ResponseQueueTimeMs
   dequeued - ready, ResponseSendTimeMs sent - dequeued, TotalTimeMs sent - received. A
   request is counted (RequestsPerSec) when its answer is written, or when it is done if
   it has none (acks=0). Four clock reads and six bisects per request (more if parked),
   only with ``metrics.listener`` set. Fetch is also counted as FetchConsumer or
   FetchFollower, as in Kafka. Histograms are shown for request names seen at least once.
6. ``NetworkProcessorAvgIdlePercent``: one thread runs the network, the handlers and the
   replication here, so the figure is the share of wall time that thread was not on a CPU
   since the previous scrape (``time.thread_time`` against ``time.monotonic``; 1.0 idle,
   0.0 saturated). Time blocked in a system call or waiting for a CPU counts as idle; a
   window under 0.5 s keeps the previous figure.
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
from collections.abc import Awaitable, Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any, Final

from prometheus_client import CollectorRegistry, ProcessCollector, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector
from prometheus_client.samples import Sample

from tidelog.histogram import TIME_BUCKETS_MS, Histogram
from tidelog.protocol.apis import ApiKey
from tidelog.server.config.values import MetricsListener
from tidelog.server.replica.topic_stats import BrokerTopicStats, TopicStats
from tidelog.zk import SessionEvent

if TYPE_CHECKING:
    from tidelog.server.cluster.node import ClusterNode
    from tidelog.server.replica.manager import ReplicaManager

log = logging.getLogger(__name__)

#: The text format ``generate_latest`` writes (Prometheus 0.0.4; newer clients of the
#: library advertise 1.0.0, which is the same text for names like ours).
CONTENT_TYPE: Final = "text/plain; version=0.0.4; charset=utf-8"
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


#: The request time split (module rule 5): metric name suffix, Kafka's MBean name, meaning.
TIME_SPLIT: Final = (
    ("totaltimems", "TotalTimeMs", "from the request's arrival to its answer written"),
    (
        "requestqueuetimems",
        "RequestQueueTimeMs",
        "from arrival to the handler's start: decode, requests before it in the same read, "
        "the wait for the broker to be ready",
    ),
    ("localtimems", "LocalTimeMs", "in the handler, up to its answer or its parking"),
    (
        "remotetimems",
        "RemoteTimeMs",
        "parked: acks=all produces waiting for the ISR, fetches long-polling",
    ),
    (
        "responsequeuetimems",
        "ResponseQueueTimeMs",
        "from the answer being ready to its write: behind the answers before it",
    ),
    ("responsesendtimems", "ResponseSendTimeMs", "writing the answer to the socket"),
)


class RequestStats:
    """Count and time histograms of one request name (Kafka's RequestMetrics for it)."""

    __slots__ = ("name", "times")

    def __init__(self, name: str) -> None:
        self.name = name
        #: One ``Histogram`` per ``TIME_SPLIT`` entry, in its order (total first).
        self.times = tuple(Histogram() for _ in TIME_SPLIT)

    @property
    def count(self) -> int:
        """Requests answered (written, or done without an answer)."""
        return self.times[0].count

    def histogram(self, suffix: str) -> Histogram:
        """The histogram of ``TIME_SPLIT`` entry ``suffix`` (``"localtimems"``, ...)."""
        return self.times[[s for s, _, _ in TIME_SPLIT].index(suffix)]

    def record(  # noqa: PLR0917 - the marks of one request, in order
        self,
        received: float,
        started: float,
        local_done: float,
        ready: float,
        dequeued: float,
        sent: float,
    ) -> None:
        """One request answered; ``time.monotonic()`` marks (rule 5)."""
        # Histogram.observe inlined: this runs for every request.
        bounds = TIME_BUCKETS_MS
        total, queue, local, remote, response_queue, send = self.times
        ms = (sent - received) * 1000.0
        total.sum_ms += ms
        total.buckets[bisect_left(bounds, ms)] += 1
        ms = (started - received) * 1000.0
        queue.sum_ms += ms
        queue.buckets[bisect_left(bounds, ms)] += 1
        ms = (local_done - started) * 1000.0
        local.sum_ms += ms
        local.buckets[bisect_left(bounds, ms)] += 1
        ms = (ready - local_done) * 1000.0
        remote.sum_ms += ms
        remote.buckets[bisect_left(bounds, ms)] += 1
        ms = (dequeued - ready) * 1000.0
        response_queue.sum_ms += ms
        response_queue.buckets[bisect_left(bounds, ms)] += 1
        ms = (sent - dequeued) * 1000.0
        send.sum_ms += ms
        send.buckets[bisect_left(bounds, ms)] += 1


class RequestTiming:
    """The marks of one request in flight (module rule 5): made by ``RequestMetrics.start``,
    filled in by the dispatcher, recorded when the connection has written the answer
    (``sent``, network's ``ResponseTiming``)."""

    __slots__ = ("local_done", "ready", "received", "started", "stats")

    def __init__(self, stats: tuple[RequestStats, ...], received: float) -> None:
        self.stats = stats
        self.received = received
        self.started = received
        self.local_done = received
        self.ready = received

    def answered(self, _future: object = None) -> None:
        """A parked request's answer is ready (a future's done callback)."""
        self.ready = time.monotonic()

    def sent(self, dequeued: float) -> None:
        """The connection took the answer at ``dequeued`` and has written it."""
        now = time.monotonic()
        for stats in self.stats:
            stats.record(self.received, self.started, self.local_done, self.ready, dequeued, now)


def _fetch_replica_id(body: Any) -> int:
    # A top-level field before Fetch v15, inside replica_state from v15 (KIP-903).
    replica_state = getattr(body, "replica_state", None)
    if replica_state is not None:
        return int(replica_state.replica_id)
    return int(getattr(body, "replica_id", -1))


class RequestMetrics(Collector):
    """Per-API request counts and time splits, marked by the ``Dispatcher`` and the
    connection (module rule 5)."""

    def __init__(self, api_keys: Iterable[int]) -> None:
        self._by_key: dict[int, tuple[RequestStats, ...]] = {
            k: (RequestStats(request_name(k)),) for k in api_keys
        }
        self._fetch_consumer = RequestStats(FETCH_CONSUMER)
        self._fetch_follower = RequestStats(FETCH_FOLLOWER)
        # A Fetch counts as Fetch and as FetchConsumer or FetchFollower (used only when
        # Fetch is served).
        (fetch,) = self._by_key.get(ApiKey.FETCH, (self._fetch_consumer,))
        self._consumer_fetch = (fetch, self._fetch_consumer)
        self._follower_fetch = (fetch, self._fetch_follower)

    def stats(self, name: str) -> RequestStats | None:
        """The stats of request ``name`` (``Produce``, ``FetchFollower``, ...), if kept."""
        return next((s for s in self._all() if s.name == name), None)

    def _all(self) -> list[RequestStats]:
        return [
            *(stats[0] for stats in self._by_key.values()),
            self._fetch_consumer,
            self._fetch_follower,
        ]

    def start(self, api_key: int, body: Any, received: float) -> RequestTiming | None:
        """A decoded request that arrived at ``received``; None for an API not kept."""
        stats = self._by_key.get(api_key)
        if stats is None:
            return None
        if api_key == ApiKey.FETCH:
            follower = _fetch_replica_id(body) >= 0
            stats = self._follower_fetch if follower else self._consumer_fetch
        return RequestTiming(stats, received)

    @staticmethod
    def dispatched(timing: RequestTiming, result: object, timings: dict[int, Any]) -> None:
        """The dispatcher is done with the request (its ``local_done`` marked): an answer
        now, a future of one, or nothing (acks=0). ``timings`` is the connection's: it
        calls ``sent`` once it has written the answer."""
        if result is None:  # no answer to write: done now
            timing.ready = timing.local_done
            timing.sent(timing.local_done)
            return
        if isinstance(result, asyncio.Future):
            result.add_done_callback(timing.answered)
        else:
            timing.ready = timing.local_done
        timings[id(result)] = timing

    def describe(self) -> Iterable[Metric]:
        return ()

    def collect(self) -> Iterable[Metric]:
        requests = CounterMetricFamily(
            "kafka_network_requestmetrics_requests",
            "Requests answered, by request name "
            "(kafka.network:type=RequestMetrics,name=RequestsPerSec,request=<name>)",
            labels=["request"],
        )
        families = [
            HistogramMetricFamily(
                f"kafka_network_requestmetrics_{suffix}",
                f"Time {meaning}, in ms "
                f"(kafka.network:type=RequestMetrics,name={mbean},request=<name>)",
                labels=["request"],
            )
            for suffix, mbean, meaning in TIME_SPLIT
        ]
        for stats in self._all():
            count = stats.count
            requests.add_metric([stats.name], count)
            if count == 0:
                continue  # histograms only for requests seen: a smaller scrape
            for family, histogram in zip(families, stats.times, strict=True):
                family.add_metric([stats.name], histogram.cumulative(), histogram.sum_ms)
        yield requests
        yield from families


#: BrokerTopicMetrics counters: TopicStats attribute, metric name part, Kafka's MBean name,
#: meaning, whether there is a per-topic series beside the all-topics one.
TOPIC_COUNTERS: Final = (
    ("bytes_in", "bytesin", "BytesInPerSec", "Bytes of records appended by produces", True),
    ("messages_in", "messagesin", "MessagesInPerSec", "Records appended by produces", True),
    ("bytes_out", "bytesout", "BytesOutPerSec", "Bytes of records sent to consumers", True),
    (
        "bytes_rejected",
        "bytesrejected",
        "BytesRejectedPerSec",
        "Bytes of produced batches refused as too large",
        True,
    ),
    (
        "failed_produce",
        "failedproducerequests",
        "FailedProduceRequestsPerSec",
        "Partition appends answered with an error",
        True,
    ),
    (
        "failed_fetch",
        "failedfetchrequests",
        "FailedFetchRequestsPerSec",
        "Partition reads answered with an error",
        True,
    ),
    (
        "produced",
        "totalproducerequests",
        "TotalProduceRequestsPerSec",
        "Partition appends tried",
        True,
    ),
    ("fetched", "totalfetchrequests", "TotalFetchRequestsPerSec", "Partition reads", True),
    (
        "replication_bytes_out",
        "replicationbytesout",
        "ReplicationBytesOutPerSec",
        "Bytes of records sent to follower replicas",
        False,
    ),
)

#: kafka.log:type=Log gauges per hosted partition: metric name part, MBean name, meaning.
LOG_GAUGES: Final = (
    ("size", "Size", "Bytes of the partition's log on disk"),
    ("numlogsegments", "NumLogSegments", "Segments of the partition's log"),
    ("logendoffset", "LogEndOffset", "The log end offset"),
    ("logstartoffset", "LogStartOffset", "The log start offset"),
)


class LoopIdleProbe:
    """``NetworkProcessorAvgIdlePercent`` of an asyncio broker (module rule 6): the share
    of wall time the event loop's thread did not spend on the CPU since the last sample,
    0.0 to 1.0. Sampled on the loop's thread (a scrape); a window shorter than
    ``MIN_WINDOW_S`` keeps the previous value."""

    MIN_WINDOW_S: Final = 0.5

    def __init__(
        self,
        cpu: Callable[[], float] = time.thread_time,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._cpu = cpu
        self._clock = clock
        self._wall_then = clock()
        self._cpu_then = cpu()
        self.value = 1.0

    def sample(self) -> float:
        wall, cpu = self._clock(), self._cpu()
        elapsed = wall - self._wall_then
        if elapsed >= self.MIN_WINDOW_S:
            busy = (cpu - self._cpu_then) / elapsed
            self.value = min(1.0, max(0.0, 1.0 - busy))
            self._wall_then, self._cpu_then = wall, cpu
        return self.value


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
        #: Made on the loop's thread (rule 6).
        self.loop_idle = LoopIdleProbe()

    def describe(self) -> Iterable[Metric]:
        return ()

    def collect(self) -> Iterator[Metric]:
        yield _gauge(
            "kafka_server_kafkaserver_brokerstate",
            "The broker's state: 1 starting, 3 running, 6 in a controlled shutdown, "
            "7 shutting down (kafka.server:type=KafkaServer,name=BrokerState)",
            int(self.state()),
        )
        yield _gauge(
            "kafka_network_socketserver_networkprocessoravgidlepercent",
            "Share of wall time, 0 to 1, the event loop's thread was off the CPU since the "
            "last scrape (kafka.network:type=SocketServer,name=NetworkProcessorAvgIdlePercent)",
            self.loop_idle.sample(),
        )
        yield from self._replica_manager()
        yield from self._partitions()
        yield from self._controller()
        yield from self._zookeeper()

    def _partitions(self) -> Iterator[Metric]:
        """kafka.log:type=Log per hosted partition, the BrokerTopicMetrics counters, the
        follower fetch lag (rules 2, 3)."""
        rm = self.replica_manager
        families = [
            GaugeMetricFamily(
                f"kafka_log_log_{name}",
                f"{meaning} (kafka.log:type=Log,name={mbean},topic=<topic>,partition=<partition>)",
                labels=["topic", "partition"],
            )
            for name, mbean, meaning in LOG_GAUGES
        ]
        # Samples appended directly, one labels dict shared by a partition's four: a third
        # of add_metric's cost, which counts with 5,000 partitions.
        size, segments, end, start = (f.samples.append for f in families)
        size_name, segments_name, end_name, start_name = (f.name for f in families)
        hosted_topics: set[str] = set()
        for tp, hosted in rm.partitions.items():
            the_log = hosted.log
            labels = {"topic": tp.topic, "partition": str(tp.partition)}
            hosted_topics.add(tp.topic)
            size(Sample(size_name, labels, the_log.size_bytes))
            segments(Sample(segments_name, labels, len(the_log.segment_base_offsets)))
            end(Sample(end_name, labels, the_log.log_end_offset))
            start(Sample(start_name, labels, the_log.log_start_offset))
        yield from families
        stats = rm.topic_stats
        stats.retire(hosted_topics)
        total = stats.all_topics()
        prefix = "kafka_server_brokertopicmetrics_"
        for attr, name, mbean, meaning, per_topic in TOPIC_COUNTERS:
            # The all-topics series has no topic label, as the JMX exporter gives it.
            family = Metric(
                prefix + name,
                f"{meaning}; without a topic label: all topics "
                f"(kafka.server:type=BrokerTopicMetrics,name={mbean}"
                f"{',topic=<topic>' if per_topic else ''})",
                "counter",
            )
            sample = prefix + name + "_total"
            family.add_sample(sample, {}, getattr(total, attr))
            if per_topic:
                for topic, topic_stats in stats.items():
                    family.add_sample(sample, {"topic": topic}, getattr(topic_stats, attr))
            yield family
        yield from self._fetcher_lag()

    def _fetcher_lag(self) -> Iterator[Metric]:
        """Kafka's follower lag: the leader's high watermark at the last fetch minus this
        replica's log end offset, per followed partition fetched at least once."""
        lag = GaugeMetricFamily(
            "kafka_server_fetcherlagmetrics_consumerlag",
            "Records this follower is behind its leader's high watermark "
            "(kafka.server:type=FetcherLagMetrics,name=ConsumerLag,"
            "clientId=ReplicaFetcherThread-0-<leader>,topic=<topic>,partition=<partition>)",
            labels=["clientid", "topic", "partition"],
        )
        max_lag = 0
        fetchers = self.node.fetchers.fetchers if self.node is not None else {}
        partitions = self.replica_manager.partitions
        for fetcher in fetchers.values():
            client_id = f"ReplicaFetcherThread-0-{fetcher.leader_id}"
            for tp, state in fetcher.partitions.items():
                hosted = partitions.get(tp)
                leader_hw = state.leader_high_watermark
                if hosted is None or leader_hw < 0:
                    continue
                behind = max(0, leader_hw - hosted.log.log_end_offset)
                max_lag = max(max_lag, behind)
                lag.add_metric([client_id, tp.topic, str(tp.partition)], behind)
        most = GaugeMetricFamily(
            "kafka_server_replicafetchermanager_maxlag",
            "The largest follower lag of this broker, in records "
            "(kafka.server:type=ReplicaFetcherManager,name=MaxLag,clientId=Replica)",
            labels=["clientid"],
        )
        most.add_metric(["Replica"], max_lag)
        yield most
        yield lag

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
        election_times = Histogram()
        if controller is not None:
            election_times = controller.election_times
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
        timer = HistogramMetricFamily(
            "kafka_controller_controllerstats_leaderelectionrateandtimems",
            f"Time of the active controller's decide-and-write rounds that elected leaders, "
            f"in ms ({stats}LeaderElectionRateAndTimeMs)",
        )
        timer.add_metric([], election_times.cumulative(), election_times.sum_ms)
        yield timer
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
        #: Other GET/HEAD paths, by prefix (the web console,
        #: ``tidelog.server.observability.console``):
        #: ``route(head, target, writer)`` answers, or streams itself and returns None.
        self.routes: dict[bytes, Callable[..., Awaitable[bytes | None]]] = {}

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
            answer = await self._answer(reader, writer)
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

    async def _answer(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter | None = None
    ) -> bytes | None:
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
        path = target.split(b"?", 1)[0]
        route = next((r for p, r in self.routes.items() if path.startswith(p)), None)
        if route is not None and writer is not None:
            return await route(head, target, writer)
        if path != b"/metrics":
            return _answer(404, b"not found: the metrics are at /metrics\n", head=head)
        body = generate_latest(self.registry)
        return _answer(200, body, content_type=CONTENT_TYPE, head=head)


__all__ = [
    "CONTENT_TYPE",
    "TIME_BUCKETS_MS",
    "TIME_SPLIT",
    "BrokerCollector",
    "BrokerState",
    "BrokerTopicStats",
    "Histogram",
    "LoopIdleProbe",
    "MetricsEndpoint",
    "RequestMetrics",
    "RequestStats",
    "RequestTiming",
    "TopicStats",
    "ZkSessionTracker",
    "broker_registry",
    "request_name",
]
