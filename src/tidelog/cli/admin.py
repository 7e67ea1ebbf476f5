"""Admin requests the CLI needs beyond the client's helpers, on ``tidelog.client.Client``.

DescribeConfigs (32), IncrementalAlterConfigs (44), CreatePartitions (37), ElectLeaders (43)
and DescribeQuorum (55, answered by each partition's leader with per-replica LEO). Each
picks the highest version both sides speak; an API the broker does not advertise raises
``NoCompatibleVersionError`` (callers degrade or report it). Per-resource errors come back
as ``ErrorCode`` values.
"""

from __future__ import annotations

import dataclasses
import datetime
import importlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from kio.index import load_request_schema

from tidelog.client import (
    Client,
    ClientConnectionError,
    ClientTimeoutError,
    NoCompatibleVersionError,
)
from tidelog.client.connection import BrokerConnection
from tidelog.errors import ErrorCode
from tidelog.model import TopicPartition
from tidelog.protocol.apis import (
    UNADVERTISED_DESCRIBE_QUORUM_VERSION,
    ApiKey,
    is_tidelog_cluster_broker,
)

_PREFERRED: Final[Mapping[ApiKey, tuple[int, ...]]] = {
    ApiKey.DESCRIBE_CONFIGS: (4, 3, 2, 1),
    ApiKey.INCREMENTAL_ALTER_CONFIGS: (1, 0),
    ApiKey.CREATE_PARTITIONS: (3, 2, 1, 0),
    ApiKey.ELECT_LEADERS: (2, 1, 0),
    ApiKey.DESCRIBE_QUORUM: (2, 1, 0),
}

#: Kafka's ConfigResource.Type and config sources (DescribeConfigs).
TOPIC_RESOURCE: Final = 2
CONFIG_SOURCES: Final[Mapping[int, str]] = {
    1: "DYNAMIC_TOPIC_CONFIG",
    2: "DYNAMIC_BROKER_CONFIG",
    3: "DYNAMIC_DEFAULT_BROKER_CONFIG",
    4: "STATIC_BROKER_CONFIG",
    5: "DEFAULT_CONFIG",
    6: "DYNAMIC_BROKER_LOGGER_CONFIG",
}
#: IncrementalAlterConfigs operations.
OP_SET: Final = 0
OP_DELETE: Final = 1
#: ElectLeaders election types.
PREFERRED_ELECTION: Final = 0
UNCLEAN_ELECTION: Final = 1


def _code(value: int) -> ErrorCode:
    try:
        return ErrorCode._value2member_map_[int(value)]  # type: ignore[return-value]
    except KeyError:
        return ErrorCode.UNKNOWN_SERVER_ERROR


def _module(api_key: ApiKey, version: int) -> Any:
    return importlib.import_module(load_request_schema(api_key, version).__module__)


def _make(cls: type[Any], **kwargs: Any) -> Any:
    names = {f.name for f in dataclasses.fields(cls)}
    return cls(**{k: v for k, v in kwargs.items() if k in names})


def _version(conn: BrokerConnection, api_key: ApiKey) -> int:
    version = conn.pick_version(api_key, _PREFERRED[api_key])
    if version is None:
        raise NoCompatibleVersionError(
            f"{conn.address} does not support {api_key.name} (API {int(api_key)})"
        )
    return version


def _describe_quorum_version(conn: BrokerConnection) -> int:
    """The advertised DescribeQuorum version, else the one a tidelog cluster broker serves
    unadvertised (``protocol.apis.UNADVERTISED``, as ZooKeeper-mode Kafka does not
    advertise it); NoCompatibleVersionError for any other broker."""
    advertised = conn.pick_version(ApiKey.DESCRIBE_QUORUM, _PREFERRED[ApiKey.DESCRIBE_QUORUM])
    if advertised is None and is_tidelog_cluster_broker(conn.api_versions):
        return UNADVERTISED_DESCRIBE_QUORUM_VERSION
    return _version(conn, ApiKey.DESCRIBE_QUORUM)


def _ms(value: int) -> datetime.timedelta:
    return datetime.timedelta(milliseconds=value)


@dataclass(frozen=True, slots=True)
class ConfigEntry:
    name: str
    value: str | None
    source: str
    read_only: bool
    is_default: bool


