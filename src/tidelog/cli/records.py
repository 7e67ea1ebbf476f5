"""``tidelog produce`` (stdin lines -> records) and ``tidelog consume`` (records -> stdout).

``produce`` reads lines, optionally splits each into key and value at ``--key-separator``,
and sends them in batches to each partition's leader with ``--acks``. Keyed records go to
``murmur2(key) % partitions`` (Kafka's default partitioner, so keys land where Java and
librdkafka's ``murmur2_random`` put them); unkeyed ones round-robin per batch. A line is sent
as soon as no more input is waiting, so interactive use works.

``consume`` fetches from each partition's leader, from the end (default), the beginning
(``--from-beginning``) or ``--offset``, and prints values (``--print-key``: key TAB value) or
one JSON object per record (``--json``). It stops after ``--max-messages`` or after
``--timeout-ms`` without new records.
"""

from __future__ import annotations

import argparse
import contextlib
import json
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
from tidelog.client import (
    EARLIEST_TIMESTAMP,
    LATEST_TIMESTAMP,
    BlockingClient,
    ClientConnectionError,
    FetchRequestPartition,
    FetchResult,
    Record,
    build_batch,
    decode_records,
)
from tidelog.client.client import ClusterMetadata
from tidelog.errors import ErrorCode
from tidelog.model import TopicPartition
from tidelog.protocol.partitioner import partition_for_key

ACKS: Final = {"all": -1, "-1": -1, "1": 1, "0": 0}
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


def parse_line(line: str, separator: str | None, line_number: int) -> Record:
    """One input line (without its newline) -> a Record; a missing separator is an error."""
    if separator is None:
        return Record(value=line.encode())
    key, sep, value = line.partition(separator)
    if not sep:
        raise CommandError(
            f"line {line_number} has no key separator {separator!r}: {line[:60]!r}",
            hint="every line must be KEY<separator>VALUE when --key-separator is given",
        )
    return Record(key=key.encode(), value=value.encode())


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


def _topic_partitions(client: BlockingClient, topic: str, refresh: bool = False) -> int:
    md: ClusterMetadata | None = client.client.cluster
    if refresh or md is None or topic not in md.topics:
        md = client.metadata([topic])
    t = md.topics.get(topic)
    if t is None or t.error_code != ErrorCode.NONE or not t.partitions:
        code = t.error_code if t is not None else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        raise kafka_error(code, None, f"topic '{topic}'")
    return len(t.partitions)


def _send(
    client: BlockingClient,
    tp: TopicPartition,
    records: Sequence[Record],
    *,
    acks: int,
    timeout_ms: int,
    retries: int,
) -> int | None:
    """Produce one batch with retries on leader changes; returns the base offset."""
    attempt = 0
    while True:
        now = int(time.time() * 1000)
        batch = build_batch(records, base_timestamp_ms=now)
        try:
            result = client.produce(tp, batch, acks=acks, timeout_ms=timeout_ms)
        except ClientConnectionError:
            if attempt >= retries:
                raise
            result = None
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
    parser.add_argument("--acks", choices=sorted(ACKS), default="all", help="default: all")
    parser.add_argument("--batch-size", type=int, default=500, help="records per batch (max)")
    parser.add_argument("--timeout-ms", type=int, default=30000, help="produce request timeout")
    parser.add_argument(
        "--retries", type=int, default=20, help="retries on leader changes (about 40 s in all)"
    )


def run_produce(args: argparse.Namespace) -> int:
    if args.batch_size < 1:
        raise CommandError("--batch-size must be at least 1")
    acks = ACKS[args.acks]
    bootstrap = resolve_bootstrap(args)
    sent = 0
    line_number = 0
    round_robin = 0
    with BlockingClient(
        bootstrap, client_id="tidelog-produce", security=resolve_security(args)
    ) as client:
        count = _topic_partitions(client, args.topic)
        if args.partition is not None and not 0 <= args.partition < count:
            raise kafka_error(
                ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                f"it has partitions 0-{count - 1}",
                f"partition {args.partition} of topic '{args.topic}'",
            )
        for lines in read_batches(sys.stdin, args.batch_size):
            by_partition: dict[int, list[Record]] = {}
            for line in lines:
                line_number += 1
                record = parse_line(line, args.key_separator, line_number)
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
                    acks=acks,
                    timeout_ms=args.timeout_ms,
                    retries=args.retries,
                )
                sent += len(records)
    print(f"produced {sent} records to {args.topic} (acks={args.acks})", file=sys.stderr)
    return 0


