"""Shared pieces of the CLI commands: tables, JSON, errors with hints, bootstrap lookup.

Commands print readable tables by default and JSON with ``--json``. A failure prints one
line ``tidelog <command>: error: <KAFKA_ERROR_NAME>: <message>`` and, when there is one, a
``hint:`` line, on stderr, and the command exits non-zero (``CommandError``).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Final, TextIO

from tidelog.errors import ErrorCode, TidelogError

#: What to tell the user for Kafka errors the CLI meets most.
HINTS: Final[Mapping[ErrorCode, str]] = {
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION: "check the name with `tidelog topics list`",
    ErrorCode.TOPIC_ALREADY_EXISTS: "pick another name, or delete the topic first",
    ErrorCode.INVALID_REPLICATION_FACTOR: (
        "the replication factor cannot exceed the number of live brokers"
    ),
    ErrorCode.INVALID_PARTITIONS: "the partition count must be at least 1 and can only grow",
    ErrorCode.INVALID_CONFIG: "see docs/broker.md for the topic configs tidelog accepts",
    ErrorCode.INVALID_TOPIC_EXCEPTION: (
        "topic names use ASCII letters, digits, '.', '_' and '-', at most 249 characters"
    ),
    ErrorCode.NOT_ENOUGH_REPLICAS: (
        "fewer in-sync replicas than min.insync.replicas; wait for replicas to catch up "
        "or use --acks 1"
    ),
    ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND: (
        "the ISR shrank below min.insync.replicas after the write; it may or may not be kept"
    ),
    ErrorCode.LEADER_NOT_AVAILABLE: "no leader right now (an election may be running); retry",
    ErrorCode.NOT_LEADER_OR_FOLLOWER: "leadership moved; retry",
    ErrorCode.REQUEST_TIMED_OUT: "no answer in time; check `tidelog cluster status`",
    ErrorCode.UNSUPPORTED_VERSION: "this broker does not implement that request",
    ErrorCode.ELECTION_NOT_NEEDED: "the preferred replica already leads",
    ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE: (
        "the preferred replica is down or not in the ISR; bring it back first"
    ),
    ErrorCode.OFFSET_OUT_OF_RANGE: "use --from-beginning or an --offset inside the log",
    ErrorCode.MESSAGE_TOO_LARGE: "the topic's max.message.bytes is smaller than this batch",
}


class CommandError(TidelogError):
    """A command failed in a way the user must see; ``main`` prints it and exits non-zero."""

    def __init__(
        self, message: str, *, code: ErrorCode | None = None, hint: str | None = None
    ) -> None:
        super().__init__(message)
        self.code = code
        self.hint = hint if hint is not None else (HINTS.get(code) if code is not None else None)
        self.message = message

    def render(self, command: str) -> str:
        prefix = f"{self.code.name}: " if self.code is not None else ""
        text = f"tidelog {command}: error: {prefix}{self.message}"
        if self.hint:
            text += f"\nhint: {self.hint}"
        return text


def kafka_error(code: ErrorCode, message: str | None, what: str) -> CommandError:
    """A CommandError for an error code the broker returned about ``what``."""
    detail = f"{what}: {message}" if message else what
    return CommandError(detail, code=code)


def format_table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """A plain aligned table (two spaces between columns), header first."""
    cells = [[str(h) for h in headers]] + [["" if c is None else str(c) for c in r] for r in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    lines = [
        "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in cells
    ]
    return "\n".join(lines)


def print_json(data: Any, out: TextIO = sys.stdout) -> None:
    json.dump(data, out, indent=2, sort_keys=False, default=str)
    out.write("\n")


def add_json_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")


def add_bootstrap_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--bootstrap-server",
        metavar="HOST:PORT[,...]",
        help="brokers to connect to (default: the local cluster in --dir)",
    )
    parser.add_argument(
        "--dir",
        type=Path,
        default=Path(".tidelog"),
        help="local cluster directory whose state file gives the brokers (default: .tidelog)",
    )


def resolve_bootstrap(args: argparse.Namespace) -> str:
    """``--bootstrap-server``, else the brokers recorded in the local cluster's state file."""
    if args.bootstrap_server:
        return str(args.bootstrap_server)
    from tidelog.cli.launcher import ClusterError, read_state  # noqa: PLC0415

    try:
        state = read_state(Path(args.dir).resolve())
    except ClusterError as exc:
        raise CommandError(
            f"no --bootstrap-server given and {exc}",
            hint="pass --bootstrap-server HOST:PORT or start a local cluster",
        ) from None
    return state.bootstrap_servers


def parse_key_value(item: str, what: str = "config") -> tuple[str, str]:
    """``key=value`` -> (key, value); a missing ``=`` or empty key is a CommandError."""
    key, sep, value = item.partition("=")
    if not sep or not key.strip():
        raise CommandError(
            f"{what} {item!r} is not KEY=VALUE", hint=f"e.g. --{what} retention.ms=60000"
        )
    return key.strip(), value.strip()