@dataclass(frozen=True, slots=True)
class ResourceConfigs:
    error_code: ErrorCode
    error_message: str | None
    entries: tuple[ConfigEntry, ...]

    def overrides(self) -> dict[str, str | None]:
        """Configs set on the topic itself (what kafka-topics' ``Configs:`` shows)."""
        return {e.name: e.value for e in self.entries if e.source == "DYNAMIC_TOPIC_CONFIG"}


async def describe_topic_configs(
    client: Client, topics: Sequence[str]
) -> dict[str, ResourceConfigs]:
    conn = await client.connection()
    version = _version(conn, ApiKey.DESCRIBE_CONFIGS)
    m = _module(ApiKey.DESCRIBE_CONFIGS, version)
    response = await conn.send(
        _make(
            m.DescribeConfigsRequest,
            resources=tuple(
                _make(
                    m.DescribeConfigsResource,
                    resource_type=TOPIC_RESOURCE,
                    resource_name=t,
                    configuration_keys=None,
                )
                for t in topics
            ),
            include_synonyms=False,
            include_documentation=False,
        )
    )
    result = {}
    for r in response.results:
        entries = []
        for c in r.configs:
            source = int(getattr(c, "config_source", -1))
            is_default = bool(getattr(c, "is_default", source == 5))
            entries.append(
                ConfigEntry(
                    name=c.name,
                    value=c.value,
                    source=CONFIG_SOURCES.get(source, "UNKNOWN"),
                    read_only=bool(c.read_only),
                    is_default=is_default,
                )
            )
        result[r.resource_name] = ResourceConfigs(
            _code(r.error_code), getattr(r, "error_message", None), tuple(entries)
        )
    return result


async def incremental_alter_topic_configs(
    client: Client,
    topic: str,
    set_configs: Mapping[str, str],
    delete_configs: Sequence[str] = (),
    *,
    validate_only: bool = False,
) -> tuple[ErrorCode, str | None]:
    conn = await client.connection()
    version = _version(conn, ApiKey.INCREMENTAL_ALTER_CONFIGS)
    m = _module(ApiKey.INCREMENTAL_ALTER_CONFIGS, version)
    configs = [
        m.AlterableConfig(name=k, config_operation=OP_SET, value=v) for k, v in set_configs.items()
    ] + [m.AlterableConfig(name=k, config_operation=OP_DELETE, value=None) for k in delete_configs]
    response = await conn.send(
        m.IncrementalAlterConfigsRequest(
            resources=(
                m.AlterConfigsResource(
                    resource_type=TOPIC_RESOURCE, resource_name=topic, configs=tuple(configs)
                ),
            ),
            validate_only=validate_only,
        )
    )
    for r in response.responses:
        return _code(r.error_code), r.error_message
    return ErrorCode.UNKNOWN_SERVER_ERROR, "empty IncrementalAlterConfigs response"


async def create_partitions(
    client: Client,
    topic: str,
    count: int,
    *,
    assignments: Sequence[Sequence[int]] | None = None,
    timeout_ms: int = 30000,
    validate_only: bool = False,
) -> tuple[ErrorCode, str | None]:
    """CreatePartitions; ``assignments`` (None: the broker places them) lists the new
    partitions' replicas, in partition order."""
    conn = await client.connection()
    version = _version(conn, ApiKey.CREATE_PARTITIONS)
    m = _module(ApiKey.CREATE_PARTITIONS, version)
    given = (
        None
        if assignments is None
        else tuple(m.CreatePartitionsAssignment(broker_ids=tuple(rs)) for rs in assignments)
    )
    response = await conn.send(
        m.CreatePartitionsRequest(
            topics=(m.CreatePartitionsTopic(name=topic, count=count, assignments=given),),
            timeout=_ms(timeout_ms),
            validate_only=validate_only,
        ),
        timeout_s=timeout_ms / 1000 + 5,
    )
    for r in response.results:
        return _code(r.error_code), getattr(r, "error_message", None)
    return ErrorCode.UNKNOWN_SERVER_ERROR, "empty CreatePartitions response"


@dataclass(frozen=True, slots=True)
class ElectionResult:
    error_code: ErrorCode
    error_message: str | None


