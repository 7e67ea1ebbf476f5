"""What the group coordinator's handler groups share: the shapes of the callables they
receive from ``GroupCoordinator`` and the group and topic ACL checks they make (Kafka's
KafkaApis authorizations, through ``tidelog.server.auth.authz``)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Protocol

from tidelog.coordinator.group import GroupManager
from tidelog.errors import ErrorCode
from tidelog.protocol.codec import RequestHeader
from tidelog.security.acls import AclOperation, ResourceType
from tidelog.server.auth import authz

if TYPE_CHECKING:
    from tidelog.server.auth.authorizer import AclAuthorizer

#: Records for ``__consumer_offsets``: (key, value), a None value is a tombstone.
Entries = list[tuple[bytes, bytes | None]]
#: Builds the response of a request from its fields.
Respond = Callable[[RequestHeader, Mapping[str, Any]], Any]
#: The broker's ACL authorizer now (None: everything is allowed); read per request.
AuthorizerOf = Callable[[], "AclAuthorizer | None"]
#: A group's ``__consumer_offsets`` partition and manager here, or NOT_COORDINATOR.
Lookup = Callable[[str], tuple[int, GroupManager | None, ErrorCode]]
#: The coordinator's clock (ms).
Clock = Callable[[], int]


class Append(Protocol):
    """Appends records to a ``__consumer_offsets`` partition as one batch with acks=all:
    the batch's base offset (-1 when refused) and a future resolving once replicated."""

    def __call__(
        self, p: int, entries: Entries, producer_id: int = -1, producer_epoch: int = -1
    ) -> tuple[int, asyncio.Future[ErrorCode]]: ...


def group_refused(
    authorizer: AclAuthorizer | None,
    header: RequestHeader,
    operation: AclOperation,
    group_id: str,
) -> bool:
    """``operation`` on group ``group_id`` is not allowed to the current request."""
    return not authz.allowed(authorizer, operation, ResourceType.GROUP, group_id, header.api_key)


def topics_refused(
    authorizer: AclAuthorizer | None,
    header: RequestHeader,
    operation: AclOperation,
    names: list[str],
) -> frozenset[str]:
    """The topics of ``names`` on which ``operation`` is not allowed to the current request."""
    return authz.denied_names(authorizer, operation, ResourceType.TOPIC, names, header.api_key)


__all__ = [
    "Append",
    "AuthorizerOf",
    "Clock",
    "Entries",
    "Lookup",
    "Respond",
    "group_refused",
    "topics_refused",
]
