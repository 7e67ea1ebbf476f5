"""The async client: one connection per broker, metadata-driven routing, helpers.

``Client`` bootstraps from ``host:port`` strings, learns the brokers from Metadata and keeps
one ``BrokerConnection`` per broker (opened on first use). Helpers pick, for each API, the
highest version both sides speak (``_PREFERRED``), route the request (a partition's leader,
a given node, any broker) and leave building the request and reading the answer to the
module of its job: ``metadata``, ``produce``, ``fetch``, ``offsets``, ``topic_admin`` and
``transactions``. They return small values (``ErrorCode`` per partition) rather than
raising for per-partition errors, because those are expected outcomes. ``send`` is there
for anything else.

The result types and constants of those modules are importable from here too.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Collection, Iterable, Mapping, Sequence
from typing import Any, Final

from tidelog.client import describe_txn
from tidelog.client.connection import (
    DEFAULT_CONNECT_TIMEOUT_S,
    DEFAULT_REQUEST_TIMEOUT_S,
    BrokerConnection,
)
from tidelog.client.errors import ClientConnectionError, NoCompatibleVersionError
from tidelog.client.fetch import (
    READ_COMMITTED,
    READ_UNCOMMITTED,
    FetchRequestPartition,
    FetchResult,
    fetch_request,
    read_fetch,
)
from tidelog.client.fetch_session import FetchSessionHandler
from tidelog.client.metadata import (
    BrokerMetadata,
    ClusterMetadata,
    PartitionMetadata,
    TopicMetadata,
    metadata_request,
    read_metadata,
)
from tidelog.client.offsets import (
    EpochEndOffset,
    ListOffsetsResult,
    list_offsets_request,
    offset_for_leader_epoch_request,
    read_list_offsets,
    read_offset_for_leader_epoch,
)
from tidelog.client.produce import ProduceResult, produce_request, read_produce
from tidelog.client.topic_admin import (
    NewTopic,
    TopicError,
    create_topics_request,
    delete_topics_request,
    read_create_topics,
    read_delete_topics,
)
from tidelog.client.transactions import (
    COORDINATOR_GROUP,
    COORDINATOR_TRANSACTION,
    CoordinatorResult,
    ProducerIdResult,
    TransactionDescription,
    add_partitions_to_txn_request,
    describe_transactions_request,
    end_txn_request,
    find_coordinator_request,
    init_producer_id_request,
    read_add_partitions_to_txn,
    read_describe_transactions,
    read_find_coordinator,
    read_init_producer_id,
)
from tidelog.client.wire import error_code
from tidelog.errors import ErrorCode
from tidelog.model import TopicPartition
from tidelog.protocol.apis import ApiKey
from tidelog.protocol.list_offsets import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, MAX_TIMESTAMP
from tidelog.security.client_config import PLAINTEXT, ClientSecurity

__all__ = [
    "COORDINATOR_GROUP",
    "COORDINATOR_TRANSACTION",
    "EARLIEST_TIMESTAMP",
    "LATEST_TIMESTAMP",
    "MAX_TIMESTAMP",
    "READ_COMMITTED",
    "READ_UNCOMMITTED",
    "BrokerMetadata",
    "Client",
    "ClusterMetadata",
    "CoordinatorResult",
    "EpochEndOffset",
    "FetchRequestPartition",
    "FetchResult",
    "ListOffsetsResult",
    "NewTopic",
    "PartitionMetadata",
    "ProduceResult",
    "ProducerIdResult",
    "TopicError",
    "TopicMetadata",
    "TransactionDescription",
    "parse_bootstrap",
]

#: Versions each helper speaks, best first (names, not topic ids, for simplicity).
_PREFERRED: Final[Mapping[ApiKey, tuple[int, ...]]] = {
    ApiKey.METADATA: (12, 11, 10, 9, 8, 7, 6, 5, 4),
    ApiKey.PRODUCE: (9, 8, 7, 6, 5, 4, 3),
    ApiKey.FETCH: (12, 11, 10, 9, 8, 7, 6, 5, 4),
    ApiKey.LIST_OFFSETS: (7, 6, 5, 4, 3, 2, 1),
    ApiKey.CREATE_TOPICS: (5, 4, 3, 2),
    ApiKey.DELETE_TOPICS: (4, 3, 2, 1),
    ApiKey.OFFSET_FOR_LEADER_EPOCH: (4, 3, 2),
    ApiKey.FIND_COORDINATOR: (6, 5, 4, 3, 2, 1),
    ApiKey.INIT_PRODUCER_ID: (4, 3, 2, 1, 0),
    ApiKey.ADD_PARTITIONS_TO_TXN: (3, 2, 1, 0),
    ApiKey.END_TXN: (4, 3, 2, 1, 0),
    ApiKey.DESCRIBE_TRANSACTIONS: (0,),
}


def parse_bootstrap(servers: str | Sequence[str]) -> list[tuple[str, int]]:
    """``"h1:9092,h2:9093"`` (or a list of ``host:port``) -> [(host, port)]."""
    items = servers.split(",") if isinstance(servers, str) else list(servers)
    result = []
    for item in items:
        host, sep, port = item.strip().rpartition(":")
        if not sep or not host or not port.isdigit():
            raise ValueError(f"bootstrap server {item!r} is not host:port")
        result.append((host.strip("[]"), int(port)))
    if not result:
        raise ValueError("no bootstrap servers given")
    return result


# --- the client --------------------------------------------------------------------------


class Client:
    """Async client for a tidelog (or Kafka) cluster. Use ``async with Client(...)``."""

    def __init__(
        self,
        bootstrap_servers: str | Sequence[str],
        *,
        client_id: str = "tidelog",
        request_timeout_s: float = DEFAULT_REQUEST_TIMEOUT_S,
        connect_timeout_s: float = DEFAULT_CONNECT_TIMEOUT_S,
        security: ClientSecurity = PLAINTEXT,
    ) -> None:
        self.bootstrap = parse_bootstrap(bootstrap_servers)
        #: TLS and SASL for every connection (``tidelog.security.client_config``).
        self.security = security
        self.client_id = client_id
        self.request_timeout_s = request_timeout_s
        self.connect_timeout_s = connect_timeout_s
        self.cluster: ClusterMetadata | None = None
        self._by_address: dict[tuple[str, int], BrokerConnection] = {}
        self._connecting: dict[tuple[str, int], asyncio.Future[BrokerConnection]] = {}

    async def __aenter__(self) -> Client:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    async def close(self) -> None:
        connections, self._by_address = list(self._by_address.values()), {}
        for conn in connections:
            await conn.close()

    # connections

    async def connection_to(self, host: str, port: int) -> BrokerConnection:
        """The connection to ``host:port``, opened (and negotiated) on first use."""
        key = (host, port)
        conn = self._by_address.get(key)
        if conn is not None and not conn.is_closed:
            return conn
        pending = self._connecting.get(key)
        if pending is not None:
            return await asyncio.shield(pending)
        future: asyncio.Future[BrokerConnection] = asyncio.get_running_loop().create_future()
        self._connecting[key] = future
        try:
            conn = await BrokerConnection.connect(
                host,
                port,
                client_id=self.client_id,
                connect_timeout_s=self.connect_timeout_s,
                request_timeout_s=self.request_timeout_s,
                security=self.security,
            )
        except BaseException as exc:
            future.set_exception(exc)
            future.exception()  # mark retrieved: waiters re-raise it themselves
            raise
        finally:
            self._connecting.pop(key, None)
        self._by_address[key] = conn
        future.set_result(conn)
        return conn

    async def any_connection(self) -> BrokerConnection:
        """A connection to some broker: an open one, else the bootstrap servers in order."""
        for conn in self._by_address.values():
            if not conn.is_closed:
                return conn
        errors = []
        candidates = list(self.bootstrap)
        if self.cluster is not None:
            candidates += [(b.host, b.port) for b in self.cluster.brokers.values()]
        for host, port in candidates:
            try:
                return await self.connection_to(host, port)
            except ClientConnectionError as exc:
                errors.append(str(exc))
        raise ClientConnectionError("no broker reachable: " + "; ".join(errors))

    async def connection(self, node_id: int | None = None) -> BrokerConnection:
        """The connection to broker ``node_id`` (any broker when None)."""
        if node_id is None:
            return await self.any_connection()
        if self.cluster is None or node_id not in self.cluster.brokers:
            await self.metadata()
        assert self.cluster is not None
        broker = self.cluster.brokers.get(node_id)
        if broker is None:
            raise ClientConnectionError(f"broker {node_id} is not in the cluster metadata")
        return await self.connection_to(broker.host, broker.port)

    async def leader_connection(self, tp: TopicPartition) -> BrokerConnection:
        """The connection to ``tp``'s leader (metadata refreshed once if unknown)."""
        leader = self.cluster.leader_for(tp) if self.cluster else None
        if leader is None:
            await self.metadata([tp.topic])
            assert self.cluster is not None
            leader = self.cluster.leader_for(tp)
        if leader is None:
            raise ClientConnectionError(f"{tp} has no known leader")
        return await self.connection(leader)

    async def _partition_connection(
        self, tp: TopicPartition, node_id: int | None
    ) -> BrokerConnection:
        """Broker ``node_id``'s connection when given, else ``tp``'s leader's."""
        if node_id is not None:
            return await self.connection(node_id)
        return await self.leader_connection(tp)

    @staticmethod
    def _version(conn: BrokerConnection, api_key: ApiKey) -> int:
        version = conn.pick_version(api_key, _PREFERRED[api_key])
        if version is None:
            raise NoCompatibleVersionError(
                f"{conn.address} advertises {api_key.name} "
                f"{conn.api_versions.get(api_key, 'not at all')}; this client speaks "
                f"{sorted(_PREFERRED[api_key])}"
            )
        return version

    async def send(
        self, body: Any, *, node_id: int | None = None, timeout_s: float | None = None
    ) -> Any:
        """Send any request entity to a broker (any broker when ``node_id`` is None)."""
        conn = await self.connection(node_id)
        return await conn.send(body, timeout_s=timeout_s)

    # helpers

    async def api_versions(self, node_id: int | None = None) -> dict[int, tuple[int, int]]:
        conn = await self.connection(node_id)
        return await conn.negotiate()

    async def metadata(
        self,
        topics: Iterable[str] | None = None,
        *,
        allow_auto_topic_creation: bool = False,
        node_id: int | None = None,
    ) -> ClusterMetadata:
        """Metadata for ``topics`` (all topics when None); also refreshes ``self.cluster``."""
        conn = await self.connection(node_id)
        version = self._version(conn, ApiKey.METADATA)
        response = await conn.send(
            metadata_request(version, topics, allow_auto_topic_creation=allow_auto_topic_creation)
        )
        cluster = read_metadata(response)
        if topics is not None and self.cluster is not None:
            # Partial refresh: keep what we knew of other topics.
            cluster = dataclasses.replace(cluster, topics={**self.cluster.topics, **cluster.topics})
        self.cluster = cluster
        return cluster

    async def produce(
        self,
        tp: TopicPartition,
        records: bytes,
        *,
        acks: int = -1,
        timeout_ms: int = 30000,
        node_id: int | None = None,
        transactional_id: str | None = None,
    ) -> ProduceResult | None:
        """Produce v2 batches (``records``: whole batches) to one partition.

        Goes to the partition's leader unless ``node_id`` is given. Returns None for acks=0
        (the broker sends no response).
        """
        conn = await (
            self.connection(node_id) if node_id is not None else self.leader_connection(tp)
        )
        version = self._version(conn, ApiKey.PRODUCE)
        request = produce_request(
            version,
            tp,
            records,
            acks=acks,
            timeout_ms=timeout_ms,
            transactional_id=transactional_id,
        )
        if acks == 0:
            await conn.send_no_response(request)
            return None
        response = await conn.send(
            request, timeout_s=max(self.request_timeout_s, timeout_ms / 1000 + 5)
        )
        result = read_produce(response, tp)
        if result is None:
            raise ClientConnectionError(f"Produce response from {conn.address} lacks {tp}")
        return result

    async def fetch(
        self,
        partitions: Mapping[TopicPartition, FetchRequestPartition],
        *,
        max_wait_ms: int = 500,
        min_bytes: int = 1,
        max_bytes: int = 50 * 1024 * 1024,
        replica_id: int = -1,
        isolation_level: int = 0,
        node_id: int | None = None,
        conn: BrokerConnection | None = None,
    ) -> dict[TopicPartition, FetchResult]:
        """Fetch from one broker (the first partition's leader unless ``node_id`` is given).

        ``replica_id`` >= 0 makes it a follower fetch (replication); ``conn`` sends on a
        given connection (a follower's fetcher to its leader). With ``isolation_level``
        ``READ_COMMITTED`` the broker returns records below the last stable offset only, and
        each result carries the aborted transactions overlapping what was returned.
        """
        if not partitions:
            return {}
        if conn is None:
            conn = await self._partition_connection(next(iter(partitions)), node_id)
        version = self._version(conn, ApiKey.FETCH)
        request = fetch_request(
            version,
            partitions,
            max_wait_ms=max_wait_ms,
            min_bytes=min_bytes,
            max_bytes=max_bytes,
            replica_id=replica_id,
            isolation_level=isolation_level,
        )
        response = await conn.send(
            request, timeout_s=max(self.request_timeout_s, max_wait_ms / 1000 + 5)
        )
        return read_fetch(response)

    async def session_fetch(
        self,
        session: FetchSessionHandler[FetchRequestPartition],
        partitions: Mapping[TopicPartition, FetchRequestPartition],
        *,
        conn: BrokerConnection,
        max_wait_ms: int,
        min_bytes: int,
        max_bytes: int,
        replica_id: int = -1,
        isolation_level: int = 0,
        changed: Collection[TopicPartition] | None = None,
    ) -> tuple[ErrorCode, dict[TopicPartition, FetchResult]]:
        """Fetch ``partitions`` from ``conn``'s broker in ``session`` (KIP-227,
        ``tidelog.client.fetch_session``): only what changed since the last call goes out,
        and only the partitions with news come back (the others are as last answered).
        ``changed``, when the caller knows it, holds every partition added, removed or with
        a new request since the last call (``FetchSessionHandler.build``).

        Returns the top-level error (a session error makes the next call a full fetch;
        UNKNOWN_SERVER_ERROR for an answer that breaks the session) and each answered
        partition's result. Below Fetch v7 (no sessions) every call is a full fetch.
        """
        version = self._version(conn, ApiKey.FETCH)
        if version < 7:
            return ErrorCode.NONE, await self.fetch(
                partitions,
                max_wait_ms=max_wait_ms,
                min_bytes=min_bytes,
                max_bytes=max_bytes,
                replica_id=replica_id,
                isolation_level=isolation_level,
                conn=conn,
            )
        step = session.build(partitions, changed)
        request = fetch_request(
            version,
            step.to_send,
            max_wait_ms=max_wait_ms,
            min_bytes=min_bytes,
            max_bytes=max_bytes,
            replica_id=replica_id,
            isolation_level=isolation_level,
            session_id=step.session_id,
            session_epoch=step.epoch,
            forgotten=step.to_forget,
        )
        try:
            response = await conn.send(
                request, timeout_s=max(self.request_timeout_s, max_wait_ms / 1000 + 5)
            )
        except BaseException:
            session.handle_error()
            raise
        error = error_code(response.error_code)
        results = read_fetch(response)
        if not session.handle_response(error, int(response.session_id), results):
            return (error if error != ErrorCode.NONE else ErrorCode.UNKNOWN_SERVER_ERROR), {}
        return ErrorCode.NONE, results

    async def list_offsets(
        self,
        partitions: Mapping[TopicPartition, int],
        *,
        isolation_level: int = 0,
        node_id: int | None = None,
    ) -> dict[TopicPartition, ListOffsetsResult]:
        """Offsets for timestamps (``LATEST_TIMESTAMP``, ``EARLIEST_TIMESTAMP``, ...).

        Without ``node_id`` each partition's leader is asked.
        """
        groups: dict[int | None, dict[TopicPartition, int]] = {}
        for tp, ts in partitions.items():
            target = node_id
            if target is None:
                await self.leader_connection(tp)  # refreshes metadata when the leader is unknown
                assert self.cluster is not None
                target = self.cluster.leader_for(tp)
            groups.setdefault(target, {})[tp] = ts
        results: dict[TopicPartition, ListOffsetsResult] = {}
        for target, group in groups.items():
            conn = await self.connection(target)
            version = self._version(conn, ApiKey.LIST_OFFSETS)
            response = await conn.send(
                list_offsets_request(version, group, isolation_level=isolation_level)
            )
            results.update(read_list_offsets(response))
        return results

    async def create_topics(
        self,
        topics: Sequence[NewTopic],
        *,
        timeout_ms: int = 30000,
        validate_only: bool = False,
        node_id: int | None = None,
    ) -> dict[str, TopicError]:
        """CreateTopics (send to the controller, or any broker that forwards)."""
        conn = await self.connection(node_id)
        version = self._version(conn, ApiKey.CREATE_TOPICS)
        request = create_topics_request(
            version, topics, timeout_ms=timeout_ms, validate_only=validate_only
        )
        response = await conn.send(
            request, timeout_s=max(self.request_timeout_s, timeout_ms / 1000 + 5)
        )
        return read_create_topics(response)

    async def delete_topics(
        self, names: Sequence[str], *, timeout_ms: int = 30000, node_id: int | None = None
    ) -> dict[str, TopicError]:
        conn = await self.connection(node_id)
        version = self._version(conn, ApiKey.DELETE_TOPICS)
        response = await conn.send(
            delete_topics_request(version, names, timeout_ms=timeout_ms),
            timeout_s=max(self.request_timeout_s, timeout_ms / 1000 + 5),
        )
        return read_delete_topics(response)

    async def offset_for_leader_epoch(
        self,
        partitions: Mapping[TopicPartition, tuple[int, int]],
        *,
        replica_id: int = -2,
        node_id: int | None = None,
        conn: BrokerConnection | None = None,
    ) -> dict[TopicPartition, EpochEndOffset]:
        """``partitions``: tp -> (leader_epoch asked about, current_leader_epoch or -1).

        Followers pass their ``replica_id`` (Kafka: -2 means a consumer / debugging tool).
        """
        if not partitions:
            return {}
        if conn is None:
            conn = await self._partition_connection(next(iter(partitions)), node_id)
        version = self._version(conn, ApiKey.OFFSET_FOR_LEADER_EPOCH)
        response = await conn.send(
            offset_for_leader_epoch_request(version, partitions, replica_id=replica_id)
        )
        return read_offset_for_leader_epoch(response)

    # transactions (KIP-98): the coordinator's APIs; send them to ``find_coordinator``'s node

    async def find_coordinator(
        self,
        key: str,
        *,
        key_type: int = COORDINATOR_TRANSACTION,
        node_id: int | None = None,
    ) -> CoordinatorResult:
        """FindCoordinator for one group id (key type 0) or transactional id (1)."""
        conn = await self.connection(node_id)
        version = self._version(conn, ApiKey.FIND_COORDINATOR)
        response = await conn.send(find_coordinator_request(version, key, key_type))
        result = read_find_coordinator(version, response, key)
        if result is None:
            raise ClientConnectionError(
                f"FindCoordinator response from {conn.address} lacks key {key!r}"
            )
        return result

    async def init_producer_id(
        self,
        transactional_id: str | None,
        *,
        transaction_timeout_ms: int,
        producer_id: int = -1,
        producer_epoch: int = -1,
        node_id: int | None = None,
    ) -> ProducerIdResult:
        """InitProducerId: a producer id and epoch. With a transactional id (at its
        coordinator), bumps the epoch, fencing older instances and aborting their open
        transaction (answered CONCURRENT_TRANSACTIONS until that abort is done)."""
        conn = await self.connection(node_id)
        version = self._version(conn, ApiKey.INIT_PRODUCER_ID)
        response = await conn.send(
            init_producer_id_request(
                version,
                transactional_id,
                transaction_timeout_ms=transaction_timeout_ms,
                producer_id=producer_id,
                producer_epoch=producer_epoch,
            )
        )
        return read_init_producer_id(response)

    async def add_partitions_to_txn(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        partitions: Iterable[TopicPartition],
        *,
        node_id: int | None = None,
    ) -> dict[TopicPartition, ErrorCode]:
        """AddPartitionsToTxn (v0-3): the partitions the running transaction writes to."""
        partitions = list(partitions)
        conn = await self.connection(node_id)
        version = self._version(conn, ApiKey.ADD_PARTITIONS_TO_TXN)
        response = await conn.send(
            add_partitions_to_txn_request(
                version, transactional_id, producer_id, producer_epoch, partitions
            )
        )
        return read_add_partitions_to_txn(response)

    async def end_txn(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        *,
        commit: bool,
        node_id: int | None = None,
    ) -> ErrorCode:
        """EndTxn: commit or abort the running transaction of ``producer_id``/epoch."""
        conn = await self.connection(node_id)
        version = self._version(conn, ApiKey.END_TXN)
        response = await conn.send(
            end_txn_request(version, transactional_id, producer_id, producer_epoch, commit=commit)
        )
        return error_code(response.error_code)

    async def describe_transactions(
        self, transactional_ids: Sequence[str], *, node_id: int | None = None
    ) -> list[TransactionDescription]:
        """DescribeTransactions v0 (at the ids' coordinator): one answer per id.

        Read with ``tidelog.client.describe_txn`` (kio cannot read the -1 start time of an
        id with no running transaction)."""
        conn = await self.connection(node_id)
        self._version(conn, ApiKey.DESCRIBE_TRANSACTIONS)
        response = await conn.send(
            describe_transactions_request(describe_txn.VERSION, transactional_ids),
            decode=describe_txn.decode,
        )
        return read_describe_transactions(response)
