"""The partition reassignment APIs (KIP-455), answered by the active controller.

- AlterPartitionReassignments (45, v0-v1): ALTER on the cluster, else the request's
  ``error_code`` is CLUSTER_AUTHORIZATION_FAILED (Kafka's
  ``handleAlterPartitionReassignmentsRequest``).
  A broker that is not the active controller answers NOT_CONTROLLER (41) at the top, and the
  admin client retries on the controller. Per partition: a target list starts (or replaces)
  a reassignment, null cancels one (NO_REASSIGNMENT_IN_PROGRESS, 85, when none runs); a
  bad target is INVALID_REPLICA_ASSIGNMENT (39) with Kafka's message; an unknown partition
  UNKNOWN_TOPIC_OR_PARTITION (3). v1 (KIP-860): with ``allow_replication_factor_change``
  false, a target whose size differs from the partition's current replication factor is
  INVALID_REPLICATION_FACTOR (38). The answer comes once the reassignment is *started*
  (written to ZooKeeper), as in Kafka; ``tidelog.controller.reassignment`` carries it out.
- ListPartitionReassignments (46, v0): DESCRIBE on the cluster. ``topics`` null lists every
  partition being reassigned, else the named partitions that are (others are left out, as
  in Kafka). Each with its replicas (RS), adding and removing replicas.

A partition named twice in one AlterPartitionReassignments gets the last target, as
Kafka's map does.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Final

from tidelog.errors import ErrorCode
from tidelog.model import BrokerId, TopicPartition
from tidelog.protocol.apis import ApiKey
from tidelog.protocol.codec import RequestHeader
from tidelog.security.acls import AclOperation
from tidelog.server.auth import authz

if TYPE_CHECKING:
    from tidelog.server.apis.helper import RequestHelper
    from tidelog.server.cluster.node import ClusterNode

#: What the broker advertises for these APIs (``tidelog.protocol.apis``).
REASSIGNMENT_API_VERSIONS: Final[Mapping[ApiKey, tuple[int, int]]] = {
    ApiKey.ALTER_PARTITION_REASSIGNMENTS: (0, 1),
    ApiKey.LIST_PARTITION_REASSIGNMENTS: (0, 0),
}


class ReassignmentApis:
    """AlterPartitionReassignments and ListPartitionReassignments of one broker."""

    def __init__(self, helper: RequestHelper, node: ClusterNode) -> None:
        self.helper = helper
        self.node = node

    def handlers(self) -> dict[int, Callable[[RequestHeader, Any], Any]]:
        return {
            ApiKey.ALTER_PARTITION_REASSIGNMENTS: self.handle_alter,
            ApiKey.LIST_PARTITION_REASSIGNMENTS: self.handle_list,
        }

    def _alter_answer(
        self,
        header: RequestHeader,
        error: ErrorCode,
        message: str | None,
        responses: list[dict[str, Any]],
        body: Any,
    ) -> Any:
        data: dict[str, Any] = {
            "throttle_time": 0,
            "error_code": error,
            "error_message": message,
            "responses": responses,
        }
        if header.api_version >= 1:
            data["allow_replication_factor_change"] = bool(
                getattr(body, "allow_replication_factor_change", True)
            )
        return self.helper.respond(header, data)

    def handle_alter(self, header: RequestHeader, body: Any) -> Any:
        if not authz.cluster_allowed(self.helper.authorizer, AclOperation.ALTER, header.api_key):
            return self._alter_answer(
                header, ErrorCode.CLUSTER_AUTHORIZATION_FAILED, None, [], body
            )

        async def run() -> Any:
            controller = self.node.controller
            if controller is None or not controller.is_active:
                return self._alter_answer(header, ErrorCode.NOT_CONTROLLER, None, [], body)
            wanted: dict[TopicPartition, tuple[BrokerId, ...] | None] = {}
            for topic in body.topics:
                for p in topic.partitions:
                    replicas = p.replicas
                    wanted[TopicPartition(topic.name, int(p.partition_index))] = (
                        None if replicas is None else tuple(BrokerId(int(r)) for r in replicas)
                    )
            refused: dict[TopicPartition, tuple[ErrorCode, str | None]] = {}
            if header.api_version >= 1 and not body.allow_replication_factor_change:
                for tp, target in wanted.items():
                    assignment = controller.reassignments.of(tp)
                    current = None if assignment is None else len(assignment.origin)
                    if target is not None and current is not None and len(target) != current:
                        refused[tp] = (
                            ErrorCode.INVALID_REPLICATION_FACTOR,
                            f"The replication factor is changed from {current} to {len(target)}",
                        )
            asked = {tp: t for tp, t in wanted.items() if tp not in refused}
            results = await controller.alter_partition_reassignments(asked) if asked else {}
            by_topic: dict[str, list[dict[str, Any]]] = {}
            for tp in wanted:
                if tp in refused:
                    code, message = refused[tp]
                else:
                    code, message = results[tp].error, results[tp].message
                by_topic.setdefault(tp.topic, []).append(
                    {
                        "partition_index": tp.partition,
                        "error_code": code,
                        "error_message": message if code is not ErrorCode.NONE else None,
                    }
                )
            if any(r.error is ErrorCode.NOT_CONTROLLER for r in results.values()):
                return self._alter_answer(header, ErrorCode.NOT_CONTROLLER, None, [], body)
            return self._alter_answer(
                header,
                ErrorCode.NONE,
                None,
                [{"name": t, "partitions": ps} for t, ps in by_topic.items()],
                body,
            )

        return asyncio.ensure_future(run())

    def handle_list(self, header: RequestHeader, body: Any) -> Any:
        def answer(error: ErrorCode, topics: list[dict[str, Any]]) -> Any:
            return self.helper.respond(
                header,
                {"throttle_time": 0, "error_code": error, "error_message": None, "topics": topics},
            )

        if not authz.cluster_allowed(self.helper.authorizer, AclOperation.DESCRIBE, header.api_key):
            return answer(ErrorCode.CLUSTER_AUTHORIZATION_FAILED, [])
        controller = self.node.controller
        asked = (
            None
            if body.topics is None
            else [TopicPartition(t.name, int(p)) for t in body.topics for p in t.partition_indexes]
        )
        ongoing = None if controller is None else controller.list_partition_reassignments(asked)
        if ongoing is None:
            return answer(ErrorCode.NOT_CONTROLLER, [])
        by_topic: dict[str, list[dict[str, Any]]] = {}
        for tp, ra in sorted(ongoing.items()):
            by_topic.setdefault(tp.topic, []).append(
                {
                    "partition_index": tp.partition,
                    "replicas": [int(r) for r in ra.replicas],
                    "adding_replicas": [int(r) for r in ra.adding],
                    "removing_replicas": [int(r) for r in ra.removing],
                }
            )
        return answer(ErrorCode.NONE, [{"name": t, "partitions": ps} for t, ps in by_topic.items()])
