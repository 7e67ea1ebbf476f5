"""Group membership APIs of the classic protocol: JoinGroup (11), SyncGroup (14),
Heartbeat (12) and LeaveGroup (13) (Kafka's GroupCoordinator ``handleJoinGroup`` and
siblings). The rules live in ``tidelog.coordinator.group``; here requests become its method
calls, and the answers it delays are parked until its ``Effects`` resolve them (rule 4 of
``tidelog.server.coordinators.group``)."""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Callable
from typing import Any

from tidelog.coordinator.group import Effects, JoinRequest, JoinResult, SyncResult
from tidelog.errors import ErrorCode
from tidelog.protocol.codec import RequestHeader
from tidelog.security.acls import AclOperation
from tidelog.server.coordinators.group_common import (
    AuthorizerOf,
    Clock,
    Lookup,
    Respond,
    group_refused,
)

#: The address of the client whose request is being handled (set by the dispatcher).
client_host: contextvars.ContextVar[str] = contextvars.ContextVar("client_host", default="")


def _host_of(peer: str) -> str:
    return "/" + peer.rsplit(":", 1)[0] if peer else ""


class ParkedRequests:
    """JoinGroup and SyncGroup answers the state machine delays, keyed by member id."""

    def __init__(self) -> None:
        self.joins: dict[str, Callable[[JoinResult], None]] = {}
        self.syncs: dict[str, Callable[[SyncResult], None]] = {}

    def park_join(self, member_id: str, done: Callable[[JoinResult], None]) -> None:
        """A member's newer join replaces one still parked: the old request is answered
        first."""
        previous = self.joins.pop(member_id, None)
        if previous is not None:
            previous(JoinResult(ErrorCode.REBALANCE_IN_PROGRESS, member_id))
        self.joins[member_id] = done

    def park_sync(self, member_id: str, done: Callable[[SyncResult], None]) -> None:
        previous = self.syncs.pop(member_id, None)
        if previous is not None:
            previous(SyncResult(ErrorCode.REBALANCE_IN_PROGRESS))
        self.syncs[member_id] = done

    def resolve(self, effects: Effects) -> None:
        """Answer the parked requests ``effects`` decided."""
        for member_id, join in effects.joins.items():
            join_done = self.joins.pop(member_id, None)
            if join_done is not None:
                join_done(join)
        for member_id, sync in effects.syncs.items():
            sync_done = self.syncs.pop(member_id, None)
            if sync_done is not None:
                sync_done(sync)


