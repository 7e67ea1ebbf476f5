"""``tidelog topics create|list|describe|alter|delete`` and ``tidelog elect-leaders``.

``describe`` prints what ``kafka-topics.sh --describe`` prints (a topic line with TopicId,
PartitionCount, ReplicationFactor and Configs, then one line per partition with Leader,
Replicas, Isr), plus the partition's high watermark and, per replica, its log end offset
(LEO) and lag behind the leader, from DescribeQuorum (API 55) sent to each partition's
leader. A broker without DescribeQuorum gets a note and the HW from ListOffsets.
"""

from __future__ import annotations

import argparse
import base64
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tidelog.cli import admin
from tidelog.cli.main import COMMANDS
from tidelog.cli.output import (
    CommandError,
    add_bootstrap_flags,
    add_json_flag,
    format_table,
    kafka_error,
    parse_key_value,
    print_json,
    resolve_bootstrap,
    resolve_security,
)
from tidelog.client import (
    LATEST_TIMESTAMP,
    BlockingClient,
    ClientConnectionError,
    ClientTimeoutError,
    NewTopic,
    NoCompatibleVersionError,
)
from tidelog.client.client import ClusterMetadata, TopicMetadata
from tidelog.errors import ErrorCode
from tidelog.model import TopicPartition


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

    @property
    def under_replicated(self) -> bool:
        return len(self.isr) < len(self.replicas)

    @property
    def unavailable(self) -> bool:
        return self.leader < 0 or not self.leader_live


@dataclass(frozen=True, slots=True)
class TopicDescription:
    name: str
    topic_id: str
    replication_factor: int
    configs: Mapping[str, str | None]
    partitions: tuple[PartitionDescription, ...]


def _ids(values: Sequence[int]) -> str:
    return ",".join(str(v) for v in values)


def format_partition_line(topic: str, p: PartitionDescription) -> str:
    leader = p.leader if p.leader >= 0 else "none"
    line = (
        f"\tTopic: {topic}\tPartition: {p.partition}\tLeader: {leader}"
        f"\tReplicas: {_ids(p.replicas)}\tIsr: {_ids(p.isr)}"
    )
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
    topics: Sequence[TopicDescription],
    *,
    under_replicated_only: bool = False,
    unavailable_only: bool = False,
) -> str:
    """kafka-topics.sh's layout; with a filter flag only matching partition lines (as Kafka)."""
    lines: list[str] = []
    filtered = under_replicated_only or unavailable_only
    for t in topics:
        if not filtered:
            configs = ",".join(f"{k}={v}" for k, v in sorted(t.configs.items()))
            lines.append(
                f"Topic: {t.name}\tTopicId: {t.topic_id}\tPartitionCount: {len(t.partitions)}"
                f"\tReplicationFactor: {t.replication_factor}\tConfigs: {configs}"
            )
        for p in t.partitions:
            if under_replicated_only and not p.under_replicated:
                continue
            if unavailable_only and not p.unavailable:
                continue
            lines.append(format_partition_line(t.name, p))
            lines.extend(format_replica_line(r) for r in p.replica_states)
    return "\n".join(lines)


def describe_to_json(topics: Sequence[TopicDescription]) -> list[dict[str, Any]]:
    return [
        {
            "topic": t.name,
            "topic_id": t.topic_id,
            "partition_count": len(t.partitions),
            "replication_factor": t.replication_factor,
            "configs": dict(t.configs),
            "partitions": [
                {
                    "partition": p.partition,
                    "leader": p.leader,
                    "leader_epoch": p.leader_epoch,
                    "replicas": list(p.replicas),
                    "isr": list(p.isr),
                    "high_watermark": p.high_watermark,
                    "under_replicated": p.under_replicated,
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
                for p in t.partitions
            ],
        }
        for t in topics
    ]


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


# --- talking to the cluster ---------------------------------------------------------------


def _metadata(client: BlockingClient, topics: Sequence[str] | None) -> ClusterMetadata:
    md = client.metadata(topics)
    for name in topics or ():
        t = md.topics.get(name)
        if t is None or t.error_code != ErrorCode.NONE:
            code = t.error_code if t else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            raise kafka_error(code, None, f"topic '{name}'")
    return md


def describe_topics(
    client: BlockingClient, names: Sequence[str] | None
) -> tuple[list[TopicDescription], list[str]]:
    """The descriptions and notes (e.g. DescribeQuorum unsupported)."""
    md = _metadata(client, names)
    wanted = sorted(names) if names else sorted(md.topics)
    topics: list[TopicMetadata] = [md.topics[n] for n in wanted if n in md.topics]
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
    now_ms = int(time.time() * 1000)
    result = []
    for t in topics:
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
                )
            )
        topic_configs = configs.get(t.name)
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


