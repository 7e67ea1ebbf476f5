"""Handlers of a broker in a ZooKeeper cluster (``zookeeper.connect`` set).

The data path (Produce, Fetch, ListOffsets, ...) is ``KafkaApis``'s, unchanged: the replica
manager answers NOT_LEADER_OR_FOLLOWER (6) for partitions this broker does not lead. What
differs lives here:

- control plane from the controller: LeaderAndIsr (4), StopReplica (5), UpdateMetadata (6)
  (``ClusterNode`` applies them, fencing a stale controller epoch with 11);
- requests to the controller: ControlledShutdown (7), AlterPartition (56), ElectLeaders (43)
  are answered by the active controller only (NOT_CONTROLLER, 41, elsewhere);
- Metadata, DescribeCluster from the metadata cache (all live brokers, real leaders, replicas
  and ISR; LEADER_NOT_AVAILABLE (5) for an offline partition);
- CreateTopics, CreatePartitions, DeleteTopics and auto-creation through ZooKeeper
  (``tidelog.controller``: assignment by ``decisions.assign_replicas``, RF > live brokers ->
  INVALID_REPLICATION_FACTOR, 38);
- DescribeQuorum (55) for any topic partition, answered by its leader: current voters are
  the ISR, observers the other replicas, with each one's LEO and fetch times.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Coroutine, Iterable, Mapping
from typing import Any

from tidelog.errors import ErrorCode
from tidelog.model import BrokerId, TopicPartition
from tidelog.protocol import control
from tidelog.protocol.apis import ApiKey
from tidelog.protocol.codec import RequestHeader
from tidelog.replication.partition import AlterPartitionProposal
from tidelog.security.acls import AclOperation
from tidelog.server.apis.kafka_apis import (
    CREATE_PARTITIONS_DENIED,
    HandlerResult,
    KafkaApis,
)
from tidelog.server.auth import authz
from tidelog.server.cluster.metadata_cache import ClusterMetadataCache
from tidelog.server.cluster.node import ClusterNode
from tidelog.server.config.broker_config import (
    BrokerConfig,
    topic_name_error,
    validate_topic_configs,
)
from tidelog.server.config.policies import create_topic_request
from tidelog.server.network.request_context import current_request
from tidelog.server.replica.manager import ReplicaManager
from tidelog.storage.producer_id import ProducerIdsExhaustedError
from tidelog.zk import ZkError

log = logging.getLogger(__name__)

#: How long CreateTopics waits for the new partitions' leaders to reach this broker.
CREATE_WAIT_S = 10.0
ELECTION_PREFERRED = 0


def _future(coro: Coroutine[Any, Any, Any]) -> asyncio.Future[Any]:
    return asyncio.ensure_future(coro)


class ClusterApis(KafkaApis):
    """``KafkaApis`` for a broker in a cluster; see the module docstring."""

    def __init__(
        self,
        config: BrokerConfig,
        metadata: ClusterMetadataCache,
        replica_manager: ReplicaManager,
        supported_versions: Mapping[ApiKey, tuple[int, int]],
        node: ClusterNode,
    ) -> None:
        super().__init__(config, metadata, replica_manager, supported_versions)
        self.cache = metadata
        self.node = node
        self.handlers.update(
            {
                ApiKey.LEADER_AND_ISR: self.handle_leader_and_isr,
                ApiKey.UPDATE_METADATA: self.handle_update_metadata,
                ApiKey.STOP_REPLICA: self.handle_stop_replica,
                ApiKey.CONTROLLED_SHUTDOWN: self.handle_controlled_shutdown,
                ApiKey.ALTER_PARTITION: self.handle_alter_partition,
                ApiKey.ELECT_LEADERS: self.handle_elect_leaders,
                ApiKey.DESCRIBE_QUORUM: self.handle_describe_quorum,
            }
        )

    def broker_config_changed(self) -> None:
        """KIP-226 in a cluster: the topic defaults, and the controller's default for
        ``unclean.leader.election.enable`` (read at its next election)."""
        super().broker_config_changed()
        if self.node.controller is not None:
            self.node.controller.default_unclean = self.config.get_bool(
                "unclean.leader.election.enable"
            )

    def live_broker_ids(self) -> list[int]:
        return sorted(self.cache.brokers)

    # --- InitProducerId (22) ---------------------------------------------------------------

    def handle_init_producer_id(self, header: RequestHeader, body: Any) -> HandlerResult:
        """Idempotent producers: a cluster-unique id from a ZooKeeper-claimed block (Kafka's
        ZkProducerIdManager), epoch 0. A block that cannot be claimed now (ZooKeeper
        unreachable) is COORDINATOR_LOAD_IN_PROGRESS (14, retriable), as Kafka 3.x answers
        while its next block is pending."""
        if (refused := self.idempotent_refusal(header, body)) is not None:
            return refused
        if getattr(body, "transactional_id", None):
            return self._respond(
                header, {"error_code": ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED}
            )

        async def run() -> Any:
            try:
                producer_id = await self.node.generate_producer_id()
            except (ZkError, ProducerIdsExhaustedError) as exc:
                log.warning("InitProducerId: no producer id block: %s", exc)
                return self._respond(
                    header,
                    {
                        "error_code": ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
                        "producer_id": -1,
                        "producer_epoch": -1,
                    },
                )
            return self._respond(
                header,
                {"error_code": ErrorCode.NONE, "producer_id": producer_id, "producer_epoch": 0},
            )

        return _future(run())

    # --- control plane -------------------------------------------------------------------

    def _refused(self, header: RequestHeader, operation: AclOperation) -> bool:
        """Inter-broker requests need CLUSTER_ACTION on the cluster (ElectLeaders ALTER,
        DescribeQuorum DESCRIBE), else CLUSTER_AUTHORIZATION_FAILED (Kafka's
        ``authorizeClusterOperation``). Brokers log in as a super user (or a principal
        granted CLUSTER_ACTION)."""
        return self.authorizer is not None and not authz.cluster_allowed(
            self.authorizer, operation, header.api_key
        )

    def handle_leader_and_isr(self, header: RequestHeader, body: Any) -> HandlerResult:
        if self._refused(header, AclOperation.CLUSTER_ACTION):
            return control.LeaderAndIsrResponse(
                error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                partition_errors=_all_refused(body.partition_states),
            )
        return _future(self.node.handle_leader_and_isr(body))

    def handle_update_metadata(self, header: RequestHeader, body: Any) -> HandlerResult:
        if self._refused(header, AclOperation.CLUSTER_ACTION):
            return control.UpdateMetadataResponse(error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
        return _future(self.node.handle_update_metadata(body))

    def handle_stop_replica(self, header: RequestHeader, body: Any) -> HandlerResult:
        if self._refused(header, AclOperation.CLUSTER_ACTION):
            return control.StopReplicaResponse(
                error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                partition_errors=_all_refused(body.partitions),
            )
        return self.node.handle_stop_replica(body)

    def handle_controlled_shutdown(self, header: RequestHeader, body: Any) -> HandlerResult:
        if self._refused(header, AclOperation.CLUSTER_ACTION):
            return control.ControlledShutdownResponse(
                error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED
            )

        async def run() -> control.ControlledShutdownResponse:
            controller = self.node.controller
            if controller is None or not controller.is_active:
                return control.ControlledShutdownResponse(error_code=ErrorCode.NOT_CONTROLLER)
            result = await controller.controlled_shutdown(
                BrokerId(body.broker_id), int(body.broker_epoch)
            )
            return control.ControlledShutdownResponse(
                error_code=int(result.error),
                remaining_partitions=tuple(
                    control.RemainingPartition(topic_name=tp.topic, partition_index=tp.partition)
                    for tp in result.remaining
                ),
            )

        return _future(run())

    def handle_alter_partition(self, header: RequestHeader, body: Any) -> HandlerResult:
        if self._refused(header, AclOperation.CLUSTER_ACTION):
            return self._respond(
                header, {"error_code": ErrorCode.CLUSTER_AUTHORIZATION_FAILED, "topics": []}
            )

        async def run() -> Any:
            controller = self.node.controller
            if controller is None or not controller.is_active:
                return self._respond(header, {"error_code": ErrorCode.NOT_CONTROLLER, "topics": []})
            topics = []
            for topic in body.topics:
                info = self.cache.by_id(topic.topic_id)
                partitions = []
                for part in topic.partitions:
                    entry: dict[str, Any] = {"partition_index": int(part.partition_index)}
                    if info is None:
                        entry["error_code"] = ErrorCode.UNKNOWN_TOPIC_ID
                        partitions.append(entry)
                        continue
                    new_isr = getattr(part, "new_isr_with_epochs", None)
                    isr = (
                        tuple(BrokerId(b.broker_id) for b in new_isr)
                        if new_isr is not None
                        else tuple(BrokerId(b) for b in part.new_isr)
                    )
                    proposal = AlterPartitionProposal(
                        topic_partition=TopicPartition(info.name, int(part.partition_index)),
                        leader_id=BrokerId(body.broker_id),
                        leader_epoch=int(part.leader_epoch),
                        partition_epoch=int(part.partition_epoch),
                        new_isr=isr,
                    )
                    result = await controller.alter_partition(
                        proposal, broker_epoch=int(body.broker_epoch)
                    )
                    entry["error_code"] = result.error
                    if result.state is not None:
                        entry.update(
                            leader_id=result.state.leader,
                            leader_epoch=result.state.leader_epoch,
                            isr=list(result.state.isr),
                            partition_epoch=result.state.partition_epoch,
                        )
                    partitions.append(entry)
                topics.append({"topic_id": topic.topic_id, "partitions": partitions})
            return self._respond(header, {"error_code": ErrorCode.NONE, "topics": topics})

        return _future(run())

    def handle_elect_leaders(self, header: RequestHeader, body: Any) -> HandlerResult:
        if self._refused(header, AclOperation.ALTER):
            # Kafka's handleElectLeaders: the error at the top and for every partition asked.
            denied = ErrorCode.CLUSTER_AUTHORIZATION_FAILED
            return self._respond(
                header,
                {
                    "error_code": denied,
                    "replica_election_results": [
                        {
                            "topic": t.topic,
                            "partition_result": [
                                {
                                    "partition_id": int(p),
                                    "error_code": denied,
                                    "error_message": None,
                                }
                                for p in t.partitions
                            ],
                        }
                        for t in body.topic_partitions or ()
                    ],
                },
            )

        async def run() -> Any:
            controller = self.node.controller
            if controller is None or not controller.is_active:
                return self._respond(
                    header, {"error_code": ErrorCode.NOT_CONTROLLER, "replica_election_results": []}
                )
            if int(getattr(body, "election_type", ELECTION_PREFERRED)) != ELECTION_PREFERRED:
                return self._respond(
                    header,
                    {"error_code": ErrorCode.INVALID_REQUEST, "replica_election_results": []},
                )
            wanted = (
                None
                if body.topic_partitions is None
                else [
                    TopicPartition(t.topic, int(p))
                    for t in body.topic_partitions
                    for p in t.partitions
                ]
            )
            results = await controller.elect_preferred_leaders(wanted)
            by_topic: dict[str, list[dict[str, Any]]] = {}
            for tp, error in sorted(results.items()):
                by_topic.setdefault(tp.topic, []).append(
                    {"partition_id": tp.partition, "error_code": error, "error_message": None}
                )
            return self._respond(
                header,
                {
                    "error_code": ErrorCode.NONE,
                    "replica_election_results": [
                        {"topic": t, "partition_result": ps} for t, ps in by_topic.items()
                    ],
                },
            )

        return _future(run())

    # --- DescribeQuorum (55): ISR replication in Raft's shape ----------------------------

    def handle_describe_quorum(self, header: RequestHeader, body: Any) -> HandlerResult:
        if self._refused(header, AclOperation.DESCRIBE):
            return self._respond(
                header,
                {
                    "error_code": ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                    "error_message": authz.CLUSTER_AUTHORIZATION_MESSAGE,
                    "topics": [],
                    "nodes": [],
                },
            )
        topics = []
        for topic in body.topics:
            partitions = []
            for part in topic.partitions:
                tp = TopicPartition(topic.topic_name, int(part.partition_index))
                partitions.append(self._quorum_of(tp))
            topics.append({"topic_name": topic.topic_name, "partitions": partitions})
        return self._respond(header, {"error_code": ErrorCode.NONE, "topics": topics, "nodes": []})

    def _quorum_of(self, tp: TopicPartition) -> dict[str, Any]:
        hosted = self.replica_manager.partitions.get(tp)
        if hosted is None or not hosted.partition.is_leader:
            error = (
                ErrorCode.NOT_LEADER_OR_FOLLOWER
                if tp in self.cache.partitions
                else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            )
            return {
                "partition_index": tp.partition,
                "error_code": error,
                "leader_id": -1,
                "leader_epoch": -1,
                "high_watermark": -1,
                "current_voters": [],
                "observers": [],
            }
        p = hosted.partition
        voters: list[dict[str, Any]] = []
        observers: list[dict[str, Any]] = []
        for r in p.replicas:
            if r == p.local_broker_id:
                state: dict[str, Any] = {
                    "replica_id": r,
                    "log_end_offset": hosted.log.log_end_offset,
                    "last_fetch_timestamp": -1,
                    "last_caught_up_timestamp": -1,
                }
            else:
                rs = p.replica_states.get(r)
                state = {
                    "replica_id": r,
                    "log_end_offset": -1 if rs is None else rs.log_end_offset,
                    "last_fetch_timestamp": -1 if rs is None else rs.last_fetch_time_ms,
                    "last_caught_up_timestamp": -1 if rs is None else rs.last_caught_up_time_ms,
                }
            state["replica_directory_id"] = uuid.UUID(int=0)  # no directories here
            (voters if r in p.isr else observers).append(state)
        return {
            "partition_index": tp.partition,
            "error_code": ErrorCode.NONE,
            "leader_id": p.local_broker_id,
            "leader_epoch": p.leader_epoch,
            "high_watermark": p.high_watermark,
            "current_voters": voters,
            "observers": observers,
        }

    # --- Metadata / DescribeCluster from the cache ---------------------------------------

    def _brokers(self) -> list[dict[str, Any]]:
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

    def _partition_metadata(self, info: Any) -> list[dict[str, Any]]:
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

    @staticmethod
    def _not_described(info: Any) -> dict[str, Any]:
        """A topic this broker replicates (LeaderAndIsr) before UpdateMetadata said how many
        partitions it has: listing the partitions known so far would tell clients it has
        only those (librdkafka then fails a produce to any other with _UNKNOWN_PARTITION).
        Kafka answers a topic that exists but is not in its metadata cache yet with
        LEADER_NOT_AVAILABLE, which clients retry."""
        return {
            "error_code": ErrorCode.LEADER_NOT_AVAILABLE,
            "name": info.name,
            "topic_id": info.topic_id,
            "partitions": [],
        }

    def handle_metadata(self, header: RequestHeader, body: Any) -> HandlerResult:
        allow_auto = bool(getattr(body, "allow_auto_topic_creation", True)) and (
            self.config.get_bool("auto.create.topics.enable")
        )
        # Kafka's handleTopicMetadataRequest: decided before any auto-creation.
        access = self.metadata_access(header, body)
        missing = []
        if body.topics is not None and allow_auto:
            for item in body.topics:
                name = getattr(item, "name", None)
                if (
                    name
                    and name not in self.cache.topics
                    and not topic_name_error(name)
                    and not access.refused(name)
                ):
                    missing.append(name)
        if not missing:
            return self._metadata_response(header, body, access)

        async def run() -> Any:
            for name in missing:
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
            await self.node.wait_for_leaders(missing, 2.0)
            return self._metadata_response(header, body, access)

        return _future(run())

    def _metadata_response(
        self, header: RequestHeader, body: Any, access: authz.MetadataAccess
    ) -> Any:
        topics: list[dict[str, Any]] = []
        if body.topics is None:
            topics = [
                self._topic_metadata(i)
                for i in sorted(self.cache.topics.values(), key=lambda i: i.name)
                # not described yet: see _not_described; not describable: not listed
                if i.num_partitions > 0 and i.name not in access.hidden
            ]
        else:
            for item in body.topics:
                name = getattr(item, "name", None)
                topic_id = getattr(item, "topic_id", None)
                if not name and topic_id is not None and topic_id.int != 0:
                    found = self.cache.by_id(topic_id)
                    if found is None:
                        topics.append(
                            {
                                "error_code": ErrorCode.UNKNOWN_TOPIC_ID,
                                "name": None,
                                "topic_id": topic_id,
                                "partitions": [],
                            }
                        )
                        continue
                    name = found.name
                name = str(name or "")
                if access.refused(name):
                    topics.append(self.metadata_refusal(name, topic_id))
                    continue
                info = self.cache.topics.get(name)
                if info is None:
                    error = (
                        ErrorCode.INVALID_TOPIC_EXCEPTION
                        if topic_name_error(name)
                        else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                    )
                    topics.append(
                        {
                            "error_code": error,
                            "name": name,
                            "topic_id": uuid.UUID(int=0),
                            "partitions": [],
                        }
                    )
                    continue
                if info.num_partitions == 0:
                    topics.append(self._not_described(info))
                    continue
                topics.append(self._topic_metadata(info))
        return self._respond(
            header,
            {
                "brokers": self._brokers(),
                "cluster_id": self.cache.cluster_id,
                "controller_id": self.cache.controller_id,
                "topics": self.with_topic_operations(header, body, topics),
                "cluster_authorized_operations": self.cluster_operations(header, body),
                "error_code": ErrorCode.NONE,
            },
        )

    def handle_describe_cluster(self, header: RequestHeader, body: Any) -> HandlerResult:
        return self._respond(
            header,
            {
                "error_code": ErrorCode.NONE,
                "endpoint_type": 1,
                "cluster_id": self.cache.cluster_id,
                "controller_id": self.cache.controller_id,
                "brokers": [
                    {
                        "broker_id": b["node_id"],
                        "host": b["host"],
                        "port": b["port"],
                        "rack": b["rack"],
                    }
                    for b in self._brokers()
                ],
                "cluster_authorized_operations": self.cluster_operations(header, body),
            },
        )

    # --- topic admin through ZooKeeper ---------------------------------------------------

    def handle_create_topics(self, header: RequestHeader, body: Any) -> HandlerResult:
        not_creatable, configs_hidden = self.create_topics_access(header, body)

        async def run() -> Any:
            results = []
            created = []
            validate_only = bool(getattr(body, "validate_only", False))
            for topic in body.topics:
                name = str(topic.name)
                result: dict[str, Any] = {"name": name, "topic_id": uuid.UUID(int=0)}
                num_partitions = int(topic.num_partitions)
                rf = int(topic.replication_factor)
                if num_partitions == -1:
                    num_partitions = self.config.get_int("num.partitions")
                if rf == -1:
                    rf = self.config.get_int("default.replication.factor")
                assignment = None
                if topic.assignments:
                    assignment = {
                        int(a.partition_index): [BrokerId(b) for b in a.broker_ids]
                        for a in topic.assignments
                    }
                    num_partitions = len(assignment)
                    rf = len(topic.assignments[0].broker_ids)
                raw = {c.name: c.value for c in topic.configs}
                parsed, problem = validate_topic_configs(raw)
                error: ErrorCode
                message: str | None
                topic_id: uuid.UUID | None
                if name in not_creatable:
                    error, message = ErrorCode.TOPIC_AUTHORIZATION_FAILED, "Authorization failed."
                    topic_id = None
                elif problem:
                    error, message, topic_id = ErrorCode.INVALID_CONFIG, problem, None
                elif (
                    verdict := self.policies.check_create(
                        create_topic_request(topic, num_partitions, rf)
                    )
                )[0] != ErrorCode.NONE:
                    (error, message), topic_id = verdict, None
                else:
                    error, message, topic_id = await self.node.create_topic(
                        name,
                        num_partitions=num_partitions,
                        replication_factor=rf,
                        config={k: v for k, v in raw.items() if v is not None},
                        assignment=assignment,
                        validate_only=validate_only,
                    )
                overrides = {k: v for k, v in parsed.items() if v is not None}
                if error == ErrorCode.NONE and topic_id is not None:
                    result["topic_id"] = topic_id
                    created.append(name)
                if error == ErrorCode.NONE and name not in configs_hidden:
                    result.update(
                        num_partitions=num_partitions,
                        replication_factor=rf,
                        configs=self.config_apis.topic_entries(overrides),
                    )
                result.update(error_code=error, error_message=message)
                self.hide_created_configs(result, error, configs_hidden)
                results.append(result)
            if created:
                timeout_s = min(CREATE_WAIT_S, int(body.timeout.total_seconds()))
                await self.node.wait_for_leaders(created, timeout_s)
            return self._respond(header, {"topics": results})

        return _future(run())

    def handle_create_partitions(self, header: RequestHeader, body: Any) -> HandlerResult:
        denied = self.alter_denied(header, body)

        async def run() -> Any:
            results = []
            for topic in body.topics:
                name = str(topic.name)
                if name in denied:
                    results.append(
                        {
                            "name": name,
                            "error_code": ErrorCode.TOPIC_AUTHORIZATION_FAILED,
                            "error_message": CREATE_PARTITIONS_DENIED,
                        }
                    )
                    continue
                assignment = (
                    None
                    if topic.assignments is None
                    else [[BrokerId(b) for b in a.broker_ids] for a in topic.assignments]
                )
                error, message = await self.node.create_partitions(
                    name, int(topic.count), assignment, bool(body.validate_only)
                )
                results.append({"name": name, "error_code": error, "error_message": message})
            return self._respond(header, {"results": results})

        return _future(run())

    def handle_delete_topics(self, header: RequestHeader, body: Any) -> HandlerResult:
        async def run() -> Any:
            items: list[tuple[str | None, Any]] = []
            if getattr(body, "topics", None):
                items = [(t.name, t.topic_id) for t in body.topics]
            else:
                items = [(n, None) for n in getattr(body, "topic_names", ())]
            results = []
            refusals = self.delete_topics_refusals(header, items)
            for i, (name, topic_id) in enumerate(items):
                if i in refusals:
                    results.append(refusals[i])
                    continue
                info = None
                if name:
                    info = self.cache.topics.get(name)
                elif topic_id is not None:
                    info = self.cache.by_id(topic_id)
                if info is None:
                    results.append(
                        {
                            "name": name,
                            "topic_id": topic_id or uuid.UUID(int=0),
                            "error_code": ErrorCode.UNKNOWN_TOPIC_ID
                            if not name
                            else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                        }
                    )
                    continue
                if not self.config.get_bool("delete.topic.enable"):
                    error = ErrorCode.TOPIC_DELETION_DISABLED
                else:
                    await self.node.delete_topic(info.name)
                    error = ErrorCode.NONE
                results.append({"name": info.name, "topic_id": info.topic_id, "error_code": error})
            return self._respond(header, {"responses": results})

        return _future(run())


def _all_refused(partitions: Iterable[Any]) -> tuple[control.PartitionError, ...]:
    """CLUSTER_AUTHORIZATION_FAILED for every partition of a refused control request
    (LeaderAndIsr, StopReplica: each partition answers, as in Kafka)."""
    return tuple(
        control.PartitionError(
            topic_name=p.topic_name,
            partition_index=p.partition_index,
            error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
        )
        for p in partitions
    )


__all__ = ["ClusterApis"]
