"""The authorization checks the request handlers share (Kafka's ``AuthHelper`` and the checks
of ``KafkaApis``), on top of the ACL authorizer (``tidelog.server.auth.authorizer``).

Rules:

1. No authorizer (``None``): everything is allowed. Handlers test ``authorizer is None``
   once per request and skip every other step then (the Produce and Fetch hot paths
   pay nothing else); the helpers here also accept ``None`` and allow everything.
2. A decision is always about the request being handled (``current_request()``): its
   principal and client host. Requests the broker makes to itself are never dispatched,
   so they are never checked; requests other brokers make (replica fetches, the
   controller's LeaderAndIsr, markers) are checked like any other, which is why brokers
   log in as a principal listed in ``super.users`` (or one granted CLUSTER_ACTION).
3. A name list is authorized once per distinct name, with Kafka's resource reference count
   (how many times the request names it) in the authorizer's log line
   (``filterByAuthorized``). Denials are logged by the authorizer, at INFO, unless the
   check only filters what is shown (listing every topic, ListGroups, authorized
   operations: Kafka's ``logIfDenied = false``).
4. Authorized operations (KIP-430): the bit field ``sum(1 << operation code)`` of the
   operations Kafka supports on the resource type that are allowed here; with no
   authorizer every supported operation. Not asked for: ``AUTHORIZED_OPERATIONS_OMITTED``.
5. KIP-679: an idempotent producer (InitProducerId without a transactional id) needs
   IDEMPOTENT_WRITE on the cluster or WRITE on some topic, decided as Kafka's
   ``AclAuthorizer.authorizeByResourceType``: a LITERAL ``*`` DENY refuses; then
   ``allow.everyone.if.no.acl.found`` allows; then any ALLOW (LITERAL or PREFIXED) that
   no DENY dominates allows (a LITERAL DENY of the same name or a PREFIXED DENY of one of
   its prefixes dominates; a LITERAL ``*`` ALLOW is never dominated).
"""

from __future__ import annotations

import logging
import struct
from collections import Counter
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import Final

from tidelog.errors import ErrorCode
from tidelog.security.acls import (
    CLUSTER_NAME,
    WILDCARD_HOST,
    WILDCARD_PRINCIPAL,
    WILDCARD_RESOURCE,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
)
from tidelog.server.auth.authorizer import AclAuthorizer, request_name
from tidelog.server.network.request_context import current_request

log = logging.getLogger("tidelog.authorizer")

#: Kafka's ``Errors.X.message()``: the message where Kafka answers one.
TOPIC_AUTHORIZATION_MESSAGE: Final = "Topic authorization failed."
GROUP_AUTHORIZATION_MESSAGE: Final = "Group authorization failed."
CLUSTER_AUTHORIZATION_MESSAGE: Final = "Cluster authorization failed."
TRANSACTIONAL_ID_AUTHORIZATION_MESSAGE: Final = "Transactional Id authorization failed."
#: Schema default of every ``*_authorized_operations`` field: "not computed".
AUTHORIZED_OPERATIONS_OMITTED: Final = -(2**31)
#: Kafka's internal topics (``Topic.isInternal``): never added to a transaction by a client.
INTERNAL_TOPICS: Final = frozenset({"__consumer_offsets", "__transaction_state"})

_O = AclOperation
#: Kafka's ``AclEntry.supportedOperations`` per resource type (rule 4).
SUPPORTED_OPERATIONS: Final[Mapping[ResourceType, tuple[AclOperation, ...]]] = {
    ResourceType.TOPIC: (
        _O.READ,
        _O.WRITE,
        _O.CREATE,
        _O.DELETE,
        _O.ALTER,
        _O.DESCRIBE,
        _O.DESCRIBE_CONFIGS,
        _O.ALTER_CONFIGS,
    ),
    ResourceType.GROUP: (_O.READ, _O.DELETE, _O.DESCRIBE),
    ResourceType.CLUSTER: (
        _O.CREATE,
        _O.ALTER,
        _O.DESCRIBE,
        _O.CLUSTER_ACTION,
        _O.DESCRIBE_CONFIGS,
        _O.ALTER_CONFIGS,
        _O.IDEMPOTENT_WRITE,
    ),
    ResourceType.TRANSACTIONAL_ID: (_O.WRITE, _O.DESCRIBE),
}

# Record batch v2: magic at byte 16, attributes (int16) at byte 21, length at byte 8.
_BATCH_LENGTH = struct.Struct(">i")
_ATTRIBUTES = struct.Struct(">h")
_TRANSACTIONAL = 0x10
_BATCH_OVERHEAD = 12  # base offset (8) + batch length (4)


# --- single decisions (rule 1) ---------------------------------------------------------


def allowed(
    authorizer: AclAuthorizer | None,
    operation: AclOperation,
    resource_type: ResourceType,
    name: str,
    api_key: int,
    *,
    log_if_denied: bool = True,
) -> bool:
    """Kafka's ``AuthHelper.authorize``: may the current request do ``operation``?"""
    if authorizer is None:
        return True
    return authorizer.authorize(
        operation, resource_type, name, api_key=api_key, log_if_denied=log_if_denied
    )