# --- consume ---------------------------------------------------------------------------------


def add_consume_arguments(parser: argparse.ArgumentParser) -> None:
    add_bootstrap_flags(parser)
    parser.add_argument("--topic", required=True)
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
    parser.add_argument("--print-key", action="store_true", help="print KEY<TAB>VALUE")
    parser.add_argument("--json", action="store_true", help="one JSON object per record")


def _text(value: bytes | None) -> str | None:
    return None if value is None else value.decode("utf-8", errors="replace")


def format_record(
    tp: TopicPartition,
    offset: int,
    timestamp_ms: int,
    key: bytes | None,
    value: bytes | None,
    *,
    as_json: bool,
    print_key: bool,
) -> str:
    if as_json:
        return json.dumps(
            {
                "topic": tp.topic,
                "partition": tp.partition,
                "offset": offset,
                "timestamp": timestamp_ms,
                "key": _text(key),
                "value": _text(value),
            }
        )
    text = _text(value) or ""
    if print_key:
        return f"{_text(key) or ''}\t{text}"
    return text


def _start_offsets(
    client: BlockingClient, tps: list[TopicPartition], args: argparse.Namespace
) -> dict[TopicPartition, int]:
    if args.offset is not None and args.offset not in ("earliest", "latest"):
        try:
            offset = int(args.offset)
        except ValueError:
            raise CommandError(
                f"--offset {args.offset!r} is not a number, 'earliest' or 'latest'"
            ) from None
        if offset < 0:
            raise CommandError(f"--offset {offset} is negative")
        return dict.fromkeys(tps, offset)
    earliest = args.from_beginning or args.offset == "earliest"
    results = client.list_offsets(
        dict.fromkeys(tps, EARLIEST_TIMESTAMP if earliest else LATEST_TIMESTAMP)
    )
    offsets = {}
    for tp in tps:
        r = results.get(tp)
        if r is None or r.error_code != ErrorCode.NONE:
            code = r.error_code if r is not None else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            raise kafka_error(code, None, f"listing offsets of {tp.topic}-{tp.partition}")
        offsets[tp] = r.offset
    return offsets


def run_consume(args: argparse.Namespace) -> int:
    if args.offset is not None and args.partition is None:
        raise CommandError("--offset needs --partition", hint="add --partition N")
    bootstrap = resolve_bootstrap(args)
    with BlockingClient(
        bootstrap, client_id="tidelog-consume", security=resolve_security(args)
    ) as client:
        tps = _consumed_partitions(client, args)
        printed = _consume(client, tps, _start_offsets(client, tps, args), args, sys.stdout)
    print(f"consumed {printed} records from {args.topic}", file=sys.stderr)
    return 0


def _consumed_partitions(client: BlockingClient, args: argparse.Namespace) -> list[TopicPartition]:
    """``--partition`` of the topic, or all its partitions."""
    count = _topic_partitions(client, args.topic)
    if args.partition is None:
        return [TopicPartition(args.topic, p) for p in range(count)]
    if not 0 <= args.partition < count:
        raise kafka_error(
            ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
            f"it has partitions 0-{count - 1}",
            f"partition {args.partition} of topic '{args.topic}'",
        )
    return [TopicPartition(args.topic, args.partition)]


