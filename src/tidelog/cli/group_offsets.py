"""``tidelog groups reset-offsets``: kafka-consumer-groups.sh ``--reset-offsets``.

1. The groups are ``--group G`` (repeatable) or ``--all-groups`` (every group ListGroups
   shows); each must be inactive (Empty, or Dead: unknown to its coordinator), else Kafka's
   "Assignments can only be reset if the group 'G' is inactive, but the current state is
   Stable." goes to stderr, the group is passed over and the command exits 1.
2. The partitions are ``--topic T`` (every partition) or ``T:0,1`` (repeatable), or
   ``--all-topics`` (those the group committed offsets for); ``--from-file`` alone takes
   the file's partitions.
3. The new offsets come from ``reset_plans`` (its rules 1-4), from the committed offsets
   (OffsetFetch), the log start and end offsets and offsets for a time (ListOffsets).
4. A dry run by default: the plan is printed (``GROUP TOPIC PARTITION NEW-OFFSET``), or with
   ``--export`` as the CSV ``--from-file`` reads (the group column unless exactly one
   ``--group`` was given, as Kafka). ``--execute`` commits it as an admin
   client does, OffsetCommit with generation -1 and no member id, which the coordinator
   takes from an Empty group only.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from tidelog.cli.groups import (
    ACTIONS,
    committed_offsets,
    coordinator_of,
    described_group,
    group_request,
    list_groups,
)
from tidelog.cli.output import (
    CommandError,
    UsageError,
    format_table,
    kafka_error,
    print_json,
)
from tidelog.cli.reset_plans import (
    FromFile,
    LogOffsets,
    PlanError,
    Scenario,
    ShiftBy,
    ToCurrent,
    ToEarliest,
    ToLatest,
    ToOffset,
    ToTimestamp,
    export_csv,
    parse_datetime_ms,
    parse_iso_duration_ms,
    parse_reset_csv,
    parse_topic_partitions,
    plan_reset,
)
from tidelog.client import BlockingClient
from tidelog.client.wire import error_code
from tidelog.errors import ErrorCode
from tidelog.model import TopicPartition
from tidelog.protocol.apis import ApiKey
from tidelog.protocol.list_offsets import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP

DESCRIBE_GROUPS_V = 5
OFFSET_COMMIT_V = 8

#: Rule 1: the states in which a group's offsets may be reset.
INACTIVE_STATES = frozenset({"Empty", "Dead"})

NO_EXECUTE_WARNING = (
    "WARN: No action will be performed as the --execute option is missing. "
    "Add --dry-run to say so explicitly, or --execute to commit the new offsets."
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    who = parser.add_mutually_exclusive_group(required=True)
    who.add_argument("--group", action="append", help="group (repeatable)")
    who.add_argument("--all-groups", action="store_true", help="every group")
    scope = parser.add_mutually_exclusive_group()
    scope.add_argument(
        "--topic", action="append", metavar="TOPIC[:P,...]", help="topic, or its partitions"
    )
    scope.add_argument(
        "--all-topics", action="store_true", help="every partition the group has an offset for"
    )
    how = parser.add_mutually_exclusive_group(required=True)
    how.add_argument("--to-earliest", action="store_true", help="the log start offset")
    how.add_argument("--to-latest", action="store_true", help="the log end offset")
    how.add_argument("--to-current", action="store_true", help="the committed offset")
    how.add_argument("--to-offset", type=int, metavar="N", help="offset N (clamped to the log)")
    how.add_argument(
        "--to-datetime",
        metavar="YYYY-MM-DDTHH:mm:SS.sss",
        help="the first offset at or after this time (zone Z or +hh:mm; default local)",
    )
    how.add_argument(
        "--by-duration",
        metavar="PnDTnHnMnS",
        help="the first offset at or after now minus this ISO-8601 duration",
    )
    how.add_argument("--shift-by", type=int, metavar="N", help="the committed offset plus N")
    how.add_argument(
        "--from-file", type=Path, metavar="CSV", help="topic,partition,offset lines (--export)"
    )
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--dry-run", action="store_true", help="print the plan only (default)")
    mode.add_argument("--execute", action="store_true", help="commit the new offsets")
    parser.add_argument("--export", action="store_true", help="print the plan as CSV")


def _scenario(args: argparse.Namespace, now_ms: int) -> Scenario:
    try:
        if args.to_earliest:
            return ToEarliest()
        if args.to_latest:
            return ToLatest()
        if args.to_current:
            return ToCurrent()
        if args.to_offset is not None:
            return ToOffset(args.to_offset)
        if args.shift_by is not None:
            return ShiftBy(args.shift_by)
        if args.to_datetime is not None:
            return ToTimestamp(parse_datetime_ms(args.to_datetime))
        if args.by_duration is not None:
            return ToTimestamp(now_ms - parse_iso_duration_ms(args.by_duration))
    except PlanError as exc:
        raise UsageError(str(exc)) from None
    return FromFile({})


def _read_plans(path: Path, groups: list[str]) -> dict[str, dict[TopicPartition, int]]:
    try:
        text = path.read_text()
    except OSError as exc:
        raise UsageError(f"--from-file {path}: {exc.strerror or exc}") from None
    try:
        return parse_reset_csv(text, groups)
    except PlanError as exc:
        raise UsageError(f"--from-file {path}: {exc}") from None


def group_state(client: BlockingClient, node: int, group: str) -> str:
    return str(described_group(client, node, group).group_state)


def topic_partitions(client: BlockingClient, specs: list[str]) -> list[TopicPartition]:
    """Rule 2's ``--topic`` values as partitions; an unknown topic or partition is an error."""
    try:
        parsed = [parse_topic_partitions(spec) for spec in specs]
    except PlanError as exc:
        raise UsageError(str(exc)) from None
    cluster = client.metadata(sorted({topic for topic, _ in parsed}))
    out: list[TopicPartition] = []
    for topic, partitions in parsed:
        meta = cluster.topics.get(topic)
        if meta is None or meta.error_code != ErrorCode.NONE:
            code = meta.error_code if meta else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            raise kafka_error(code, None, f"topic '{topic}'")
        missing = sorted(set(partitions or ()) - set(meta.partitions))
        if missing:
            raise kafka_error(
                ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                None,
                f"topic '{topic}' has no partition {missing[0]}",
            )
        out += [TopicPartition(topic, p) for p in (partitions or sorted(meta.partitions))]
    return out


