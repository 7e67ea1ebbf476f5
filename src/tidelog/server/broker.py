"""The broker's composition root: config -> logs -> partitions -> listener, and back down.

Start-up: validate the config (``ConfigError`` names the key), open every log dir (storage
recovers each log: torn tails truncated, indexes rebuilt), load the topic image, host every
partition as leader with the checkpointed high watermark, build the codecs, then listen.

Shutdown (SIGTERM/SIGINT): stop accepting, answer parked requests, close connections, flush
every log and write the checkpoints (high watermark, recovery point, log start), close.
After SIGKILL nothing of that runs; the next start recovers from the log files themselves,
so every acknowledged record (acks=1/all: in the page cache before the answer) is kept.
"""

from __future__ import annotations

import asyncio
import dataclasses
import gc
import logging
import signal
import sys
import time
from collections.abc import Callable

from tidelog.aio import wait_for
from tidelog.protocol.apis import ApiKey, narrow_versions
from tidelog.protocol.codec import warm_up_steps
from tidelog.server.apis.acl_apis import AclApis
from tidelog.server.apis.client_quota_apis import ClientQuotaApis
from tidelog.server.apis.control_apis import ControlApis
from tidelog.server.apis.dispatcher import Dispatcher
from tidelog.server.apis.feature_apis import FeatureApis
from tidelog.server.apis.find_coordinator import FindCoordinatorApis
from tidelog.server.apis.handler_table import HandlerGroup, HandlerTable
from tidelog.server.apis.kafka_apis import KafkaApis
from tidelog.server.apis.log_dir_apis import LogDirApis
from tidelog.server.apis.reassignment_apis import REASSIGNMENT_API_VERSIONS, ReassignmentApis
from tidelog.server.apis.scram_apis import ScramCredentialApis
from tidelog.server.apis.throttling import RequestThrottler
from tidelog.server.apis.txn_admin import TxnAdmin
from tidelog.server.auth.broker_security import BrokerSecurity
from tidelog.server.cluster.backend import ZkBackend
from tidelog.server.cluster.metadata_cache import ClusterMetadataCache
from tidelog.server.cluster.node import ClusterNode
from tidelog.server.config.broker_config import BrokerConfig
from tidelog.server.config.topic_config import effective_topic_config, log_config_for
from tidelog.server.coordinators.group import GroupCoordinator
from tidelog.server.coordinators.txn import TransactionCoordinator
from tidelog.server.metadata.backend import MetadataBackend
from tidelog.server.metadata.local import MetadataStore
from tidelog.server.metadata.local_backend import LocalBackend
from tidelog.server.network.connection import Connection
from tidelog.server.network.listeners import ListenerSecurity
from tidelog.server.observability.console import Console
from tidelog.server.observability.console_sources import ClusterSource, LocalSource, SnapshotSource
from tidelog.server.observability.metrics.broker_collector import BrokerState, broker_registry
from tidelog.server.observability.metrics.endpoint import MetricsEndpoint
from tidelog.server.observability.metrics.quota_collector import QuotaCollector
from tidelog.server.observability.metrics.request_metrics import RequestMetrics
from tidelog.server.observability.metrics.zk_session import ZkSessionTracker
from tidelog.server.process import HeapFreezer, keep_freed_memory
from tidelog.server.quotas.configs import QuotaConfigs
from tidelog.server.quotas.manager import ClientQuotas
from tidelog.server.replica.alter_log_dirs import ReplicaAlterLogDirsManager
from tidelog.server.replica.manager import (
    LOG_DIR_PROBE_INTERVAL_S,
    ReplicaManager,
    now_ms,
    probe_log_dir,
)
from tidelog.storage.cleaner import CleanerConfig, LogCleaner
from tidelog.storage.log_manager import LogManager
from tidelog.zk import ZkError

log = logging.getLogger(__name__)

