"""The topic APIs: Metadata (3), CreateTopics (19), DeleteTopics (20), CreatePartitions (37)
and DescribeCluster (60), one handler each for a lone broker and a cluster broker, asking
the metadata backend (``tidelog.server.metadata.backend``) where the two differ.

Errors follow Kafka: names that fail ``Topic.validate`` get INVALID_TOPIC_EXCEPTION (17);
unknown topics UNKNOWN_TOPIC_OR_PARTITION (3) (UNKNOWN_TOPIC_ID, 100, asked by id); topic
configs that are unknown or out of range INVALID_CONFIG (40). A cluster broker answers a
topic it knows but that UpdateMetadata has not described yet with LEADER_NOT_AVAILABLE (5),
which clients retry: listing the partitions known so far would tell them it has only those.

The handlers are coroutines run eagerly (``tidelog.server.apis.eager``): a lone broker's
answer is immediate, a cluster broker's comes when the controller or ZooKeeper answered and,
for CreateTopics, CreatePartitions and DeleteTopics, once the change is in the metadata
served here and by the other live brokers (``tidelog.server.cluster.propagation``; Kafka's
DelayedCreatePartitions / DelayedDeleteTopics): timeout_ms 0 answers at once; what is not
there at timeout_ms is REQUEST_TIMED_OUT (CreateTopics: NONE after at most
``CREATE_WAIT_S``, the topic exists).
Authorization as Kafka's handleTopicMetadataRequest, handleCreateTopicsRequest,
handleDeleteTopicsRequest and handleCreatePartitionsRequest (``tidelog.server.apis
.topic_access``).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping
from typing import Any

from tidelog.errors import ErrorCode
from tidelog.model import BrokerId
from tidelog.protocol.apis import ApiKey
from tidelog.protocol.codec import RequestHeader
from tidelog.server.apis.eager import eager
from tidelog.server.apis.helper import RequestHelper
from tidelog.server.apis.topic_access import TopicAccess
from tidelog.server.auth import authz
from tidelog.server.config.broker_config import topic_name_error, validate_topic_configs
from tidelog.server.config.policies import create_topic_request
from tidelog.server.metadata.backend import MetadataBackend
from tidelog.server.metadata.local import TopicInfo

#: Kafka's CreatePartitions message for a topic without ALTER.
CREATE_PARTITIONS_DENIED = "The topic authorization is failed."
#: Kafka's CreateTopics message (ZkAdminManager) for a topic with replica assignments and
#: a partition count or replication factor other than -1.
BOTH_COUNTS_AND_ASSIGNMENTS = (
    "Both numPartitions or replicationFactor and replicasAssignments were set. "
    "Both cannot be used at the same time."
)
#: How long CreateTopics waits at most for the new partitions' leaders to reach the brokers.
CREATE_WAIT_S = 10.0
#: CreateTopics v5+ ``configs``: a topic's config entries from its overrides
#: (``ConfigApis.topic_entries``).
TopicEntries = Callable[[Mapping[str, object]], list[dict[str, Any]]]


class TopicApis:
    """The topic handlers of one broker; see the module docstring."""

    def __init__(
        self, helper: RequestHelper, backend: MetadataBackend, topic_entries: TopicEntries
    ) -> None:
        self.helper = helper
        self.backend = backend
        self.topic_entries = topic_entries
        self.access = TopicAccess(helper, backend)

    def handlers(self) -> dict[int, Callable[[RequestHeader, Any], Any]]:
        return {
            ApiKey.METADATA: self.handle_metadata,
            ApiKey.CREATE_TOPICS: self.handle_create_topics,
            ApiKey.DELETE_TOPICS: self.handle_delete_topics,
            ApiKey.CREATE_PARTITIONS: self.handle_create_partitions,
            ApiKey.DESCRIBE_CLUSTER: self.handle_describe_cluster,
        }

    # --- Metadata (3) -----------------------------------------------------------------------

    def _allow_auto_create(self, body: Any) -> bool:
        return bool(getattr(body, "allow_auto_topic_creation", True)) and (
            self.helper.config.get_bool("auto.create.topics.enable")
        )

    def _topic_metadata(self, info: TopicInfo) -> dict[str, Any]:
        return {
            "error_code": ErrorCode.NONE,
            "name": info.name,
            "topic_id": info.topic_id,
            "is_internal": info.name == "__consumer_offsets",  # Kafka marks its internal topic
            "partitions": self.backend.partition_metadata(info),
        }

    @staticmethod
    def _not_described(info: TopicInfo) -> dict[str, Any]:
        """A topic known from LeaderAndIsr before UpdateMetadata said how many partitions
        it has (see the module docstring)."""
        return {
            "error_code": ErrorCode.LEADER_NOT_AVAILABLE,
            "name": info.name,
            "topic_id": info.topic_id,
            "partitions": [],
        }

    def handle_metadata(self, header: RequestHeader, body: Any) -> Any:
        # Kafka's handleTopicMetadataRequest: decided before any auto-creation.
        access = self.access.metadata_access(header, body)
        missing = []
        if body.topics is not None and self._allow_auto_create(body):
            for item in body.topics:
                name = getattr(item, "name", None)
                if (
                    name
                    and name not in self.backend.topics
                    and not topic_name_error(name)
                    and not access.refused(name)
                ):
                    missing.append(name)
        if not missing:
            return self._metadata_response(header, body, access)

        async def run() -> Any:
            await self.backend.auto_create_topics(missing)
            return self._metadata_response(header, body, access)

        return eager(run())

    def _metadata_response(
        self, header: RequestHeader, body: Any, access: authz.MetadataAccess
    ) -> Any:
        topics: list[dict[str, Any]] = []
        if body.topics is None:
            topics = [
                self._topic_metadata(i)
                for i in sorted(self.backend.topics.values(), key=lambda i: i.name)
                # not described yet: see _not_described; not describable: not listed
                if i.num_partitions > 0 and i.name not in access.hidden
            ]
        else:
            topics = [self._asked_topic_metadata(item, access) for item in body.topics]
        return self.helper.respond(
            header,
            {
                "brokers": self.backend.brokers(self.helper.own_address()),
                "cluster_id": self.backend.cluster_id,
                "controller_id": self.backend.controller_id(),
                "topics": self.access.with_topic_operations(header, body, topics),
                "cluster_authorized_operations": self.access.cluster_operations(header, body),
                "error_code": ErrorCode.NONE,
            },
        )

    def _asked_topic_metadata(self, item: Any, access: authz.MetadataAccess) -> dict[str, Any]:
        """Metadata of one topic asked by name or id."""
        name = getattr(item, "name", None)
        topic_id = getattr(item, "topic_id", None)
        if not name and topic_id is not None and topic_id.int != 0:
            found = self.backend.by_id(topic_id)
            if found is None:
                return {
                    "error_code": ErrorCode.UNKNOWN_TOPIC_ID,
                    "name": None,
                    "topic_id": topic_id,
                    "partitions": [],
                }
            name = found.name
        name = str(name or "")
        if access.refused(name):
            return self.access.metadata_refusal(name, topic_id)
        info = self.backend.topics.get(name)
        if info is None:
            error = (
                ErrorCode.INVALID_TOPIC_EXCEPTION
                if topic_name_error(name)
                else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            )
            return {
                "error_code": error,
                "name": name,
                "topic_id": uuid.UUID(int=0),
                "partitions": [],
            }
        if info.num_partitions == 0:
            return self._not_described(info)
        return self._topic_metadata(info)

    # --- CreateTopics (19) ------------------------------------------------------------------

    def handle_create_topics(self, header: RequestHeader, body: Any) -> Any:
        not_creatable, configs_hidden = self.access.create_topics_access(header, body)
        validate_only = bool(getattr(body, "validate_only", False))

        async def run() -> Any:
            results = []
            created: dict[str, int] = {}
            for topic in body.topics:
                result, topic_id, count = await self._create_topic(
                    topic, validate_only, not_creatable, configs_hidden
                )
                if topic_id is not None:
                    created[result["name"]] = count
                results.append(result)
            timeout_s = min(CREATE_WAIT_S, body.timeout.total_seconds())
            if created and timeout_s > 0:
                # As CreatePartitions' wait, but answered NONE when the time is up (the
                # topic exists; its leaders follow).
                await self.backend.wait_for_partitions(created, timeout_s)
            return self.helper.respond(header, {"topics": results})

        return eager(run())

    async def _create_topic(
        self,
        topic: Any,
        validate_only: bool,
        not_creatable: frozenset[str],
        configs_hidden: frozenset[str],
    ) -> tuple[dict[str, Any], uuid.UUID | None, int]:
        """One topic of CreateTopics: its result, its id when it was created and its
        partition count."""
        config = self.helper.config
        name = str(topic.name)
        result: dict[str, Any] = {"name": name, "topic_id": uuid.UUID(int=0)}
        num_partitions = int(topic.num_partitions)
        rf = int(topic.replication_factor)
        if num_partitions == -1:
            num_partitions = config.get_int("num.partitions")
        if rf == -1:
            rf = config.get_int("default.replication.factor")
        assignment = None
        if topic.assignments:
            assignment = {
                int(a.partition_index): [BrokerId(b) for b in a.broker_ids]
                for a in topic.assignments
            }
            num_partitions = len(assignment)  # by partition index, as Kafka counts them
            rf = len(topic.assignments[0].broker_ids)
        raw = {c.name: c.value for c in topic.configs}
        overrides: dict[str, object] = {}
        topic_id: uuid.UUID | None = None
        error: ErrorCode
        message: str | None
        if name in not_creatable:
            error, message = ErrorCode.TOPIC_AUTHORIZATION_FAILED, "Authorization failed."
        elif topic.assignments and (
            int(topic.num_partitions) != -1 or int(topic.replication_factor) != -1
        ):
            error, message = ErrorCode.INVALID_REQUEST, BOTH_COUNTS_AND_ASSIGNMENTS
        elif (
            checked := self.backend.check_new_topic(
                name,
                num_partitions,
                rf,
                None if not topic.assignments else [a.broker_ids for a in topic.assignments],
            )
        )[0] != ErrorCode.NONE:
            error, message = checked
        else:
            parsed, problem = validate_topic_configs(raw)
            overrides = {k: v for k, v in parsed.items() if v is not None}
            if problem:
                error, message = ErrorCode.INVALID_CONFIG, problem
            elif (
                verdict := self.helper.policies.check_create(
                    create_topic_request(topic, num_partitions, rf)
                )
            )[0] != ErrorCode.NONE:
                error, message = verdict
            else:
                error, message, topic_id = await self.backend.create_topic(
                    name,
                    num_partitions=num_partitions,
                    replication_factor=rf,
                    raw_configs={k: v for k, v in raw.items() if v is not None},
                    overrides=overrides,
                    assignment=assignment,
                    validate_only=validate_only,
                )
        if error == ErrorCode.NONE and topic_id is not None:
            result["topic_id"] = topic_id
        if error == ErrorCode.NONE and name not in configs_hidden:
            result.update(
                num_partitions=num_partitions,
                replication_factor=rf,
                configs=self.topic_entries(overrides),
            )
        result.update(error_code=error, error_message=message)
        self.access.hide_created_configs(result, error, configs_hidden)
        return result, topic_id if error == ErrorCode.NONE else None, num_partitions

    # --- DeleteTopics (20) ------------------------------------------------------------------

    def handle_delete_topics(self, header: RequestHeader, body: Any) -> Any:
        items: list[tuple[str | None, Any]] = []
        if getattr(body, "topics", None):
            items = [(t.name, t.topic_id) for t in body.topics]
        else:
            items = [(n, None) for n in getattr(body, "topic_names", ())]
        refusals = self.access.delete_topics_refusals(header, items)

        async def run() -> Any:
            results = []
            deleted: dict[str, uuid.UUID] = {}
            for i, (name, topic_id) in enumerate(items):
                if i in refusals:
                    results.append(refusals[i])
                    continue
                info = None
                if name:
                    info = self.backend.topics.get(name)
                elif topic_id is not None:
                    info = self.backend.by_id(topic_id)
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
                if not self.helper.config.get_bool("delete.topic.enable"):
                    error = ErrorCode.TOPIC_DELETION_DISABLED
                else:
                    await self.backend.delete_topic(info.name)
                    deleted[info.name] = info.topic_id
                    error = ErrorCode.NONE
                results.append({"name": info.name, "topic_id": info.topic_id, "error_code": error})
            timeout_s = body.timeout.total_seconds()
            if deleted and timeout_s > 0:
                # Kafka's DelayedDeleteTopics: answered once the topics are gone from the
                # metadata, or REQUEST_TIMED_OUT for those still there at timeout_ms.
                late = await self.backend.wait_for_deletions(deleted, timeout_s)
                for result in results:
                    if result["name"] in late and result["error_code"] == ErrorCode.NONE:
                        result["error_code"] = ErrorCode.REQUEST_TIMED_OUT
            return self.helper.respond(header, {"responses": results})

        return eager(run())

    # --- CreatePartitions (37) --------------------------------------------------------------

    def handle_create_partitions(self, header: RequestHeader, body: Any) -> Any:
        denied = self.access.alter_denied(header, body)

        async def run() -> Any:
            results = []
            grown: dict[str, int] = {}
            for topic in body.topics:
                name = str(topic.name)
                error: ErrorCode
                message: str | None
                if name in denied:
                    error, message = ErrorCode.TOPIC_AUTHORIZATION_FAILED, CREATE_PARTITIONS_DENIED
                else:
                    assignment = (
                        None
                        if topic.assignments is None
                        else [[BrokerId(b) for b in a.broker_ids] for a in topic.assignments]
                    )
                    error, message = await self.backend.create_partitions(
                        name, int(topic.count), assignment, bool(body.validate_only)
                    )
                    if error == ErrorCode.NONE and not body.validate_only:
                        grown[name] = int(topic.count)
                results.append({"name": name, "error_code": error, "error_message": message})
            timeout_s = body.timeout.total_seconds()
            if grown and timeout_s > 0:
                # Kafka's DelayedCreatePartitions: answered once every new partition has a
                # leader in the metadata, or REQUEST_TIMED_OUT at timeout_ms.
                late = await self.backend.wait_for_partitions(grown, timeout_s)
                for result in results:
                    if result["name"] in late and result["error_code"] == ErrorCode.NONE:
                        result["error_code"] = ErrorCode.REQUEST_TIMED_OUT
            return self.helper.respond(header, {"results": results})

        return eager(run())

    # --- DescribeCluster (60) ---------------------------------------------------------------

    def handle_describe_cluster(self, header: RequestHeader, body: Any) -> Any:
        return self.helper.respond(
            header,
            {
                "error_code": ErrorCode.NONE,
                "endpoint_type": 1,
                "cluster_id": self.backend.cluster_id,
                "controller_id": self.backend.controller_id(),
                "brokers": [
                    {
                        "broker_id": b["node_id"],
                        "host": b["host"],
                        "port": b["port"],
                        "rack": b["rack"],
                    }
                    for b in self.backend.brokers(self.helper.own_address())
                ],
                "cluster_authorized_operations": self.access.cluster_operations(header, body),
            },
        )


__all__ = ["BOTH_COUNTS_AND_ASSIGNMENTS", "CREATE_PARTITIONS_DENIED", "TopicApis"]
