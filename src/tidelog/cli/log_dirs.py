"""``tidelog log-dirs describe|move``: the brokers' log dirs and replicas moving between them
(KIP-113), like ``kafka-log-dirs.sh --describe`` and the ``log_dirs`` of
``kafka-reassign-partitions.sh``; DescribeLogDirs and AlterReplicaLogDirs
(``tidelog.client.log_dir_admin``).

- ``describe [--broker-list 1,2] [--topic-list t1,t2]``: prints kafka-log-dirs.sh's JSON on
  one line, ``{"version":1,"brokers":[{"broker":1,"logDirs":[{"logDir":..,"error":null,
  "partitions":[{"partition":"t-0","size":..,"offsetLag":0,"isFuture":false}]}]}]}``, with
  ``--pretty`` indented. Every broker of the cluster by default; ``--topic-list`` keeps
  those topics' partitions (filtered here, as the Kafka tool does). ``error`` is null or
  the name of Kafka's exception (``org.apache.kafka.common.errors.KafkaStorageException``
  for an offline dir). tidelog adds ``totalBytes``/``usableBytes`` per log dir.
- ``move --topic T --partition P --broker B --log-dir D [--wait] [--timeout S]``: moves
  broker B's replica of T-P into its log dir D (an absolute path, as Kafka requires). The broker
  answers at once and copies in the background; ``--wait`` polls DescribeLogDirs until the
  replica is in D with no future log left (or the move stopped: an error naming where the
  replica is).

Rules: option mistakes are usage errors (exit 2, nothing sent); a broker's refusal prints
its Kafka error (LOG_DIR_NOT_FOUND, REPLICA_NOT_AVAILABLE, KAFKA_STORAGE_ERROR,
CLUSTER_AUTHORIZATION_FAILED, ...) and exits 1. Progress lines go to stderr, the JSON to
stdout.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Mapping, Sequence
from typing import Any, Final

from tidelog.cli.main import COMMANDS
from tidelog.cli.output import (
    CommandError,
    UsageError,
    add_bootstrap_flags,
    resolve_bootstrap,
    resolve_security,
)
from tidelog.client import BlockingClient
from tidelog.client import log_dir_admin as lda
from tidelog.errors import ErrorCode
from tidelog.model import TopicPartition

#: kafka-log-dirs.sh names the exception class of a log dir's error.
KAFKA_EXCEPTIONS: Final[Mapping[ErrorCode, str]] = {
    ErrorCode.KAFKA_STORAGE_ERROR: "org.apache.kafka.common.errors.KafkaStorageException",
    ErrorCode.LOG_DIR_NOT_FOUND: "org.apache.kafka.common.errors.LogDirNotFoundException",
    ErrorCode.CLUSTER_AUTHORIZATION_FAILED: (
        "org.apache.kafka.common.errors.ClusterAuthorizationException"
    ),
    ErrorCode.UNKNOWN_SERVER_ERROR: "org.apache.kafka.common.errors.UnknownServerException",
}
HINTS: Final[Mapping[ErrorCode, str]] = {
    ErrorCode.LOG_DIR_NOT_FOUND: (
        "--log-dir must be one of the broker's log.dirs, as an absolute path; see "
        "`tidelog log-dirs describe`"
    ),
    ErrorCode.REPLICA_NOT_AVAILABLE: "that broker does not host a replica of the partition",
    ErrorCode.KAFKA_STORAGE_ERROR: "a log dir of that broker is offline (see its log)",
}
POLL_INTERVAL_S: Final = 0.5


def id_list(text: str) -> list[int]:
    try:
        ids = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a comma-separated list of ids") from None
    if not ids:
        raise argparse.ArgumentTypeError("the list is empty")
    return ids


def name_list(text: str) -> list[str]:
    names = [part.strip() for part in text.split(",") if part.strip()]
    if not names:
        raise argparse.ArgumentTypeError("the list is empty")
    return names


def absolute_dir(text: str) -> str:
    if not os.path.isabs(text):
        raise argparse.ArgumentTypeError(f"{text!r} is not an absolute path (Kafka requires one)")
    return os.path.normpath(text)


# --- output (pure) ---------------------------------------------------------------------------


def error_name(code: ErrorCode) -> str | None:
    if code == ErrorCode.NONE:
        return None
    return KAFKA_EXCEPTIONS.get(code, code.name)


def log_dirs_json(
    answers: Mapping[int, lda.DescribeLogDirsResult], topics: Sequence[str] | None = None
) -> dict[str, Any]:
    """kafka-log-dirs.sh's document for the brokers' answers (brokers in id order)."""
    wanted = set(topics) if topics else None
    brokers = []
    for broker_id in sorted(answers):
        log_dirs = []
        for log_dir in answers[broker_id].log_dirs:
            replicas = sorted(
                (r for r in log_dir.replicas if wanted is None or r.partition.topic in wanted),
                key=lambda r: (r.partition, r.is_future),
            )
            log_dirs.append(
                {
                    "logDir": log_dir.path,
                    "error": error_name(log_dir.error_code),
                    "partitions": [
                        {
                            "partition": str(r.partition),
                            "size": r.size,
                            "offsetLag": r.offset_lag,
                            "isFuture": r.is_future,
                        }
                        for r in replicas
                    ],
                    "totalBytes": log_dir.total_bytes,
                    "usableBytes": log_dir.usable_bytes,
                }
            )
        brokers.append({"broker": broker_id, "logDirs": log_dirs})
    return {"version": 1, "brokers": brokers}


def where_is(result: lda.DescribeLogDirsResult, tp: TopicPartition) -> tuple[list[str], list[str]]:
    """(dirs holding ``tp``'s current log, dirs holding a future log of it)."""
    current: list[str] = []
    future: list[str] = []
    for log_dir in result.log_dirs:
        for r in log_dir.replicas:
            if r.partition == tp:
                (future if r.is_future else current).append(os.path.normpath(log_dir.path))
    return current, future


# --- commands --------------------------------------------------------------------------------


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    p = sub.add_parser(
        "describe",
        help="log dirs of brokers: sizes, lags, future replicas (DescribeLogDirs)",
        description="Print kafka-log-dirs.sh's JSON for the brokers' log dirs.",
    )
    add_bootstrap_flags(p)
    p.add_argument("--broker-list", type=id_list, metavar="1,2", help="default: every broker")
    p.add_argument("--topic-list", type=name_list, metavar="T1,T2", help="default: every topic")
    p.add_argument("--pretty", action="store_true", help="indent the JSON")
    p = sub.add_parser(
        "move",
        help="move a broker's replica into another of its log dirs (AlterReplicaLogDirs)",
        description="Move a broker's replica into another of its log dirs, online.",
    )
    add_bootstrap_flags(p)
    p.add_argument("--topic", required=True)
    p.add_argument("--partition", type=int, required=True)
    p.add_argument("--broker", type=int, required=True, help="the broker whose replica moves")
    p.add_argument(
        "--log-dir",
        type=absolute_dir,
        required=True,
        metavar="PATH",
        help="the target log dir (absolute, one of the broker's log.dirs; --dir is the "
        "local cluster's directory, as in every command)",
    )
    p.add_argument("--wait", action="store_true", help="wait until the move finished")
    p.add_argument(
        "--timeout", type=float, default=600.0, metavar="S", help="for --wait (default: 600)"
    )


def run(args: argparse.Namespace) -> int:
    if args.action == "move" and args.partition < 0:
        raise UsageError("--partition must be >= 0")
    bootstrap = resolve_bootstrap(args)
    security = resolve_security(args)
    with BlockingClient(bootstrap, client_id="tidelog-cli", security=security) as client:
        if args.action == "move":
            return _move(client, args)
        return _describe(client, args)


def _broker_ids(client: BlockingClient, wanted: Sequence[int] | None) -> list[int]:
    known = sorted(client.metadata([]).brokers)
    if wanted is None:
        return known
    missing = sorted(set(wanted) - set(known))
    if missing:
        raise UsageError(
            f"the given brokers do not exist from --broker-list: "
            f"{','.join(map(str, missing))}. Current existent brokers: "
            f"{','.join(map(str, known))}"
        )
    return list(dict.fromkeys(wanted))


def _describe_one(
    client: BlockingClient, broker_id: int, partitions: Mapping[str, Sequence[int]] | None = None
) -> lda.DescribeLogDirsResult:
    result = client.run(lda.describe_log_dirs(client.client, broker_id, partitions))
    if result.error_code != ErrorCode.NONE:
        raise CommandError(f"broker {broker_id} refused DescribeLogDirs", code=result.error_code)
    return result


def _describe(client: BlockingClient, args: argparse.Namespace) -> int:
    ids = _broker_ids(client, args.broker_list)
    print("Querying brokers for log directories information", file=sys.stderr)
    answers = {broker_id: _describe_one(client, broker_id) for broker_id in ids}
    print(
        f"Received log directory information from brokers {','.join(map(str, ids))}",
        file=sys.stderr,
    )
    document = log_dirs_json(answers, args.topic_list)
    if args.pretty:
        print(json.dumps(document, indent=2))
    else:
        print(json.dumps(document, separators=(",", ":")))
    return 0


def _move(client: BlockingClient, args: argparse.Namespace) -> int:
    tp = TopicPartition(args.topic, args.partition)
    _broker_ids(client, [args.broker])
    answers = client.run(lda.alter_replica_log_dirs(client.client, args.broker, {tp: args.log_dir}))
    error = answers.get(tp)
    if error is None:
        raise CommandError(f"broker {args.broker}'s answer does not name {tp}")
    if error != ErrorCode.NONE:
        raise CommandError(
            f"moving {tp} on broker {args.broker} to {args.log_dir}",
            code=error,
            hint=HINTS.get(error),
        )
    if not args.wait:
        print(f"Moving {tp} on broker {args.broker} to {args.log_dir} (in the background).")
        return 0
    deadline = time.monotonic() + args.timeout
    while True:
        described = _describe_one(client, args.broker, {tp.topic: [tp.partition]})
        current, future = where_is(described, tp)
        if not future and current == [args.log_dir]:
            print(f"Moved {tp} on broker {args.broker} to {args.log_dir}.")
            return 0
        if not future:
            raise CommandError(
                f"the move of {tp} stopped: broker {args.broker} has it in "
                f"{', '.join(current) or 'no log dir'}",
                hint="see the broker's log for why; repeat the command to try again",
            )
        if time.monotonic() >= deadline:
            raise CommandError(
                f"{tp} still moving to {args.log_dir} after {args.timeout:g} s",
                code=ErrorCode.REQUEST_TIMED_OUT,
                hint="the move goes on; check it with `tidelog log-dirs describe`",
            )
        lag = [r.offset_lag for d in described.log_dirs for r in d.replicas if r.is_future]
        print(f"{tp}: future log {lag[0] if lag else '?'} offsets behind", file=sys.stderr)
        time.sleep(POLL_INTERVAL_S)


COMMANDS["log-dirs"] = (
    "describe the brokers' log dirs and move replicas between them (like kafka-log-dirs.sh)",
    add_arguments,
    run,
)