async def elect_leaders(
    client: Client,
    partitions: Sequence[TopicPartition] | None,
    *,
    election_type: int = PREFERRED_ELECTION,
    timeout_ms: int = 30000,
) -> tuple[ErrorCode, dict[TopicPartition, ElectionResult]]:
    """ElectLeaders (to the controller); ``partitions`` None = every partition."""
    cluster = await client.metadata([])
    node = cluster.controller_id if cluster.controller_id in cluster.brokers else None
    conn = await client.connection(node)
    version = _version(conn, ApiKey.ELECT_LEADERS)
    m = _module(ApiKey.ELECT_LEADERS, version)
    topic_partitions = None
    if partitions is not None:
        by_topic: dict[str, list[int]] = {}
        for tp in partitions:
            by_topic.setdefault(tp.topic, []).append(tp.partition)
        topic_partitions = tuple(
            m.TopicPartitions(topic=t, partitions=tuple(ps)) for t, ps in by_topic.items()
        )
    response = await conn.send(
        _make(
            m.ElectLeadersRequest,
            election_type=election_type,
            topic_partitions=topic_partitions,
            timeout=_ms(timeout_ms),
        ),
        timeout_s=timeout_ms / 1000 + 5,
    )
    results = {
        TopicPartition(r.topic, int(p.partition_id)): ElectionResult(
            _code(p.error_code), p.error_message
        )
        for r in response.replica_election_results
        for p in r.partition_result
    }
    return _code(getattr(response, "error_code", 0)), results


@dataclass(frozen=True, slots=True)
class ReplicaState:
    replica_id: int
    log_end_offset: int
    last_fetch_timestamp: int
    last_caught_up_timestamp: int
    in_sync: bool


@dataclass(frozen=True, slots=True)
class QuorumInfo:
    error_code: ErrorCode
    leader_id: int
    leader_epoch: int
    high_watermark: int
    replicas: tuple[ReplicaState, ...]


async def describe_quorum(
    client: Client, partitions: Mapping[TopicPartition, int]
) -> tuple[dict[TopicPartition, QuorumInfo], dict[int, str]]:
    """DescribeQuorum per leader: ``partitions`` maps each partition to its leader's id.

    Returns the answers and, per leader that could not be asked (down, or not answering),
    why. Raises NoCompatibleVersionError when a leader does not support API 55.
    """
    unreachable: dict[int, str] = {}
    by_leader: dict[int, list[TopicPartition]] = {}
    for tp, leader in partitions.items():
        if leader >= 0:
            by_leader.setdefault(leader, []).append(tp)
    result: dict[TopicPartition, QuorumInfo] = {}
    for leader, tps in sorted(by_leader.items()):
        try:
            conn = await client.connection(leader)
        except (ClientConnectionError, ClientTimeoutError) as exc:
            unreachable[leader] = str(exc)
            continue
        version = _describe_quorum_version(conn)
        m = _module(ApiKey.DESCRIBE_QUORUM, version)
        by_topic: dict[str, list[int]] = {}
        for tp in tps:
            by_topic.setdefault(tp.topic, []).append(tp.partition)
        request = m.DescribeQuorumRequest(
            topics=tuple(
                m.TopicData(
                    topic_name=t,
                    partitions=tuple(m.PartitionData(partition_index=p) for p in ps),
                )
                for t, ps in by_topic.items()
            )
        )
        try:
            response = await conn.send(request)
        except (ClientConnectionError, ClientTimeoutError) as exc:
            unreachable[leader] = str(exc)
            continue
        top_error = _code(response.error_code)
        for t in response.topics:
            for p in t.partitions:
                replicas = tuple(
                    ReplicaState(
                        replica_id=int(r.replica_id),
                        log_end_offset=int(r.log_end_offset),
                        last_fetch_timestamp=int(getattr(r, "last_fetch_timestamp", -1)),
                        last_caught_up_timestamp=int(getattr(r, "last_caught_up_timestamp", -1)),
                        in_sync=voter,
                    )
                    for voter, group in ((True, p.current_voters), (False, p.observers))
                    for r in group
                )
                code = _code(p.error_code)
                result[TopicPartition(t.topic_name, int(p.partition_index))] = QuorumInfo(
                    error_code=code if code != ErrorCode.NONE else top_error,
                    leader_id=int(p.leader_id),
                    leader_epoch=int(p.leader_epoch),
                    high_watermark=int(p.high_watermark),
                    replicas=replicas,
                )
    return result, unreachable
