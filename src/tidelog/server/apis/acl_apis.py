"""The ACL admin APIs (KIP-140, prefixed patterns KIP-290): what ``kafka-acls.sh`` and
``Admin.createAcls/describeAcls/deleteAcls`` ask a broker. Versions 1-3 (kio's; v0 predates
pattern types and Kafka 4 no longer serves it; v2 is the first flexible one).

Rules (Kafka's ``AclApis``):

1. Every request first needs the caller to hold an ACL on the cluster: ALTER for CreateAcls
   and DeleteAcls, DESCRIBE for DescribeAcls; without it the whole request fails with
   CLUSTER_AUTHORIZATION_FAILED (31): every creation / every filter result, or the single
   DescribeAcls error. Without an authorizer this check passes.
2. No authorizer configured: SECURITY_DISABLED (54) "No Authorizer is configured on the
   broker", in the same places.
3. CreateAcls: one result per creation, in order. An invalid binding is INVALID_REQUEST (42)
   with Kafka's message (``tidelog.security.acls.binding_error``); the valid ones are
   stored. DeleteAcls: one result per filter, in order, a filter with UNKNOWN elements is
   INVALID_REQUEST, each deleted binding is listed under the first filter matching it.
   DescribeAcls: an UNKNOWN filter is INVALID_REQUEST; otherwise the bindings this broker
   knows, grouped by resource pattern (sorted by type, name, pattern type).
4. Creations and deletions are in this broker's authorizer before the response leaves
   (``AclAuthorizer.create_acls``/``delete_acls``), and in other brokers' through the
   store's change notifications. Unknown enum codes on the wire read as UNKNOWN, as Kafka.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Final

from kio.index import load_response_schema

from tidelog.errors import ErrorCode
from tidelog.protocol.apis import ApiKey
from tidelog.protocol.codec import RequestHeader
from tidelog.protocol.messages import build
from tidelog.security.acls import (
    CLUSTER_NAME,
    AccessControlEntry,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
    filter_error,
)
from tidelog.server.auth.authorizer import AclAuthorizer

SECURITY_DISABLED_MESSAGE: Final = "No Authorizer is configured on the broker"
CLUSTER_AUTHORIZATION_MESSAGE: Final = "Cluster authorization failed."
#: What to add to ``SUPPORTED_VERSIONS`` / ``SERVED_APIS`` when the handlers are wired.
ACL_API_VERSIONS: Final[Mapping[ApiKey, tuple[int, int]]] = {
    ApiKey.DESCRIBE_ACLS: (1, 3),
    ApiKey.CREATE_ACLS: (1, 3),
    ApiKey.DELETE_ACLS: (1, 3),
}


# --- wire <-> values (pure) ---------------------------------------------------------------


def binding_from_creation(creation: Any) -> AclBinding:
    """A CreateAcls ``AclCreation`` as a binding (unknown codes: UNKNOWN)."""
    return AclBinding(
        ResourcePattern(
            ResourceType.from_code(creation.resource_type),
            str(creation.resource_name),
            PatternType.from_code(creation.resource_pattern_type),
        ),
        AccessControlEntry(
            str(creation.principal),
            str(creation.host),
            AclOperation.from_code(creation.operation),
            AclPermissionType.from_code(creation.permission_type),
        ),
    )


def filter_from_wire(raw: Any) -> AclBindingFilter:
    """A DescribeAcls request or a DeleteAcls ``DeleteAclsFilter`` as a filter."""
    return AclBindingFilter(
        resource_type=ResourceType.from_code(raw.resource_type_filter),
        name=raw.resource_name_filter,
        pattern_type=PatternType.from_code(raw.pattern_type_filter),
        principal=raw.principal_filter,
        host=raw.host_filter,
        operation=AclOperation.from_code(raw.operation),
        permission=AclPermissionType.from_code(raw.permission_type),
    )


def _entry_fields(entry: AccessControlEntry) -> dict[str, Any]:
    return {
        "principal": entry.principal,
        "host": entry.host,
        "operation": int(entry.operation),
        "permission_type": int(entry.permission),
    }


def describe_resources(bindings: Iterable[AclBinding]) -> list[dict[str, Any]]:
    """DescribeAcls ``resources``: the bindings grouped by pattern (rule 3)."""
    grouped: dict[ResourcePattern, list[AccessControlEntry]] = {}
    for binding in sorted(bindings):
        grouped.setdefault(binding.pattern, []).append(binding.entry)
    return [
        {
            "resource_type": int(pattern.resource_type),
            "resource_name": pattern.name,
            "pattern_type": int(pattern.pattern_type),
            "acls": [_entry_fields(e) for e in entries],
        }
        for pattern, entries in grouped.items()
    ]


def matching_acl(binding: AclBinding) -> dict[str, Any]:
    """One DeleteAcls ``matching_acls`` row (deleted without error)."""
    return {
        "error_code": ErrorCode.NONE,
        "error_message": None,
        "resource_type": int(binding.pattern.resource_type),
        "resource_name": binding.pattern.name,
        "pattern_type": int(binding.pattern.pattern_type),
        **_entry_fields(binding.entry),
    }


def _result(error: ErrorCode, message: str | None) -> dict[str, Any]:
    return {"error_code": error, "error_message": message if error != ErrorCode.NONE else None}


# --- handlers ---------------------------------------------------------------------------------


class AclApis:
    """DescribeAcls (29), CreateAcls (30) and DeleteAcls (31) over ``authorizer`` (None: no
    ``authorizer.class.name``)."""

    def __init__(self, authorizer: AclAuthorizer | None) -> None:
        self.authorizer = authorizer

    def handlers(self) -> dict[int, Callable[[RequestHeader, Any], Any]]:
        return {
            ApiKey.DESCRIBE_ACLS: self.handle_describe_acls,
            ApiKey.CREATE_ACLS: self.handle_create_acls,
            ApiKey.DELETE_ACLS: self.handle_delete_acls,
        }

    @staticmethod
    def _respond(header: RequestHeader, data: Mapping[str, Any]) -> Any:
        return build(load_response_schema(header.api_key, header.api_version), data)

    def _refusal(self, header: RequestHeader, operation: AclOperation) -> dict[str, Any] | None:
        """Rules 1 and 2: the error every answer carries, None when the request may run."""
        if self.authorizer is None:
            return _result(ErrorCode.SECURITY_DISABLED, SECURITY_DISABLED_MESSAGE)
        if not self.authorizer.authorize(
            operation, ResourceType.CLUSTER, CLUSTER_NAME, api_key=header.api_key
        ):
            return _result(ErrorCode.CLUSTER_AUTHORIZATION_FAILED, CLUSTER_AUTHORIZATION_MESSAGE)
        return None

    # --- DescribeAcls (29) ---------------------------------------------------------------

    def handle_describe_acls(self, header: RequestHeader, body: Any) -> Any:
        refusal = self._refusal(header, AclOperation.DESCRIBE)
        if refusal is not None or self.authorizer is None:
            return self._respond(header, {**(refusal or {}), "resources": []})
        acl_filter = filter_from_wire(body)
        error = filter_error(acl_filter)
        if error is not None:
            return self._respond(
                header, {**_result(ErrorCode.INVALID_REQUEST, error), "resources": []}
            )
        resources = describe_resources(self.authorizer.acls(acl_filter))
        return self._respond(header, {**_result(ErrorCode.NONE, None), "resources": resources})

    # --- CreateAcls (30) -----------------------------------------------------------------

    def handle_create_acls(self, header: RequestHeader, body: Any) -> Any:
        refusal = self._refusal(header, AclOperation.ALTER)
        if refusal is not None or self.authorizer is None:
            return self._respond(header, {"results": [refusal] * len(body.creations)})
        return asyncio.ensure_future(self._create(self.authorizer, header, body))

    async def _create(self, authorizer: AclAuthorizer, header: RequestHeader, body: Any) -> Any:
        bindings = [binding_from_creation(c) for c in body.creations]
        results = await authorizer.create_acls(bindings)
        return self._respond(header, {"results": [_result(r.error, r.message) for r in results]})

    # --- DeleteAcls (31) -----------------------------------------------------------------

    def handle_delete_acls(self, header: RequestHeader, body: Any) -> Any:
        refusal = self._refusal(header, AclOperation.ALTER)
        if refusal is not None or self.authorizer is None:
            failed = {**(refusal or {}), "matching_acls": []}
            return self._respond(header, {"filter_results": [failed] * len(body.filters)})
        return asyncio.ensure_future(self._delete(self.authorizer, header, body))

    async def _delete(self, authorizer: AclAuthorizer, header: RequestHeader, body: Any) -> Any:
        results = await authorizer.delete_acls([filter_from_wire(f) for f in body.filters])
        return self._respond(
            header,
            {
                "filter_results": [
                    {
                        **_result(r.error, r.message),
                        "matching_acls": [matching_acl(b) for b in r.deleted],
                    }
                    for r in results
                ]
            },
        )