# --- commands -------------------------------------------------------------------------------


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="action", metavar="ACTION", required=True)

    def add(name: str, help_text: str) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help_text, description=help_text)
        add_bootstrap_flags(p)
        add_json_flag(p)
        return p

    create = add("create", "create a topic (CreateTopics)")
    create.add_argument("--topic", required=True)
    create.add_argument("--partitions", type=int, default=-1, help="default: num.partitions")
    create.add_argument(
        "--replication-factor", type=int, default=-1, help="default: default.replication.factor"
    )
    create.add_argument("--config", action="append", default=[], metavar="KEY=VALUE")
    create.add_argument("--if-not-exists", action="store_true")

    add("list", "list topic names")

    describe = add("describe", "partitions, leaders, replicas, ISR, HW, per-replica LEO and lag")
    describe.add_argument("--topic", action="append", help="topic (repeatable; default: all)")
    describe.add_argument("--under-replicated-partitions", action="store_true")
    describe.add_argument("--unavailable-partitions", action="store_true")

    alter = add("alter", "change topic configs (IncrementalAlterConfigs) or partition count")
    alter.add_argument("--topic", required=True)
    alter.add_argument("--partitions", type=int, help="new (larger) partition count")
    alter.add_argument("--config", action="append", default=[], metavar="KEY=VALUE")
    alter.add_argument("--delete-config", action="append", default=[], metavar="KEY")

    delete = add("delete", "delete a topic (DeleteTopics)")
    delete.add_argument("--topic", required=True)
    delete.add_argument("--if-exists", action="store_true")


def run(args: argparse.Namespace) -> int:
    bootstrap = resolve_bootstrap(args)
    with BlockingClient(
        bootstrap, client_id="tidelog-cli", security=resolve_security(args)
    ) as client:
        action = args.action
        if action == "create":
            return _create(client, args)
        if action == "list":
            return _list(client, args)
        if action == "describe":
            return _describe(client, args)
        if action == "alter":
            return _alter(client, args)
        if action == "delete":
            return _delete(client, args)
    raise AssertionError(action)


def _list(client: BlockingClient, args: argparse.Namespace) -> int:
    names = sorted(client.metadata(None).topics)
    if args.json:
        print_json(names)
    else:
        for name in names:
            print(name)
    return 0


def _describe(client: BlockingClient, args: argparse.Namespace) -> int:
    topics, notes = describe_topics(client, args.topic)
    if args.json:
        print_json({"topics": describe_to_json(topics), "notes": notes})
    else:
        text = format_describe(
            topics,
            under_replicated_only=args.under_replicated_partitions,
            unavailable_only=args.unavailable_partitions,
        )
        if text:
            print(text)
        for note in notes:
            print(f"note: {note}")
    return 0


def _delete(client: BlockingClient, args: argparse.Namespace) -> int:
    errors = client.delete_topics([args.topic])
    err = errors.get(args.topic)
    if err is not None and err.error_code != ErrorCode.NONE:
        if args.if_exists and err.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
            return 0
        raise kafka_error(err.error_code, err.message, f"topic '{args.topic}'")
    _say(args, {"deleted": args.topic}, f"Deleted topic {args.topic}.")
    return 0


def _say(args: argparse.Namespace, data: dict[str, Any], text: str) -> None:
    if args.json:
        print_json(data)
    else:
        print(text)


def _create(client: BlockingClient, args: argparse.Namespace) -> int:
    configs = dict(parse_key_value(item) for item in args.config)
    errors = client.create_topics(
        [
            NewTopic(
                args.topic,
                num_partitions=args.partitions,
                replication_factor=args.replication_factor,
                configs=configs,
            )
        ]
    )
    err = errors.get(args.topic)
    if err is not None and err.error_code != ErrorCode.NONE:
        if args.if_not_exists and err.error_code == ErrorCode.TOPIC_ALREADY_EXISTS:
            return 0
        raise kafka_error(err.error_code, err.message, f"topic '{args.topic}'")
    _say(args, {"created": args.topic}, f"Created topic {args.topic}.")
    return 0


