"""Partition reassignment requests on ``tidelog.client.Client`` (KIP-455):
AlterPartitionReassignments (45) and ListPartitionReassignments (46), as Kafka's
``Admin.alterPartitionReassignments`` / ``listPartitionReassignments`` send them.

Rules:

1. Both go to the active controller (Kafka's admin client routes them with its
   ``ControllerNodeProvider``): the controller named by the latest Metadata. A top-level
   NOT_CONTROLLER (the controller moved, or the metadata was stale) refreshes the metadata
   and sends again, until ``timeout_ms`` has passed; so does a connection that breaks while
   the controller changes.
2. Each speaks v0 (v1 of Alter only adds ``allow_replication_factor_change``, KIP-860,
   whose default is Kafka's behaviour anyway); a broker advertising neither version raises
   ``NoCompatibleVersionError``.
3. A top-level error other than NOT_CONTROLLER (CLUSTER_AUTHORIZATION_FAILED, ...) raises
   ``BrokerError`` with the broker's message; per-partition errors of Alter
   (INVALID_REPLICA_ASSIGNMENT, UNKNOWN_TOPIC_OR_PARTITION, NO_REASSIGNMENT_IN_PROGRESS,
   ...) come back as values with their messages. A partition the answer leaves out reads as
   UNKNOWN_SERVER_ERROR; an error code the client does not know, likewise.
4. ``replicas=None`` for a partition cancels its reassignment; List answers only the
   partitions being reassigned, each with the full replica set RS (target + the original
   replicas that are leaving), ``adding`` (target - original) and ``removing`` (original -
   target), from which the target and the original replicas follow.
5. Requests are built and responses read by pure functions (``*_request``, ``read_*``).
"""

from __future__ import annotations

import asyncio
import datetime
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, TypeVar

from tidelog.client import wire
from tidelog.client.client import Client
from tidelog.client.connection import BrokerConnection
from tidelog.client.errors import (
    BrokerError,
    ClientConnectionError,
    ClientTimeoutError,
    NoCompatibleVersionError,
)
from tidelog.errors import ErrorCode
from tidelog.model import TopicPartition
from tidelog.protocol.apis import ApiKey

#: Rule 2.
_PREFERRED: Final[Mapping[ApiKey, tuple[int, ...]]] = {
    ApiKey.ALTER_PARTITION_REASSIGNMENTS: (0,),
    ApiKey.LIST_PARTITION_REASSIGNMENTS: (0,),
}
#: Kafka's default.api.timeout.ms for these calls.
DEFAULT_TIMEOUT_MS: Final = 60_000
#: Pause before asking the (new) controller again (rule 1).
RETRY_BACKOFF_S: Final = 0.2

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class AlterResult:
    """Alter's answer for one partition (NONE: started, replaced, or cancelled)."""

    error_code: ErrorCode
    error_message: str | None = None


@dataclass(frozen=True, slots=True)
class OngoingReassignment:
    """List's answer for one partition being reassigned (Kafka's PartitionReassignment)."""

    #: RS: the full replica set while the reassignment runs.
    replicas: tuple[int, ...]
    adding: tuple[int, ...] = ()
    removing: tuple[int, ...] = ()

    @property
    def target(self) -> tuple[int, ...]:
        """TRS: the replicas once it completes."""
        return tuple(r for r in self.replicas if r not in self.removing)

    @property
    def origin(self) -> tuple[int, ...]:
        """ORS: the replicas before it started."""
        return tuple(r for r in self.replicas if r not in self.adding)


def _pick(conn: BrokerConnection, api_key: ApiKey) -> int:
    version = conn.pick_version(api_key, _PREFERRED[api_key])
    if version is None:
        raise NoCompatibleVersionError(
            f"{conn.address} does not support {api_key.name} (API {int(api_key)}); this "
            f"client speaks versions {sorted(_PREFERRED[api_key])}"
        )
    return version


def _by_topic(partitions: Iterable[TopicPartition]) -> dict[str, list[int]]:
    grouped: dict[str, list[int]] = {}
    for tp in sorted(set(partitions)):
        grouped.setdefault(tp.topic, []).append(tp.partition)
    return grouped


# --- pure: requests and answers (rule 5) ----------------------------------------------------


def alter_partition_reassignments_request(
    reassignments: Mapping[TopicPartition, Sequence[int] | None],
    *,
    timeout_ms: int = DEFAULT_TIMEOUT_MS,
    version: int = 0,
) -> Any:
    """Partitions grouped by topic, in order; ``None`` replicas cancel (rule 4)."""
    m = wire.schema_module(ApiKey.ALTER_PARTITION_REASSIGNMENTS, version)
    grouped: dict[str, list[Any]] = {}
    for tp in sorted(reassignments):
        replicas = reassignments[tp]
        grouped.setdefault(tp.topic, []).append(
            m.ReassignablePartition(
                partition_index=tp.partition,
                replicas=None if replicas is None else tuple(int(r) for r in replicas),
            )
        )
    return m.AlterPartitionReassignmentsRequest(
        timeout=datetime.timedelta(milliseconds=timeout_ms),
        topics=tuple(
            m.ReassignableTopic(name=topic, partitions=tuple(ps)) for topic, ps in grouped.items()
        ),
    )


