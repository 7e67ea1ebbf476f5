"""``tidelog produce``: stdin lines -> records, as kafka-console-producer.sh.

Each line is a record read by ``record_format.LineReader`` (``--property parse.key=true``,
``key.separator``, ``parse.headers``, ``headers.*``, ``null.marker``; ``--key-separator SEP``
is ``parse.key=true key.separator=SEP``). Records go in batches, compressed with
``--compression-codec`` (none, gzip, snappy, lz4, zstd: what ``build_batch`` writes), to each
partition's leader with ``--acks`` / ``--request-required-acks``. Keyed records go to
``murmur2(key) % partitions`` (Kafka's default partitioner, so keys land where Java and
librdkafka's ``murmur2_random`` put them); unkeyed ones round-robin per batch. A batch is
sent as soon as no more input is waiting, so interactive use works.
"""

from __future__ import annotations

import argparse
import select
import sys
import time
from collections.abc import Iterator, Sequence
from typing import Final, TextIO

from tidelog.cli.main import COMMANDS
from tidelog.cli.output import (
    CommandError,
    add_bootstrap_flags,
    kafka_error,
    resolve_bootstrap,
    resolve_security,
)
from tidelog.cli.record_format import READER_PROPERTIES, LineReader, parse_properties
from tidelog.client import BlockingClient, ClientConnectionError, Record, build_batch
from tidelog.client.client import ClusterMetadata
from tidelog.errors import ErrorCode
from tidelog.model import TopicPartition
from tidelog.protocol.partitioner import partition_for_key
from tidelog.protocol.records import Compression

ACKS: Final = {"all": -1, "-1": -1, "1": 1, "0": 0}
#: ``--compression-codec`` names (kafka-console-producer.sh's) -> the batch attribute.
CODECS: Final = {
    "none": Compression.NONE,
    "gzip": Compression.GZIP,
    "snappy": Compression.SNAPPY,
    "lz4": Compression.LZ4,
    "zstd": Compression.ZSTD,
}
#: Errors after which a metadata refresh and a retry may succeed.
RETRY_ERRORS: Final = frozenset(
    {
        ErrorCode.NOT_LEADER_OR_FOLLOWER,
        ErrorCode.LEADER_NOT_AVAILABLE,
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        ErrorCode.FENCED_LEADER_EPOCH,
        ErrorCode.UNKNOWN_LEADER_EPOCH,
        ErrorCode.REQUEST_TIMED_OUT,
        ErrorCode.NOT_ENOUGH_REPLICAS,
    }
)


def _input_waiting(stream: TextIO) -> bool:
    try:
        ready, _, _ = select.select([stream], [], [], 0)
    except (ValueError, OSError, TypeError):
        return True  # not selectable (e.g. a StringIO): just keep reading
    return bool(ready)


def read_batches(stream: TextIO, max_records: int) -> Iterator[list[str]]:
    """Lines in groups: a group ends at ``max_records`` or when no more input is waiting."""
    group: list[str] = []
    while True:
        line = stream.readline()
        if not line:
            break
        group.append(line.rstrip("\n").rstrip("\r"))
        if len(group) >= max_records or not _input_waiting(stream):
            yield group
            group = []
    if group:
        yield group


def topic_partition_count(client: BlockingClient, topic: str) -> int:
    """How many partitions ``topic`` has (the client's metadata, fetched when it lacks it);
    a Kafka error for a topic that does not exist."""
    md: ClusterMetadata | None = client.client.cluster
    if md is None or topic not in md.topics:
        md = client.metadata([topic])
    t = md.topics.get(topic)
    if t is None or t.error_code != ErrorCode.NONE or not t.partitions:
        code = t.error_code if t is not None else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        raise kafka_error(code, None, f"topic '{topic}'")
    return len(t.partitions)


def check_partition(topic: str, partition: int, count: int) -> None:
    if not 0 <= partition < count:
        raise kafka_error(
            ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
            f"it has partitions 0-{count - 1}",
            f"partition {partition} of topic '{topic}'",
        )