def _alter(client: BlockingClient, args: argparse.Namespace) -> int:
    configs = dict(parse_key_value(item) for item in args.config)
    if args.partitions is None and not configs and not args.delete_config:
        raise CommandError(
            "nothing to alter",
            hint="give --partitions N, --config KEY=VALUE or --delete-config KEY",
        )
    _metadata(client, [args.topic])
    done: dict[str, Any] = {"topic": args.topic}
    if configs or args.delete_config:
        code, message = client.run(
            admin.incremental_alter_topic_configs(
                client.client, args.topic, configs, args.delete_config
            )
        )
        if code != ErrorCode.NONE:
            raise kafka_error(code, message, f"topic '{args.topic}'")
        done["configs"] = configs
        done["deleted_configs"] = list(args.delete_config)
        if not args.json:
            print(f"Updated configs for topic {args.topic}.")
    if args.partitions is not None:
        code, message = client.run(
            admin.create_partitions(client.client, args.topic, args.partitions)
        )
        if code != ErrorCode.NONE:
            raise kafka_error(code, message, f"topic '{args.topic}'")
        done["partitions"] = args.partitions
        if not args.json:
            print(f"Topic {args.topic} now has {args.partitions} partitions.")
    if args.json:
        print_json(done)
    return 0


# --- elect-leaders ----------------------------------------------------------------------------


def add_elect_arguments(parser: argparse.ArgumentParser) -> None:
    add_bootstrap_flags(parser)
    add_json_flag(parser)
    kind = parser.add_mutually_exclusive_group(required=True)
    kind.add_argument("--preferred", action="store_true", help="move leadership to replica 1")
    kind.add_argument("--unclean", action="store_true", help="elect an out-of-sync replica")
    parser.add_argument("--topic", help="only this topic (default: every partition)")
    parser.add_argument("--partition", type=int, help="only this partition (needs --topic)")


def run_elect(args: argparse.Namespace) -> int:
    if args.partition is not None and args.topic is None:
        raise CommandError("--partition needs --topic")
    bootstrap = resolve_bootstrap(args)
    with BlockingClient(
        bootstrap, client_id="tidelog-cli", security=resolve_security(args)
    ) as client:
        partitions: list[TopicPartition] | None = None
        if args.topic is not None:
            md = _metadata(client, [args.topic])
            numbers = (
                [args.partition]
                if args.partition is not None
                else sorted(md.topics[args.topic].partitions)
            )
            partitions = [TopicPartition(args.topic, p) for p in numbers]
        election = admin.UNCLEAN_ELECTION if args.unclean else admin.PREFERRED_ELECTION
        try:
            top, results = client.run(
                admin.elect_leaders(client.client, partitions, election_type=election)
            )
        except NoCompatibleVersionError as exc:
            raise CommandError(str(exc), code=ErrorCode.UNSUPPORTED_VERSION) from exc
    if top != ErrorCode.NONE:
        raise kafka_error(top, None, "ElectLeaders")
    return report_election(results, "UNCLEAN" if args.unclean else "PREFERRED", args.json)


def _names(tps: Sequence[TopicPartition]) -> str:
    return ", ".join(f"{tp.topic}-{tp.partition}" for tp in tps)


def report_election(
    results: Mapping[TopicPartition, admin.ElectionResult], kind: str, as_json: bool
) -> int:
    """Kafka's leader-election tool's summary; exit 1 when any partition failed."""
    done = sorted(tp for tp, r in results.items() if r.error_code == ErrorCode.NONE)
    not_needed = sorted(
        tp for tp, r in results.items() if r.error_code == ErrorCode.ELECTION_NOT_NEEDED
    )
    failed = {
        tp: r
        for tp, r in sorted(results.items())
        if r.error_code not in (ErrorCode.NONE, ErrorCode.ELECTION_NOT_NEEDED)
    }
    if as_json:
        print_json(
            [
                {
                    "topic": tp.topic,
                    "partition": tp.partition,
                    "error": r.error_code.name,
                    "message": r.error_message,
                }
                for tp, r in sorted(results.items())
            ]
        )
    else:
        if done:
            print(f"Successfully completed leader election ({kind}) for partitions {_names(done)}")
        if not_needed:
            print(f"Valid replica already elected for partitions {_names(not_needed)}")
        if failed:
            rows = [
                (f"{tp.topic}-{tp.partition}", r.error_code.name, r.error_message or "")
                for tp, r in failed.items()
            ]
            print(format_table(("PARTITION", "ERROR", "MESSAGE"), rows))
        if not results:
            print("No partitions to elect.")
    return 1 if failed else 0


COMMANDS["topics"] = ("create, list, describe, alter and delete topics", add_arguments, run)
COMMANDS["elect-leaders"] = (
    "preferred (or unclean) leader election",
    add_elect_arguments,
    run_elect,
)
