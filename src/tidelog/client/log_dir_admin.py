"""Log dir requests on ``tidelog.client.Client`` (KIP-113): DescribeLogDirs (35) and
AlterReplicaLogDirs (34), as Kafka's ``Admin.describeLogDirs`` / ``alterReplicaLogDirs``
send them.

Rules:

1. Both go to one broker, named by its id (they describe and move that broker's replicas);
   each picks the highest version both sides speak: DescribeLogDirs v4 to v1 (v4 adds the
   volume's total and usable bytes, v3 the request-level error), AlterReplicaLogDirs v2 or
   v1. A broker advertising neither raises ``NoCompatibleVersionError``.
2. Broker errors come back as values, never raised: the request-level error of
   DescribeLogDirs (CLUSTER_AUTHORIZATION_FAILED), each log dir's (KAFKA_STORAGE_ERROR for
   an offline one), each partition's AlterReplicaLogDirs answer. An error code the client
   does not know reads as UNKNOWN_SERVER_ERROR.
3. Requests are built and responses read by pure functions, testable without a broker.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from tidelog.client import wire
from tidelog.client.client import Client
from tidelog.client.errors import NoCompatibleVersionError
from tidelog.errors import ErrorCode
from tidelog.model import TopicPartition
from tidelog.protocol.apis import ApiKey

#: Rule 1: versions each call speaks, best first.
_PREFERRED: Final[Mapping[ApiKey, tuple[int, ...]]] = {
    ApiKey.DESCRIBE_LOG_DIRS: (4, 3, 2, 1),
    ApiKey.ALTER_REPLICA_LOG_DIRS: (2, 1),
}


@dataclass(frozen=True, slots=True)
class ReplicaLogInfo:
    """One log of a partition in a log dir (Kafka's ``ReplicaInfo``)."""

    partition: TopicPartition
    size: int
    #: A current log: how far its end is behind the high watermark (-1: not hosted); a
    #: future log: how far it is behind the current log.
    offset_lag: int
    is_future: bool


@dataclass(frozen=True, slots=True)
class LogDirDescription:
    path: str
    error_code: ErrorCode
    replicas: tuple[ReplicaLogInfo, ...] = ()
    #: The volume's size and free space (-1: unknown, or a broker below v4).
    total_bytes: int = -1
    usable_bytes: int = -1


@dataclass(frozen=True, slots=True)
class DescribeLogDirsResult:
    #: The request-level error (CLUSTER_AUTHORIZATION_FAILED); ``log_dirs`` is then empty.
    error_code: ErrorCode
    log_dirs: tuple[LogDirDescription, ...] = ()


def pick_version(conn: Any, api_key: ApiKey) -> int:
    version: int | None = conn.pick_version(api_key, _PREFERRED[api_key])
    if version is None:
        raise NoCompatibleVersionError(
            f"{conn.address} does not support {api_key.name} (API {int(api_key)}); this "
            f"client speaks versions {sorted(_PREFERRED[api_key])}"
        )
    return version


# --- pure --------------------------------------------------------------------------------


def describe_log_dirs_request(
    partitions: Mapping[str, Sequence[int]] | None = None, version: int = 4
) -> Any:
    """None: every partition the broker has a log of."""
    m = wire.schema_module(ApiKey.DESCRIBE_LOG_DIRS, version)
    topics = (
        None
        if partitions is None
        else tuple(
            m.DescribableLogDirTopic(topic=topic, partitions=tuple(ps))
            for topic, ps in partitions.items()
        )
    )
    return m.DescribeLogDirsRequest(topics=topics)


def read_describe_log_dirs(response: Any) -> DescribeLogDirsResult:
    dirs = tuple(
        LogDirDescription(
            path=str(r.log_dir),
            error_code=wire.error_code(r.error_code),
            replicas=tuple(
                ReplicaLogInfo(
                    TopicPartition(str(t.name), int(p.partition_index)),
                    int(p.partition_size),
                    int(p.offset_lag),
                    bool(p.is_future_key),
                )
                for t in r.topics
                for p in t.partitions
            ),
            total_bytes=int(getattr(r, "total_bytes", -1)),
            usable_bytes=int(getattr(r, "usable_bytes", -1)),
        )
        for r in response.results
    )
    return DescribeLogDirsResult(wire.error_code(getattr(response, "error_code", 0)), dirs)


def alter_replica_log_dirs_request(
    assignments: Mapping[TopicPartition, str], version: int = 2
) -> Any:
    """One entry per dir, its partitions grouped by topic."""
    m = wire.schema_module(ApiKey.ALTER_REPLICA_LOG_DIRS, version)
    by_dir: dict[str, dict[str, list[int]]] = {}
    for tp, path in assignments.items():
        by_dir.setdefault(path, {}).setdefault(tp.topic, []).append(tp.partition)
    return m.AlterReplicaLogDirsRequest(
        dirs=tuple(
            m.AlterReplicaLogDir(
                path=path,
                topics=tuple(
                    m.AlterReplicaLogDirTopic(name=topic, partitions=tuple(ps))
                    for topic, ps in topics.items()
                ),
            )
            for path, topics in by_dir.items()
        )
    )


def read_alter_replica_log_dirs(response: Any) -> dict[TopicPartition, ErrorCode]:
    return {
        TopicPartition(str(t.topic_name), int(p.partition_index)): wire.error_code(p.error_code)
        for t in response.results
        for p in t.partitions
    }


# --- the calls ---------------------------------------------------------------------------


async def describe_log_dirs(
    client: Client, node_id: int, partitions: Mapping[str, Sequence[int]] | None = None
) -> DescribeLogDirsResult:
    """DescribeLogDirs at broker ``node_id`` (rule 2 for errors)."""
    conn = await client.connection(node_id)
    version = pick_version(conn, ApiKey.DESCRIBE_LOG_DIRS)
    return read_describe_log_dirs(await conn.send(describe_log_dirs_request(partitions, version)))


async def alter_replica_log_dirs(
    client: Client, node_id: int, assignments: Mapping[TopicPartition, str]
) -> dict[TopicPartition, ErrorCode]:
    """AlterReplicaLogDirs at broker ``node_id``: partition -> its answer (NONE: the move
    started, or the replica is there already; the move itself runs in the background)."""
    if not assignments:
        return {}
    conn = await client.connection(node_id)
    version = pick_version(conn, ApiKey.ALTER_REPLICA_LOG_DIRS)
    request = alter_replica_log_dirs_request(assignments, version)
    return read_alter_replica_log_dirs(await conn.send(request))


__all__ = [
    "DescribeLogDirsResult",
    "LogDirDescription",
    "ReplicaLogInfo",
    "alter_replica_log_dirs",
    "alter_replica_log_dirs_request",
    "describe_log_dirs",
    "describe_log_dirs_request",
    "read_alter_replica_log_dirs",
    "read_describe_log_dirs",
]