def cluster_allowed(
    authorizer: AclAuthorizer | None,
    operation: AclOperation,
    api_key: int,
    *,
    log_if_denied: bool = True,
) -> bool:
    """``operation`` on the cluster resource (``kafka-cluster``)."""
    return allowed(
        authorizer, operation, ResourceType.CLUSTER, CLUSTER_NAME, api_key,
        log_if_denied=log_if_denied,
    )  # fmt: skip


def denied_names(
    authorizer: AclAuthorizer | None,
    operation: AclOperation,
    resource_type: ResourceType,
    names: Iterable[str],
    api_key: int,
    *,
    log_if_denied: bool = True,
) -> frozenset[str]:
    """Rule 3 (Kafka's ``filterByAuthorized``, inverted): the names of ``names`` the current
    request may not ``operation``; each distinct name is asked once."""
    if authorizer is None:
        return frozenset()
    counts = Counter(names)
    return frozenset(
        name
        for name, count in counts.items()
        if not authorizer.authorize(
            operation,
            resource_type,
            name,
            api_key=api_key,
            ref_count=count,
            log_if_denied=log_if_denied,
        )
    )


# --- authorized operations (rule 4) ------------------------------------------------------


def authorized_operations(
    authorizer: AclAuthorizer | None, resource_type: ResourceType, name: str, api_key: int
) -> int:
    """Kafka's ``AuthHelper.authorizedOperations``: the bit field of the supported
    operations on (``resource_type``, ``name``) the current request is allowed."""
    bits = 0
    for operation in SUPPORTED_OPERATIONS[resource_type]:
        if authorizer is None or authorizer.authorize(
            operation, resource_type, name, api_key=api_key, log_if_denied=False
        ):
            bits |= 1 << int(operation)
    return bits


def cluster_authorized_operations(authorizer: AclAuthorizer | None, api_key: int) -> int:
    """DescribeCluster / Metadata v8-v10 ``include_cluster_authorized_operations``: the
    cluster's operations when DESCRIBE on it is allowed, else 0 (Kafka answers so)."""
    if not cluster_allowed(authorizer, AclOperation.DESCRIBE, api_key):
        return 0
    return authorized_operations(authorizer, ResourceType.CLUSTER, CLUSTER_NAME, api_key)


# --- KIP-679 (rule 5) ----------------------------------------------------------------------


def authorize_by_resource_type(
    authorizer: AclAuthorizer, operation: AclOperation, resource_type: ResourceType, api_key: int
) -> bool:
    """Rule 5: may the current request ``operation`` at least one resource of the type?"""
    ctx = current_request()
    result = _by_resource_type(authorizer, operation, resource_type)
    level = logging.DEBUG if result else logging.INFO
    if log.isEnabledFor(level):
        log.log(
            level,
            "Principal = %s is %s Operation = %s from host = %s on resource = %s:UNKNOWN:NONE "
            "for request = %s with resourceRefCount = 0",
            ctx.principal,
            "Allowed" if result else "Denied",
            operation.kafka_name,
            ctx.client_host,
            resource_type.kafka_name,
            request_name(api_key),
        )
    return result


def _by_resource_type(
    authorizer: AclAuthorizer, operation: AclOperation, resource_type: ResourceType
) -> bool:
    core = authorizer.core
    ctx = current_request()
    if core.is_super_user(ctx.principal):
        return True
    who, host = str(ctx.principal), ctx.client_host

    def names(permission: AclPermissionType, pattern_type: PatternType) -> set[str]:
        return {
            pattern.name
            for pattern, entries in core.acls.items()
            if pattern.resource_type == resource_type
            and pattern.pattern_type == pattern_type
            and any(
                e.permission == permission
                and e.principal in (who, WILDCARD_PRINCIPAL)
                and e.host in (host, WILDCARD_HOST)
                and e.operation in (operation, AclOperation.ALL)
                for e in entries
            )
        }

    deny_literals = names(AclPermissionType.DENY, PatternType.LITERAL)
    if WILDCARD_RESOURCE in deny_literals:
        return False
    if core.allow_everyone_if_no_acl_found:
        return True
    deny_prefixes = names(AclPermissionType.DENY, PatternType.PREFIXED)

    def dominated(name: str) -> bool:
        return any(name.startswith(prefix) for prefix in deny_prefixes)

    if any(not dominated(p) for p in names(AclPermissionType.ALLOW, PatternType.PREFIXED)):
        return True
    return any(
        name == WILDCARD_RESOURCE or (name not in deny_literals and not dominated(name))
        for name in names(AclPermissionType.ALLOW, PatternType.LITERAL)
    )


def idempotent_write_allowed(authorizer: AclAuthorizer | None, api_key: int) -> bool:
    """KIP-679: IDEMPOTENT_WRITE on the cluster, or WRITE on any topic."""
    if authorizer is None:
        return True
    if authorizer.authorize(
        AclOperation.IDEMPOTENT_WRITE,
        ResourceType.CLUSTER,
        CLUSTER_NAME,
        api_key=api_key,
        log_if_denied=False,
    ):
        return True
    return authorize_by_resource_type(authorizer, AclOperation.WRITE, ResourceType.TOPIC, api_key)


