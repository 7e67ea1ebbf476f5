"""The metadata backend of a broker that is its own controller (``zookeeper.connect``
empty): the topic image is ``MetadataStore``'s, every partition is led here.

Nothing here waits: the coroutines of ``MetadataBackend`` finish at once, so a handler run
eagerly answers before the next request of its connection is dispatched. CreateTopics and
CreatePartitions check here what a cluster's controller checks: a valid, new name, at
least one partition, replication factor 1, assignments naming this broker only.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final

from tidelog.errors import ErrorCode, KafkaError
from tidelog.model import BrokerId, TopicPartition
from tidelog.protocol.responses import NodeEndpoint
from tidelog.security.client_config import PLAINTEXT, ClientSecurity
from tidelog.server.config.broker_config import BrokerConfig, topic_name_error
from tidelog.server.config.topic_config import effective_topic_config
from tidelog.server.metadata.backend import FollowerFetcher, Outcome, RequestGate
from tidelog.server.metadata.features import FinalizedFeatures
from tidelog.server.metadata.local import MetadataStore, TopicInfo
from tidelog.server.replica.manager import ReplicaManager

if TYPE_CHECKING:
    from tidelog.controller.controller import Controller
    from tidelog.zk import ZkClient

log = logging.getLogger(__name__)


#: A lone broker's finalized features: none, at epoch 0 (``features`` rule 2).
LONE_FEATURES: Final = FinalizedFeatures(0, {})


class LocalBackend:
    """``MetadataBackend`` of a lone broker, over its ``MetadataStore``."""

    def __init__(
        self, config: BrokerConfig, store: MetadataStore, replica_manager: ReplicaManager
    ) -> None:
        self.config = config
        self.store = store
        self.replica_manager = replica_manager
        self.broker_id = config.broker_id

    # --- reads ------------------------------------------------------------------------------

    @property
    def topics(self) -> Mapping[str, TopicInfo]:
        return self.store.topics

    @property
    def cluster_id(self) -> str:
        return self.store.cluster_id

    def by_id(self, topic_id: uuid.UUID) -> TopicInfo | None:
        return self.store.by_id(topic_id)

    def controller_id(self) -> int:
        return self.broker_id

    def live_broker_ids(self) -> list[int]:
        return [self.broker_id]

    def brokers(self, own_address: tuple[str, int]) -> list[dict[str, Any]]:
        return [
            {
                "node_id": self.broker_id,
                "host": own_address[0],
                "port": own_address[1],
                "rack": self.config.get_str("broker.rack") or None,
            }
        ]

    def partition_metadata(self, info: TopicInfo) -> list[dict[str, Any]]:
        partitions = []
        for p in range(info.num_partitions):
            hosted = self.replica_manager.partitions.get(TopicPartition(info.name, p))
            epoch = hosted.partition.leader_epoch if hosted is not None else -1
            partitions.append(
                {
                    "error_code": ErrorCode.NONE,
                    "partition_index": p,
                    "leader_id": self.broker_id,
                    "leader_epoch": epoch,
                    "replica_nodes": [self.broker_id],
                    "isr_nodes": [self.broker_id],
                    "offline_replicas": [],
                }
            )
        return partitions

    def partition_leader(
        self, tp: TopicPartition, own_address: tuple[str, int] | None = None
    ) -> tuple[int, str, int] | None:
        if tp not in self.replica_manager.partitions:
            return None
        if own_address is None:
            endpoint = self.config.advertised_listener
            own_address = endpoint.host, endpoint.port
        return self.broker_id, own_address[0], own_address[1]

    def finalized_features(self) -> FinalizedFeatures:
        # Its own controller, which finalized nothing: the empty agreement's epoch 0.
        return LONE_FEATURES

    async def write_finalized_features(self, levels: Mapping[str, int], epoch: int) -> None:
        raise KafkaError(ErrorCode.FEATURE_UPDATE_FAILED, "a lone broker finalizes no features")

    def current_leader(
        self, tp: TopicPartition, own_address: tuple[str, int]
    ) -> tuple[int, int, NodeEndpoint | None]:
        hosted = self.replica_manager.partitions.get(tp)
        if hosted is None:
            return -1, -1, None
        rack = self.config.get_str("broker.rack") or None
        endpoint = NodeEndpoint(self.broker_id, own_address[0], own_address[1], rack)
        return self.broker_id, hosted.partition.leader_epoch, endpoint

    @property
    def peer_security(self) -> ClientSecurity:
        return PLAINTEXT

    def controller(self) -> Controller | None:
        return None

    def is_active_controller(self) -> bool:
        return True

    def fetchers(self) -> Iterable[FollowerFetcher]:
        return ()

    # --- topic admin --------------------------------------------------------------------------

    def topic_config(self, info: TopicInfo) -> dict[str, object]:
        return effective_topic_config(self.config, info.configs)

    def create_topic_now(
        self, name: str, num_partitions: int, overrides: Mapping[str, object]
    ) -> TopicInfo:
        """Create a topic and host its partitions (the caller validated everything)."""
        info = self.store.create_topic(name, num_partitions, overrides, uuid.uuid4())
        config = self.topic_config(info)
        for p in range(num_partitions):
            self.replica_manager.make_leader(TopicPartition(name, p), info.topic_id, config)
        log.info("created topic %s with %d partitions", name, num_partitions)
        return info

    def load_topics(self, high_watermarks: Mapping[TopicPartition, int]) -> None:
        """At start-up: host every known topic's partitions (logs already recovered)."""
        for info in self.store.topics.values():
            config = self.topic_config(info)
            for p in range(info.num_partitions):
                tp = TopicPartition(info.name, p)
                try:
                    self.replica_manager.make_leader(
                        tp, info.topic_id, config, high_watermarks.get(tp)
                    )
                except KafkaError as exc:
                    # e.g. CorruptLogError: flushed data failed validation. The partition
                    # stays offline (clients get UNKNOWN_TOPIC_OR_PARTITION); others serve.
                    log.error("partition %s is offline: %s", tp, exc)

    def _assignment_problem(self, assignments: Sequence[Sequence[int]] | None) -> Outcome | None:
        if assignments is not None and any(list(a) != [self.broker_id] for a in assignments):
            return (
                ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                f"Replica assignments must name broker {self.broker_id} only",
            )
        return None

    def check_new_topic(
        self,
        name: str,
        num_partitions: int,
        replication_factor: int,
        assignments: Sequence[Sequence[int]] | None,
    ) -> Outcome:
        if problem := topic_name_error(name):
            return ErrorCode.INVALID_TOPIC_EXCEPTION, problem
        if name in self.store.topics:
            return ErrorCode.TOPIC_ALREADY_EXISTS, f"Topic '{name}' already exists."
        if num_partitions <= 0:
            return ErrorCode.INVALID_PARTITIONS, "Number of partitions must be > 0"
        if replication_factor <= 0 or replication_factor > 1:
            return (
                ErrorCode.INVALID_REPLICATION_FACTOR,
                f"Replication factor: {replication_factor} larger than available brokers: 1.",
            )
        return self._assignment_problem(assignments or None) or (ErrorCode.NONE, None)

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
        if validate_only:
            return ErrorCode.NONE, None, None
        return ErrorCode.NONE, None, self.create_topic_now(name, num_partitions, overrides).topic_id

    async def wait_for_leaders(self, topics: Sequence[str], timeout_s: float) -> None:
        """Created topics are led here at once."""

    async def auto_create_topics(self, names: Sequence[str]) -> None:
        for name in names:
            if name not in self.store.topics:
                self.create_topic_now(name, self.config.get_int("num.partitions"), {})

    async def delete_topic(self, name: str) -> None:
        info = self.store.topics[name]
        self.store.delete_topic(name)
        self.replica_manager.delete_partitions(
            [TopicPartition(name, p) for p in range(info.num_partitions)]
        )
        log.info("deleted topic %s", name)

    async def wait_for_deletions(
        self, topic_ids: Mapping[str, uuid.UUID], timeout_s: float
    ) -> set[str]:
        """Deleted topics are gone from the store at once."""
        return set()

    async def create_partitions(
        self,
        name: str,
        count: int,
        assignment: Sequence[Sequence[BrokerId]] | None,
        validate_only: bool,
    ) -> Outcome:
        info = self.store.topics.get(name)
        if info is None:
            return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"The topic '{name}' does not exist."
        if count <= info.num_partitions:
            return (
                ErrorCode.INVALID_PARTITIONS,
                f"Topic currently has {info.num_partitions} partitions, which is higher "
                f"than or equal to the requested {count}.",
            )
        if (problem := self._assignment_problem(assignment)) is not None:
            return problem
        if not validate_only:
            config = self.topic_config(info)
            for p in range(info.num_partitions, count):
                self.replica_manager.make_leader(TopicPartition(name, p), info.topic_id, config)
            self.store.set_partitions(name, count)
        return ErrorCode.NONE, None

    async def wait_for_partitions(self, counts: Mapping[str, int], timeout_s: float) -> set[str]:
        """New partitions are led here at once."""
        return set()

    async def set_topic_configs(self, name: str, overrides: Mapping[str, object]) -> None:
        self.store.set_configs(name, overrides)

    async def wait_for_topic_configs(self, name: str, overrides: Mapping[str, object]) -> None:
        """No other broker to wait for."""

    async def wait_for_broker_configs(
        self, here: Callable[[], bool], default: Mapping[str, str] | None
    ) -> None:
        """A lone broker writes no dynamic broker configs: nothing to wait for."""

    async def allocate_producer_id(self) -> int:
        return self.store.allocate_producer_id()

    def broker_config_changed(self) -> None:
        """Nothing of a lone broker's own reads a broker config."""

    # --- lifecycle: no cluster to join or leave ------------------------------------------------

    @property
    def zk(self) -> ZkClient | None:
        return None

    @property
    def readiness(self) -> RequestGate | None:
        return None

    def is_ready(self) -> bool:
        return True

    async def connect(self) -> None:
        pass

    async def start(self, bound_ports: Mapping[str, int]) -> None:
        pass

    async def withdraw_candidacy(self) -> None:
        pass

    def wants_controlled_shutdown(self) -> bool:
        return False

    async def controlled_shutdown(self) -> None:
        pass

    async def stop(self) -> None:
        pass

    def close_readiness(self) -> None:
        pass


__all__ = ["LocalBackend"]
