"""``tidelog delete-records``: kafka-delete-records.sh.

1. ``--offset-json-file F`` is Kafka's ``{"partitions": [{"topic": T, "partition": P,
   "offset": O}], "version": 1}`` (``version`` may be left out; any other than 1 is refused);
   offset -1 stands for the partition's high watermark. A partition named twice is refused,
   as Kafka does ("Offset json file contains duplicate topic partitions: ...").
2. DeleteRecords goes to each partition's leader, which moves the log start offset up to
   the offset (OFFSET_OUT_OF_RANGE beyond the high watermark) and answers the new low
   watermark.
3. The output is Kafka's: ``partition: T-P<TAB>low_watermark: N`` or
   ``partition: T-P<TAB>error: CODE`` per partition; any error makes the command exit 1.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from kio.index import load_request_schema

from tidelog.cli.main import COMMANDS
from tidelog.cli.output import (
    CommandError,
    UsageError,
    add_bootstrap_flags,
    add_json_flag,
    print_json,
    resolve_bootstrap,
    resolve_security,
)
from tidelog.client import BlockingClient
from tidelog.client.wire import error_code
from tidelog.errors import ErrorCode
from tidelog.model import TopicPartition
from tidelog.protocol.apis import ApiKey
from tidelog.protocol.messages import build

DELETE_RECORDS_V = 2
TIMEOUT_MS = 30_000


def parse_offset_json(text: str) -> dict[TopicPartition, int]:
    """Rule 1: partition -> offset; ValueError with Kafka's message when the file is wrong."""
    try:
        data = json.loads(text)
    except ValueError:
        raise ValueError("The input string is not a valid JSON") from None
    if not isinstance(data, dict):
        raise ValueError("The input string is not a JSON object")
    version = data.get("version", 1)
    if version != 1:
        raise ValueError(f"Not supported version field value {version}")
    entries = data.get("partitions")
    if not isinstance(entries, list):
        raise ValueError("Missing partitions field")
    offsets: dict[TopicPartition, int] = {}
    duplicates: list[str] = []
    for entry in entries:
        if not (
            isinstance(entry, dict)
            and isinstance(entry.get("topic"), str)
            and all(type(entry.get(k)) is int for k in ("partition", "offset"))
        ):
            raise ValueError(
                f'{json.dumps(entry)} is not {{"topic": "T", "partition": <int>, "offset": <int>}}'
            )
        tp = TopicPartition(entry["topic"], entry["partition"])
        if tp in offsets:
            duplicates.append(f"{tp.topic}-{tp.partition}")
        offsets[tp] = entry["offset"]
    if duplicates:
        raise ValueError(
            "Offset json file contains duplicate topic partitions: " + ",".join(duplicates)
        )
    return offsets


def _send(
    client: BlockingClient, node: int, offsets: Mapping[TopicPartition, int]
) -> dict[TopicPartition, tuple[ErrorCode, int]]:
    by_topic: dict[str, list[dict[str, int]]] = {}
    for tp, offset in offsets.items():
        by_topic.setdefault(tp.topic, []).append(
            {"partition_index": tp.partition, "offset": offset}
        )
    request: Any = build(
        load_request_schema(ApiKey.DELETE_RECORDS, DELETE_RECORDS_V),
        {
            "topics": [{"name": t, "partitions": ps} for t, ps in by_topic.items()],
            "timeout": TIMEOUT_MS,
        },
    )
    response = client.send(request, node_id=node)
    return {
        TopicPartition(str(t.name), int(p.partition_index)): (
            error_code(p.error_code),
            int(p.low_watermark),
        )
        for t in response.topics
        for p in t.partitions
    }


def delete_records(
    client: BlockingClient, offsets: Mapping[TopicPartition, int]
) -> dict[TopicPartition, tuple[ErrorCode, int]]:
    """Rule 2: partition -> (error, low watermark), one request per leader."""
    cluster = client.metadata(sorted({tp.topic for tp in offsets}))
    results: dict[TopicPartition, tuple[ErrorCode, int]] = {}
    by_leader: dict[int, dict[TopicPartition, int]] = {}
    for tp, offset in offsets.items():
        topic = cluster.topics.get(tp.topic)
        if topic is None or topic.error_code != ErrorCode.NONE:
            code = topic.error_code if topic else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            results[tp] = (code, -1)
            continue
        partition = topic.partitions.get(tp.partition)
        if partition is None:
            results[tp] = (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, -1)
        elif partition.leader_id < 0:
            results[tp] = (ErrorCode.LEADER_NOT_AVAILABLE, -1)
        else:
            by_leader.setdefault(partition.leader_id, {})[tp] = offset
    for node, group in by_leader.items():
        answered = _send(client, node, group)
        for tp in group:
            results[tp] = answered.get(tp, (ErrorCode.UNKNOWN_SERVER_ERROR, -1))
    return {tp: results[tp] for tp in offsets}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_bootstrap_flags(parser)
    add_json_flag(parser)
    parser.add_argument(
        "--offset-json-file",
        type=Path,
        required=True,
        metavar="FILE",
        help='{"partitions": [{"topic": T, "partition": P, "offset": O}], "version": 1}; '
        "offset -1: the high watermark",
    )


def run(args: argparse.Namespace) -> int:
    path: Path = args.offset_json_file
    try:
        text = path.read_text()
    except OSError as exc:
        raise UsageError(f"--offset-json-file {path}: {exc.strerror or exc}") from None
    try:
        offsets = parse_offset_json(text)
    except ValueError as exc:
        raise UsageError(f"--offset-json-file {path}: {exc}") from None
    with BlockingClient(
        resolve_bootstrap(args), client_id="tidelog-cli", security=resolve_security(args)
    ) as client:
        if not args.json:
            print("Executing records delete operation", flush=True)
        results = delete_records(client, offsets)
    if args.json:
        print_json(
            [
                {
                    "topic": tp.topic,
                    "partition": tp.partition,
                    "low_watermark": low if code == ErrorCode.NONE else None,
                    "error": None if code == ErrorCode.NONE else code.name,
                }
                for tp, (code, low) in results.items()
            ]
        )
    else:
        print("Records delete operation completed:")
        for tp, (code, low) in results.items():
            outcome = f"low_watermark: {low}" if code == ErrorCode.NONE else f"error: {code.name}"
            print(f"partition: {tp.topic}-{tp.partition}\t{outcome}")
    failed = [(tp, code) for tp, (code, _) in results.items() if code != ErrorCode.NONE]
    if failed:
        sys.stdout.flush()
        tp, code = failed[0]
        raise CommandError(
            f"{len(failed)} of {len(results)} partition(s) failed, first {tp.topic}-{tp.partition}",
            code=code,
            hint=(
                "the offset must be at most the high watermark (-1 stands for it)"
                if code == ErrorCode.OFFSET_OUT_OF_RANGE
                else None
            ),
        )
    return 0


COMMANDS["delete-records"] = (
    "delete records before an offset (kafka-delete-records.sh)",
    add_arguments,
    run,
)
