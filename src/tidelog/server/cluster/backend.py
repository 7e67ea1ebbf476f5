"""The metadata backend of a broker in a ZooKeeper cluster (``zookeeper.connect`` set),
over ``ClusterNode`` and its ``ClusterMetadataCache``.

Reads come from the cache the controller keeps current (Kafka's MetadataCache): all live
brokers, real leaders, replicas and ISR; LEADER_NOT_AVAILABLE (5) for a partition without
a live leader. Topic admin goes through ZooKeeper (``tidelog.controller``: assignment by
``controller.placement``, rack-aware with ``broker.rack``; RF > live brokers ->
INVALID_REPLICATION_FACTOR, 38), whose checks answer what a lone broker checks itself.
Producer ids come from ZooKeeper-claimed blocks (Kafka's ZkProducerIdManager).
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from tidelog.controller.controller import Controller
from tidelog.errors import ErrorCode, KafkaError
from tidelog.model import BrokerId, TopicPartition
from tidelog.protocol.responses import NodeEndpoint
from tidelog.security.client_config import ClientSecurity
from tidelog.server.cluster.metadata_cache import ClusterMetadataCache
from tidelog.server.cluster.node import ClusterNode
from tidelog.server.cluster.readiness import ReadinessGate
from tidelog.server.config.broker_config import BrokerConfig
from tidelog.server.metadata.backend import FollowerFetcher, Outcome, ProducerIdUnavailableError
from tidelog.server.metadata.features import FinalizedFeatures
from tidelog.server.metadata.local import TopicInfo
from tidelog.server.network.request_context import current_request
from tidelog.storage.producer_id import ProducerIdsExhaustedError
from tidelog.zk import Watch, ZkClient, ZkError
from tidelog.zk.znodes import FEATURE_PATH, ZNodeDecodeError, decode_feature_znode

log = logging.getLogger(__name__)

#: How long Metadata's auto-creation waits for the new topics' leaders.
AUTO_CREATE_WAIT_S = 2.0


class ZkBackend:
    """``MetadataBackend`` of a cluster broker; see the module docstring."""

    def __init__(self, config: BrokerConfig, node: ClusterNode) -> None:
        self.config = config
        self.node = node
        self.cache: ClusterMetadataCache = node.metadata
        #: KIP-584: ``/feature`` as last read (``_on_feature_znode``).
        self._features = FinalizedFeatures()
        self._feature_watch: Watch | None = None

    # --- reads ------------------------------------------------------------------------------

    @property
    def topics(self) -> Mapping[str, TopicInfo]:
        return self.cache.topics

    @property
    def cluster_id(self) -> str:
        return self.cache.cluster_id

    def by_id(self, topic_id: uuid.UUID) -> TopicInfo | None:
        return self.cache.by_id(topic_id)

    def controller_id(self) -> int:
        return self.cache.controller_id

    def live_broker_ids(self) -> list[int]:
        return sorted(self.cache.brokers)

    def finalized_features(self) -> FinalizedFeatures:
        return self._features

    async def write_finalized_features(self, levels: Mapping[str, int], epoch: int) -> None:
        zk = self.node.zk
        if zk is None:
            raise KafkaError(ErrorCode.FEATURE_UPDATE_FAILED, "not connected to ZooKeeper")
        try:
            await zk.set_feature_znode(levels, epoch)
        except ZkError as exc:
            raise KafkaError(ErrorCode.FEATURE_UPDATE_FAILED, str(exc)) from None

    def _on_feature_znode(self, data: bytes | None, version: int) -> None:
        if data is None:
            self._features = FinalizedFeatures()
            return
        try:
            self._features = FinalizedFeatures(version, decode_feature_znode(data))
        except ZNodeDecodeError as exc:
            log.error("finalized features kept as they were: %s", exc)

    def brokers(self, own_address: tuple[str, int]) -> list[dict[str, Any]]:
        """The live brokers with an endpoint on the request's listener, at that endpoint
        (Kafka's MetadataCache.getAliveBrokerNodes(listenerName))."""
        listener = current_request().listener_name
        brokers = []
        for b in sorted(self.cache.brokers.values(), key=lambda b: b.broker_id):
            address = b.address_on(listener) if listener else (b.host, b.port)
            if address is not None:
                brokers.append(
                    {"node_id": b.broker_id, "host": address[0], "port": address[1], "rack": b.rack}
                )
        return brokers

    def partition_metadata(self, info: TopicInfo) -> list[dict[str, Any]]:
        partitions = []
        live = self.cache.brokers
        for p in range(info.num_partitions):
            state = self.cache.partitions.get(TopicPartition(info.name, p))
            if state is None:
                partitions.append(
                    {
                        "error_code": ErrorCode.LEADER_NOT_AVAILABLE,
                        "partition_index": p,
                        "leader_id": -1,
                        "leader_epoch": -1,
                        "replica_nodes": [],
                        "isr_nodes": [],
                        "offline_replicas": [],
                    }
                )
                continue
            leader = state.leader if state.leader in live else -1
            partitions.append(
                {
                    "error_code": ErrorCode.NONE if leader >= 0 else ErrorCode.LEADER_NOT_AVAILABLE,
                    "partition_index": p,
                    "leader_id": leader,
                    "leader_epoch": state.leader_epoch,
                    "replica_nodes": list(state.replicas),
                    "isr_nodes": list(state.isr),
                    "offline_replicas": [r for r in state.replicas if r not in live],
                }
            )
        return partitions

    def partition_leader(
        self, tp: TopicPartition, own_address: tuple[str, int] | None = None
    ) -> tuple[int, str, int] | None:
        """The cached leader, at its registered endpoint (``own_address`` given: on the
        current request's listener; None when the leader has no such listener)."""
        state = self.cache.partitions.get(tp)
        if state is None or state.leader < 0:
            return None
        broker = self.cache.brokers.get(state.leader)
        if broker is None:
            return None
        if own_address is None:
            return broker.broker_id, broker.host, broker.port
        address = broker.address_on(current_request().listener_name)
        if address is None:
            return None
        return broker.broker_id, address[0], address[1]

    def current_leader(
        self, tp: TopicPartition, own_address: tuple[str, int]
    ) -> tuple[int, int, NodeEndpoint | None]:
        state = self.cache.partitions.get(tp)
        if state is None:
            return -1, -1, None
        broker = self.cache.brokers.get(state.leader)
        address = None if broker is None else broker.address_on(current_request().listener_name)
        if broker is None or address is None:
            return state.leader, state.leader_epoch, None
        return (
            state.leader,
            state.leader_epoch,
            NodeEndpoint(broker.broker_id, address[0], address[1], broker.rack),
        )

    @property
    def peer_security(self) -> ClientSecurity:
        return self.node.peer_security

    def controller(self) -> Controller | None:
        return self.node.controller

    def is_active_controller(self) -> bool:
        controller = self.node.controller
        return controller is not None and controller.is_active

    def fetchers(self) -> Iterable[FollowerFetcher]:
        # Looked up at each call: the fetchers' dict is the manager's to replace.
        return self.node.fetchers.fetchers.values()

    # --- topic admin through ZooKeeper --------------------------------------------------------

    def check_new_topic(
        self,
        name: str,
        num_partitions: int,
        replication_factor: int,
        assignments: Sequence[Sequence[int]] | None,
    ) -> Outcome:
        """The controller checks name, existence, counts and assignments (create_topic)."""
        return ErrorCode.NONE, None

    async def create_topic(
        self,
        name: str,
        *,
        num_partitions: int,
        replication_factor: int,
        raw_configs: Mapping[str, str],
        overrides: Mapping[str, object],
        assignment: Mapping[int, Sequence[BrokerId]] | None,
        validate_only: bool,
    ) -> tuple[ErrorCode, str | None, uuid.UUID | None]:
        return await self.node.create_topic(
            name,
            num_partitions=num_partitions,
            replication_factor=replication_factor,
            config=raw_configs,
            assignment=assignment,
            validate_only=validate_only,
        )

    async def wait_for_leaders(self, topics: Sequence[str], timeout_s: float) -> None:
        await self.node.wait_for_leaders(topics, timeout_s)

    async def auto_create_topics(self, names: Sequence[str]) -> None:
        for name in names:
            error, message, _ = await self.node.create_topic(
                name,
                num_partitions=self.config.get_int("num.partitions"),
                replication_factor=self.config.get_int("default.replication.factor"),
                config={},
                assignment=None,
                validate_only=False,
            )
            if error not in (ErrorCode.NONE, ErrorCode.TOPIC_ALREADY_EXISTS):
                log.info("auto-creating topic %s failed: %s (%s)", name, error.name, message)
        await self.node.wait_for_leaders(names, AUTO_CREATE_WAIT_S)

    async def delete_topic(self, name: str) -> None:
        await self.node.delete_topic(name)

    async def wait_for_deletions(
        self, topic_ids: Mapping[str, uuid.UUID], timeout_s: float
    ) -> set[str]:
        return await self.node.propagation.topics_gone(topic_ids, timeout_s)

    async def create_partitions(
        self,
        name: str,
        count: int,
        assignment: Sequence[Sequence[BrokerId]] | None,
        validate_only: bool,
    ) -> Outcome:
        return await self.node.create_partitions(name, count, assignment, validate_only)

    async def wait_for_partitions(self, counts: Mapping[str, int], timeout_s: float) -> set[str]:
        return await self.node.propagation.partitions_led(counts, timeout_s)

    async def set_topic_configs(self, name: str, overrides: Mapping[str, object]) -> None:
        """ZooKeeper first (Kafka's AdminZkClient.changeTopicConfig, before the answer),
        then this broker's cache."""
        await self.node.topic_configs.write(name, overrides)
        if name in self.cache.topics:
            self.cache.set_configs(name, overrides)

    async def wait_for_topic_configs(self, name: str, overrides: Mapping[str, object]) -> None:
        await self.node.propagation.configs_seen(name, overrides)

    async def wait_for_broker_configs(
        self, here: Callable[[], bool], default: Mapping[str, str] | None
    ) -> None:
        await self.node.propagation.broker_configs_seen(here, default)

    async def allocate_producer_id(self) -> int:
        try:
            return await self.node.generate_producer_id()
        except (ZkError, ProducerIdsExhaustedError) as exc:
            raise ProducerIdUnavailableError(str(exc)) from exc

    def broker_config_changed(self) -> None:
        """The controller's default for ``unclean.leader.election.enable`` (read at its
        next election)."""
        if self.node.controller is not None:
            self.node.controller.default_unclean = self.config.get_bool(
                "unclean.leader.election.enable"
            )

    # --- lifecycle: the broker's membership in the cluster ------------------------------------

    @property
    def zk(self) -> ZkClient | None:
        return self.node.zk

    @property
    def readiness(self) -> ReadinessGate | None:
        return self.node.readiness

    def is_ready(self) -> bool:
        return self.node.readiness.is_open

    async def connect(self) -> None:
        await self.node.connect()
        zk = self.node.zk
        assert zk is not None
        await zk.ensure_feature_znode()
        self._feature_watch = await zk.watch_data(FEATURE_PATH, self._on_feature_znode)

    async def start(self, bound_ports: Mapping[str, int]) -> None:
        await self.node.start(bound_ports)

    async def withdraw_candidacy(self) -> None:
        await self.node.withdraw_candidacy()

    def wants_controlled_shutdown(self) -> bool:
        return self.config.get_bool("controlled.shutdown.enable")

    async def controlled_shutdown(self) -> None:
        await self.node.controlled_shutdown()

    async def stop(self) -> None:
        if self._feature_watch is not None:
            self._feature_watch.cancel()
        await self.node.stop()
        log.info("left the cluster")

    def close_readiness(self) -> None:
        self.node.readiness.close()


__all__ = ["ZkBackend"]