class MembershipApis:
    """JoinGroup, SyncGroup, Heartbeat and LeaveGroup. ``apply`` carries out a manager's
    effects (parked answers, group metadata appends) for its partition."""

    def __init__(
        self,
        *,
        lookup: Lookup,
        apply: Callable[[int, Effects], None],
        parked: ParkedRequests,
        clock: Clock,
        authorizer: AuthorizerOf,
        respond: Respond,
    ) -> None:
        self._lookup = lookup
        self._apply = apply
        self._parked = parked
        self._clock = clock
        self._authorizer = authorizer
        self._respond = respond

    def _refused(self, header: RequestHeader, group_id: str) -> bool:
        """Every membership API needs READ on the group (Kafka's KafkaApis)."""
        return group_refused(self._authorizer(), header, AclOperation.READ, group_id)

    # --- JoinGroup (11) --------------------------------------------------------------------

    def _join_response(self, header: RequestHeader, r: JoinResult) -> Any:
        members = [
            {
                "member_id": m.member_id,
                "group_instance_id": m.group_instance_id,
                "metadata": m.metadata,
            }
            for m in r.members
        ]
        return self._respond(
            header,
            {
                "error_code": r.error,
                "generation_id": r.generation_id,
                "protocol_type": r.protocol_type,
                "protocol_name": r.protocol_name or ("" if header.api_version < 7 else None),
                "leader": r.leader,
                "skip_assignment": r.skip_assignment,
                "member_id": r.member_id,
                "members": members,
            },
        )

    def handle_join_group(self, header: RequestHeader, body: Any) -> Any:
        group_id = str(body.group_id)
        member_id = str(body.member_id or "")
        if self._refused(header, group_id):
            return self._join_response(
                header, JoinResult(ErrorCode.GROUP_AUTHORIZATION_FAILED, member_id)
            )
        p, manager, error = self._lookup(group_id) if group_id else (-1, None, ErrorCode.NONE)
        if group_id and manager is None:
            return self._join_response(header, JoinResult(error, member_id))
        request = _join_request(header, body, group_id, member_id)
        if manager is None:  # the empty group id
            return self._join_response(header, JoinResult(ErrorCode.INVALID_GROUP_ID, member_id))
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()

        def done(r: JoinResult) -> None:
            if not future.done():
                future.set_result(self._join_response(header, r))

        result, parked, effects = manager.join_group(request, self._clock())
        if result is not None:
            self._apply(p, effects)
            return self._join_response(header, result)
        self._parked.park_join(parked, done)
        self._apply(p, effects)
        return future

    # --- SyncGroup (14) --------------------------------------------------------------------

    def handle_sync_group(self, header: RequestHeader, body: Any) -> Any:
        def response(r: SyncResult) -> Any:
            return self._respond(
                header,
                {
                    "error_code": r.error,
                    "protocol_type": r.protocol_type,
                    "protocol_name": r.protocol_name,
                    "assignment": r.assignment,
                },
            )

        group_id = str(body.group_id)
        member_id = str(body.member_id)
        if self._refused(header, group_id):
            return response(SyncResult(ErrorCode.GROUP_AUTHORIZATION_FAILED))
        p, manager, error = self._lookup(group_id) if group_id else (-1, None, ErrorCode.NONE)
        if manager is None:
            return response(SyncResult(error if group_id else ErrorCode.INVALID_GROUP_ID))
        result, effects = manager.sync_group(
            group_id,
            generation_id=int(body.generation_id),
            member_id=member_id,
            group_instance_id=getattr(body, "group_instance_id", None),
            protocol_type=getattr(body, "protocol_type", None),
            protocol_name=getattr(body, "protocol_name", None),
            assignments={str(a.member_id): bytes(a.assignment) for a in body.assignments},
            now_ms=self._clock(),
        )
        if result is not None:
            self._apply(p, effects)
            return response(result)
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()

        def done(r: SyncResult) -> None:
            if not future.done():
                future.set_result(response(r))

        self._parked.park_sync(member_id, done)
        self._apply(p, effects)
        return future

    # --- Heartbeat (12), LeaveGroup (13) ---------------------------------------------------

    def handle_heartbeat(self, header: RequestHeader, body: Any) -> Any:
        group_id = str(body.group_id)
        if self._refused(header, group_id):
            return self._respond(header, {"error_code": ErrorCode.GROUP_AUTHORIZATION_FAILED})
        _p, manager, error = self._lookup(group_id) if group_id else (-1, None, ErrorCode.NONE)
        if manager is not None:
            error = manager.heartbeat(
                group_id,
                int(body.generation_id),
                str(body.member_id),
                getattr(body, "group_instance_id", None),
                self._clock(),
            )
        elif not group_id:
            error = ErrorCode.INVALID_GROUP_ID
        return self._respond(header, {"error_code": error})

    def handle_leave_group(self, header: RequestHeader, body: Any) -> Any:
        group_id = str(body.group_id)
        if self._refused(header, group_id):
            # Kafka's handleLeaveGroupRequest: the error alone, no member answers.
            return self._respond(
                header, {"error_code": ErrorCode.GROUP_AUTHORIZATION_FAILED, "members": []}
            )
        if header.api_version >= 3:
            members = [(str(m.member_id), m.group_instance_id) for m in body.members]
        else:
            members = [(str(body.member_id), None)]
        p, manager, error = self._lookup(group_id) if group_id else (-1, None, ErrorCode.NONE)
        member_errors: list[ErrorCode] = []
        if manager is not None:
            error, member_errors, effects = manager.leave_group(group_id, members, self._clock())
            self._apply(p, effects)
        elif not group_id:
            error = ErrorCode.INVALID_GROUP_ID
        if header.api_version < 3 and error == ErrorCode.NONE and member_errors:
            error = member_errors[0]
        return self._respond(
            header,
            {
                "error_code": error,
                "members": [
                    {"member_id": m, "group_instance_id": i, "error_code": e}
                    for (m, i), e in zip(members, member_errors, strict=False)
                ],
            },
        )


def _join_request(header: RequestHeader, body: Any, group_id: str, member_id: str) -> JoinRequest:
    """The state machine's view of a JoinGroup request."""
    session_ms = int(body.session_timeout.total_seconds() * 1000)
    rebalance = getattr(body, "rebalance_timeout", None)
    rebalance_ms = int(rebalance.total_seconds() * 1000) if rebalance is not None else -1
    return JoinRequest(
        group_id=group_id,
        member_id=member_id,
        group_instance_id=getattr(body, "group_instance_id", None),
        client_id=header.client_id or "",
        client_host=_host_of(client_host.get()),
        session_timeout_ms=session_ms,
        rebalance_timeout_ms=rebalance_ms if rebalance_ms > 0 else session_ms,
        protocol_type=str(body.protocol_type),
        protocols=tuple((str(p.name), bytes(p.metadata)) for p in body.protocols),
        require_known_member_id=header.api_version >= 4,
    )


__all__ = ["MembershipApis", "ParkedRequests", "client_host"]
