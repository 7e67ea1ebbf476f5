"""``tidelog consume``: records -> stdout, as kafka-console-consumer.sh.

Without ``--group`` it reads every partition of ``--topic`` (or ``--partition``) from the
end (default), the beginning (``--from-beginning``) or ``--offset``, and commits nothing.
With ``--group G`` it is a member of consumer group G (``tidelog.client.group_member``):
it reads the partitions the group's range assignment gives it, each from the group's
committed offset, else from where ``auto.offset.reset`` says (``latest``; ``earliest``
with ``--from-beginning``; ``none`` is an error), as it does when a position falls outside
the log (OFFSET_OUT_OF_RANGE), follows rebalances, commits its
positions every ``auto.commit.interval.ms`` (5000) and on exit, and leaves the group on
exit. A committed position is the offset after the last record printed, so a run stopped
by ``--max-messages`` is continued by the next exactly where it stopped.

``--isolation-level read_committed`` reads up to the last stable offset and drops the
records of aborted transactions (KIP-98). Records print through ``--property print.*``
(Kafka's DefaultMessageFormatter, ``record_format``) or ``--json``. The command stops after
``--max-messages``, after ``--timeout-ms`` without new records, or at Ctrl-C / SIGTERM
(exit status 130, after the final commit and LeaveGroup).
"""

from __future__ import annotations

import argparse
import contextlib
import signal
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from types import FrameType
from typing import Final

from tidelog.cli.consume_fetch import Consumption
from tidelog.cli.consume_offsets import list_offsets
from tidelog.cli.main import COMMANDS
from tidelog.cli.output import (
    CommandError,
    UsageError,
    add_bootstrap_flags,
    kafka_error,
    resolve_bootstrap,
    resolve_security,
)
from tidelog.cli.produce import check_partition, topic_partition_count
from tidelog.cli.record_format import (
    FORMATTER_PROPERTIES,
    MessageFormatter,
    json_line,
    parse_properties,
)
from tidelog.client import (
    READ_COMMITTED,
    READ_UNCOMMITTED,
    BlockingClient,
)
from tidelog.client.group_member import GroupMember
from tidelog.errors import ErrorCode
from tidelog.model import TopicPartition

ISOLATION_LEVELS: Final = {"read_uncommitted": READ_UNCOMMITTED, "read_committed": READ_COMMITTED}
CONSUMER_PROPERTIES: Final = frozenset(
    {
        "auto.offset.reset",
        "enable.auto.commit",
        "auto.commit.interval.ms",
        "session.timeout.ms",
        "heartbeat.interval.ms",
    }
)
RESETS: Final = ("earliest", "latest", "none")


@dataclass(frozen=True, slots=True)
class GroupSettings:
    """``--consumer-property`` values a group member uses (Kafka's names and defaults)."""

    auto_offset_reset: str = "latest"
    enable_auto_commit: bool = True
    auto_commit_interval_ms: int = 5000
    session_timeout_ms: int = 10_000
    heartbeat_interval_ms: int = 3000


def _int_property(props: Mapping[str, str], key: str, default: int) -> int:
    value = props.get(key)
    if value is None:
        return default
    try:
        number = int(value)
    except ValueError:
        raise UsageError(f"--consumer-property {key}={value!r} is not a number") from None
    if number <= 0:
        raise UsageError(f"--consumer-property {key} must be positive")
    return number


def group_settings(props: Mapping[str, str], from_beginning: bool) -> GroupSettings:
    reset = props.get("auto.offset.reset", "earliest" if from_beginning else "latest")
    if reset not in RESETS:
        raise UsageError(
            f"--consumer-property auto.offset.reset={reset!r}: expected one of {', '.join(RESETS)}"
        )
    if from_beginning and reset != "earliest":
        raise UsageError(
            f"Can't simultaneously specify --from-beginning and 'auto.offset.reset={reset}'"
        )
    return GroupSettings(
        auto_offset_reset=reset,
        enable_auto_commit=props.get("enable.auto.commit", "true").strip().lower() == "true",
        auto_commit_interval_ms=_int_property(props, "auto.commit.interval.ms", 5000),
        session_timeout_ms=_int_property(props, "session.timeout.ms", 10_000),
        heartbeat_interval_ms=_int_property(props, "heartbeat.interval.ms", 3000),
    )


