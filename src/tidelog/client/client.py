"""The async client: one connection per broker, metadata-driven routing, helpers.

``Client`` bootstraps from ``host:port`` strings, learns the brokers from Metadata and keeps
one ``BrokerConnection`` per broker (opened on first use). Helpers pick, for each API, the
highest version both sides speak (``_PREFERRED``) and build the kio request for it; they
return small values (``ErrorCode`` per partition) rather than raising for per-partition
errors, because those are expected outcomes. ``send`` is there for anything else.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import importlib
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from kio.index import load_request_schema

from tidelog.client import describe_txn
from tidelog.client.connection import (
    DEFAULT_CONNECT_TIMEOUT_S,
    DEFAULT_REQUEST_TIMEOUT_S,
    BrokerConnection,
)
from tidelog.client.errors import ClientConnectionError, NoCompatibleVersionError
from tidelog.errors import ErrorCode
from tidelog.model import TopicPartition
from tidelog.protocol.apis import ApiKey
from tidelog.security.client_config import PLAINTEXT, ClientSecurity

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

#: ListOffsets timestamps with a special meaning (Kafka's ListOffsetsRequest).
LATEST_TIMESTAMP: Final = -1
EARLIEST_TIMESTAMP: Final = -2
MAX_TIMESTAMP: Final = -3

#: FindCoordinator key types.
COORDINATOR_GROUP: Final = 0
COORDINATOR_TRANSACTION: Final = 1

#: Fetch / ListOffsets isolation levels (KIP-98): read_committed reads up to the last stable
#: offset and gets the aborted transactions of what it fetched.
READ_UNCOMMITTED: Final = 0
READ_COMMITTED: Final = 1


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


def _schema_module(api_key: ApiKey, version: int) -> Any:
    return importlib.import_module(load_request_schema(api_key, version).__module__)


def _make(cls: type[Any], **kwargs: Any) -> Any:
    """Build a kio entity from the keyword arguments its version has (others dropped)."""
    names = {f.name for f in dataclasses.fields(cls)}
    return cls(**{k: v for k, v in kwargs.items() if k in names})


def _code(value: int) -> ErrorCode:
    """Our ``ErrorCode`` for a wire value; codes we do not know map to UNKNOWN_SERVER_ERROR."""
    try:
        return ErrorCode._value2member_map_[int(value)]  # type: ignore[return-value]
    except KeyError:
        return ErrorCode.UNKNOWN_SERVER_ERROR


def _ms(value: int) -> datetime.timedelta:
    return datetime.timedelta(milliseconds=value)


# --- results -----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class BrokerMetadata:
    node_id: int
    host: str
    port: int
    rack: str | None = None


@dataclass(frozen=True, slots=True)
class PartitionMetadata:
    partition: int
    error_code: ErrorCode
    leader_id: int
    leader_epoch: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    offline_replicas: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class TopicMetadata:
    name: str
    error_code: ErrorCode
    topic_id: uuid.UUID | None
    partitions: Mapping[int, PartitionMetadata]


@dataclass(frozen=True, slots=True)
class ClusterMetadata:
    cluster_id: str | None
    controller_id: int
    brokers: Mapping[int, BrokerMetadata]
    topics: Mapping[str, TopicMetadata]

    def leader_for(self, tp: TopicPartition) -> int | None:
        topic = self.topics.get(tp.topic)
        partition = topic.partitions.get(tp.partition) if topic else None
        if partition is None or partition.leader_id < 0:
            return None
        return partition.leader_id


@dataclass(frozen=True, slots=True)
class ProduceResult:
    error_code: ErrorCode
    base_offset: int
    log_append_time_ms: int = -1
    log_start_offset: int = -1
    error_message: str | None = None


@dataclass(frozen=True, slots=True)
class FetchResult:
    error_code: ErrorCode
    high_watermark: int
    last_stable_offset: int
    log_start_offset: int
    records: bytes
    #: (epoch, end_offset) when the broker detected divergence (v12+), else None.
    diverging_epoch: tuple[int, int] | None = None
    #: (leader_id, leader_epoch) when the broker says who leads now, else None.
    current_leader: tuple[int, int] | None = None
    #: read_committed: (producer id, first offset) of the aborted transactions that overlap
    #: the fetched range, as the broker listed them (empty when it sent none or null).
    aborted_transactions: list[tuple[int, int]] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class FetchRequestPartition:
    """One partition to fetch (the helper's input)."""

    fetch_offset: int
    partition_max_bytes: int = 1 << 20
    current_leader_epoch: int = -1
    last_fetched_epoch: int = -1
    log_start_offset: int = -1


@dataclass(frozen=True, slots=True)
class ListOffsetsResult:
    error_code: ErrorCode
    offset: int
    timestamp: int
    leader_epoch: int = -1


@dataclass(frozen=True, slots=True)
class EpochEndOffset:
    error_code: ErrorCode
    leader_epoch: int
    end_offset: int


@dataclass(frozen=True, slots=True)
class NewTopic:
    name: str
    num_partitions: int = -1
    replication_factor: int = -1
    #: partition -> broker ids (then num_partitions/replication_factor must be -1).
    assignments: Mapping[int, Sequence[int]] = field(default_factory=dict)
    configs: Mapping[str, str | None] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class TopicError:
    error_code: ErrorCode
    message: str | None = None


@dataclass(frozen=True, slots=True)
class CoordinatorResult:
    """FindCoordinator's answer for one key."""

    error_code: ErrorCode
    node_id: int
    host: str
    port: int
    error_message: str | None = None


@dataclass(frozen=True, slots=True)
class ProducerIdResult:
    """InitProducerId's answer."""

    error_code: ErrorCode
    producer_id: int
    producer_epoch: int


@dataclass(frozen=True, slots=True)
class TransactionDescription:
    """DescribeTransactions' answer for one transactional id (Kafka's state names:
    Empty, Ongoing, PrepareCommit, PrepareAbort, CompleteCommit, CompleteAbort, ...)."""

    error_code: ErrorCode
    transactional_id: str
    state: str
    timeout_ms: int
    #: When the running transaction started; None when none runs (-1 on the wire).
    start_ms: int | None
    producer_id: int
    producer_epoch: int
    partitions: tuple[TopicPartition, ...] = ()


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
        m = _schema_module(ApiKey.METADATA, version)
        request_topics = (
            None
            if topics is None
            else tuple(_make(m.MetadataRequestTopic, name=t, topic_id=None) for t in topics)
        )
        response = await conn.send(
            _make(
                m.MetadataRequest,
                topics=request_topics,
                allow_auto_topic_creation=allow_auto_topic_creation,
                include_cluster_authorized_operations=False,
                include_topic_authorized_operations=False,
            )
        )
        brokers = {
            int(b.node_id): BrokerMetadata(int(b.node_id), b.host, int(b.port), b.rack)
            for b in response.brokers
        }
        result_topics = {}
        for t in response.topics:
            partitions = {
                int(p.partition_index): PartitionMetadata(
                    partition=int(p.partition_index),
                    error_code=_code(p.error_code),
                    leader_id=int(p.leader_id),
                    leader_epoch=int(getattr(p, "leader_epoch", -1)),
                    replicas=tuple(int(r) for r in p.replica_nodes),
                    isr=tuple(int(r) for r in p.isr_nodes),
                    offline_replicas=tuple(int(r) for r in getattr(p, "offline_replicas", ())),
                )
                for p in t.partitions
            }
            result_topics[t.name] = TopicMetadata(
                name=t.name,
                error_code=_code(t.error_code),
                topic_id=getattr(t, "topic_id", None),
                partitions=partitions,
            )
        cluster = ClusterMetadata(
            cluster_id=getattr(response, "cluster_id", None),
            controller_id=int(getattr(response, "controller_id", -1)),
            brokers=brokers,
            topics=result_topics,
        )
        if topics is not None and self.cluster is not None:
            # Partial refresh: keep what we knew of other topics.
            cluster = dataclasses.replace(cluster, topics={**self.cluster.topics, **result_topics})
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
        m = _schema_module(ApiKey.PRODUCE, version)
        request = _make(
            m.ProduceRequest,
            transactional_id=transactional_id,
            acks=acks,
            timeout=_ms(timeout_ms),
            topic_data=(
                m.TopicProduceData(
                    name=tp.topic,
                    partition_data=(m.PartitionProduceData(index=tp.partition, records=records),),
                ),
            ),
        )
        if acks == 0:
            await conn.send_no_response(request)
            return None
        response = await conn.send(
            request, timeout_s=max(self.request_timeout_s, timeout_ms / 1000 + 5)
        )
        for topic in response.responses:
            for p in topic.partition_responses:
                if topic.name == tp.topic and p.index == tp.partition:
                    append_time = p.log_append_time
                    return ProduceResult(
                        error_code=_code(p.error_code),
                        base_offset=int(p.base_offset),
                        log_append_time_ms=-1
                        if append_time is None
                        else round(append_time.timestamp() * 1000),
                        log_start_offset=int(getattr(p, "log_start_offset", -1)),
                        error_message=getattr(p, "error_message", None),
                    )
        raise ClientConnectionError(f"Produce response from {conn.address} lacks {tp}")

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
        first = next(iter(partitions))
        if conn is None:
            conn = await (
                self.connection(node_id) if node_id is not None else self.leader_connection(first)
            )
        version = self._version(conn, ApiKey.FETCH)
        m = _schema_module(ApiKey.FETCH, version)
        by_topic: dict[str, list[Any]] = {}
        for tp, spec in partitions.items():
            by_topic.setdefault(tp.topic, []).append(
                _make(
                    m.FetchPartition,
                    partition=tp.partition,
                    current_leader_epoch=spec.current_leader_epoch,
                    fetch_offset=spec.fetch_offset,
                    last_fetched_epoch=spec.last_fetched_epoch,
                    log_start_offset=spec.log_start_offset,
                    partition_max_bytes=spec.partition_max_bytes,
                )
            )
        request = _make(
            m.FetchRequest,
            replica_id=replica_id,
            max_wait=_ms(max_wait_ms),
            min_bytes=min_bytes,
            max_bytes=max_bytes,
            isolation_level=isolation_level,
            session_id=0,
            session_epoch=-1,
            topics=tuple(
                m.FetchTopic(topic=topic, partitions=tuple(parts))
                for topic, parts in by_topic.items()
            ),
            forgotten_topics_data=(),
            rack_id="",
        )
        response = await conn.send(
            request, timeout_s=max(self.request_timeout_s, max_wait_ms / 1000 + 5)
        )
        results: dict[TopicPartition, FetchResult] = {}
        for topic in response.responses:
            for p in topic.partitions:
                diverging = getattr(p, "diverging_epoch", None)
                leader = getattr(p, "current_leader", None)
                aborted = getattr(p, "aborted_transactions", None) or ()
                results[TopicPartition(topic.topic, int(p.partition_index))] = FetchResult(
                    error_code=_code(p.error_code),
                    high_watermark=int(p.high_watermark),
                    last_stable_offset=int(p.last_stable_offset),
                    log_start_offset=int(getattr(p, "log_start_offset", -1)),
                    records=p.records or b"",
                    diverging_epoch=None
                    if diverging is None or int(diverging.epoch) < 0
                    else (int(diverging.epoch), int(diverging.end_offset)),
                    current_leader=None
                    if leader is None or int(leader.leader_id) < 0
                    else (int(leader.leader_id), int(leader.leader_epoch)),
                    aborted_transactions=[
                        (int(a.producer_id), int(a.first_offset)) for a in aborted
                    ],
                )
        return results

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
            m = _schema_module(ApiKey.LIST_OFFSETS, version)
            by_topic: dict[str, list[Any]] = {}
            for tp, ts in group.items():
                by_topic.setdefault(tp.topic, []).append(
                    _make(
                        m.ListOffsetsPartition,
                        partition_index=tp.partition,
                        timestamp=ts,
                        current_leader_epoch=-1,
                        max_num_offsets=1,
                    )
                )
            response = await conn.send(
                _make(
                    m.ListOffsetsRequest,
                    replica_id=-1,
                    isolation_level=isolation_level,
                    topics=tuple(
                        m.ListOffsetsTopic(name=t, partitions=tuple(ps))
                        for t, ps in by_topic.items()
                    ),
                )
            )
            for topic in response.topics:
                for p in topic.partitions:
                    results[TopicPartition(topic.name, int(p.partition_index))] = ListOffsetsResult(
                        error_code=_code(p.error_code),
                        offset=int(p.offset),
                        timestamp=int(p.timestamp),
                        leader_epoch=int(getattr(p, "leader_epoch", -1)),
                    )
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
        m = _schema_module(ApiKey.CREATE_TOPICS, version)
        request = _make(
            m.CreateTopicsRequest,
            topics=tuple(
                m.CreatableTopic(
                    name=t.name,
                    num_partitions=t.num_partitions,
                    replication_factor=t.replication_factor,
                    assignments=tuple(
                        m.CreatableReplicaAssignment(partition_index=p, broker_ids=tuple(ids))
                        for p, ids in sorted(t.assignments.items())
                    ),
                    configs=tuple(
                        m.CreatableTopicConfig(name=k, value=v) for k, v in t.configs.items()
                    ),
                )
                for t in topics
            ),
            timeout=_ms(timeout_ms),
            validate_only=validate_only,
        )
        response = await conn.send(
            request, timeout_s=max(self.request_timeout_s, timeout_ms / 1000 + 5)
        )
        return {
            t.name: TopicError(_code(t.error_code), getattr(t, "error_message", None))
            for t in response.topics
        }

    async def delete_topics(
        self, names: Sequence[str], *, timeout_ms: int = 30000, node_id: int | None = None
    ) -> dict[str, TopicError]:
        conn = await self.connection(node_id)
        version = self._version(conn, ApiKey.DELETE_TOPICS)
        m = _schema_module(ApiKey.DELETE_TOPICS, version)
        response = await conn.send(
            _make(m.DeleteTopicsRequest, topic_names=tuple(names), timeout=_ms(timeout_ms)),
            timeout_s=max(self.request_timeout_s, timeout_ms / 1000 + 5),
        )
        return {
            r.name: TopicError(_code(r.error_code), getattr(r, "error_message", None))
            for r in response.responses
        }

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
        first = next(iter(partitions))
        if conn is None:
            conn = await (
                self.connection(node_id) if node_id is not None else self.leader_connection(first)
            )
        version = self._version(conn, ApiKey.OFFSET_FOR_LEADER_EPOCH)
        m = _schema_module(ApiKey.OFFSET_FOR_LEADER_EPOCH, version)
        by_topic: dict[str, list[Any]] = {}
        for tp, (epoch, current) in partitions.items():
            by_topic.setdefault(tp.topic, []).append(
                _make(
                    m.OffsetForLeaderPartition,
                    partition=tp.partition,
                    current_leader_epoch=current,
                    leader_epoch=epoch,
                )
            )
        response = await conn.send(
            _make(
                m.OffsetForLeaderEpochRequest,
                replica_id=replica_id,
                topics=tuple(
                    m.OffsetForLeaderTopic(topic=t, partitions=tuple(ps))
                    for t, ps in by_topic.items()
                ),
            )
        )
        return {
            TopicPartition(t.topic, int(p.partition)): EpochEndOffset(
                _code(p.error_code), int(p.leader_epoch), int(p.end_offset)
            )
            for t in response.topics
            for p in t.partitions
        }

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
        m = _schema_module(ApiKey.FIND_COORDINATOR, version)
        if version >= 4:
            response = await conn.send(
                m.FindCoordinatorRequest(key_type=key_type, coordinator_keys=(key,))
            )
            found = [c for c in response.coordinators if c.key == key]
            if not found:
                raise ClientConnectionError(
                    f"FindCoordinator response from {conn.address} lacks key {key!r}"
                )
            c = found[0]
            return CoordinatorResult(
                _code(c.error_code), int(c.node_id), str(c.host), int(c.port), c.error_message
            )
        response = await conn.send(m.FindCoordinatorRequest(key=key, key_type=key_type))
        return CoordinatorResult(
            _code(response.error_code),
            int(response.node_id),
            str(response.host),
            int(response.port),
            response.error_message,
        )

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
        m = _schema_module(ApiKey.INIT_PRODUCER_ID, version)
        response = await conn.send(
            _make(
                m.InitProducerIdRequest,
                transactional_id=transactional_id,
                transaction_timeout=_ms(transaction_timeout_ms),
                producer_id=producer_id,
                producer_epoch=producer_epoch,
            )
        )
        return ProducerIdResult(
            _code(response.error_code), int(response.producer_id), int(response.producer_epoch)
        )

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
        by_topic: dict[str, list[int]] = {}
        for tp in partitions:
            by_topic.setdefault(tp.topic, []).append(tp.partition)
        conn = await self.connection(node_id)
        version = self._version(conn, ApiKey.ADD_PARTITIONS_TO_TXN)
        m = _schema_module(ApiKey.ADD_PARTITIONS_TO_TXN, version)
        response = await conn.send(
            m.AddPartitionsToTxnRequest(
                v3_and_below_transactional_id=transactional_id,
                v3_and_below_producer_id=producer_id,
                v3_and_below_producer_epoch=producer_epoch,
                v3_and_below_topics=tuple(
                    m.AddPartitionsToTxnTopic(name=t, partitions=tuple(sorted(ps)))
                    for t, ps in sorted(by_topic.items())
                ),
            )
        )
        return {
            TopicPartition(t.name, int(p.partition_index)): _code(p.partition_error_code)
            for t in response.results_by_topic_v3_and_below
            for p in t.results_by_partition
        }

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
        m = _schema_module(ApiKey.END_TXN, version)
        response = await conn.send(
            m.EndTxnRequest(
                transactional_id=transactional_id,
                producer_id=producer_id,
                producer_epoch=producer_epoch,
                committed=commit,
            )
        )
        return _code(response.error_code)

    async def describe_transactions(
        self, transactional_ids: Sequence[str], *, node_id: int | None = None
    ) -> list[TransactionDescription]:
        """DescribeTransactions v0 (at the ids' coordinator): one answer per id.

        Read with ``tidelog.client.describe_txn`` (kio cannot read the -1 start time of an
        id with no running transaction)."""
        conn = await self.connection(node_id)
        self._version(conn, ApiKey.DESCRIBE_TRANSACTIONS)
        m = _schema_module(ApiKey.DESCRIBE_TRANSACTIONS, describe_txn.VERSION)
        response = await conn.send(
            m.DescribeTransactionsRequest(transactional_ids=tuple(transactional_ids)),
            decode=describe_txn.decode,
        )
        out = []
        for s in response.transaction_states:
            start = int(s.transaction_start_time)
            out.append(
                TransactionDescription(
                    error_code=_code(s.error_code),
                    transactional_id=str(s.transactional_id),
                    state=str(s.transaction_state),
                    timeout_ms=int(s.transaction_timeout),
                    start_ms=start if start >= 0 else None,
                    producer_id=int(s.producer_id),
                    producer_epoch=int(s.producer_epoch),
                    partitions=tuple(
                        sorted(
                            TopicPartition(str(t.topic), int(p))
                            for t in s.topics
                            for p in t.partitions
                        )
                    ),
                )
            )
        return out
