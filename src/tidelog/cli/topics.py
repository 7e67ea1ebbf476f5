"""``tidelog topics create|list|describe|alter|delete`` and ``tidelog elect-leaders``, with
``kafka-topics.sh``'s options (``describe`` and its filters: ``topics_describe``).

Rules of the options, as Kafka's ``TopicCommandOptions`` checks them:

1. ``--replica-assignment B:B:B,B:B:B,...`` lists partition 0's replicas, then partition
   1's, ...; the first broker of each is its preferred leader. With ``create`` it replaces
   ``--partitions`` and ``--replication-factor`` (giving either too is Kafka's usage error);
   with ``alter`` it needs ``--partitions N`` and lists every partition, of which those past
   the current count are created (Kafka's ``topicNewPartitions`` skips the others).
2. The command checks only that each entry is a broker id; the broker judges the rest
   (duplicates, differing replica counts, unknown brokers, gaps) and answers
   INVALID_REPLICA_ASSIGNMENT (39) with Kafka's message, which the user sees.
3. ``--exclude-internal`` (``list``, ``describe``) leaves out ``__consumer_offsets`` and
   ``__transaction_state``.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping, Sequence
from typing import Any

from tidelog.cli import admin
from tidelog.cli.main import COMMANDS
from tidelog.cli.output import (
    CommandError,
    UsageError,
    add_bootstrap_flags,
    add_json_flag,
    format_table,
    kafka_error,
    parse_key_value,
    print_json,
    resolve_bootstrap,
    resolve_security,
)
from tidelog.cli.topics_describe import (
    INTERNAL_TOPICS,
    DescribeFilter,
    checked_metadata,
    describe_to_json,
    describe_topics,
    format_describe,
)
from tidelog.client import BlockingClient, NewTopic, NoCompatibleVersionError
from tidelog.errors import ErrorCode
from tidelog.model import TopicPartition

ASSIGNMENT_HINT = (
    "e.g. --replica-assignment 1:2:3,2:3:1 (partition 0 on brokers 1,2,3, led by 1; "
    "partition 1 on 2,3,1, led by 2)"
)


def parse_replica_assignment(text: str) -> list[list[int]]:
    """Rule 1's list, per partition its broker ids; a non-integer is a UsageError."""
    result: list[list[int]] = []
    for partition in text.split(","):
        brokers: list[int] = []
        for item in partition.split(":"):
            try:
                brokers.append(int(item.strip()))
            except ValueError:
                raise UsageError(
                    f"--replica-assignment {text!r}: {item.strip()!r} is not a broker id",
                    hint=ASSIGNMENT_HINT,
                ) from None
        result.append(brokers)
    return result


# --- commands -------------------------------------------------------------------------------


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="action", metavar="ACTION", required=True)

    def add(name: str, help_text: str) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help_text, description=help_text)
        add_bootstrap_flags(p)
        add_json_flag(p)
        return p

    assignment_help = (
        "partition 0's brokers, then partition 1's, ...; the first of each is the preferred "
        "leader (B:B,B:B,...)"
    )
    create = add("create", "create a topic (CreateTopics)")
    create.add_argument("--topic", required=True)
    create.add_argument("--partitions", type=int, help="default: num.partitions")
    create.add_argument(
        "--replication-factor", type=int, help="default: default.replication.factor"
    )
    create.add_argument("--replica-assignment", metavar="ASSIGNMENT", help=assignment_help)
    create.add_argument("--config", action="append", default=[], metavar="KEY=VALUE")
    create.add_argument("--if-not-exists", action="store_true")

    listing = add("list", "list topic names")
    listing.add_argument("--exclude-internal", action="store_true")

    describe = add("describe", "partitions, leaders, replicas, ISR, HW, per-replica LEO and lag")
    describe.add_argument("--topic", action="append", help="topic (repeatable; default: all)")
    describe.add_argument("--under-replicated-partitions", action="store_true")
    describe.add_argument(
        "--under-min-isr-partitions", action="store_true", help="ISR below min.insync.replicas"
    )
    describe.add_argument(
        "--at-min-isr-partitions", action="store_true", help="ISR equal to min.insync.replicas"
    )
    describe.add_argument("--unavailable-partitions", action="store_true")
    describe.add_argument(
        "--topics-with-overrides", action="store_true", help="only topics with config overrides"
    )
    describe.add_argument("--exclude-internal", action="store_true")

    alter = add("alter", "change topic configs (IncrementalAlterConfigs) or partition count")
    alter.add_argument("--topic", required=True)
    alter.add_argument("--partitions", type=int, help="new (larger) partition count")
    alter.add_argument(
        "--replica-assignment",
        metavar="ASSIGNMENT",
        help=f"with --partitions: every partition's brokers ({assignment_help})",
    )
    alter.add_argument("--config", action="append", default=[], metavar="KEY=VALUE")
    alter.add_argument("--delete-config", action="append", default=[], metavar="KEY")

    delete = add("delete", "delete a topic (DeleteTopics)")
    delete.add_argument("--topic", required=True)
    delete.add_argument("--if-exists", action="store_true")