def add_consume_arguments(parser: argparse.ArgumentParser) -> None:
    add_bootstrap_flags(parser)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--group", help="consume as a member of this consumer group")
    parser.add_argument("--partition", type=int, help="only this partition (default: all)")
    start = parser.add_mutually_exclusive_group()
    start.add_argument("--from-beginning", action="store_true")
    start.add_argument(
        "--offset", help="start offset: a number, 'earliest' or 'latest' (needs --partition)"
    )
    parser.add_argument("--max-messages", type=int, help="stop after this many records")
    parser.add_argument(
        "--timeout-ms", type=int, help="stop when no record arrives for this long (default: never)"
    )
    parser.add_argument(
        "--isolation-level",
        choices=sorted(ISOLATION_LEVELS),
        default="read_uncommitted",
        help="read_committed: only committed transactions' records (default: read_uncommitted)",
    )
    parser.add_argument(
        "--property",
        action="append",
        metavar="KEY=VALUE",
        help="formatter: print.timestamp, print.partition, print.offset, print.headers, "
        "print.key, print.value, key.separator, line.separator, headers.separator, null.literal",
    )
    parser.add_argument(
        "--consumer-property",
        action="append",
        metavar="KEY=VALUE",
        help="with --group: auto.offset.reset, enable.auto.commit, auto.commit.interval.ms, "
        "session.timeout.ms, heartbeat.interval.ms",
    )
    parser.add_argument("--print-key", action="store_true", help="print.key=true")
    parser.add_argument("--json", action="store_true", help="one JSON object per record")


def _check_options(args: argparse.Namespace) -> None:
    if args.offset is not None and args.partition is None:
        raise UsageError("--offset needs --partition", hint="add --partition N")
    if args.group is not None and args.partition is not None:
        raise UsageError("Options group and partition cannot be specified together.")
    if args.group is None and args.consumer_property:
        raise UsageError("--consumer-property needs --group")


@contextlib.contextmanager
def _sigterm_interrupts() -> Iterator[None]:
    """SIGTERM raises KeyboardInterrupt, as Ctrl-C does, so the final commit and LeaveGroup
    run (Kafka's console consumer does both in its shutdown hook)."""

    def interrupt(_signum: int, _frame: FrameType | None) -> None:
        raise KeyboardInterrupt

    try:
        previous = signal.signal(signal.SIGTERM, interrupt)
    except ValueError:  # not the main thread: leave SIGTERM alone
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def run_consume(args: argparse.Namespace) -> int:
    _check_options(args)
    props = parse_properties(args.property, FORMATTER_PROPERTIES)
    formatter = MessageFormatter.from_properties(props, print_key=args.print_key)
    settings = group_settings(
        parse_properties(args.consumer_property, CONSUMER_PROPERTIES, "--consumer-property"),
        args.from_beginning,
    )
    status = 0
    with (
        BlockingClient(
            resolve_bootstrap(args), client_id="tidelog-consume", security=resolve_security(args)
        ) as client,
        _sigterm_interrupts(),
    ):
        consumption = Consumption(
            client,
            args.topic,
            sys.stdout,
            json_line if args.json else formatter.format,
            isolation_level=ISOLATION_LEVELS[args.isolation_level],
            max_messages=args.max_messages,
            max_wait_ms=500 if args.timeout_ms is None else max(10, min(500, args.timeout_ms)),
        )
        try:
            if args.group is None:
                tps = _partitions(client, args)
                consumption.assign(_start_offsets(client, tps, args))
                _loop(consumption, args.timeout_ms, lambda: None)
            else:
                _consume_in_group(client, consumption, args, settings)
        except KeyboardInterrupt:
            status = 130
    print(f"consumed {consumption.printed} records from {args.topic}", file=sys.stderr)
    return status


def _loop(consumption: Consumption, timeout_ms: int | None, between: Callable[[], None]) -> None:
    """Poll until ``--max-messages`` or ``timeout_ms`` without new records, running
    ``between`` before each round."""
    last_data = time.monotonic()
    while not consumption.done:
        if timeout_ms is not None and (time.monotonic() - last_data) * 1000 >= timeout_ms:
            return
        between()
        if consumption.poll():
            last_data = time.monotonic()