#: Group coordination (``tidelog.server.coordinators.group``), alone and in a cluster.
GROUP_APIS = frozenset(
    {
        ApiKey.FIND_COORDINATOR,
        ApiKey.JOIN_GROUP,
        ApiKey.SYNC_GROUP,
        ApiKey.HEARTBEAT,
        ApiKey.LEAVE_GROUP,
        ApiKey.OFFSET_COMMIT,
        ApiKey.OFFSET_FETCH,
        ApiKey.LIST_GROUPS,
        ApiKey.DESCRIBE_GROUPS,
        ApiKey.DELETE_GROUPS,
        ApiKey.OFFSET_DELETE,
    }
)
#: Transactions (``tidelog.server.coordinators.txn``), alone and in a cluster.
TXN_APIS = frozenset(
    {
        ApiKey.ADD_PARTITIONS_TO_TXN,
        ApiKey.ADD_OFFSETS_TO_TXN,
        ApiKey.END_TXN,
        ApiKey.WRITE_TXN_MARKERS,
        ApiKey.TXN_OFFSET_COMMIT,
        ApiKey.DESCRIBE_TRANSACTIONS,
        ApiKey.LIST_TRANSACTIONS,
        ApiKey.DESCRIBE_PRODUCERS,
    }
)
#: Security (``tidelog.server.auth.broker_security``): logins and ACLs, alone and in a cluster.
SECURITY_APIS = frozenset(
    {
        ApiKey.SASL_HANDSHAKE,
        ApiKey.SASL_AUTHENTICATE,
        ApiKey.DESCRIBE_ACLS,
        ApiKey.CREATE_ACLS,
        ApiKey.DELETE_ACLS,
        ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS,
        ApiKey.ALTER_USER_SCRAM_CREDENTIALS,
    }
)
#: Client quotas (``tidelog.server.apis.client_quota_apis``, KIP-546), alone and in a cluster.
QUOTA_APIS = frozenset({ApiKey.DESCRIBE_CLIENT_QUOTAS, ApiKey.ALTER_CLIENT_QUOTAS})
#: Log dirs (``tidelog.server.apis.log_dir_apis``, KIP-113), alone and in a cluster.
LOG_DIR_APIS = frozenset({ApiKey.DESCRIBE_LOG_DIRS, ApiKey.ALTER_REPLICA_LOG_DIRS})
#: How often a broker that owns its process checks whether its heap is due a new freeze.
REFREEZE_CHECK_S = 10.0
#: Versions this broker serves: the protocol table narrowed to the APIs handled here.
#: Fetch stops at v16 (v17+ adds KIP-853 replica directory fields nobody here sends),
#: CreateTopics/DeleteTopics/DescribeConfigs as the protocol table has them.
SERVED_APIS = frozenset(
    {
        ApiKey.API_VERSIONS,
        ApiKey.METADATA,
        ApiKey.PRODUCE,
        ApiKey.FETCH,
        ApiKey.LIST_OFFSETS,
        ApiKey.CREATE_TOPICS,
        ApiKey.DELETE_TOPICS,
        ApiKey.CREATE_PARTITIONS,
        ApiKey.DELETE_RECORDS,
        ApiKey.DESCRIBE_CONFIGS,
        ApiKey.ALTER_CONFIGS,
        ApiKey.INCREMENTAL_ALTER_CONFIGS,
        ApiKey.DESCRIBE_CLUSTER,
        ApiKey.INIT_PRODUCER_ID,
        ApiKey.OFFSET_FOR_LEADER_EPOCH,
        ApiKey.LIST_CONFIG_RESOURCES,
        ApiKey.DESCRIBE_TOPIC_PARTITIONS,
        ApiKey.UPDATE_FEATURES,
    }
    | GROUP_APIS
    | TXN_APIS
    | SECURITY_APIS
    | LOG_DIR_APIS
    | QUOTA_APIS
)
#: In a cluster also the control plane, the requests to the controller and DescribeQuorum.
CLUSTER_APIS = SERVED_APIS | {
    ApiKey.LEADER_AND_ISR,
    ApiKey.STOP_REPLICA,
    ApiKey.UPDATE_METADATA,
    ApiKey.CONTROLLED_SHUTDOWN,
    ApiKey.ALTER_PARTITION,
    ApiKey.ELECT_LEADERS,
    ApiKey.DESCRIBE_QUORUM,
    ApiKey.ALTER_PARTITION_REASSIGNMENTS,
    ApiKey.LIST_PARTITION_REASSIGNMENTS,
}


