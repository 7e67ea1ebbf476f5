"""The broker in a cluster: ``ClusterNode`` wires this broker's cluster side together and
answers the controller's LeaderAndIsr, UpdateMetadata and StopReplica.

With ``zookeeper.connect`` set, the broker composition (``tidelog.server.broker``) adds a
``ClusterNode``. It wires what exists; the rules stay in ``tidelog.replication`` (Partition,
truncation) and ``tidelog.controller`` (decisions, Controller), each job of the cluster side
in its own module of this package:

1. Start: open a ZooKeeper session, register ``/brokers/ids/<id>`` (the broker epoch is the
   znode's czxid; ``registration``), start a ``Controller`` candidate (one broker wins
   ``/controller``). No partition is hosted until the controller says so: a LeaderAndIsr
   makes each replica leader or follower (rule 10).
2. The controller reaches brokers through ``RpcControllerSender`` (``controller_channel``).
   Brokers fence a stale controller epoch with STALE_CONTROLLER_EPOCH (11), and a request
   for an earlier incarnation of themselves with STALE_BROKER_EPOCH (KIP-380), and ignore
   the request (rule 8).
3. Followers pull (rule 2): one ``LeaderFetcher`` per leader broker (``fetcher``).
4. ISR changes (rules 4, 5): the leader's ``Partition`` proposes them;
   ``AlterPartitionManager`` (``alter_partition``) takes each proposal to the active
   controller and applies the answer.
5. Metadata answers come from ``ClusterMetadataCache`` (``metadata_cache``), fed by
   UpdateMetadata and by the LeaderAndIsr states this broker applied, when newer
   (``applied_leader_and_isr``).
6. InitProducerId: producer ids come from blocks of 1000 claimed on ZooKeeper's
   ``/latest_producer_id_block`` with compare-and-set (``ProducerIdManager`` over
   ``ZkProducerIdBlockStore``, Kafka's ZkProducerIdManager), so no two brokers and no two
   incarnations of one broker ever hand out the same id.
7. Log dir failure and recovery (KIP-112) reach the controller as log dir events
   (``log_dirs``).
8. Every connection to a peer broker goes to the address the peer registered, unless the
   testing-only ``tidelog.testing.peer.addresses`` names another (``peers``).
9. Topic config overrides live in ZooKeeper (``topic_configs``); a stopping broker first
   hands its leaderships over (``controlled_shutdown``, rule 12).
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Awaitable, Iterable, Mapping, Sequence
from typing import Any, Literal

from tidelog.aio import wait_for
from tidelog.client.client import Client
from tidelog.client.connection import BrokerConnection
from tidelog.controller.controller import Controller
from tidelog.controller.deletion import LEADER_DURING_DELETE
from tidelog.controller.topic_admin import create_partitions, create_topic
from tidelog.errors import ErrorCode, KafkaError
from tidelog.model import BrokerId, TopicPartition
from tidelog.protocol import control
from tidelog.replication.partition import AlterPartitionProposal, LeaderAndIsr
from tidelog.server.cluster.alter_partition import AlterPartitionManager, send_alter_partition
from tidelog.server.cluster.controlled_shutdown import (
    CONTROLLED_SHUTDOWN_TIMEOUT_S,
    ControlledShutdown,
)
from tidelog.server.cluster.controller_channel import RpcControllerSender
from tidelog.server.cluster.controller_connection import ControllerConnection
from tidelog.server.cluster.fetcher import ReplicaFetcherManager
from tidelog.server.cluster.log_dirs import LogDirReporter
from tidelog.server.cluster.metadata_cache import (
    CachedBroker,
    CachedPartition,
    ClusterMetadataCache,
)
from tidelog.server.cluster.propagation import MetadataPropagation
from tidelog.server.cluster.readiness import ReadinessGate
from tidelog.server.cluster.registration import broker_registration, open_session
from tidelog.server.cluster.topic_configs import TopicConfigs
from tidelog.server.config.broker_config import BrokerConfig
from tidelog.server.network.listeners import inter_broker_security
from tidelog.server.replica.manager import ReplicaManager
from tidelog.server.replica.reads import HostedPartition
from tidelog.server.replica.stray_replicas import stray_logs, unknown_topic_logs
from tidelog.storage.producer_id import ProducerIdManager
from tidelog.zk import SessionEvent, ZkClient

#: LeaderAndIsr requests up to this many partitions log each one at INFO.
_PER_PARTITION_LOG_LIMIT = 50

log = logging.getLogger(__name__)

#: What a LeaderAndIsr made of one partition here: its leader, a follower that (re)started
#: fetching, or neither (an unchanged follower, or one with nobody to fetch from).
_Became = Literal["leader", "follower"] | None


class ClusterNode:
    """This broker's cluster side: ZooKeeper session, controller candidate, control-plane
    handlers, fetchers and ISR proposals. See the module docstring."""

    def __init__(
        self,
        config: BrokerConfig,
        replica_manager: ReplicaManager,
        metadata: ClusterMetadataCache,
        checkpointed_hw: Mapping[TopicPartition, int],
    ) -> None:
        self.config = config
        self.broker_id = BrokerId(config.broker_id)
        self.replica_manager = replica_manager
        self.metadata = metadata
        self.checkpointed_hw = dict(checkpointed_hw)
        #: How this broker connects to its peers: the inter-broker listener's protocol,
        #: TLS trust and SASL login (``tidelog.server.network.listeners`` rule 4).
        self.listener_name = config.inter_broker_listener_name
        self.peer_security = inter_broker_security(config)
        self.client = Client(
            f"{config.advertised_listener.host}:{config.advertised_listener.port}",
            client_id=f"broker-{config.broker_id}",
            security=self.peer_security,
        )
        self.background: set[asyncio.Task[Any]] = set()
        self.fetchers = ReplicaFetcherManager(self)
        #: CreatePartitions' and DeleteTopics' wait for the metadata (``propagation``).
        self.propagation = MetadataPropagation(
            config.broker_id,
            metadata,
            f"{config.advertised_listener.host}:{config.advertised_listener.port}",
            self.peer_security,
        )
        #: Client requests wait until this broker is registered and has the controller's
        #: metadata for that registration (``tidelog.server.cluster.readiness``).
        self.readiness = ReadinessGate(
            config.broker_id, config.get_int("tidelog.not.ready.request.hold.ms") / 1000
        )
        self.broker_epoch = -1
        self.zk: ZkClient | None = None
        #: InitProducerId's ids: blocks of 1000 claimed on /latest_producer_id_block.
        self.producer_id_manager: ProducerIdManager | None = None
        self.controller: Controller | None = None
        self.sender = RpcControllerSender(
            self.broker_id,
            config.peer_address,
            listener_name=self.listener_name,
            security=self.peer_security,
        )
        self._tasks: list[asyncio.Task[None]] = []
        self._build_parts(config, replica_manager, metadata)
        #: The registration (broker epoch) whose first UpdateMetadata was checked for logs of
        #: unknown topics (``tidelog.server.replica.stray_replicas`` rule 2).
        self._unknown_logs_checked_for = -1
        replica_manager.alter_partition_sink = self.propose
        replica_manager.partition_known = lambda tp: tp in metadata.partitions
        replica_manager.broker_rack = metadata.rack_on
        replica_manager.log_dir_failure_sink = self.log_dirs.on_log_dir_offline
        replica_manager.log_dir_recovery_sink = self.log_dirs.on_log_dir_online

    def _build_parts(
        self, config: BrokerConfig, replica_manager: ReplicaManager, metadata: ClusterMetadataCache
    ) -> None:
        """The node's parts, each given the collaborators it uses (the ZooKeeper client, the
        broker epoch and the controller as getters: they change over the node's life)."""
        self.controller_connection = ControllerConnection(
            broker_id=self.broker_id,
            metadata=metadata,
            zookeeper=lambda: self.zk,
            peer_address=config.peer_address,
            listener_name=self.listener_name,
            security=self.peer_security,
        )
        self.alter_partitions = AlterPartitionManager(
            replica_manager=replica_manager,
            # Looked up at each call, so that a test can stand in for the controller.
            send=lambda proposal: self._send_alter(proposal),  # noqa: PLW0108
            zookeeper=lambda: self.zk,
            background=self.background,
            lag_ms=config.get_int("replica.lag.time.max.ms"),
        )
        self.topic_configs = TopicConfigs(
            config=config,
            metadata=metadata,
            zookeeper=lambda: self.zk,
            apply=replica_manager.update_topic_config,
            background=self.background,
        )
        self.log_dirs = LogDirReporter(
            broker_id=self.broker_id,
            replica_manager=replica_manager,
            fetchers=self.fetchers,
            metadata=metadata,
            zookeeper=lambda: self.zk,
            broker_epoch=lambda: self.broker_epoch,
        )
        self.shutdown = ControlledShutdown(
            broker_id=self.broker_id,
            replica_manager=replica_manager,
            metadata=metadata,
            connection=self.controller_connection,
            controller=lambda: self.controller,
            zookeeper=lambda: self.zk,
            broker_epoch=lambda: self.broker_epoch,
        )

    # -- lifecycle ----------------------------------------------------------------------

    async def connect(self) -> None:
        """Open the ZooKeeper session (before the listener opens: no ZooKeeper, no broker)."""
        self.zk = await open_session(self.config)
        self.metadata.cluster_id = await self.zk.get_or_create_cluster_id()
        self.producer_id_manager = ProducerIdManager(
            self.broker_id, self.zk.producer_id_block_store()
        )

    async def generate_producer_id(self) -> int:
        """A producer id never handed out before by any broker of the cluster (Kafka's
        ZkProducerIdManager): from the current block, claiming the next one from ZooKeeper
        (compare-and-set) when it is used up. Raises ZkError when ZooKeeper cannot be reached."""
        assert self.producer_id_manager is not None
        return await asyncio.to_thread(self.producer_id_manager.generate_producer_id)

    async def start(self, bound_ports: Mapping[str, int]) -> None:
        """Register every advertised listener (they are up: ``bound_ports`` are the bound
        ports by listener name, for advertised port 0) and start competing for the
        controller seat."""
        assert self.zk is not None
        registration = broker_registration(self.broker_id, self.config, bound_ports)
        self.broker_epoch = await self.zk.register_broker(registration)
        log.info("broker %d registered, broker epoch %d", self.broker_id, self.broker_epoch)
        self.readiness.registered(self.broker_epoch)
        # After a session expiry the registration is redone with a new czxid: requests to
        # the controller (AlterPartition, ControlledShutdown) must carry the new broker
        # epoch, or the controller answers every one with STALE_BROKER_EPOCH (a leader
        # could never change its ISR again).
        self.zk.add_session_listener(self._on_session_event)
        self.controller = Controller(
            self.zk,
            self.broker_id,
            self.sender,
            unclean_leader_election_enable=self.config.get_bool("unclean.leader.election.enable"),
            auto_leader_rebalance_enable=self.config.get_bool("auto.leader.rebalance.enable"),
        )
        await self.controller.start()
        loop = asyncio.get_running_loop()
        self._tasks.append(loop.create_task(self.alter_partitions.shrink_loop()))
        # Topic config changes made through any broker (Kafka's config change notifications).
        await self.topic_configs.watch(self.zk)
        self._tasks.append(loop.create_task(self.topic_configs.changes_loop()))
        self._tasks.append(loop.create_task(self._log_dir_report_loop()))

    def _on_session_event(self, event: SessionEvent, broker_epoch: int | None) -> None:
        if event is SessionEvent.EXPIRED:
            # Our registration is gone: until the controller has seen the new one and sent
            # us its view, our metadata may be stale (readiness rule 3).
            self.readiness.session_expired()
        if event is SessionEvent.REESTABLISHED and broker_epoch is not None:
            log.info("broker %d re-registered, broker epoch %d", self.broker_id, broker_epoch)
            self.broker_epoch = broker_epoch
            self.readiness.registered(broker_epoch)
            if self.replica_manager.offline_log_dirs:
                # The controller takes the new incarnation for a fresh start: report again.
                self.log_dirs.report_again()

    async def _log_dir_report_loop(self) -> None:
        await self.log_dirs.report_loop()

    async def withdraw_candidacy(self) -> None:
        """At the start of a shutdown, a broker that is not the active controller stops
        competing for the seat: elected now, it would load every partition state and elect
        leaders among brokers that are all stopping (with three brokers of 5,000 replicas
        each stopped at once, ~10 s spent writing leader epochs for 4,260 partitions). The
        active controller stays until ``stop``: it answers the controlled shutdowns."""
        if self.controller is not None and not self.controller.is_active:
            await _bounded("the controller candidate", self.controller.stop())

    async def controlled_shutdown(self, timeout_s: float = CONTROLLED_SHUTDOWN_TIMEOUT_S) -> None:
        """Rule 12: ask the controller to move our leaderships away, bounded in time."""
        await self.shutdown.run(timeout_s)

    async def stop(self) -> None:
        """Stop fetching, leave the controller race, close the session. Each step is
        bounded, so a stuck peer cannot hold the shutdown (the logs are flushed after)."""
        self.topic_configs.stop_watching()
        for task in self._tasks:
            task.cancel()
        for task in list(self.background):
            task.cancel()
        await _bounded("the fetchers", self.fetchers.stop())
        if self.controller is not None:
            await _bounded("the controller", self.controller.stop())
        await _bounded("the control channels", self.sender.close())
        await _bounded("the client", self.client.close())
        await _bounded("the propagation client", self.propagation.close())
        if self.controller_connection.conn is not None:
            await _bounded("the controller connection", self.controller_connection.close())
        if self.zk is not None:
            await _bounded("the ZooKeeper session", self.zk.close())

    # -- control-plane handlers (called by ClusterApis) ----------------------------------

    def _fenced(self, controller_epoch: int) -> bool:
        """Rule 8: a request from a controller older than one we heard from is ignored."""
        if controller_epoch < self.metadata.controller_epoch:
            log.info(
                "ignoring a control request of controller epoch %d (current %d)",
                controller_epoch,
                self.metadata.controller_epoch,
            )
            return True
        if (
            controller_epoch > self.metadata.controller_epoch
            and self.replica_manager.offline_log_dirs
        ):
            # A new controller knows nothing of our offline log dir: report it again.
            self.log_dirs.report_again()
        self.metadata.controller_epoch = controller_epoch
        return False

    def _stale_broker_epoch(self, request: control.ControlMessage) -> bool:
        """KIP-380: a control request addressed to an earlier incarnation of this broker
        (its broker epoch older than our registration's) is refused unapplied. The
        controller's queue to a killed broker goes on delivering to the process started
        after it on the same port; applied, its partial UpdateMetadata would describe a
        topic by the partitions it named, and its LeaderAndIsr would make this broker leader
        at an old epoch. -1 (not sent) is not stale. These requests wait for the
        registration (``tidelog.server.cluster.readiness`` rule 4), so our own epoch is
        known here."""
        epoch = int(getattr(request, "broker_epoch", -1))
        if 0 <= epoch < self.broker_epoch:
            log.info(
                "ignoring %s for broker epoch %d (ours is %d)",
                type(request).__name__,
                epoch,
                self.broker_epoch,
            )
            return True
        return False

    async def handle_leader_and_isr(
        self, request: control.LeaderAndIsrRequest
    ) -> control.LeaderAndIsrResponse:
        if self._stale_broker_epoch(request):
            return control.LeaderAndIsrResponse(error_code=ErrorCode.STALE_BROKER_EPOCH)
        if self._fenced(request.controller_epoch):
            return control.LeaderAndIsrResponse(error_code=ErrorCode.STALE_CONTROLLER_EPOCH)
        topic_ids = {e.topic_name: e.topic_id for e in request.topic_ids}
        leaders = {b.broker_id: b for b in request.live_leaders}
        # One line per partition for small requests (what the fault harness' readers want);
        # a summary for large ones: at INFO, 1,000 lines cost a loaded broker about a second.
        level = (
            logging.INFO
            if len(request.partition_states) <= _PER_PARTITION_LOG_LIMIT
            else logging.DEBUG
        )
        errors: list[control.PartitionError] = []
        applied: list[TopicPartition] = []
        became: list[_Became] = []
        for ps in request.partition_states:
            tp = TopicPartition(ps.topic_name, ps.partition_index)
            error, role = await self._apply_partition_state(
                tp, ps, topic_ids.get(ps.topic_name), leaders, level
            )
            errors.append(_perror(tp, error))
            became.append(role)
            if error == ErrorCode.NONE:
                applied.append(tp)
        # Once for all partitions: a parked follower fetch spans all of them (purgatory).
        rm = self.replica_manager
        rm.produce_purgatory.check_and_complete_all(applied)
        rm.fetch_purgatory.check_and_complete_all(applied)
        if level == logging.DEBUG:
            log.info(
                "LeaderAndIsr (controller epoch %d, %d partitions): leader of %d, "
                "new follower of %d, %d errors",
                request.controller_epoch,
                len(request.partition_states),
                became.count("leader"),
                became.count("follower"),
                sum(1 for e in errors if e.error_code != ErrorCode.NONE),
            )
        return control.LeaderAndIsrResponse(partition_errors=tuple(errors))

    async def _apply_partition_state(
        self,
        tp: TopicPartition,
        ps: control.LeaderAndIsrPartitionState,
        topic_id: uuid.UUID | None,
        leaders: Mapping[int, control.LeaderAndIsrLiveLeader],
        level: int,
    ) -> tuple[ErrorCode, _Became]:
        """Make this broker ``tp``'s leader or a follower as ``ps`` says (rule 10): the
        partition's error (FENCED_LEADER_EPOCH for an epoch older than the one hosted) and
        what this broker became."""
        state = CachedPartition(ps.leader, ps.leader_epoch, ps.isr, ps.replicas, ps.partition_epoch)
        if tp not in self.metadata.partitions or tp.topic not in self.metadata.topics:
            self.metadata.host_partition(tp, topic_id, state)
        config = await self.topic_configs.effective(tp.topic)
        if topic_id is None:
            info = self.metadata.topics.get(tp.topic)
            topic_id = info.topic_id if info is not None else uuid.UUID(int=0)
        hosted = self.replica_manager.partitions.get(tp)
        if hosted is not None and ps.leader_epoch < hosted.partition.leader_epoch:
            return ErrorCode.FENCED_LEADER_EPOCH, None
        try:
            if ps.leader == self.broker_id:
                self._become_leader(
                    tp, ps, topic_id=topic_id, config=config, hosted=hosted, level=level
                )
                became: _Became = "leader"
            else:
                leader = leaders.get(ps.leader)
                fetching = self._become_follower(
                    tp, ps, topic_id=topic_id, config=config, leader=leader, level=level
                )
                became = "follower" if fetching else None
        except KafkaError as exc:
            log.error("%s: cannot host the replica: %s", tp, exc)
            return exc.code, None
        except OSError as exc:
            # Creating the log failed on a full or failing log dir (Kafka answers
            # KAFKA_STORAGE_ERROR for the partition and takes the dir offline).
            log.error("%s: cannot host the replica: %s", tp, exc)
            self.replica_manager.on_storage_error(tp, exc)
            return ErrorCode.KAFKA_STORAGE_ERROR, None
        self.metadata.applied_leader_and_isr(tp, state)
        return ErrorCode.NONE, became

    def _become_leader(
        self,
        tp: TopicPartition,
        ps: control.LeaderAndIsrPartitionState,
        *,
        topic_id: uuid.UUID,
        config: Mapping[str, object],
        hosted: HostedPartition | None,
        level: int,
    ) -> None:
        """Stop following ``tp`` and lead it from our high watermark (the checkpointed one
        when it was not hosted yet)."""
        self.fetchers.remove(tp)
        hw = (
            hosted.partition.high_watermark
            if hosted is not None
            else self.checkpointed_hw.get(tp, 0)
        )
        self.replica_manager.make_leader(
            tp,
            topic_id,
            config,
            hw,
            leader_epoch=ps.leader_epoch,
            partition_epoch=ps.partition_epoch,
            replicas=[BrokerId(r) for r in ps.replicas],
            isr=[BrokerId(r) for r in ps.isr],
        )
        log.log(
            level,
            "%s: leader, epoch %d, ISR %s",
            tp,
            ps.leader_epoch,
            list(ps.isr),
            extra={"topic_partition": tp, "leader_epoch": ps.leader_epoch},
        )

    def _become_follower(
        self,
        tp: TopicPartition,
        ps: control.LeaderAndIsrPartitionState,
        *,
        topic_id: uuid.UUID,
        config: Mapping[str, object],
        leader: control.LeaderAndIsrLiveLeader | None,
        level: int,
    ) -> bool:
        """Follow ``tp`` from ``ps.leader``; True when a fetch from it (re)started. Nothing
        is fetched without a live leader, or into an offline log dir (fetching resumes once
        the dir has room, rule 7)."""
        rm = self.replica_manager
        changed = rm.make_follower(
            tp,
            topic_id,
            config,
            leader=BrokerId(ps.leader),
            leader_epoch=ps.leader_epoch,
            partition_epoch=ps.partition_epoch,
            replicas=[BrokerId(r) for r in ps.replicas],
            isr=[BrokerId(r) for r in ps.isr],
            high_watermark=self.checkpointed_hw.get(tp, 0),
        )
        if ps.leader < 0 or leader is None or rm.is_offline(tp):
            self.fetchers.remove(tp)
            return False
        if not changed and self._is_fetching(tp):
            return False
        self.fetchers.add(tp, ps.leader, leader.host_name, leader.port, ps.leader_epoch)
        log.log(
            level,
            "%s: follower of %d, epoch %d",
            tp,
            ps.leader,
            ps.leader_epoch,
            extra={"topic_partition": tp, "leader_epoch": ps.leader_epoch},
        )
        return True

    def _is_fetching(self, tp: TopicPartition) -> bool:
        return self.fetchers.is_fetching(tp)

    async def handle_update_metadata(
        self, request: control.UpdateMetadataRequest
    ) -> control.UpdateMetadataResponse:
        if self._stale_broker_epoch(request):
            return control.UpdateMetadataResponse(error_code=ErrorCode.STALE_BROKER_EPOCH)
        if self._fenced(request.controller_epoch):
            return control.UpdateMetadataResponse(error_code=ErrorCode.STALE_CONTROLLER_EPOCH)
        self.metadata.controller_id = request.controller_id
        self.metadata.brokers = {
            b.id: CachedBroker(
                b.id, b.host, b.port, b.rack, {e.listener: (e.host, e.port) for e in b.endpoints}
            )
            for b in request.live_brokers
        }
        topic_ids = {e.topic_name: e.topic_id for e in request.topic_ids}
        new_topics = set()
        listed: dict[TopicPartition, control.UpdateMetadataPartitionState] = {}
        for ps in request.partition_states:
            tp = TopicPartition(ps.topic_name, ps.partition_index)
            if ps.leader == LEADER_DURING_DELETE:
                self.metadata.remove_topic(tp.topic)
                self.topic_configs.forget(tp.topic)
                continue
            listed[tp] = ps
            if ps.topic_name not in self.metadata.topics:
                new_topics.add(ps.topic_name)
            self.metadata.update_partition(
                tp,
                topic_ids.get(ps.topic_name),
                CachedPartition(
                    ps.leader, ps.leader_epoch, ps.isr, ps.replicas, ps.partition_epoch
                ),
            )
        for topic in sorted(new_topics):
            await self.topic_configs.effective(topic)
        # A whole view for this registration: clients may be answered (readiness rule 2).
        self.readiness.applied_update_metadata(request.broker_epoch)
        self._delete_stray_logs(listed)
        if self._unknown_logs_checked_for != request.broker_epoch:
            self._unknown_logs_checked_for = request.broker_epoch
            unknown = unknown_topic_logs(
                self.replica_manager.log_manager.all_logs(), self.metadata.topics
            )
            if unknown:
                log.warning("logs of topics the controller does not know: %s", unknown[:10])
        return control.UpdateMetadataResponse()

    def _delete_stray_logs(
        self, listed: Mapping[TopicPartition, control.UpdateMetadataPartitionState]
    ) -> None:
        """``tidelog.server.replica.stray_replicas`` rule 1: replicas this UpdateMetadata says
        this broker no longer has, whose StopReplica(delete) it never got."""
        rm = self.replica_manager
        logs = rm.log_manager
        strays = stray_logs(
            listed,
            lambda tp: tp in rm.partitions or logs.get_log(tp) is not None,
            self.broker_id,
        )
        if not strays:
            return
        log.warning(
            "deleting the stray replicas %s: this broker is not one of their replicas",
            ", ".join(map(str, strays[:10])),
        )
        self._delete_replicas(strays)

    def _delete_replicas(self, tps: Sequence[TopicPartition]) -> None:
        """Stop fetching ``tps`` and delete their replicas (partition state and log):
        StopReplica(delete) and the stray rule. Only the replicas: the topic may live on (a
        reassignment moved them away); a deleted topic leaves the metadata cache with the
        UpdateMetadata that follows (leader LEADER_DURING_DELETE), on the same channel."""
        for tp in tps:
            self.fetchers.remove(tp)
        self.replica_manager.delete_partitions(tps)

    def handle_stop_replica(
        self, request: control.StopReplicaRequest
    ) -> control.StopReplicaResponse:
        if self._stale_broker_epoch(request):
            return control.StopReplicaResponse(error_code=ErrorCode.STALE_BROKER_EPOCH)
        if self._fenced(request.controller_epoch):
            return control.StopReplicaResponse(error_code=ErrorCode.STALE_CONTROLLER_EPOCH)
        deleted: list[TopicPartition] = []
        errors = []
        for p in request.partitions:
            tp = TopicPartition(p.topic_name, p.partition_index)
            if p.delete_partition:
                deleted.append(tp)
            else:
                self.fetchers.remove(tp)
            errors.append(_perror(tp, ErrorCode.NONE))
        if deleted:
            self._delete_replicas(deleted)
            log.info("deleted the replicas %s", ", ".join(map(str, deleted[:10])))
        return control.StopReplicaResponse(partition_errors=tuple(errors))

    # -- ISR changes (rules 4, 5) --------------------------------------------------------

    def propose(self, proposal: AlterPartitionProposal) -> None:
        """Take a leader's ISR change to the controller (``alter_partition``)."""
        self.alter_partitions.propose(proposal)

    async def _alter_partition(self, proposal: AlterPartitionProposal) -> None:
        await self.alter_partitions.alter_partition(proposal)

    async def _send_alter(
        self, proposal: AlterPartitionProposal
    ) -> tuple[ErrorCode, LeaderAndIsr | None]:
        info = self.metadata.topics.get(proposal.topic_partition.topic)
        return await send_alter_partition(
            proposal,
            broker_id=self.broker_id,
            broker_epoch=self.broker_epoch,
            controller=self.controller,
            topic_id=None if info is None else info.topic_id,
            connect=self._connection_to_controller,
        )

    async def _connection_to_controller(self, *, ask_zookeeper: bool = False) -> BrokerConnection:
        """A connection to the controller (``controller_connection``); ``NoControllerError``
        when none is elected."""
        return await self.controller_connection.get(ask_zookeeper=ask_zookeeper)

    # -- admin through ZooKeeper (CreateTopics, CreatePartitions, DeleteTopics) ----------

    async def create_topic(
        self,
        name: str,
        *,
        num_partitions: int,
        replication_factor: int,
        config: Mapping[str, str],
        assignment: Mapping[int, Sequence[BrokerId]] | None,
        validate_only: bool,
    ) -> tuple[ErrorCode, str | None, uuid.UUID | None]:
        assert self.zk is not None
        result = await create_topic(
            self.zk,
            name,
            num_partitions=num_partitions,
            replication_factor=replication_factor,
            config=config,
            assignment=assignment,
            validate_only=validate_only,
        )
        return result.error, result.message, result.topic_id

    async def create_partitions(
        self,
        topic: str,
        count: int,
        assignment: Sequence[Sequence[BrokerId]] | None,
        validate_only: bool,
    ) -> tuple[ErrorCode, str | None]:
        assert self.zk is not None
        result = await create_partitions(
            self.zk, topic, count=count, assignment=assignment, validate_only=validate_only
        )
        return result.error, result.message

    async def delete_topic(self, topic: str) -> None:
        assert self.zk is not None
        await self.zk.mark_topic_for_deletion(topic)

    async def wait_for_leaders(self, topics: Iterable[str], timeout_s: float) -> None:
        """Until every partition of ``topics`` has a leader in this broker's cache (or the
        time is up), so a client that created a topic can use it at once."""
        wanted = list(topics)
        deadline = asyncio.get_running_loop().time() + timeout_s
        while asyncio.get_running_loop().time() < deadline:
            ok = True
            for topic in wanted:
                info = self.metadata.described(topic)
                if info is None or any(
                    (p := self.metadata.partitions.get(TopicPartition(topic, i))) is None
                    or p.leader < 0
                    for i in range(info.num_partitions)
                ):
                    ok = False
                    break
            if ok:
                return
            await asyncio.sleep(0.05)


async def _bounded(what: str, step: Awaitable[None], timeout_s: float = 5.0) -> None:
    started = asyncio.get_running_loop().time()
    try:
        await wait_for(step, timeout_s)
    except TimeoutError:
        log.warning("stopping %s took more than %.0f s; going on", what, timeout_s)
    except Exception:
        log.exception("stopping %s failed", what)
    else:
        took = asyncio.get_running_loop().time() - started
        log.log(logging.INFO if took >= 1.0 else logging.DEBUG, "stopped %s in %.1f s", what, took)


def _perror(tp: TopicPartition, error: ErrorCode) -> control.PartitionError:
    return control.PartitionError(
        topic_name=tp.topic, partition_index=tp.partition, error_code=int(error)
    )


__all__ = ["ClusterNode"]
