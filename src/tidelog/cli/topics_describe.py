"""``tidelog topics describe``: what ``kafka-topics.sh --describe`` prints, and its filters.

The layout is Kafka's ``TopicCommand``: a topic line with TopicId, PartitionCount,
ReplicationFactor and Configs, then one line per partition with Leader, Replicas, Isr.
tidelog adds the partition's high watermark and, per replica, its log end offset (LEO) and
lag behind the leader, from DescribeQuorum (API 55) sent to each partition's leader. A
broker without DescribeQuorum gets a note and the HW from ListOffsets. When brokers have a
``broker.rack``, the partition line adds ``Racks:``, each replica's rack in the order of
``Replicas:`` (``-`` for a broker without one, ``?`` for a broker not live).

The filters are Kafka's ``DescribeOptions``:

1. ``--under-replicated-partitions`` (ISR smaller than the replicas),
   ``--under-min-isr-partitions`` (no leader, or ISR smaller than the topic's effective
   ``min.insync.replicas``), ``--at-min-isr-partitions`` (ISR size equal to it) and
   ``--unavailable-partitions`` (no leader, or a leader that is not live) each select
   partitions; given together, a partition line is printed when any of them matches, and
   no topic line is printed.
2. ``--topics-with-overrides`` prints only the topic lines of topics with config overrides,
   and no partition lines; it cannot be combined with the partition filters (rule 1).
3. ``--exclude-internal`` leaves out ``__consumer_offsets`` and ``__transaction_state``.
"""

from __future__ import annotations

import base64
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from tidelog.cli import admin
from tidelog.cli.output import kafka_error
from tidelog.client import (
    LATEST_TIMESTAMP,
    BlockingClient,
    ClientConnectionError,
    ClientTimeoutError,
    NoCompatibleVersionError,
)
from tidelog.client.client import ClusterMetadata, TopicMetadata
from tidelog.errors import ErrorCode
from tidelog.model import TopicPartition

#: The rack shown for a replica on a broker the Metadata does not list (not live).
UNKNOWN_RACK: Final = "?"
#: Kafka's ``Topic.isInternal`` (rule 3).
INTERNAL_TOPICS: Final = frozenset({"__consumer_offsets", "__transaction_state"})


def kafka_uuid(value: uuid.UUID | None) -> str:
    """Kafka's printed form of a Uuid: URL-safe base64 of the 16 bytes, no padding."""
    if value is None or value.int == 0:
        return "AAAAAAAAAAAAAAAAAAAAAA"
    return base64.urlsafe_b64encode(value.bytes).rstrip(b"=").decode()


# --- the description (pure values, formatted by pure functions) --------------------------


@dataclass(frozen=True, slots=True)
class ReplicaDescription:
    broker_id: int
    log_end_offset: int | None
    lag: int | None
    in_sync: bool
    #: Milliseconds since the replica last caught up with the leader (None: unknown).
    caught_up_ms_ago: int | None


@dataclass(frozen=True, slots=True)
class PartitionDescription:
    partition: int
    leader: int
    leader_epoch: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    high_watermark: int | None
    replica_states: tuple[ReplicaDescription, ...]
    #: Whether the leader is live (in the Metadata's brokers).
    leader_live: bool = True
    #: The topic's effective min.insync.replicas (None: its configs could not be read).
    min_isr: int | None = None
    #: Each replica's ``broker.rack`` in ``replicas`` order: None for a broker without one,
    #: ``UNKNOWN_RACK`` for a broker not in the Metadata's brokers; () when no broker has one.
    racks: tuple[str | None, ...] = ()

    @property
    def under_replicated(self) -> bool:
        return len(self.isr) < len(self.replicas)

    @property
    def unavailable(self) -> bool:
        return self.leader < 0 or not self.leader_live

    @property
    def under_min_isr(self) -> bool:
        """Kafka's ``isUnderMinIsr``: no leader counts as under the minimum."""
        return self.leader < 0 or (self.min_isr is not None and len(self.isr) < self.min_isr)

    @property
    def at_min_isr(self) -> bool:
        return self.min_isr is not None and len(self.isr) == self.min_isr


@dataclass(frozen=True, slots=True)
class TopicDescription:
    name: str
    topic_id: str
    replication_factor: int
    configs: Mapping[str, str | None]
    partitions: tuple[PartitionDescription, ...]


@dataclass(frozen=True, slots=True)
class DescribeFilter:
    """Which lines ``describe`` prints (rules 1 and 2); the default prints every line."""

    under_replicated: bool = False
    under_min_isr: bool = False
    at_min_isr: bool = False
    unavailable: bool = False
    topics_with_overrides: bool = False

    @property
    def partition_filtered(self) -> bool:
        return self.under_replicated or self.under_min_isr or self.at_min_isr or self.unavailable

    def topic_line(self, t: TopicDescription) -> bool:
        if self.partition_filtered:
            return False
        return not self.topics_with_overrides or bool(t.configs)

    def partition_line(self, p: PartitionDescription) -> bool:
        if self.topics_with_overrides:
            return False
        if not self.partition_filtered:
            return True
        return (
            (self.under_replicated and p.under_replicated)
            or (self.under_min_isr and p.under_min_isr)
            or (self.at_min_isr and p.at_min_isr)
            or (self.unavailable and p.unavailable)
        )


