"""``tidelog get-offsets``: kafka-get-offsets.sh (Kafka's ``GetOffsetShell``).

1. The partitions are those of the topics ``--topic`` matches as a whole (a regular
   expression; default: every topic), narrowed by ``--partitions 0,2-4``; the internal
   topics (``__consumer_offsets``, ``__transaction_state``) are left out with
   ``--exclude-internal-topics``. Nothing matched is Kafka's "Could not match any
   topic-partitions with the specified filters" (exit 1).
2. ``--time`` is ``-1``/``latest`` (the default: the log end offset), ``-2``/``earliest``
   (the log start offset), ``-3``/``max-timestamp`` (the offset of the record with the
   largest timestamp, KIP-734) or a timestamp in ms (the first offset at or after it).
3. One ``topic:partition:offset`` line per partition, by topic then partition; a partition
   without such an offset (-1) prints nothing, one that failed prints Kafka's "Skip getting
   offsets for topic-partition T:P due to error: CODE" on stderr.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Mapping
from typing import Final

from tidelog.cli.main import COMMANDS
from tidelog.cli.output import (
    CommandError,
    UsageError,
    add_bootstrap_flags,
    resolve_bootstrap,
    resolve_security,
)
from tidelog.client import BlockingClient
from tidelog.errors import ErrorCode
from tidelog.model import TopicPartition
from tidelog.protocol.list_offsets import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, MAX_TIMESTAMP

INTERNAL_TOPICS: Final = frozenset({"__consumer_offsets", "__transaction_state"})

TIME_NAMES: Final[Mapping[str, int]] = {
    "latest": LATEST_TIMESTAMP,
    "earliest": EARLIEST_TIMESTAMP,
    "max-timestamp": MAX_TIMESTAMP,
}


def parse_time(text: str) -> int:
    """Rule 2: ``--time`` as a ListOffsets timestamp."""
    value = TIME_NAMES.get(text.strip().lower())
    if value is not None:
        return value
    try:
        value = int(text)
    except ValueError:
        value = None
    if value is None or value < MAX_TIMESTAMP:
        raise ValueError(
            f"Malformed time argument {text}. Please use -1 or latest / -2 or earliest / "
            "-3 or max-timestamp, or a specified long format timestamp"
        )
    return value


def parse_partitions(text: str) -> frozenset[int]:
    """Rule 1: ``--partitions 0,2-4`` as partition ids."""
    out: set[int] = set()
    for item in text.split(","):
        low, sep, high = item.strip().partition("-")
        try:
            first = int(low)
            last = int(high) if sep else first
        except ValueError:
            raise ValueError(
                f"--partitions '{text}': expected partition ids or ranges, e.g. 0,2-4"
            ) from None
        if first < 0 or last < first:
            raise ValueError(f"--partitions '{text}': '{item}' is not a partition or a range")
        out.update(range(first, last + 1))
    return frozenset(out)


def matching_partitions(
    topics: Mapping[str, frozenset[int]],
    topic_regex: str | None,
    partitions: frozenset[int] | None,
    *,
    exclude_internal: bool,
) -> list[TopicPartition]:
    """Rule 1 over topic -> its partitions: the partitions asked for, sorted."""
    try:
        pattern = re.compile(topic_regex) if topic_regex is not None else None
    except re.error as exc:
        raise ValueError(f"--topic '{topic_regex}' is not a regular expression: {exc}") from None
    return sorted(
        TopicPartition(topic, p)
        for topic, ids in topics.items()
        if (pattern is None or pattern.fullmatch(topic))
        and not (exclude_internal and topic in INTERNAL_TOPICS)
        for p in ids
        if partitions is None or p in partitions
    )


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_bootstrap_flags(parser)
    parser.add_argument("--topic", metavar="REGEX", help="topics (a regex; default: all)")
    parser.add_argument("--partitions", metavar="P,...", help="partition ids or ranges (0,2-4)")
    parser.add_argument(
        "--time",
        default="-1",
        metavar="TIME",
        help="-1/latest (default), -2/earliest, -3/max-timestamp, or a timestamp in ms",
    )
    parser.add_argument(
        "--exclude-internal-topics", action="store_true", help="leave out internal topics"
    )


def run(args: argparse.Namespace) -> int:
    try:
        timestamp = parse_time(args.time)
        wanted = parse_partitions(args.partitions) if args.partitions is not None else None
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    with BlockingClient(
        resolve_bootstrap(args), client_id="tidelog-cli", security=resolve_security(args)
    ) as client:
        cluster = client.metadata(None)
        topics = {
            name: frozenset(t.partitions)
            for name, t in cluster.topics.items()
            if t.error_code == ErrorCode.NONE
        }
        try:
            tps = matching_partitions(
                topics, args.topic, wanted, exclude_internal=args.exclude_internal_topics
            )
        except ValueError as exc:
            raise UsageError(str(exc)) from None
        if not tps:
            raise CommandError("Could not match any topic-partitions with the specified filters")
        results = client.list_offsets(dict.fromkeys(tps, timestamp))
    for tp in tps:
        result = results.get(tp)
        if result is None or result.error_code != ErrorCode.NONE:
            code = result.error_code if result else ErrorCode.UNKNOWN_SERVER_ERROR
            print(
                f"Skip getting offsets for topic-partition {tp.topic}:{tp.partition} due to "
                f"error: {code.name}",
                file=sys.stderr,
            )
        elif result.offset >= 0:
            print(f"{tp.topic}:{tp.partition}:{result.offset}")
    return 0


COMMANDS["get-offsets"] = (
    "offsets of partitions for a time (kafka-get-offsets.sh)",
    add_arguments,
    run,
)
