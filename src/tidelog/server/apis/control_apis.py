"""The cluster-only control APIs of a broker in a ZooKeeper cluster.

- control plane from the controller: LeaderAndIsr (4), StopReplica (5), UpdateMetadata (6)
  (``ClusterNode`` applies them, fencing a stale controller epoch with 11);
- requests to the controller: ControlledShutdown (7), AlterPartition (56), ElectLeaders (43)
  are answered by the active controller only (NOT_CONTROLLER, 41, elsewhere);
- DescribeQuorum (55) for any topic partition, answered by its leader: current voters are
  the ISR, observers the other replicas, with each one's LEO and fetch times.

Each needs CLUSTER_ACTION on the cluster (ElectLeaders ALTER, DescribeQuorum DESCRIBE),
else CLUSTER_AUTHORIZATION_FAILED (Kafka's ``authorizeClusterOperation``).
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable, Coroutine, Iterable
from typing import Any

from tidelog.errors import ErrorCode
from tidelog.model import BrokerId, TopicPartition
from tidelog.protocol import control
from tidelog.protocol.apis import ApiKey
from tidelog.protocol.codec import RequestHeader
from tidelog.replication.partition import AlterPartitionProposal
from tidelog.security.acls import AclOperation
from tidelog.server.apis.helper import RequestHelper
from tidelog.server.auth import authz
from tidelog.server.cluster.node import ClusterNode
from tidelog.server.replica.manager import ReplicaManager

ELECTION_PREFERRED = 0


def _future(coro: Coroutine[Any, Any, Any]) -> asyncio.Future[Any]:
    return asyncio.ensure_future(coro)


class ControlApis:
    """The control-plane handlers of a cluster broker; see the module docstring."""

    def __init__(
        self, helper: RequestHelper, node: ClusterNode, replica_manager: ReplicaManager
    ) -> None:
        self.helper = helper
        self.node = node
        self.replica_manager = replica_manager

    def handlers(self) -> dict[int, Callable[[RequestHeader, Any], Any]]:
        return {
            ApiKey.LEADER_AND_ISR: self.handle_leader_and_isr,
            ApiKey.UPDATE_METADATA: self.handle_update_metadata,
            ApiKey.STOP_REPLICA: self.handle_stop_replica,
            ApiKey.CONTROLLED_SHUTDOWN: self.handle_controlled_shutdown,
            ApiKey.ALTER_PARTITION: self.handle_alter_partition,
            ApiKey.ELECT_LEADERS: self.handle_elect_leaders,
            ApiKey.DESCRIBE_QUORUM: self.handle_describe_quorum,
        }

    # --- control plane -------------------------------------------------------------------

    def _refused(self, header: RequestHeader, operation: AclOperation) -> bool:
        """Inter-broker requests need CLUSTER_ACTION on the cluster (ElectLeaders ALTER,
        DescribeQuorum DESCRIBE), else CLUSTER_AUTHORIZATION_FAILED (Kafka's
        ``authorizeClusterOperation``). Brokers log in as a super user (or a principal
        granted CLUSTER_ACTION)."""
        return self.helper.authorizer is not None and not authz.cluster_allowed(
            self.helper.authorizer, operation, header.api_key
        )

    def handle_leader_and_isr(self, header: RequestHeader, body: Any) -> Any:
        if self._refused(header, AclOperation.CLUSTER_ACTION):
            return control.LeaderAndIsrResponse(
                error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                partition_errors=_all_refused(body.partition_states),
            )
        return _future(self.node.handle_leader_and_isr(body))

    def handle_update_metadata(self, header: RequestHeader, body: Any) -> Any:
        if self._refused(header, AclOperation.CLUSTER_ACTION):
            return control.UpdateMetadataResponse(error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
        return _future(self.node.handle_update_metadata(body))

    def handle_stop_replica(self, header: RequestHeader, body: Any) -> Any:
        if self._refused(header, AclOperation.CLUSTER_ACTION):
            return control.StopReplicaResponse(
                error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                partition_errors=_all_refused(body.partitions),
            )
        return self.node.handle_stop_replica(body)

    def handle_controlled_shutdown(self, header: RequestHeader, body: Any) -> Any:
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

    def handle_alter_partition(self, header: RequestHeader, body: Any) -> Any:
        if self._refused(header, AclOperation.CLUSTER_ACTION):
            return self.helper.respond(
                header, {"error_code": ErrorCode.CLUSTER_AUTHORIZATION_FAILED, "topics": []}
            )

        async def run() -> Any:
            controller = self.node.controller
            if controller is None or not controller.is_active:
                return self.helper.respond(
                    header, {"error_code": ErrorCode.NOT_CONTROLLER, "topics": []}
                )
            topics = []
            for topic in body.topics:
                info = self.node.metadata.by_id(topic.topic_id)
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
            return self.helper.respond(header, {"error_code": ErrorCode.NONE, "topics": topics})

        return _future(run())

    def handle_elect_leaders(self, header: RequestHeader, body: Any) -> Any:
        if self._refused(header, AclOperation.ALTER):
            # Kafka's handleElectLeaders: the error at the top and for every partition asked.
            denied = ErrorCode.CLUSTER_AUTHORIZATION_FAILED
            return self.helper.respond(
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
                return self.helper.respond(
                    header, {"error_code": ErrorCode.NOT_CONTROLLER, "replica_election_results": []}
                )
            if int(getattr(body, "election_type", ELECTION_PREFERRED)) != ELECTION_PREFERRED:
                return self.helper.respond(
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
            return self.helper.respond(
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

    def handle_describe_quorum(self, header: RequestHeader, body: Any) -> Any:
        if self._refused(header, AclOperation.DESCRIBE):
            return self.helper.respond(
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
        return self.helper.respond(
            header, {"error_code": ErrorCode.NONE, "topics": topics, "nodes": []}
        )

    def _quorum_of(self, tp: TopicPartition) -> dict[str, Any]:
        hosted = self.replica_manager.partitions.get(tp)
        if hosted is None or not hosted.partition.is_leader:
            error = (
                ErrorCode.NOT_LEADER_OR_FOLLOWER
                if tp in self.node.metadata.partitions
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


__all__ = ["ControlApis"]