def _consume(
    client: BlockingClient,
    tps: list[TopicPartition],
    positions: dict[TopicPartition, int],
    args: argparse.Namespace,
    out: TextIO,
) -> int:
    """Fetch rounds from each leader until ``--max-messages`` or ``--timeout-ms`` without
    new records; the number of records printed."""
    printed = 0
    last_data = time.monotonic()
    errors_in_a_row = 0
    while args.max_messages is None or printed < args.max_messages:
        if args.timeout_ms is not None and (time.monotonic() - last_data) * 1000 >= args.timeout_ms:
            break
        by_leader = _partitions_by_leader(client, tps)
        if -1 in by_leader:
            client.metadata([args.topic])
            time.sleep(0.2)
            continue
        before = printed
        refresh = False
        for leader, group in sorted(by_leader.items()):
            printed, clean = _fetch_from_leader(
                client,
                leader,
                group,
                positions,
                args=args,
                out=out,
                printed=printed,
                only_leader=len(by_leader) == 1,
            )
            refresh = refresh or not clean
        out.flush()
        if printed > before:
            last_data = time.monotonic()
            errors_in_a_row = 0
        if refresh:
            errors_in_a_row += 1
            if errors_in_a_row > 50:
                raise CommandError("the partitions' leaders keep failing; giving up")
            time.sleep(min(1.0, 0.1 * errors_in_a_row))
            with contextlib.suppress(ClientConnectionError):
                client.metadata([args.topic])
    return printed


def _fetch_from_leader(
    client: BlockingClient,
    leader: int,
    group: list[TopicPartition],
    positions: dict[TopicPartition, int],
    *,
    args: argparse.Namespace,
    out: TextIO,
    printed: int,
    only_leader: bool,
) -> tuple[int, bool]:
    """One fetch of ``group`` from ``leader``, its records printed; the new count of
    records printed, and False when a partition (or the connection) needs a metadata
    refresh and a retry. With other leaders to ask, the fetch waits at most 100 ms."""
    wait_ms = 500
    if args.timeout_ms is not None:
        wait_ms = max(10, min(wait_ms, args.timeout_ms))
    try:
        results = client.fetch(
            {tp: FetchRequestPartition(positions[tp]) for tp in group},
            max_wait_ms=wait_ms if only_leader else 100,
            node_id=leader,
        )
    except ClientConnectionError:
        return printed, False
    clean = True
    for tp in group:
        r = results.get(tp)
        if r is None:
            continue
        if not _fetched_cleanly(r, tp, positions[tp]):
            clean = False
            continue
        printed = _print_records(r.records, tp, positions, args, out, printed=printed)
        if args.max_messages is not None and printed >= args.max_messages:
            break
    return printed, clean


def _partitions_by_leader(
    client: BlockingClient, tps: list[TopicPartition]
) -> dict[int, list[TopicPartition]]:
    """``tps`` by their leader in the client's metadata; -1 holds those without one."""
    md = client.client.cluster
    by_leader: dict[int, list[TopicPartition]] = {}
    for tp in tps:
        leader = md.leader_for(tp) if md is not None else None
        by_leader.setdefault(-1 if leader is None else leader, []).append(tp)
    return by_leader


def _fetched_cleanly(r: FetchResult, tp: TopicPartition, position: int) -> bool:
    """False for an error after which a metadata refresh and a retry may succeed; raises
    for any other error."""
    if r.error_code == ErrorCode.OFFSET_OUT_OF_RANGE:
        raise kafka_error(
            r.error_code,
            f"offset {position} is outside [{r.log_start_offset}, {r.high_watermark}]",
            f"{tp.topic}-{tp.partition}",
        )
    if r.error_code != ErrorCode.NONE:
        if r.error_code not in RETRY_ERRORS:
            raise kafka_error(r.error_code, None, f"{tp.topic}-{tp.partition}")
        return False
    return True


def _print_records(
    records: bytes,
    tp: TopicPartition,
    positions: dict[TopicPartition, int],
    args: argparse.Namespace,
    out: TextIO,
    *,
    printed: int,
) -> int:
    """Write the fetched records at or past ``tp``'s position, advancing it; stops once
    ``printed`` reaches ``--max-messages``. The new count of records printed."""
    for rec in decode_records(records):
        if rec.offset < positions[tp]:
            continue
        out.write(
            format_record(
                tp,
                rec.offset,
                rec.timestamp_ms,
                rec.key,
                rec.value,
                as_json=args.json,
                print_key=args.print_key,
            )
            + "\n"
        )
        positions[tp] = rec.offset + 1
        printed += 1
        if args.max_messages is not None and printed >= args.max_messages:
            break
    return printed


COMMANDS["produce"] = ("stdin lines -> records", add_produce_arguments, run_produce)
COMMANDS["consume"] = ("records -> stdout", add_consume_arguments, run_consume)
