"""Broker state as gauges and counters, read at scrape time (``BrokerCollector``): the
package's rules 2, 3 and 6; ``broker_registry`` puts one broker's collectors together.

The collector reads the replica manager (partitions, logs, ISR counts, purgatories,
quotas, per-topic counters), the fetchers (follower lag), the controller candidate and the
ZooKeeper session; each is given to it as the thing it reads, looked up at each scrape.
"""

from __future__ import annotations

import enum
import functools
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Final, Protocol

from prometheus_client import CollectorRegistry, ProcessCollector
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector
from prometheus_client.samples import Sample

from tidelog.histogram import Histogram
from tidelog.server.observability.metrics.zk_session import (
    SESSION_STATES,
    ZkSessionTracker,
    session_state,
)

if TYPE_CHECKING:
    from tidelog.controller.controller import Controller
    from tidelog.model import TopicPartition
    from tidelog.server.metadata.backend import FollowerFetcher
    from tidelog.server.observability.metrics.request_metrics import RequestMetrics
    from tidelog.server.replica.manager import ReplicaManager
    from tidelog.server.replica.reads import HostedPartition
    from tidelog.zk import ZkClient

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
    """``NetworkProcessorAvgIdlePercent`` of an asyncio broker (package rule 6): the share
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


class LazyFamily(Metric):
    """A metric family whose samples are made when first read (package rule 4): the
    collector reads plain values on the loop, and ``build`` turns them into samples
    wherever the text is formatted (the endpoint's worker thread). ``build`` must read
    only what was handed to it, never live broker state."""

    def __init__(
        self, name: str, documentation: str, typ: str, build: Callable[[], list[Sample]]
    ) -> None:
        self._build: Callable[[], list[Sample]] | None = build
        self._samples: list[Sample] = []
        super().__init__(name, documentation, typ)

    @property
    def samples(self) -> list[Sample]:
        if self._build is not None:
            self._samples, self._build = self._build(), None
        return self._samples

    @samples.setter
    def samples(self, value: list[Sample]) -> None:
        self._samples = value


#: Per-partition rows: topic, partition, then the LOG_GAUGES' values in order.
_LogRow = tuple[str, str, int, int, int, int]


def _labelled(rows: list[_LogRow]) -> Callable[[], list[tuple[dict[str, str], _LogRow]]]:
    """The rows with one labels dict each, made once and shared by the four families (a
    third of the cost of a dict per sample)."""
    made: list[list[tuple[dict[str, str], _LogRow]]] = []

    def get() -> list[tuple[dict[str, str], _LogRow]]:
        if not made:
            made.append([({"topic": row[0], "partition": row[1]}, row) for row in rows])
        return made[0]

    return get


def _column_samples(
    name: str, labelled: Callable[[], list[tuple[dict[str, str], _LogRow]]], column: int
) -> list[Sample]:
    return [Sample(name, labels, float(row[column])) for labels, row in labelled()]


def _lag_samples(name: str, lags: list[tuple[str, TopicPartition, int]]) -> list[Sample]:
    return [
        Sample(name, {"clientid": client, "topic": tp.topic, "partition": str(tp.partition)}, lag)
        for client, tp, lag in lags
    ]


class BrokerState(enum.IntEnum):
    """Kafka's ``BrokerState`` values (kafka.server:type=KafkaServer,name=BrokerState)."""

    NOT_RUNNING = 0
    STARTING = 1
    RUNNING = 3
    PENDING_CONTROLLED_SHUTDOWN = 6
    SHUTTING_DOWN = 7


def _gauge(name: str, help_text: str, value: float) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, help_text, value=value)


def _counter(name: str, help_text: str, value: float) -> CounterMetricFamily:
    return CounterMetricFamily(name, help_text, value=value)


@dataclass(frozen=True, slots=True)
class PartitionCounts:
    """The ReplicaManager partition gauges: counts over the hosted partitions."""

    leaders: int = 0
    under_replicated: int = 0
    under_min_isr: int = 0
    at_min_isr: int = 0
    offline: int = 0


def count_partitions(
    partitions: Iterable[HostedPartition], offline_dirs: Mapping[Path, object]
) -> PartitionCounts:
    """One walk over the hosted ``partitions``: those led here, and of those the ones whose
    ISR is below their replica set, below or at min.insync.replicas; and the hosted ones
    whose log dir is in ``offline_dirs``."""
    leaders = under_replicated = under_min_isr = at_min_isr = offline = 0
    for hosted in partitions:
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
    return PartitionCounts(leaders, under_replicated, under_min_isr, at_min_isr, offline)


class ClusterSide(Protocol):
    """What the collector asks of the cluster side (``MetadataBackend`` answers it)."""

    def controller(self) -> Controller | None: ...

    def is_active_controller(self) -> bool: ...

    def fetchers(self) -> Iterable[FollowerFetcher]: ...

    @property
    def zk(self) -> ZkClient | None: ...