class Broker:
    """One tidelog broker process (single-node: its own controller)."""

    def __init__(self, config: BrokerConfig) -> None:
        self.config = config
        self.connections: set[Connection] = set()
        self._servers: list[asyncio.Server] = []
        #: Listener name -> the port it is bound to (``bound_port``: the first listener's).
        self.bound_ports: dict[str, int] = {}
        self._stopping = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self.bound_port = -1
        #: gc.freeze() once the codecs are built (set by ``run_broker``).
        self.freeze_gc_when_warm = False
        #: The cluster side (ZooKeeper, controller, fetchers) when ``zookeeper.connect`` is set.
        self.node: ClusterNode | None = None
        #: The web console's view of the cluster, given the ZooKeeper session tracker: chosen
        #: with the metadata backend (``_open_alone`` / ``_open_cluster``).
        self._console_source: Callable[[ZkSessionTracker | None], SnapshotSource]
        #: What differs alone and in a cluster (``tidelog.server.metadata.backend``).
        self.backend: MetadataBackend
        #: Prometheus endpoint when ``metrics.listener`` is set
        #: (tidelog.server.observability.metrics).
        self.request_metrics: RequestMetrics | None = None
        self.metrics_endpoint: MetricsEndpoint | None = None
        #: The web console on the metrics listener (tidelog.server.observability.console).
        self.console: Console | None = None
        self.state = BrokerState.STARTING

    def _open(self) -> None:
        config = self.config
        for d in config.log_dirs:
            d.mkdir(parents=True, exist_ok=True)
        default_log_config = log_config_for(effective_topic_config(config, {}), config)
        self.log_manager = LogManager(config.log_dirs, default_log_config, now_ms=now_ms())
        #: Log compaction (tidelog.storage.cleaner), run by ``_cleaner_loop``.
        self.log_cleaner = LogCleaner(cleaner_config(config))
        self.replica_manager = ReplicaManager(config, self.log_manager)
        clustered = bool(config.get_str("zookeeper.connect"))
        cluster_groups = self._open_cluster() if clustered else self._open_alone()
        helper = self.apis.helper
        self.groups = GroupCoordinator(
            config,
            self.backend,
            self.replica_manager,
            authorizer=lambda: helper.authorizer,
            respond=helper.respond,
            own_address=helper.own_address,
        )
        self.security = BrokerSecurity(self.config, clustered=clustered)
        #: Describe/AlterUserScramCredentials over the security's credential store.
        self.scram_apis = ScramCredentialApis(
            self.security.user_store, authorize_cluster=self.security.authorize_cluster
        )
        self.apis.authorizer = self.security.authorizer
        #: Client quotas (KIP-13, KIP-124): the sensors, their configs and the admin APIs.
        self.client_quotas = ClientQuotas(
            window_num=config.get_int("quota.window.num"),
            window_size_s=config.get_int("quota.window.size.seconds"),
        )
        self.quota_configs = QuotaConfigs(self.client_quotas)
        self.transactions = TransactionCoordinator(
            config,
            self.backend,
            self.replica_manager,
            groups=self.groups,
            allocate_producer_id=self.backend.allocate_producer_id,
            non_transactional_init=self.apis.producer_ids.handle_init_producer_id,
            authorizer=lambda: helper.authorizer,
            respond=helper.respond,
            own_address=helper.own_address,
        )
        #: DescribeLogDirs and AlterReplicaLogDirs: replicas moving between log dirs.
        self.log_dir_mover = ReplicaAlterLogDirsManager(self.config, self.replica_manager)
        # The handler table: every API of this broker, each answered by one group.
        self.handler_table = HandlerTable(
            [
                *self.apis.groups,
                self.groups,
                FindCoordinatorApis.serving(self.groups, self.transactions, helper),
                self.transactions,  # and idempotent producers' InitProducerId
                TxnAdmin(helper, self.replica_manager, self.transactions),
                self.security,  # SaslHandshake/SaslAuthenticate after the login
                AclApis(self.security.authorizer),
                self.scram_apis,
                ClientQuotaApis(
                    self.quota_configs, authorize_cluster=self.security.authorize_cluster
                ),
                LogDirApis(helper, self.log_dir_mover),
                FeatureApis(helper, self.backend),
                *cluster_groups,
            ]
        )
        if config.metrics_listener is not None:
            self.request_metrics = RequestMetrics(self.supported)
        self.dispatcher = Dispatcher(
            self.handler_table,
            self.supported,
            self.backend.readiness,
            self.request_metrics,
            RequestThrottler(self.client_quotas),
        )

    def _open_alone(self) -> list[HandlerGroup]:
        """The broker is its own controller: its topic image on disk, every partition led
        here. No handler groups of its own."""
        config = self.config
        store = MetadataStore(config.log_dirs[0])
        self.backend = backend = LocalBackend(config, store, self.replica_manager)
        self.supported = narrow_versions(only=SERVED_APIS, overrides={ApiKey.FETCH: (4, 16)})
        self.apis = KafkaApis(config, backend, self.replica_manager, self.supported)
        # Logs on disk whose topic is gone (deleted just before a crash) are removed.
        known = {(name, p) for name, i in store.topics.items() for p in range(i.num_partitions)}
        for tp in list(self.log_manager.all_logs()):
            if (tp.topic, tp.partition) not in known:
                log.warning("removing log %s of a deleted topic", tp)
                self.log_manager.delete_log(tp)
        backend.load_topics(self.log_manager.high_watermarks())
        self._console_source = lambda _zk_session: LocalSource(
            config.broker_id, self.replica_manager
        )
        return []

    def _open_cluster(self) -> list[HandlerGroup]:
        """In a cluster nothing is hosted until the controller's LeaderAndIsr says how
        (rule 10); the checkpointed HWs wait for it. The cluster-only handler groups."""
        cache = ClusterMetadataCache(self.config.broker_id)
        self.supported = narrow_versions(
            only=CLUSTER_APIS,
            overrides={
                ApiKey.FETCH: (4, 16),
                ApiKey.ELECT_LEADERS: (0, 2),
                ApiKey.DESCRIBE_QUORUM: (0, 2),
                **REASSIGNMENT_API_VERSIONS,
            },
        )
        self.node = node = ClusterNode(
            self.config, self.replica_manager, cache, self.log_manager.high_watermarks()
        )
        self.backend = backend = ZkBackend(self.config, node)
        self._console_source = lambda zk_session: ClusterSource(
            self.config.broker_id, node, self.replica_manager, backend, zk_session
        )
        self.apis = KafkaApis(self.config, self.backend, self.replica_manager, self.supported)
        helper = self.apis.helper
        return [
            ControlApis(helper, node, self.replica_manager),
            ReassignmentApis(helper, node),
        ]

    async def start(self) -> None:
        self._open()
        await self.backend.connect()
        # KIP-226: dynamic broker configs apply before anything is served.
        await self.apis.config_apis.start(self.backend.zk)
        await self.security.start(self.backend.zk)
        await self.quota_configs.start(self.backend.zk)
        self.scram_apis.store = self.security.user_store  # ZooKeeper's, in a cluster
        loop = asyncio.get_running_loop()
        max_request = self.config.get_int("socket.request.max.bytes")
        max_unauthenticated = self.config.get_int("sasl.server.max.receive.size")
        for setup in self.security.listeners:
            endpoint = setup.endpoint

            def factory(setup: ListenerSecurity = setup) -> Connection:
                conn = Connection(
                    self.dispatcher,
                    max_request,
                    on_close=self.connections.discard,
                    listener_name=setup.endpoint.name,
                    security_protocol=setup.endpoint.security_protocol,
                    tls=setup.tls,
                    tls_principal=setup.tls_principal,
                    authenticator=self.security.new_authenticator(setup.endpoint),
                    max_unauthenticated_bytes=max_unauthenticated,
                )
                self.connections.add(conn)
                return conn

            server = await loop.create_server(
                factory, endpoint.host, endpoint.port, reuse_address=True, backlog=512
            )
            self._servers.append(server)
            sockets = server.sockets
            self.bound_ports[endpoint.name] = (
                sockets[0].getsockname()[1] if sockets else endpoint.port
            )
        endpoint = self.config.listener
        self.bound_port = self.bound_ports[endpoint.name]
        self.apis.bound_ports = self.bound_ports
        await self._start_metrics()
        self._tasks.append(asyncio.create_task(self._checkpoint_loop()))
        self._tasks.append(asyncio.create_task(self._retention_loop()))
        self._tasks.append(asyncio.create_task(self._flush_loop()))
        if self.log_cleaner.config.enable:
            self._tasks.append(asyncio.create_task(self._cleaner_loop()))
        self._tasks.append(asyncio.create_task(self._log_dir_probe_loop()))
        self._tasks.append(asyncio.create_task(self._idle_connections_loop()))
        self._tasks.append(asyncio.create_task(self._warm_up_codecs()))
        self.groups.start()
        self.transactions.start()
        await self.backend.start(self.bound_ports)
        if self.state is BrokerState.STARTING:
            self.state = BrokerState.RUNNING
        log.info(
            "tidelog broker %d serving on %s (%d topics)",
            self.config.broker_id,
            ", ".join(
                f"{s.endpoint.name}://{s.endpoint.host}:{self.bound_ports[s.endpoint.name]}"
                for s in self.security.listeners
            ),
            len(self.backend.topics),
        )

    async def _start_metrics(self) -> None:
        """The Prometheus endpoint (``metrics.listener``), serving from here on."""
        listener = self.config.metrics_listener
        if listener is None:
            return
        zk_session = None
        if (zk := self.backend.zk) is not None:
            zk_session = ZkSessionTracker()
            zk.add_session_listener(zk_session)
        registry = broker_registry(
            self.replica_manager,
            self.backend,
            requests=self.request_metrics,
            state=self._broker_state,
            zk_session=zk_session,
            client_quotas=QuotaCollector(self.client_quotas),
        )
        self.metrics_endpoint = MetricsEndpoint(registry)
        self.console = Console(
            self.backend,
            self._console_source(zk_session),
        )
        for prefix in (b"/console", b"/api/"):
            self.metrics_endpoint.routes[prefix] = self.console.route
        try:
            port = await self.metrics_endpoint.start(listener)
        except OSError as exc:  # the port is taken, the host is not ours, ...
            raise OSError(exc.errno, f"metrics.listener {listener}: {exc.strerror}") from exc
        log.info("metrics served on %s/metrics", dataclasses.replace(listener, port=port))

    def _broker_state(self) -> BrokerState:
        if self.state is BrokerState.RUNNING and not self.backend.is_ready():
            return BrokerState.STARTING  # not serving clients until it has the metadata
        return self.state

    async def _warm_up_codecs(self) -> None:
        """Build the protocol codecs one at a time after the listener is up: start-up and
        readiness do not wait seconds of CPU for it, and requests are served in between
        (a codec a request needs before its turn is built on the spot)."""
        started = time.monotonic()
        count = 0
        for built in warm_up_steps(self.supported):
            count += built
            await asyncio.sleep(0)
        log.debug("built %d request codecs in %.1f s", count, time.monotonic() - started)
        if self.freeze_gc_when_warm:
            # What exists now (modules, codecs, the loaded logs) lives as long as the
            # process: out of the collector's sight, so a full (gen-2) collection scans only
            # what came after. ~100,000 such objects made every gen-2 pass take 30-65 ms of
            # the event loop on the 2-CPU VM, every few seconds under load (the acks=all
            # p99). Only when the broker owns its process (``run_broker``), not in a host
            # process such as a test's.
            gc.collect()
            gc.freeze()
            self._tasks.append(asyncio.create_task(self._refreeze_loop()))

    async def _refreeze_loop(self) -> None:
        """Freeze the heap again after a large change of the hosted partitions
        (``tidelog.server.process.HeapFreezer``)."""
        freezer = HeapFreezer(len(self.replica_manager.partitions))
        while True:
            await asyncio.sleep(REFREEZE_CHECK_S)
            hosted = len(self.replica_manager.partitions)
            started = time.monotonic()
            if freezer.check(hosted):
                took = time.monotonic() - started
                log.info("heap frozen again at %d hosted partitions (%.0f ms)", hosted, took * 1e3)

    async def _checkpoint_loop(self) -> None:
        interval = self.config.get_int("replica.high.watermark.checkpoint.interval.ms") / 1000
        said = False  # about an offline log dir: once until the checkpoints work again
        while True:
            await asyncio.sleep(interval)
            try:
                # The values are read here, on the event loop; the files (three per log dir,
                # each temp + fsync + rename + directory fsync) are written in a worker thread,
                # as Kafka's scheduler thread does: under write load one fsync on the 2-CPU VM
                # took 4 ms at the median and up to 61 ms, and on the event loop each one
                # stalled every produce and fetch behind it. The log manager's checkpoint
                # lock orders these writes with a truncation's (storage log rule 8).
                await asyncio.to_thread(
                    self.log_manager.checkpoint, self.replica_manager.high_watermarks()
                )
            except OSError as exc:
                if not self.replica_manager.offline_log_dirs:
                    log.exception("writing checkpoints failed")
                elif not said:
                    said = True
                    log.warning("writing checkpoints failed (a log dir is offline): %s", exc)
            else:
                said = False

    async def _retention_loop(self) -> None:
        interval = self.config.get_int("log.retention.check.interval.ms") / 1000
        while True:
            await asyncio.sleep(interval)
            try:
                deleted = self.log_manager.apply_retention(
                    now_ms(), self.replica_manager.high_watermarks()
                )
            except OSError:
                log.exception("retention failed")
                continue
            if deleted:
                log.info("retention deleted %d segment(s)", deleted)

    async def _cleaner_loop(self) -> None:
        """Kafka's cleaner thread: clean the dirtiest compacted log in a worker thread
        (``tidelog.storage.cleaner`` rule 7); sleep ``log.cleaner.backoff.ms`` when no log
        needs it."""
        backoff = self.log_cleaner.config.backoff_ms / 1000
        while True:
            try:
                stats = await asyncio.to_thread(
                    self.log_cleaner.clean_once,
                    dict(self.log_manager.all_logs()),
                    self.replica_manager.high_watermarks(),
                    now_ms(),
                )
            except Exception:  # the cleaner marks a failing log; this loop must go on
                log.exception("log cleaning failed")
                stats = None
            await asyncio.sleep(backoff if stats is None or not stats.complete else 0)

    async def _flush_loop(self) -> None:
        # flush.ms / flush.messages: fsync may block, so it runs in a worker thread
        # (storage flushes without holding the log's lock).
        while True:
            await asyncio.sleep(1.0)
            try:
                await asyncio.to_thread(self.log_manager.maybe_flush_all, now_ms())
            except OSError:
                log.exception("flush failed")

    async def _log_dir_probe_loop(self) -> None:
        """Offline log dirs that ran out of space come back once they have room again
        (replica manager rule 5; Kafka needs a restart)."""
        while True:
            await asyncio.sleep(LOG_DIR_PROBE_INTERVAL_S)
            for log_dir in self.replica_manager.recoverable_offline_log_dirs():
                if not await asyncio.to_thread(probe_log_dir, log_dir):
                    continue
                try:
                    # First the checkpoints that could not be written meanwhile: a
                    # truncation that lowered a recovery point must reach the file before
                    # anything is appended past it (storage log rule 8).
                    self.replica_manager.checkpoint()
                except OSError as exc:
                    log.warning("log dir %s: checkpoints still fail: %s", log_dir, exc)
                    continue
                self.replica_manager.mark_log_dir_online(log_dir)

    async def _idle_connections_loop(self) -> None:
        """Kafka's ``connections.max.idle.ms``: close connections idle that long (-1: never)."""
        max_idle_ms = self.config.get_int("connections.max.idle.ms")
        if max_idle_ms < 0:
            return
        max_idle_s = max_idle_ms / 1000
        while True:
            await asyncio.sleep(min(max_idle_s, 30.0))
            now = time.monotonic()
            for conn in list(self.connections):
                if conn.is_idle(now, max_idle_s):
                    log.info("closing connection from %s: idle for %d ms", conn.peer, max_idle_ms)
                    conn.close()

    def request_stop(self) -> None:
        self._stopping.set()

    async def serve_until_stopped(self) -> None:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self.request_stop)
        await self._stopping.wait()
        await self.stop()

    async def stop(self) -> None:
        """Shut down in Kafka's order: leave the controller seat and hand leadership over,
        stop serving, answer parked requests, then flush and close the logs."""
        log.info("shutting down")
        await self._leave_cluster()
        await self._stop_services()
        await self._close_connections()
        for hosted in self.replica_manager.partitions.values():
            hosted.log.flush()
        self.replica_manager.checkpoint()
        self.log_manager.close()
        if self.metrics_endpoint is not None:
            await self.metrics_endpoint.stop()
        if self.console is not None:
            await self.console.close()
        await self.security.stop()
        log.info("shut down cleanly")

    async def _leave_cluster(self) -> None:
        await self.backend.withdraw_candidacy()
        if self.backend.wants_controlled_shutdown():
            self.state = BrokerState.PENDING_CONTROLLED_SHUTDOWN
            await self.backend.controlled_shutdown()
        self.state = BrokerState.SHUTTING_DOWN
        for server in self._servers:
            server.close()
        self.apis.config_apis.stop()
        if hasattr(self, "quota_configs"):
            self.quota_configs.stop()
        await self.backend.stop()
        for task in self._tasks:
            task.cancel()

    async def _stop_services(self) -> None:
        if hasattr(self, "log_dir_mover"):
            await self.log_dir_mover.stop()
        if hasattr(self, "transactions"):
            await self.transactions.stop()
        if hasattr(self, "groups"):
            await self.groups.stop()

    async def _close_connections(self) -> None:
        # Parked requests answer now, with what they have. Their answers travel through two
        # layers of future callbacks (handler -> dispatcher -> connection), each one loop
        # iteration, before they are written: let those run before closing the sockets.
        self.replica_manager.shutdown()
        for _ in range(5):
            await asyncio.sleep(0)
        for conn in list(self.connections):
            conn.close()
        self.backend.close_readiness()
        for server in self._servers:
            try:
                await wait_for(server.wait_closed(), 5.0)
            except TimeoutError:
                log.warning("connections still closing after 5 s; going on")