def run(args: argparse.Namespace) -> int:
    _check_options(args)
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


def _describe_filter(args: argparse.Namespace) -> DescribeFilter:
    return DescribeFilter(
        under_replicated=args.under_replicated_partitions,
        under_min_isr=args.under_min_isr_partitions,
        at_min_isr=args.at_min_isr_partitions,
        unavailable=args.unavailable_partitions,
        topics_with_overrides=args.topics_with_overrides,
    )


def _check_options(args: argparse.Namespace) -> None:
    """Kafka's ``checkInvalidArgs``/``checkRequiredArgs`` for these options, its words."""
    if args.action == "create" and args.replica_assignment is not None:
        for flag, value in (
            ("partitions", args.partitions),
            ("replication-factor", args.replication_factor),
        ):
            if value is not None:
                raise UsageError(
                    f'Option "[replica-assignment]" can\'t be used with option "[{flag}]"',
                    hint="--replica-assignment gives the partitions and their replicas",
                )
    if args.action == "alter" and args.replica_assignment is not None and args.partitions is None:
        raise UsageError('Missing required argument "[partitions]"', hint=ASSIGNMENT_HINT)
    if args.action == "describe":
        selection = _describe_filter(args)
        if selection.topics_with_overrides and selection.partition_filtered:
            used = next(
                flag
                for flag, on in (
                    ("under-replicated-partitions", selection.under_replicated),
                    ("under-min-isr-partitions", selection.under_min_isr),
                    ("at-min-isr-partitions", selection.at_min_isr),
                    ("unavailable-partitions", selection.unavailable),
                )
                if on
            )
            raise UsageError(
                f'Option "[{used}]" can\'t be used with option "[topics-with-overrides]"'
            )


def _list(client: BlockingClient, args: argparse.Namespace) -> int:
    names = sorted(
        n
        for n in client.metadata(None).topics
        if not (args.exclude_internal and n in INTERNAL_TOPICS)
    )
    if args.json:
        print_json(names)
    else:
        for name in names:
            print(name)
    return 0


def _describe(client: BlockingClient, args: argparse.Namespace) -> int:
    topics, notes = describe_topics(client, args.topic, exclude_internal=args.exclude_internal)
    selection = _describe_filter(args)
    if args.json:
        print_json({"topics": describe_to_json(topics, selection), "notes": notes})
    else:
        text = format_describe(topics, selection)
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
    assignments: dict[int, list[int]] = {}
    if args.replica_assignment is not None:
        assignments = dict(enumerate(parse_replica_assignment(args.replica_assignment)))
    errors = client.create_topics(
        [
            NewTopic(
                args.topic,
                num_partitions=-1 if args.partitions is None else args.partitions,
                replication_factor=-1
                if args.replication_factor is None
                else args.replication_factor,
                assignments=assignments,
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
    assignment = (
        None
        if args.replica_assignment is None
        else parse_replica_assignment(args.replica_assignment)
    )
    md = checked_metadata(client, [args.topic])
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
        # Rule 1: the entries of the partitions that exist already are skipped.
        existing = len(md.topics[args.topic].partitions)
        code, message = client.run(
            admin.create_partitions(
                client.client,
                args.topic,
                args.partitions,
                assignments=None if assignment is None else assignment[existing:],
            )
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
            md = checked_metadata(client, [args.topic])
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