def read_alter_partition_reassignments(
    response: Any,
) -> tuple[ErrorCode, str | None, dict[TopicPartition, AlterResult]]:
    """(top-level error, its message, the answer per partition)."""
    results = {
        TopicPartition(str(t.name), int(p.partition_index)): AlterResult(
            wire.error_code(p.error_code), p.error_message
        )
        for t in response.responses
        for p in t.partitions
    }
    return wire.error_code(response.error_code), response.error_message, results


def list_partition_reassignments_request(
    partitions: Iterable[TopicPartition] | None = None,
    *,
    timeout_ms: int = DEFAULT_TIMEOUT_MS,
    version: int = 0,
) -> Any:
    """``None``: every partition being reassigned."""
    m = wire.schema_module(ApiKey.LIST_PARTITION_REASSIGNMENTS, version)
    topics = (
        None
        if partitions is None
        else tuple(
            m.ListPartitionReassignmentsTopics(name=topic, partition_indexes=tuple(ps))
            for topic, ps in _by_topic(partitions).items()
        )
    )
    return m.ListPartitionReassignmentsRequest(
        timeout=datetime.timedelta(milliseconds=timeout_ms), topics=topics
    )


def read_list_partition_reassignments(
    response: Any,
) -> tuple[ErrorCode, str | None, dict[TopicPartition, OngoingReassignment]]:
    ongoing = {
        TopicPartition(str(t.name), int(p.partition_index)): OngoingReassignment(
            replicas=tuple(int(r) for r in p.replicas),
            adding=tuple(int(r) for r in p.adding_replicas),
            removing=tuple(int(r) for r in p.removing_replicas),
        )
        for t in response.topics
        for p in t.partitions
    }
    return wire.error_code(response.error_code), response.error_message, ongoing


# --- the calls ------------------------------------------------------------------------------


async def _at_controller(
    client: Client,
    api_key: ApiKey,
    exchange: Callable[[BrokerConnection, int], Awaitable[tuple[ErrorCode, str | None, T]]],
    timeout_ms: int,
) -> T:
    """Rules 1 and 3: ``exchange`` at the controller, again after NOT_CONTROLLER."""
    deadline = time.monotonic() + timeout_ms / 1000
    refresh = False
    while True:
        try:
            cluster = client.cluster
            if refresh or cluster is None or cluster.controller_id not in cluster.brokers:
                cluster = await client.metadata([])
            node = cluster.controller_id if cluster.controller_id in cluster.brokers else None
            conn = await client.connection(node)
            version = _pick(conn, api_key)
            error, message, result = await exchange(conn, version)
        except (ClientConnectionError, ClientTimeoutError):
            # The controller may have died or moved: ask the metadata again.
            if time.monotonic() >= deadline:
                raise
        else:
            if error == ErrorCode.NONE:
                return result
            if error != ErrorCode.NOT_CONTROLLER or time.monotonic() >= deadline:
                raise BrokerError(error, message or "")
        refresh = True
        await asyncio.sleep(RETRY_BACKOFF_S)


async def alter_partition_reassignments(
    client: Client,
    reassignments: Mapping[TopicPartition, Sequence[int] | None],
    *,
    timeout_ms: int = DEFAULT_TIMEOUT_MS,
) -> dict[TopicPartition, AlterResult]:
    """Start, replace (replicas) or cancel (``None``) reassignments: the answer for every
    partition asked (rules 3 and 4)."""
    if not reassignments:
        return {}

    async def exchange(
        conn: BrokerConnection, version: int
    ) -> tuple[ErrorCode, str | None, dict[TopicPartition, AlterResult]]:
        request = alter_partition_reassignments_request(
            reassignments, timeout_ms=timeout_ms, version=version
        )
        response = await conn.send(
            request, timeout_s=max(conn.request_timeout_s, timeout_ms / 1000 + 5)
        )
        return read_alter_partition_reassignments(response)

    answered = await _at_controller(
        client, ApiKey.ALTER_PARTITION_REASSIGNMENTS, exchange, timeout_ms
    )
    missing = AlterResult(ErrorCode.UNKNOWN_SERVER_ERROR, "the controller's answer left it out")
    return {tp: answered.get(tp, missing) for tp in reassignments}


async def list_partition_reassignments(
    client: Client,
    partitions: Iterable[TopicPartition] | None = None,
    *,
    timeout_ms: int = DEFAULT_TIMEOUT_MS,
) -> dict[TopicPartition, OngoingReassignment]:
    """The partitions (of ``partitions``, or all) being reassigned right now."""
    wanted = None if partitions is None else list(partitions)
    if wanted is not None and not wanted:
        return {}

    async def exchange(
        conn: BrokerConnection, version: int
    ) -> tuple[ErrorCode, str | None, dict[TopicPartition, OngoingReassignment]]:
        request = list_partition_reassignments_request(
            wanted, timeout_ms=timeout_ms, version=version
        )
        response = await conn.send(
            request, timeout_s=max(conn.request_timeout_s, timeout_ms / 1000 + 5)
        )
        return read_list_partition_reassignments(response)

    return await _at_controller(client, ApiKey.LIST_PARTITION_REASSIGNMENTS, exchange, timeout_ms)


__all__ = [
    "DEFAULT_TIMEOUT_MS",
    "AlterResult",
    "OngoingReassignment",
    "alter_partition_reassignments",
    "alter_partition_reassignments_request",
    "list_partition_reassignments",
    "list_partition_reassignments_request",
    "read_alter_partition_reassignments",
    "read_list_partition_reassignments",
]