def _send(
    client: BlockingClient,
    tp: TopicPartition,
    records: Sequence[Record],
    *,
    acks: int,
    compression: Compression,
    timeout_ms: int,
    retries: int,
) -> int | None:
    """Produce one batch with retries on leader changes; returns the base offset."""
    attempt = 0
    while True:
        now = int(time.time() * 1000)
        batch = build_batch(records, base_timestamp_ms=now, compression=compression)
        try:
            result = client.produce(tp, batch, acks=acks, timeout_ms=timeout_ms)
        except ClientConnectionError:
            if attempt >= retries:
                raise
            code = ErrorCode.NETWORK_EXCEPTION
            message: str | None = None
        else:
            if result is None:
                return None
            code, message = result.error_code, result.error_message
            if code == ErrorCode.NONE:
                return result.base_offset
        if code not in RETRY_ERRORS and code != ErrorCode.NETWORK_EXCEPTION:
            raise kafka_error(code, message, f"producing to {tp.topic}-{tp.partition}")
        if attempt >= retries:
            raise kafka_error(code, message, f"producing to {tp.topic}-{tp.partition}")
        attempt += 1
        time.sleep(min(2.0, 0.2 * attempt))
        client.metadata([tp.topic])


def add_produce_arguments(parser: argparse.ArgumentParser) -> None:
    add_bootstrap_flags(parser)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--partition", type=int, help="send every record to this partition")
    parser.add_argument("--key-separator", help="split each line into KEY and VALUE at this string")
    parser.add_argument(
        "--property",
        action="append",
        metavar="KEY=VALUE",
        help="line reader: parse.key, key.separator, parse.headers, headers.delimiter, "
        "headers.separator, headers.key.separator, ignore.error, null.marker",
    )
    parser.add_argument(
        "--acks",
        "--request-required-acks",
        dest="acks",
        choices=sorted(ACKS),
        default="all",
        help="default: all (-1)",
    )
    parser.add_argument(
        "--compression-codec",
        choices=sorted(CODECS),
        nargs="?",
        const="gzip",
        default="none",
        help="batch compression (default: none; without a value: gzip)",
    )
    parser.add_argument("--batch-size", type=int, default=500, help="records per batch (max)")
    parser.add_argument("--timeout-ms", type=int, default=30000, help="produce request timeout")
    parser.add_argument(
        "--retries", type=int, default=20, help="retries on leader changes (about 40 s in all)"
    )


def run_produce(args: argparse.Namespace) -> int:
    if args.batch_size < 1:
        raise CommandError("--batch-size must be at least 1")
    reader = LineReader.from_properties(
        parse_properties(args.property, READER_PROPERTIES), args.key_separator
    )
    sent = 0
    line_number = 0
    round_robin = 0
    with BlockingClient(
        resolve_bootstrap(args), client_id="tidelog-produce", security=resolve_security(args)
    ) as client:
        count = topic_partition_count(client, args.topic)
        if args.partition is not None:
            check_partition(args.topic, args.partition, count)
        for lines in read_batches(sys.stdin, args.batch_size):
            by_partition: dict[int, list[Record]] = {}
            for line in lines:
                line_number += 1
                record = reader.read(line, line_number)
                if args.partition is not None:
                    p = args.partition
                elif record.key is not None:
                    p = partition_for_key(record.key, count)
                else:
                    p = round_robin % count
                by_partition.setdefault(p, []).append(record)
            round_robin += 1
            for p, records in sorted(by_partition.items()):
                _send(
                    client,
                    TopicPartition(args.topic, p),
                    records,
                    acks=ACKS[args.acks],
                    compression=CODECS[args.compression_codec],
                    timeout_ms=args.timeout_ms,
                    retries=args.retries,
                )
                sent += len(records)
    print(f"produced {sent} records to {args.topic} (acks={args.acks})", file=sys.stderr)
    return 0


COMMANDS["produce"] = ("stdin lines -> records", add_produce_arguments, run_produce)
