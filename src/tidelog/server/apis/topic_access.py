"""What a principal may see and do of topics in the topic APIs, Kafka's checks in
handleTopicMetadataRequest, handleCreateTopicsRequest, handleDeleteTopicsRequest,
handleCreatePartitionsRequest and handleDescribeCluster (``tidelog.server.auth.authz``
makes each check). Without an authorizer everything is allowed.
"""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, Any

from tidelog.errors import ErrorCode
from tidelog.protocol.codec import RequestHeader
from tidelog.security.acls import AclOperation, ResourceType
from tidelog.server.apis.helper import RequestHelper
from tidelog.server.auth import authz
from tidelog.server.metadata.backend import MetadataBackend

if TYPE_CHECKING:
    from tidelog.server.auth.authorizer import AclAuthorizer


class TopicAccess:
    """The authorization decisions of the topic APIs of one broker."""

    def __init__(self, helper: RequestHelper, backend: MetadataBackend) -> None:
        self.helper = helper
        self.config = helper.config
        #: Resolves topic ids and says which topics exist.
        self.backend = backend

    @property
    def authorizer(self) -> AclAuthorizer | None:
        """The broker's ACL authorizer, as set once security started."""
        return self.helper.authorizer

    def metadata_access(self, header: RequestHeader, body: Any) -> authz.MetadataAccess:
        """Kafka's handleTopicMetadataRequest checks (``authz.metadata_access``): DESCRIBE
        per topic, and CREATE (cluster or topic) for the missing ones auto-creation would
        create. Everything allowed without an authorizer."""
        if self.authorizer is None:
            return authz.EVERYTHING_ALLOWED
        known = self.backend.topics
        all_topics = body.topics is None
        if all_topics:
            names = list(known)
        else:
            names = []
            for item in body.topics:
                name = getattr(item, "name", None)
                topic_id = getattr(item, "topic_id", None)
                if not name and topic_id is not None and topic_id.int != 0:
                    found = self.backend.by_id(topic_id)
                    if found is None:
                        continue  # UNKNOWN_TOPIC_ID: topic ids are not secret (Kafka)
                    name = found.name
                names.append(str(name or ""))
        auto_create = (
            not all_topics
            and bool(getattr(body, "allow_auto_topic_creation", True))
            and self.config.get_bool("auto.create.topics.enable")
        )
        return authz.metadata_access(
            self.authorizer,
            names,
            all_topics=all_topics,
            missing=[n for n in names if n not in known],
            auto_create=auto_create,
            api_key=header.api_key,
        )

    @staticmethod
    def metadata_refusal(name: str, topic_id: Any) -> dict[str, Any]:
        """A topic Metadata may not show: TOPIC_AUTHORIZATION_FAILED, without saying whether
        it exists; asked by id, the id is answered and not the name (Kafka's rule)."""
        by_id = topic_id is not None and topic_id.int != 0
        return {
            "error_code": ErrorCode.TOPIC_AUTHORIZATION_FAILED,
            "name": None if by_id else name,
            "topic_id": topic_id if by_id else uuid.UUID(int=0),
            "partitions": [],
        }

    def with_topic_operations(
        self, header: RequestHeader, body: Any, topics: list[dict[str, Any]]
    ) -> list[dict[str, Any]]:
        """Metadata v8+ ``include_topic_authorized_operations``: each shown topic's allowed
        operations (refused and unknown-id entries keep the schema default, as Kafka's)."""
        if not getattr(body, "include_topic_authorized_operations", False):
            return topics
        for entry in topics:
            name = entry.get("name")
            if name is None or entry["error_code"] == ErrorCode.TOPIC_AUTHORIZATION_FAILED:
                continue
            entry["topic_authorized_operations"] = authz.authorized_operations(
                self.authorizer, ResourceType.TOPIC, str(name), header.api_key
            )
        return topics

    def create_topics_access(
        self, header: RequestHeader, body: Any
    ) -> tuple[frozenset[str], frozenset[str]]:
        """Kafka's handleCreateTopicsRequest: (the topics that may not be created: CREATE on
        neither the cluster nor the topic; the created topics whose configs are not shown:
        no DESCRIBE_CONFIGS, answered with topic_config_error_code
        TOPIC_AUTHORIZATION_FAILED and no configs, partition count or replication factor)."""
        if self.authorizer is None:
            return frozenset(), frozenset()
        names = [str(t.name) for t in body.topics]
        not_creatable: frozenset[str] = frozenset()
        if not authz.cluster_allowed(
            self.authorizer, AclOperation.CREATE, header.api_key, log_if_denied=False
        ):
            not_creatable = authz.denied_names(
                self.authorizer,
                AclOperation.CREATE,
                ResourceType.TOPIC,
                names,
                header.api_key,
            )
        configs_hidden = authz.denied_names(
            self.authorizer,
            AclOperation.DESCRIBE_CONFIGS,
            ResourceType.TOPIC,
            names,
            header.api_key,
            log_if_denied=False,
        )
        return not_creatable, configs_hidden

    @staticmethod
    def hide_created_configs(
        result: dict[str, Any], error: ErrorCode, configs_hidden: frozenset[str]
    ) -> None:
        """CreateTopics without DESCRIBE_CONFIGS on the topic: Kafka keeps this error for a
        topic created or refused for authorization (its other failures reset it)."""
        if (
            configs_hidden
            and result["name"] in configs_hidden
            and error in (ErrorCode.NONE, ErrorCode.TOPIC_AUTHORIZATION_FAILED)
        ):
            result["topic_config_error_code"] = ErrorCode.TOPIC_AUTHORIZATION_FAILED

    def delete_topics_refusals(
        self, header: RequestHeader, items: list[tuple[str | None, Any]]
    ) -> dict[int, dict[str, Any]]:
        """Kafka's handleDeleteTopicsRequest, by request index: a topic asked by id without
        DESCRIBE is TOPIC_AUTHORIZATION_FAILED without its name; one without DELETE is
        TOPIC_AUTHORIZATION_FAILED (before anything says whether it exists). Unknown ids
        stay UNKNOWN_TOPIC_ID."""
        if self.authorizer is None:
            return {}
        resolved: list[tuple[str | None, bool]] = []
        for name, topic_id in items:
            if name:
                resolved.append((str(name), False))
            else:
                info = self.backend.by_id(topic_id) if topic_id is not None else None
                resolved.append((info.name if info is not None else None, True))
        describe_denied = authz.denied_names(
            self.authorizer,
            AclOperation.DESCRIBE,
            ResourceType.TOPIC,
            [n for n, by_id in resolved if n is not None and by_id],
            header.api_key,
        )
        delete_denied = authz.denied_names(
            self.authorizer,
            AclOperation.DELETE,
            ResourceType.TOPIC,
            [n for n, _ in resolved if n is not None],
            header.api_key,
        )
        refusals: dict[int, dict[str, Any]] = {}
        for i, ((name, by_id), (_, topic_id)) in enumerate(zip(resolved, items, strict=True)):
            if name is None or (name not in describe_denied and name not in delete_denied):
                continue
            hide = by_id and name in describe_denied
            refusals[i] = {
                "name": None if hide else name,
                "topic_id": topic_id or uuid.UUID(int=0),
                "error_code": ErrorCode.TOPIC_AUTHORIZATION_FAILED,
            }
        return refusals

    def alter_denied(self, header: RequestHeader, body: Any) -> frozenset[str]:
        """CreatePartitions: ALTER on each topic (Kafka's handleCreatePartitionsRequest)."""
        return authz.denied_names(
            self.authorizer,
            AclOperation.ALTER,
            ResourceType.TOPIC,
            [str(t.name) for t in body.topics],
            header.api_key,
        )

    def cluster_operations(self, header: RequestHeader, body: Any) -> int:
        """``cluster_authorized_operations`` of DescribeCluster / Metadata v8-v10: when asked,
        the cluster's allowed operations if DESCRIBE on it is allowed, else 0 (Kafka)."""
        if not getattr(body, "include_cluster_authorized_operations", False):
            return authz.AUTHORIZED_OPERATIONS_OMITTED
        return authz.cluster_authorized_operations(self.authorizer, header.api_key)


__all__ = ["TopicAccess"]