def _list(
    client: BlockingClient, tps: list[TopicPartition], timestamp: int
) -> dict[TopicPartition, int]:
    if not tps:
        return {}
    out = {}
    for tp, result in client.list_offsets(dict.fromkeys(tps, timestamp)).items():
        if result.error_code != ErrorCode.NONE:
            raise kafka_error(result.error_code, None, f"partition {tp.topic}-{tp.partition}")
        out[tp] = result.offset
    return out


def log_offsets(
    client: BlockingClient,
    tps: list[TopicPartition],
    committed: dict[TopicPartition, int],
    scenario: Scenario,
) -> LogOffsets:
    """Rule 3: what ``plan_reset`` reads, from ListOffsets."""
    by_timestamp: dict[TopicPartition, int | None] = {}
    if isinstance(scenario, ToTimestamp):
        by_timestamp = {
            tp: (o if o >= 0 else None)
            for tp, o in _list(client, tps, scenario.timestamp_ms).items()
        }
    return LogOffsets(
        committed=committed,
        log_start=_list(client, tps, EARLIEST_TIMESTAMP),
        log_end=_list(client, tps, LATEST_TIMESTAMP),
        by_timestamp=by_timestamp,
    )


def commit(
    client: BlockingClient, node: int, group: str, offsets: dict[TopicPartition, int]
) -> None:
    """Rule 4's ``--execute``: one OffsetCommit as an admin client (generation -1)."""
    by_topic: dict[str, list[dict[str, object]]] = {}
    for tp, offset in offsets.items():
        by_topic.setdefault(tp.topic, []).append(
            {
                "partition_index": tp.partition,
                "committed_offset": offset,
                "committed_leader_epoch": -1,
                "committed_metadata": "",
            }
        )
    response = client.send(
        group_request(
            ApiKey.OFFSET_COMMIT,
            OFFSET_COMMIT_V,
            {
                "group_id": group,
                "generation_id_or_member_epoch": -1,
                "member_id": "",
                "group_instance_id": None,
                "topics": [{"name": t, "partitions": ps} for t, ps in by_topic.items()],
            },
        ),
        node_id=node,
    )
    for topic in response.topics:
        for p in topic.partitions:
            code = error_code(p.error_code)
            if code != ErrorCode.NONE:
                raise kafka_error(
                    code,
                    None,
                    f"committing group '{group}' offset of {topic.name}-{p.partition_index}",
                )