class _Alone:
    """``ClusterSide`` of a broker on its own, answering as ``LocalBackend`` does: its own
    active controller, with no candidate, no fetchers and no ZooKeeper."""

    def controller(self) -> Controller | None:
        return None

    def is_active_controller(self) -> bool:
        return True

    def fetchers(self) -> Iterable[FollowerFetcher]:
        return ()

    @property
    def zk(self) -> ZkClient | None:
        return None


#: The cluster side of a broker on its own.
ALONE: Final[ClusterSide] = _Alone()


class BrokerCollector(Collector):
    """The gauges and counters read from broker state at scrape time (package rules 2, 3).

    What it reads besides the ``replica_manager``, each looked up at every scrape:
    ``cluster``, what differs alone and in a cluster (the broker's ``MetadataBackend``:
    its fetchers, controller candidate, whether it is the active controller, its ZooKeeper
    client; none given: a broker on its own, ``ALONE``); ``state``, the broker's
    ``BrokerState``; ``zk_session``, the session losses counted."""

    def __init__(
        self,
        replica_manager: ReplicaManager,
        *,
        state: Callable[[], BrokerState] = lambda: BrokerState.RUNNING,
        zk_session: ZkSessionTracker | None = None,
        cluster: ClusterSide = ALONE,
    ) -> None:
        self.replica_manager = replica_manager
        self.state = state
        self.zk_session = zk_session
        self.cluster = cluster
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
        yield from self._partition_counts()
        yield from self._isr_changes()
        yield from self._replication_quotas()
        yield from self._log_dirs()
        yield from self._purgatories()
        yield from self._fetch_sessions()
        yield from self._partitions()
        yield from self._controller()
        yield from self._zookeeper()

    def _partitions(self) -> Iterator[Metric]:
        """kafka.log:type=Log per hosted partition, the BrokerTopicMetrics counters, the
        follower fetch lag (rules 2, 3)."""
        rm = self.replica_manager
        # Read here, on the loop: a tuple of plain values per partition. The samples are
        # made from these rows only when the text is formatted (``LazyFamily``), in the
        # endpoint's worker thread: with 5,000 partitions making 20,000 samples on the loop
        # held it for 40-80 ms per scrape.
        rows = [
            (
                tp.topic,
                str(tp.partition),
                hosted.log.size_bytes,
                len(hosted.log.segment_base_offsets),
                hosted.log.log_end_offset,
                hosted.log.log_start_offset,
            )
            for tp, hosted in rm.partitions.items()
        ]
        labelled = _labelled(rows)
        for column, (name, mbean, meaning) in enumerate(LOG_GAUGES, start=2):
            yield LazyFamily(
                f"kafka_log_log_{name}",
                f"{meaning} (kafka.log:type=Log,name={mbean},topic=<topic>,partition=<partition>)",
                "gauge",
                functools.partial(_column_samples, f"kafka_log_log_{name}", labelled, column),
            )
        hosted_topics = {row[0] for row in rows}
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
        lags: list[tuple[str, TopicPartition, int]] = []
        max_lag = 0
        partitions = self.replica_manager.partitions
        for fetcher in self.cluster.fetchers():
            client_id = f"ReplicaFetcherThread-0-{fetcher.leader_id}"
            for tp, state in fetcher.partitions.items():
                hosted = partitions.get(tp)
                leader_hw = state.leader_high_watermark
                if hosted is None or leader_hw < 0:
                    continue
                behind = max(0, leader_hw - hosted.log.log_end_offset)
                max_lag = max(max_lag, behind)
                lags.append((client_id, tp, behind))
        most = GaugeMetricFamily(
            "kafka_server_replicafetchermanager_maxlag",
            "The largest follower lag of this broker, in records "
            "(kafka.server:type=ReplicaFetcherManager,name=MaxLag,clientId=Replica)",
            labels=["clientid"],
        )
        most.add_metric(["Replica"], max_lag)
        yield most
        name = "kafka_server_fetcherlagmetrics_consumerlag"
        yield LazyFamily(
            name,
            "Records this follower is behind its leader's high watermark "
            "(kafka.server:type=FetcherLagMetrics,name=ConsumerLag,"
            "clientId=ReplicaFetcherThread-0-<leader>,topic=<topic>,partition=<partition>)",
            "gauge",
            functools.partial(_lag_samples, name, lags),
        )

    def _partition_counts(self) -> Iterator[Metric]:
        """kafka.server:type=ReplicaManager partition gauges (rule 2)."""
        rm = self.replica_manager
        counts = count_partitions(rm.partitions.values(), rm.offline_log_dirs)
        prefix = "kafka_server_replicamanager_"
        mbean = "kafka.server:type=ReplicaManager,name="
        yield _gauge(
            prefix + "leadercount",
            f"Partitions this broker leads ({mbean}LeaderCount)",
            counts.leaders,
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
            counts.under_replicated,
        )
        yield _gauge(
            prefix + "underminisrpartitioncount",
            f"Partitions led here whose ISR is below min.insync.replicas: acks=all "
            f"produces fail ({mbean}UnderMinIsrPartitionCount)",
            counts.under_min_isr,
        )
        yield _gauge(
            prefix + "atminisrpartitioncount",
            f"Partitions led here whose ISR is exactly min.insync.replicas "
            f"({mbean}AtMinIsrPartitionCount)",
            counts.at_min_isr,
        )
        yield _gauge(
            prefix + "offlinereplicacount",
            f"Partitions hosted here whose log dir is offline ({mbean}OfflineReplicaCount)",
            counts.offline,
        )

    def _isr_changes(self) -> Iterator[Metric]:
        """kafka.server:type=ReplicaManager ISR change counters (rule 3)."""
        rm = self.replica_manager
        prefix = "kafka_server_replicamanager_"
        mbean = "kafka.server:type=ReplicaManager,name="
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

    def _replication_quotas(self) -> Iterator[Metric]:
        """The replication throttles' byte rates, leader and follower side (KIP-73)."""
        quotas = self.replica_manager.replication_quotas
        for side, quota in (("Leader", quotas.leader), ("Follower", quotas.follower)):
            yield _gauge(
                f"kafka_server_{side.lower()}replication_byte_rate",
                f"Bytes a second moved for throttled replicas, {side.lower()} side, KIP-73 "
                f"(kafka.server:type={side}Replication,name=byte-rate)",
                quota.rate(),
            )

    def _log_dirs(self) -> Iterator[Metric]:
        """kafka.log:type=LogManager: the log dirs offline."""
        yield _gauge(
            "kafka_log_logmanager_offlinelogdirectorycount",
            "Log dirs offline after a write error "
            "(kafka.log:type=LogManager,name=OfflineLogDirectoryCount)",
            len(self.replica_manager.offline_log_dirs),
        )

    def _purgatories(self) -> Iterator[Metric]:
        """kafka.server:type=DelayedOperationPurgatory: the Produce and Fetch purgatories."""
        rm = self.replica_manager
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

    def _fetch_sessions(self) -> Iterator[Metric]:
        """kafka.server:type=FetchSessionCache: the KIP-227 incremental fetch sessions."""
        sessions = self.replica_manager.fetch_sessions
        yield _gauge(
            "kafka_server_fetchsessioncache_numincrementalfetchsessions",
            "Incremental fetch sessions cached, consumers' and followers' "
            "(kafka.server:type=FetchSessionCache,name=NumIncrementalFetchSessions)",
            len(sessions),
        )
        yield _gauge(
            "kafka_server_fetchsessioncache_numincrementalfetchpartitionscached",
            "Partitions held by the incremental fetch sessions "
            "(kafka.server:type=FetchSessionCache,name=NumIncrementalFetchPartitionsCached)",
            sessions.num_partitions,
        )

    def _controller(self) -> Iterator[Metric]:
        # A broker on its own is its own active controller, with every partition led.
        controller = self.cluster.controller()
        active = self.cluster.is_active_controller()
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
        zk = self.cluster.zk
        if zk is None:
            return
        tracker = self.zk_session
        current = session_state(connected=zk.connected, tracker=tracker)
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
    cluster: ClusterSide = ALONE,
    *,
    requests: RequestMetrics | None = None,
    state: Callable[[], BrokerState] = lambda: BrokerState.RUNNING,
    zk_session: ZkSessionTracker | None = None,
    process: bool = True,
    client_quotas: Collector | None = None,
) -> CollectorRegistry:
    """One broker's registry: its state collector, its request metrics, the process.
    ``cluster`` is what the collector asks about the cluster side (the broker's
    ``MetadataBackend``; none given: ``ALONE``)."""
    registry = CollectorRegistry(auto_describe=False)
    collector = BrokerCollector(
        replica_manager, state=state, zk_session=zk_session, cluster=cluster
    )
    registry.register(collector)
    if requests is not None:
        registry.register(requests)
    if client_quotas is not None:
        registry.register(client_quotas)
    if process:
        ProcessCollector(registry=registry)
    return registry


__all__ = [
    "ALONE",
    "LOG_GAUGES",
    "TOPIC_COUNTERS",
    "BrokerCollector",
    "BrokerState",
    "ClusterSide",
    "LazyFamily",
    "LoopIdleProbe",
    "PartitionCounts",
    "broker_registry",
    "count_partitions",
]