ALL_LINES: Final = DescribeFilter()


def _ids(values: Sequence[int]) -> str:
    return ",".join(str(v) for v in values)


def format_topic_line(t: TopicDescription) -> str:
    configs = ",".join(f"{k}={v}" for k, v in sorted(t.configs.items()))
    return (
        f"Topic: {t.name}\tTopicId: {t.topic_id}\tPartitionCount: {len(t.partitions)}"
        f"\tReplicationFactor: {t.replication_factor}\tConfigs: {configs}"
    )


def format_partition_line(topic: str, p: PartitionDescription) -> str:
    leader = p.leader if p.leader >= 0 else "none"
    line = (
        f"\tTopic: {topic}\tPartition: {p.partition}\tLeader: {leader}"
        f"\tReplicas: {_ids(p.replicas)}\tIsr: {_ids(p.isr)}"
    )
    if p.racks:
        line += "\tRacks: " + ",".join("-" if r is None else r for r in p.racks)
    if p.high_watermark is not None:
        line += f"\tHW: {p.high_watermark}"
    return line


def format_replica_line(r: ReplicaDescription) -> str:
    leo = "?" if r.log_end_offset is None else str(r.log_end_offset)
    lag = "?" if r.lag is None else str(r.lag)
    in_sync = "yes" if r.in_sync else "no"
    line = f"\t\tReplica: {r.broker_id}\tLEO: {leo}\tLag: {lag}\tInSync: {in_sync}"
    if r.caught_up_ms_ago is not None:
        line += f"\tCaughtUp: {r.caught_up_ms_ago / 1000:.1f}s ago"
    return line


def format_describe(
    topics: Sequence[TopicDescription], selection: DescribeFilter = ALL_LINES
) -> str:
    """kafka-topics.sh's layout, the lines ``selection`` keeps; each partition line is
    followed by its replica lines."""
    lines: list[str] = []
    for t in topics:
        if selection.topic_line(t):
            lines.append(format_topic_line(t))
        for p in t.partitions:
            if selection.partition_line(p):
                lines.append(format_partition_line(t.name, p))
                lines.extend(format_replica_line(r) for r in p.replica_states)
    return "\n".join(lines)


def _partition_json(p: PartitionDescription) -> dict[str, Any]:
    return {
        "partition": p.partition,
        "leader": p.leader,
        "leader_epoch": p.leader_epoch,
        "replicas": list(p.replicas),
        "isr": list(p.isr),
        "racks": list(p.racks) or None,
        "high_watermark": p.high_watermark,
        "under_replicated": p.under_replicated,
        "under_min_isr": p.under_min_isr,
        "at_min_isr": p.at_min_isr,
        "unavailable": p.unavailable,
        "replica_states": [
            {
                "broker_id": r.broker_id,
                "log_end_offset": r.log_end_offset,
                "lag": r.lag,
                "in_sync": r.in_sync,
                "caught_up_ms_ago": r.caught_up_ms_ago,
            }
            for r in p.replica_states
        ],
    }


def describe_to_json(
    topics: Sequence[TopicDescription], selection: DescribeFilter = ALL_LINES
) -> list[dict[str, Any]]:
    """The topics the text would show a line of, with the partitions it would show
    (``--topics-with-overrides`` keeps every partition of the topics it keeps)."""
    result = []
    for t in topics:
        if selection.topics_with_overrides:
            partitions = list(t.partitions) if selection.topic_line(t) else []
        else:
            partitions = [p for p in t.partitions if selection.partition_line(p)]
        if not partitions and not selection.topic_line(t):
            continue
        result.append(
            {
                "topic": t.name,
                "topic_id": t.topic_id,
                "partition_count": len(t.partitions),
                "replication_factor": t.replication_factor,
                "configs": dict(t.configs),
                "min_insync_replicas": t.partitions[0].min_isr if t.partitions else None,
                "partitions": [_partition_json(p) for p in partitions],
            }
        )
    return result


def replica_descriptions(
    quorum: admin.QuorumInfo, replicas: Sequence[int], now_ms: int
) -> tuple[ReplicaDescription, ...]:
    """Per replica in assignment order: LEO, lag = leader's LEO - its LEO, in-sync flag."""
    states = {r.replica_id: r for r in quorum.replicas}
    leader_state = states.get(quorum.leader_id)
    leader_leo = leader_state.log_end_offset if leader_state else None
    result = []
    for broker_id in replicas:
        state = states.get(broker_id)
        leo = state.log_end_offset if state and state.log_end_offset >= 0 else None
        caught_up = state.last_caught_up_timestamp if state else -1
        result.append(
            ReplicaDescription(
                broker_id=broker_id,
                log_end_offset=leo,
                lag=None if leo is None or leader_leo is None else max(0, leader_leo - leo),
                in_sync=bool(state and state.in_sync),
                caught_up_ms_ago=max(0, now_ms - caught_up) if caught_up > 0 else None,
            )
        )
    return tuple(result)


