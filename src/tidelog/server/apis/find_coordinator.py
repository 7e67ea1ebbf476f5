"""FindCoordinator (10): which broker coordinates a group (key type 0, the leader of its
``__consumer_offsets`` partition) or a transactional id (key type 1, answered by the
transaction coordinator), creating the internal topic on first use (Kafka's
``handleFindCoordinatorRequest`` and ``getCoordinator``)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from tidelog.client.transactions import COORDINATOR_GROUP, COORDINATOR_TRANSACTION
from tidelog.coordinator import partition_for
from tidelog.errors import ErrorCode
from tidelog.model import TopicPartition
from tidelog.protocol.apis import ApiKey
from tidelog.protocol.codec import RequestHeader
from tidelog.security.acls import AclOperation, ResourceType
from tidelog.server.apis.helper import RequestHelper
from tidelog.server.auth import authz
from tidelog.server.coordinators.group import GroupCoordinator
from tidelog.server.coordinators.group_common import AuthorizerOf, Respond
from tidelog.server.coordinators.internal_topics import OFFSETS_TOPIC

#: A partition's leader as clients reach it: (node id, host, port).
Leader = tuple[int, str, int]


class TransactionFinder(Protocol):
    """The transaction coordinator's part of FindCoordinator (key type 1)."""

    async def find(self, key: str) -> tuple[ErrorCode, str | None, Leader | None]: ...


class FindCoordinatorApis:
    """FindCoordinator. ``ensure_offsets_topic``: ``__consumer_offsets``'s partition count,
    creating it first (0 while it is not there yet); ``leader_of``: a partition's leader for
    clients; ``transactions``: the transaction coordinator now (None: key type 1 is an
    unknown type)."""

    def __init__(
        self,
        *,
        ensure_offsets_topic: Callable[[], Awaitable[int]],
        leader_of: Callable[[TopicPartition], Leader | None],
        transactions: Callable[[], TransactionFinder | None],
        authorizer: AuthorizerOf,
        respond: Respond,
    ) -> None:
        self._ensure_offsets_topic = ensure_offsets_topic
        self._leader_of = leader_of
        self._transactions = transactions
        self._authorizer = authorizer
        self._respond = respond

    @classmethod
    def serving(
        cls, groups: GroupCoordinator, transactions: TransactionFinder, helper: RequestHelper
    ) -> FindCoordinatorApis:
        """FindCoordinator for ``groups`` (key type 0) and ``transactions`` (key type 1)."""
        return cls(
            ensure_offsets_topic=groups.ensure_offsets_topic,
            leader_of=groups.leader_for_client,
            transactions=lambda: transactions,
            authorizer=lambda: helper.authorizer,
            respond=helper.respond,
        )

    def handlers(self) -> dict[int, Callable[[RequestHeader, Any], Any]]:
        return {ApiKey.FIND_COORDINATOR: self.handle_find_coordinator}

    def handle_find_coordinator(self, header: RequestHeader, body: Any) -> Any:
        keys = list(body.coordinator_keys) if header.api_version >= 4 else [body.key]
        key_type = int(getattr(body, "key_type", 0))

        async def run() -> Any:
            answers = [
                self._refusal(header, key_type, str(k)) or await self._find(key_type, str(k))
                for k in keys
            ]
            if header.api_version >= 4:
                return self._respond(header, {"coordinators": answers})
            return self._respond(header, answers[0])

        return asyncio.ensure_future(run())

    def _refusal(self, header: RequestHeader, key_type: int, key: str) -> dict[str, Any] | None:
        """DESCRIBE on the group, or on the transactional id (Kafka's getCoordinator); the
        message only where the version has one per answer (v0-v3)."""
        authorizer = self._authorizer()
        if authorizer is None:
            return None
        if key_type == COORDINATOR_GROUP:
            resource, error = ResourceType.GROUP, ErrorCode.GROUP_AUTHORIZATION_FAILED
        elif key_type == COORDINATOR_TRANSACTION:
            resource = ResourceType.TRANSACTIONAL_ID
            error = ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        else:
            return None
        if authorizer.authorize(AclOperation.DESCRIBE, resource, key, api_key=header.api_key):
            return None
        return {
            "key": key,
            "error_code": error,
            "error_message": authz.MESSAGES[error] if header.api_version < 4 else None,
            "node_id": -1,
            "host": "",
            "port": -1,
        }

    async def _find(self, key_type: int, key: str) -> dict[str, Any]:
        def error(code: ErrorCode, message: str) -> dict[str, Any]:
            return {
                "key": key,
                "error_code": code,
                "error_message": message,
                "node_id": -1,
                "host": "",
                "port": -1,
            }

        transactions = self._transactions()
        if key_type == COORDINATOR_TRANSACTION and transactions is not None:
            code, message, found = await transactions.find(key)
            if found is None:
                return error(code, message or code.name)
        elif key_type != COORDINATOR_GROUP:
            # Kafka: InvalidRequestException("Unknown coordinator type ...").
            return error(ErrorCode.INVALID_REQUEST, f"unknown coordinator key type {key_type}")
        else:
            # An empty group id is Kafka's too: it has a coordinator (partition 0), and the
            # group APIs answer it INVALID_GROUP_ID (24).
            count = await self._ensure_offsets_topic()
            if count == 0:
                return error(ErrorCode.COORDINATOR_NOT_AVAILABLE, "creating __consumer_offsets")
            found = self._leader_of(TopicPartition(OFFSETS_TOPIC, partition_for(key, count)))
            if found is None:
                return error(ErrorCode.COORDINATOR_NOT_AVAILABLE, "no leader for its partition")
        node_id, host, port = found
        return {
            "key": key,
            "error_code": ErrorCode.NONE,
            "error_message": None,
            "node_id": node_id,
            "host": host,
            "port": port,
        }


__all__ = ["FindCoordinatorApis", "Leader", "TransactionFinder"]