async def run_broker(config: BrokerConfig) -> int:
    # The broker owns this process: freed request and fetch buffers stay in it for reuse
    # (tidelog.server.process).
    keep_freed_memory()
    broker = Broker(config)
    broker.freeze_gc_when_warm = True
    try:
        await broker.start()
    except ZkError as exc:
        # ZooKeeper unreachable, or our broker.id held by another live broker: said plainly.
        print(f"tidelog broker: cannot start: {exc}", file=sys.stderr)
        await broker.stop()
        return 1
    await broker.serve_until_stopped()
    return 0


__all__ = ["Broker", "run_broker"]


def cleaner_config(config: BrokerConfig) -> CleanerConfig:
    """The broker's ``log.cleaner.*`` settings (``log.cleaner.threads=0`` disables it)."""
    return CleanerConfig(
        enable=config.get_bool("log.cleaner.enable") and config.get_int("log.cleaner.threads") > 0,
        backoff_ms=config.get_int("log.cleaner.backoff.ms"),
        dedupe_buffer_size=config.get_int("log.cleaner.dedupe.buffer.size"),
        io_buffer_load_factor=float(config.values["log.cleaner.io.buffer.load.factor"]),  # type: ignore[arg-type]
        max_io_bytes_per_second=float(config.values["log.cleaner.io.max.bytes.per.second"]),  # type: ignore[arg-type]
    )