# --- request helpers ------------------------------------------------------------------------


def has_transactional_records(records: bytes | bytearray | memoryview | None) -> bool:
    """Whether a Produce partition's record set holds a transactional batch (Kafka's
    ``ProduceRequest.hasTransactionalRecords``: any batch of magic 2 with the flag)."""
    if not records:
        return False
    view = memoryview(records)
    position = 0
    end = len(view)
    while position + 23 <= end:
        if view[position + 16] >= 2:
            (attributes,) = _ATTRIBUTES.unpack_from(view, position + 21)
            if attributes & _TRANSACTIONAL:
                return True
        (length,) = _BATCH_LENGTH.unpack_from(view, position + 8)
        if length <= 0:
            return False
        position += _BATCH_OVERHEAD + length
    return False


@dataclass(frozen=True, slots=True)
class MetadataAccess:
    """Kafka's ``handleTopicMetadataRequest`` decisions for one request's topic names:
    ``hidden`` may not be described (left out of an all-topics answer, else
    TOPIC_AUTHORIZATION_FAILED without saying whether they exist); ``not_creatable`` may be
    described but do not exist and may not be auto-created (TOPIC_AUTHORIZATION_FAILED)."""

    hidden: frozenset[str] = frozenset()
    not_creatable: frozenset[str] = frozenset()

    def refused(self, name: str) -> bool:
        return name in self.hidden or name in self.not_creatable


EVERYTHING_ALLOWED: Final = MetadataAccess()


def metadata_access(
    authorizer: AclAuthorizer | None,
    names: Collection[str],
    *,
    all_topics: bool,
    missing: Collection[str],
    auto_create: bool,
    api_key: int,
) -> MetadataAccess:
    """DESCRIBE per topic (not logged when listing every topic); for the describable
    ``missing`` ones, when auto-creation applies, CREATE on the cluster or on the topic."""
    if authorizer is None:
        return EVERYTHING_ALLOWED
    hidden = denied_names(
        authorizer, AclOperation.DESCRIBE, ResourceType.TOPIC, names, api_key,
        log_if_denied=not all_topics,
    )  # fmt: skip
    wanted = [n for n in missing if n not in hidden]
    not_creatable: frozenset[str] = frozenset()
    if (
        auto_create
        and wanted
        and not cluster_allowed(authorizer, AclOperation.CREATE, api_key, log_if_denied=False)
    ):
        not_creatable = denied_names(
            authorizer, AclOperation.CREATE, ResourceType.TOPIC, wanted, api_key
        )
    return MetadataAccess(hidden, not_creatable)


def config_resource_refusal(
    authorizer: AclAuthorizer,
    operation: AclOperation,
    resource_type: int,
    resource_name: str,
    api_key: int,
) -> ErrorCode | None:
    """Describe/Alter(Incremental)Configs (Kafka's ``handleDescribeConfigsRequest``,
    ``configsAuthorizationApiError``): a topic needs ``operation`` on it, a broker or broker
    logger on the cluster. None when allowed, or for another resource type (the handler
    answers those itself)."""
    if resource_type == CONFIG_TOPIC:
        if authorizer.authorize(operation, ResourceType.TOPIC, resource_name, api_key=api_key):
            return None
        return ErrorCode.TOPIC_AUTHORIZATION_FAILED
    if resource_type in (CONFIG_BROKER, CONFIG_BROKER_LOGGER):
        if authorizer.authorize(operation, ResourceType.CLUSTER, CLUSTER_NAME, api_key=api_key):
            return None
        return ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    return None


#: ConfigResource.Type codes.
CONFIG_TOPIC: Final = 2
CONFIG_BROKER: Final = 4
CONFIG_BROKER_LOGGER: Final = 8

#: Kafka's default message per authorization error code.
MESSAGES: Final[Mapping[ErrorCode, str]] = {
    ErrorCode.TOPIC_AUTHORIZATION_FAILED: TOPIC_AUTHORIZATION_MESSAGE,
    ErrorCode.GROUP_AUTHORIZATION_FAILED: GROUP_AUTHORIZATION_MESSAGE,
    ErrorCode.CLUSTER_AUTHORIZATION_FAILED: CLUSTER_AUTHORIZATION_MESSAGE,
    ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED: TRANSACTIONAL_ID_AUTHORIZATION_MESSAGE,
}


__all__ = [
    "AUTHORIZED_OPERATIONS_OMITTED",
    "EVERYTHING_ALLOWED",
    "INTERNAL_TOPICS",
    "MESSAGES",
    "SUPPORTED_OPERATIONS",
    "MetadataAccess",
    "allowed",
    "authorize_by_resource_type",
    "authorized_operations",
    "cluster_allowed",
    "cluster_authorized_operations",
    "config_resource_refusal",
    "denied_names",
    "has_transactional_records",
    "idempotent_write_allowed",
    "metadata_access",
]