def replica_racks(
    replicas: Sequence[int], racks: Mapping[int, str | None]
) -> tuple[str | None, ...]:
    """Each replica's rack (``PartitionDescription.racks``); () when no live broker has one."""
    if not any(r is not None for r in racks.values()):
        return ()
    return tuple(racks.get(b, UNKNOWN_RACK) for b in replicas)


def min_insync_replicas(configs: admin.ResourceConfigs | None) -> int | None:
    """The topic's effective ``min.insync.replicas`` (its override or the broker's)."""
    if configs is None or configs.error_code != ErrorCode.NONE:
        return None
    for entry in configs.entries:
        if entry.name == "min.insync.replicas" and entry.value is not None:
            try:
                return int(entry.value)
            except ValueError:
                return None
    return None


# --- talking to the cluster ---------------------------------------------------------------


def checked_metadata(client: BlockingClient, topics: Sequence[str] | None) -> ClusterMetadata:
    """Metadata of ``topics`` (None: every topic); a named topic that is missing or has an
    error is a CommandError with its code."""
    md = client.metadata(topics)
    for name in topics or ():
        t = md.topics.get(name)
        if t is None or t.error_code != ErrorCode.NONE:
            code = t.error_code if t else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            raise kafka_error(code, None, f"topic '{name}'")
    return md


def _replica_states(
    client: BlockingClient, leaders: Mapping[TopicPartition, int], notes: list[str]
) -> tuple[dict[TopicPartition, admin.QuorumInfo], dict[TopicPartition, int]]:
    """DescribeQuorum answers per partition, or (when unsupported) HWs from ListOffsets;
    what could not be learned goes to ``notes``."""
    quorum: dict[TopicPartition, admin.QuorumInfo] = {}
    hws: dict[TopicPartition, int] = {}
    try:
        quorum, unreachable = client.run(admin.describe_quorum(client.client, leaders))
        notes.extend(
            f"leader {leader} did not answer DescribeQuorum ({why}); its partitions show no "
            "HW or replica LEOs"
            for leader, why in sorted(unreachable.items())
        )
    except NoCompatibleVersionError as exc:
        notes.append(
            f"per-replica LEO and lag not shown: {exc}; HW is the leader's, from ListOffsets"
        )
        if leaders:
            try:
                offsets = client.list_offsets(dict.fromkeys(leaders, LATEST_TIMESTAMP))
            except (ClientConnectionError, ClientTimeoutError) as error:
                notes.append(f"HW not shown: {error}")
            else:
                hws = {tp: r.offset for tp, r in offsets.items() if r.error_code == ErrorCode.NONE}
    return quorum, hws


def describe_topics(
    client: BlockingClient, names: Sequence[str] | None, *, exclude_internal: bool = False
) -> tuple[list[TopicDescription], list[str]]:
    """The descriptions and notes (e.g. DescribeQuorum unsupported)."""
    md = checked_metadata(client, names)
    wanted = sorted(names) if names else sorted(md.topics)
    topics: list[TopicMetadata] = [
        md.topics[n]
        for n in wanted
        if n in md.topics and not (exclude_internal and n in INTERNAL_TOPICS)
    ]
    notes: list[str] = []
    configs: dict[str, admin.ResourceConfigs] = {}
    if topics:
        try:
            configs = client.run(
                admin.describe_topic_configs(client.client, [t.name for t in topics])
            )
        except NoCompatibleVersionError as exc:
            notes.append(f"configs not shown: {exc}")
    leaders = {
        TopicPartition(t.name, p.partition): p.leader_id
        for t in topics
        for p in t.partitions.values()
        if p.leader_id >= 0 and p.leader_id in md.brokers
    }
    quorum, hws = _replica_states(client, leaders, notes)
    racks = {b.node_id: b.rack for b in md.brokers.values()}
    now_ms = int(time.time() * 1000)
    result = []
    for t in topics:
        topic_configs = configs.get(t.name)
        min_isr = min_insync_replicas(topic_configs)
        parts = []
        for p in sorted(t.partitions.values(), key=lambda p: p.partition):
            tp = TopicPartition(t.name, p.partition)
            q = quorum.get(tp)
            ok = q is not None and q.error_code == ErrorCode.NONE
            parts.append(
                PartitionDescription(
                    partition=p.partition,
                    leader=p.leader_id,
                    leader_epoch=p.leader_epoch,
                    replicas=p.replicas,
                    isr=p.isr,
                    high_watermark=q.high_watermark if q is not None and ok else hws.get(tp),
                    replica_states=replica_descriptions(q, p.replicas, now_ms)
                    if q is not None and ok
                    else (),
                    leader_live=p.leader_id in md.brokers,
                    min_isr=min_isr,
                    racks=replica_racks(p.replicas, racks),
                )
            )
        result.append(
            TopicDescription(
                name=t.name,
                topic_id=kafka_uuid(t.topic_id),
                replication_factor=max((len(p.replicas) for p in parts), default=0),
                configs=topic_configs.overrides() if topic_configs else {},
                partitions=tuple(parts),
            )
        )
    return result, notes