def _reset_group(
    client: BlockingClient,
    args: argparse.Namespace,
    group: str,
    scenario: Scenario,
    file_plans: dict[str, dict[TopicPartition, int]] | None,
) -> dict[TopicPartition, int] | str:
    """Rules 1-4 for one group: its plan (committed with --execute), or why it was refused."""
    node = coordinator_of(client, group)
    state = group_state(client, node, group)
    if state not in INACTIVE_STATES:
        return (
            f"Assignments can only be reset if the group '{group}' is inactive, but the "
            f"current state is {state}."
        )
    committed = committed_offsets(client, node, group)
    if file_plans is not None:
        if group not in file_plans:
            raise UsageError(f"--from-file {args.from_file}: no reset plan for group '{group}'")
        scenario = FromFile(file_plans[group])
        tps = sorted(file_plans[group])
        if args.topic:
            wanted = set(topic_partitions(client, args.topic))
            tps = [tp for tp in tps if tp in wanted]
    elif args.all_topics:
        tps = sorted(committed)
    else:
        tps = topic_partitions(client, args.topic)
    try:
        plan = plan_reset(scenario, tps, log_offsets(client, tps, committed, scenario))
    except PlanError as exc:
        raise CommandError(f"group '{group}': {exc}") from None
    for warning in plan.warnings:
        print(f"WARN {warning}", file=sys.stderr)
    if args.execute and plan.offsets:
        commit(client, node, group, plan.offsets)
    return plan.offsets


def run(client: BlockingClient, args: argparse.Namespace) -> int:
    if args.from_file is None and not args.topic and not args.all_topics:
        raise UsageError("One of the reset scopes should be defined: --all-topics, --topic.")
    scenario = _scenario(args, int(time.time() * 1000))
    groups: list[str] = args.group or [g for g, *_ in list_groups(client)]
    file_plans = (
        _read_plans(args.from_file, args.group or []) if args.from_file is not None else None
    )
    if not args.execute and not args.dry_run:
        print(NO_EXECUTE_WARNING, file=sys.stderr)
    plans: dict[str, dict[TopicPartition, int]] = {}
    refused: list[str] = []
    for group in groups:
        outcome = _reset_group(client, args, group, scenario, file_plans)
        if isinstance(outcome, str):
            refused.append(outcome)
        else:
            plans[group] = outcome
    if args.export:
        single = args.group is not None and len(args.group) == 1
        sys.stdout.write(export_csv(plans, with_group=not single))
    elif args.json:
        print_json(
            [
                {"group": g, "topic": tp.topic, "partition": tp.partition, "new_offset": o}
                for g, plan in plans.items()
                for tp, o in plan.items()
            ]
        )
    elif any(plans.values()):
        print(
            format_table(
                ["GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"],
                [
                    [g, tp.topic, tp.partition, o]
                    for g, plan in plans.items()
                    for tp, o in plan.items()
                ],
            )
        )
    for message in refused[:-1]:
        print(CommandError(message).render("groups"), file=sys.stderr)
    if refused:
        raise CommandError(refused[-1], hint="stop the group's consumers first")
    return 0


ACTIONS["reset-offsets"] = (
    "reset a group's committed offsets (dry run unless --execute)",
    add_arguments,
    run,
)
