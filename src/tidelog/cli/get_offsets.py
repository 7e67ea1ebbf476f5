"""``tidelog get-offsets``: kafka-get-offsets.sh (Kafka's ``GetOffsetShell``).

1. The partitions are those of the topics ``--topic`` matches as a whole (a regular
   expression; default: every topic), narrowed by ``--partitions 0,2``, or those
   ``--topic-partitions`` patterns match (``t1:1,t2:0-3,t3,t4:5-,t5:-3``: a topic regex and
   a partition, a range with its upper bound excluded, or nothing for all); the internal
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
from dataclasses import dataclass
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


@dataclass(frozen=True, slots=True)
class PartitionFilter:
    """Topics whose whole name ``topic`` matches (None: any) and partitions in [low, high)
    (high None: no upper bound)."""

    topic: re.Pattern[str] | None
    low: int = 0
    high: int | None = None

    def matches(self, tp: TopicPartition) -> bool:
        return (
            (self.topic is None or self.topic.fullmatch(tp.topic) is not None)
            and tp.partition >= self.low
            and (self.high is None or tp.partition < self.high)
        )


def _compile(regex: str, option: str) -> re.Pattern[str]:
    try:
        return re.compile(regex)
    except re.error as exc:
        raise ValueError(f"{option} '{regex}' is not a regular expression: {exc}") from None


def topic_filters(topic: str | None, partitions: str | None) -> list[PartitionFilter]:
    """Rule 1: ``--topic REGEX`` and ``--partitions 0,2`` (ids only, as Kafka)."""
    pattern = _compile(topic, "--topic") if topic is not None else None
    if partitions is None:
        return [PartitionFilter(pattern)]
    try:
        ids = sorted({int(item) for item in partitions.split(",")})
    except ValueError:
        raise ValueError(
            "--partitions expects a comma separated list of numeric partition ids, but "
            f"received: {partitions}"
        ) from None
    return [PartitionFilter(pattern, p, p + 1) for p in ids]


_PATTERN: Final = re.compile(r"([^:,]*)(?::(?:([0-9]*)|(?:([0-9]*)-([0-9]*))))?")


def topic_partition_filters(text: str) -> list[PartitionFilter]:
    """Rule 1: ``--topic-partitions`` as Kafka reads it: comma-separated ``REGEX:PARTITIONS``,
    either part optional; PARTITIONS is ``N``, ``N-M`` (M excluded), ``N-`` or ``-M``."""
    out = []
    for item in text.split(","):
        match = _PATTERN.fullmatch(item.strip())
        if match is None:
            raise ValueError(f"Invalid topic-partition pattern: {item}")
        regex, single, low, high = match.groups()
        pattern = _compile(regex, "--topic-partitions") if regex else None
        if single:
            out.append(PartitionFilter(pattern, int(single), int(single) + 1))
        else:
            out.append(PartitionFilter(pattern, int(low or 0), int(high) if high else None))
    return out


def matching_partitions(
    topics: Mapping[str, frozenset[int]],
    filters: list[PartitionFilter],
    *,
    exclude_internal: bool,
) -> list[TopicPartition]:
    """Rule 1 over topic -> its partitions: those any filter matches, sorted."""
    return sorted(
        tp
        for topic, ids in topics.items()
        if not (exclude_internal and topic in INTERNAL_TOPICS)
        for tp in (TopicPartition(topic, p) for p in ids)
        if any(f.matches(tp) for f in filters)
    )


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_bootstrap_flags(parser)
    parser.add_argument("--topic", metavar="REGEX", help="topics (a regex; default: all)")
    parser.add_argument("--partitions", metavar="P,...", help="partition ids (with --topic)")
    parser.add_argument(
        "--topic-partitions",
        metavar="PATTERNS",
        help="REGEX:PARTITIONS patterns, comma-separated: t1:1,t2:0-3,t3,t4:5-,t5:-3",
    )
    parser.add_argument(
        "--time",
        default="-1",
        metavar="TIME",
        help="-1/latest (default), -2/earliest, -3/max-timestamp, or a timestamp in ms",
    )
    parser.add_argument(
        "--exclude-internal-topics", action="store_true", help="leave out internal topics"
    )


def _filters(args: argparse.Namespace) -> list[PartitionFilter]:
    if args.topic_partitions is not None:
        if args.topic is not None or args.partitions is not None:
            raise ValueError("--topic-partitions cannot be used with --topic or --partitions")
        return topic_partition_filters(args.topic_partitions)
    return topic_filters(args.topic, args.partitions)


def run(args: argparse.Namespace) -> int:
    try:
        timestamp = parse_time(args.time)
        filters = _filters(args)
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
        tps = matching_partitions(topics, filters, exclude_internal=args.exclude_internal_topics)
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
