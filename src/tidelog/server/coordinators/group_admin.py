"""Group admin APIs: ListGroups (16), DescribeGroups (15) and DeleteGroups (42) (Kafka's
``handleListGroups``, ``handleDescribeGroup``, ``handleDeleteGroups``)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable
from typing import Any

from tidelog.coordinator.group import GroupManager, GroupState
from tidelog.coordinator.records import group_key, offset_key
from tidelog.errors import ErrorCode
from tidelog.protocol.codec import RequestHeader
from tidelog.security.acls import AclOperation, ResourceType
from tidelog.server.auth import authz
from tidelog.server.coordinators.group_common import (
    Append,
    AuthorizerOf,
    Clock,
    Entries,
    Lookup,
    Respond,
)


class GroupAdminApis:
    """ListGroups, DescribeGroups and DeleteGroups. ``managers`` gives the state machine of
    every partition this broker coordinates now."""

    def __init__(
        self,
        *,
        lookup: Lookup,
        managers: Callable[[], Iterable[GroupManager]],
        append: Append,
        clock: Clock,
        authorizer: AuthorizerOf,
        respond: Respond,
    ) -> None:
        self._lookup = lookup
        self._managers = managers
        self._append = append
        self._clock = clock
        self._authorizer = authorizer
        self._respond = respond

    # --- ListGroups (16) -------------------------------------------------------------------

    def handle_list_groups(self, header: RequestHeader, body: Any) -> Any:
        states = {s.lower() for s in (getattr(body, "states_filter", None) or ())}
        types = {t.lower() for t in (getattr(body, "types_filter", None) or ())}
        groups = []
        for manager in self._managers():
            for group in manager.groups.values():
                if states and group.state.value.lower() not in states:
                    continue
                if types and "classic" not in types:
                    continue
                groups.append(
                    {
                        "group_id": group.group_id,
                        "protocol_type": group.protocol_type or "",
                        "group_state": group.state.value,
                        "group_type": "classic",
                    }
                )
        authorizer = self._authorizer()
        if authorizer is not None and not authz.cluster_allowed(
            authorizer, AclOperation.DESCRIBE, header.api_key, log_if_denied=False
        ):
            # Kafka's handleListGroupsRequest: DESCRIBE on the cluster lists every group,
            # else only those the principal may describe (a filter: denials not logged).
            groups = [
                g
                for g in groups
                if authorizer.authorize(
                    AclOperation.DESCRIBE,
                    ResourceType.GROUP,
                    g["group_id"],
                    api_key=header.api_key,
                    log_if_denied=False,
                )
            ]
        return self._respond(header, {"error_code": ErrorCode.NONE, "groups": groups})

    # --- DescribeGroups (15) ---------------------------------------------------------------

    def handle_describe_groups(self, header: RequestHeader, body: Any) -> Any:
        results = []
        authorizer = self._authorizer()
        denied = authz.denied_names(
            authorizer,
            AclOperation.DESCRIBE,
            ResourceType.GROUP,
            [str(g) for g in body.groups],
            header.api_key,
        )
        with_operations = bool(getattr(body, "include_authorized_operations", False))
        for raw_id in body.groups:
            group_id = str(raw_id)
            if denied and group_id in denied:
                # Kafka's DescribeGroupsResponse.forError: empty state and protocol.
                results.append(
                    {
                        "error_code": ErrorCode.GROUP_AUTHORIZATION_FAILED,
                        "group_id": group_id,
                        "group_state": "",
                        "protocol_type": "",
                        "protocol_data": "",
                        "members": [],
                    }
                )
                continue
            entry = self._describe(group_id, header.api_version)
            if with_operations and entry["error_code"] == ErrorCode.NONE:
                entry["authorized_operations"] = authz.authorized_operations(
                    authorizer, ResourceType.GROUP, group_id, header.api_key
                )
            results.append(entry)
        return self._respond(header, {"groups": results})

    def _describe(self, group_id: str, version: int) -> dict[str, Any]:
        """One group's DescribeGroups entry; members' metadata and assignments only while
        the group is Stable. A group this coordinator does not know is Dead, and from v6 on
        also GROUP_ID_NOT_FOUND with Kafka's message (KIP-1043); before v6 its error is
        NONE, as Kafka answers."""
        _p, manager, error = self._lookup(group_id) if group_id else (-1, None, ErrorCode.NONE)
        entry: dict[str, Any] = {
            "error_code": error if group_id else ErrorCode.INVALID_GROUP_ID,
            "group_id": group_id,
            "group_state": GroupState.DEAD.value,
            "protocol_type": "",
            "protocol_data": "",
            "members": [],
        }
        group = manager.groups.get(group_id) if manager is not None else None
        if group is None:
            if version >= 6 and entry["error_code"] == ErrorCode.NONE:
                entry["error_code"] = ErrorCode.GROUP_ID_NOT_FOUND
                entry["error_message"] = f"Group {group_id} not found."
            return entry
        stable = group.state == GroupState.STABLE
        entry.update(
            group_state=group.state.value,
            protocol_type=group.protocol_type or "",
            protocol_data=(
                group.protocol_name or ""
                if group.state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE)
                else ""
            ),
            members=[
                {
                    "member_id": m.member_id,
                    "group_instance_id": m.group_instance_id,
                    "client_id": m.client_id,
                    "client_host": m.client_host,
                    "member_metadata": (
                        m.metadata_for(group.protocol_name or "") if stable else b""
                    ),
                    "member_assignment": m.assignment if stable else b"",
                }
                for m in group.members.values()
            ],
        )
        return entry

    # --- DeleteGroups (42) -----------------------------------------------------------------

    def handle_delete_groups(self, header: RequestHeader, body: Any) -> Any:
        # Kafka's handleDeleteGroupsRequest: DELETE on each group.
        denied = authz.denied_names(
            self._authorizer(),
            AclOperation.DELETE,
            ResourceType.GROUP,
            [str(g) for g in body.groups_names],
            header.api_key,
        )

        async def run() -> Any:
            results = []
            for raw_id in body.groups_names:
                group_id = str(raw_id)
                if denied and group_id in denied:
                    results.append(
                        {"group_id": group_id, "error_code": ErrorCode.GROUP_AUTHORIZATION_FAILED}
                    )
                    continue
                results.append({"group_id": group_id, "error_code": await self._delete(group_id)})
            return self._respond(header, {"results": results})

        return asyncio.ensure_future(run())

    async def _delete(self, group_id: str) -> ErrorCode:
        """Delete one group: its offsets' and its own tombstones, answered once replicated."""
        p, manager, error = (
            self._lookup(group_id) if group_id else (-1, None, ErrorCode.INVALID_GROUP_ID)
        )
        if manager is None:
            return error
        error, tps = manager.delete_group(group_id, self._clock())
        if error != ErrorCode.NONE:
            return error
        entries: Entries = [(offset_key(group_id, tp), None) for tp in tps]
        entries.append((group_key(group_id), None))
        return await self._append(p, entries)[1]


__all__ = ["GroupAdminApis"]