def _partitions(client: BlockingClient, args: argparse.Namespace) -> list[TopicPartition]:
    """``--partition`` of the topic, or all its partitions."""
    count = topic_partition_count(client, args.topic)
    if args.partition is None:
        return [TopicPartition(args.topic, p) for p in range(count)]
    check_partition(args.topic, args.partition, count)
    return [TopicPartition(args.topic, args.partition)]


def _start_offsets(
    client: BlockingClient, tps: list[TopicPartition], args: argparse.Namespace
) -> dict[TopicPartition, int]:
    if args.offset is not None and args.offset not in ("earliest", "latest"):
        try:
            offset = int(args.offset)
        except ValueError:
            raise UsageError(
                f"--offset {args.offset!r} is not a number, 'earliest' or 'latest'"
            ) from None
        if offset < 0:
            raise UsageError(f"--offset {offset} is negative")
        return dict.fromkeys(tps, offset)
    earliest = args.from_beginning or args.offset == "earliest"
    return list_offsets(client, tps, earliest, ISOLATION_LEVELS[args.isolation_level])


# --- as a group member ----------------------------------------------------------------------


def _consume_in_group(
    client: BlockingClient,
    consumption: Consumption,
    args: argparse.Namespace,
    settings: GroupSettings,
) -> None:
    """Join ``--group``, read what it assigns, rejoin on rebalances, commit every
    ``auto.commit.interval.ms`` and at the end, then leave."""
    topic_partition_count(client, args.topic)  # an unknown topic is an error, as without a group
    member = GroupMember(
        client,
        args.group,
        [args.topic],
        session_timeout_ms=settings.session_timeout_ms,
        heartbeat_interval_ms=settings.heartbeat_interval_ms,
    )
    next_commit_ms = _now_ms() + settings.auto_commit_interval_ms

    def reset_offset(tp: TopicPartition) -> int:
        if settings.auto_offset_reset == "none":
            raise kafka_error(
                ErrorCode.OFFSET_OUT_OF_RANGE,
                f"offset {consumption.positions[tp]} is outside the log and "
                "auto.offset.reset is none",
                f"{tp.topic}-{tp.partition}",
            )
        earliest = settings.auto_offset_reset == "earliest"
        return list_offsets(client, [tp], earliest, consumption.isolation_level)[tp]

    consumption.reset_offset = reset_offset

    def between_rounds() -> None:
        nonlocal next_commit_ms
        now_ms = _now_ms()
        if not member.maybe_heartbeat(now_ms):
            if settings.enable_auto_commit:
                _commit(member, consumption)
            _join(member, consumption, settings)
        if settings.enable_auto_commit and now_ms >= next_commit_ms:
            _commit(member, consumption)
            next_commit_ms = now_ms + settings.auto_commit_interval_ms

    try:
        _join(member, consumption, settings)
        _loop(consumption, args.timeout_ms, between_rounds)
    finally:
        if settings.enable_auto_commit:
            _commit(member, consumption)
        member.leave()


def _now_ms() -> int:
    return int(time.monotonic() * 1000)


def _join(member: GroupMember, consumption: Consumption, settings: GroupSettings) -> None:
    """Join the group and read its assignment from the committed offsets, else from where
    ``auto.offset.reset`` says."""
    assignment = member.join()
    positions = member.committed(assignment)
    missing = [tp for tp in assignment if tp not in positions]
    if missing and settings.auto_offset_reset == "none":
        names = ", ".join(f"{tp.topic}-{tp.partition}" for tp in missing)
        raise CommandError(
            f"Undefined offset with no reset policy for partitions: [{names}]",
            hint="commit offsets for the group first, or use auto.offset.reset=earliest|latest",
        )
    if missing:
        positions.update(
            list_offsets(
                member.client,
                missing,
                settings.auto_offset_reset == "earliest",
                consumption.isolation_level,
            )
        )
    consumption.assign(positions)


def _commit(member: GroupMember, consumption: Consumption) -> None:
    """Commit the positions of this generation; a failure is reported, not fatal (the
    records after the last commit are read again by whoever reads the partition next)."""
    if not member.in_generation or not consumption.positions:
        return
    code = member.commit(consumption.positions)
    if code != ErrorCode.NONE:
        print(
            f"tidelog consume: warning: committing offsets of group '{member.group_id}' "
            f"failed: {code.name}",
            file=sys.stderr,
        )


COMMANDS["consume"] = ("records -> stdout", add_consume_arguments, run_consume)
