"""Shared pieces of the CLI commands: tables, JSON, errors with hints, bootstrap and
security lookup.

Commands print readable tables by default and JSON with ``--json``. A failure prints one
line ``tidelog <command>: error: <KAFKA_ERROR_NAME>: <message>`` and, when there is one, a
``hint:`` line, on stderr, and the command exits non-zero (``CommandError``: 1; its
``UsageError`` kind, a bad option or file the user gave: 2, as argparse's usage errors).

Connecting (``add_bootstrap_flags``, ``resolve_bootstrap``, ``resolve_security``):

1. The brokers are ``--bootstrap-server``, else those in the local cluster's state file
   (``<--dir>/cluster.json``, or ``hosts.json`` for a ``--hosts`` cluster).
2. The client's security (TLS, SASL) comes from Kafka client properties
   (``security.protocol``, ``sasl.*``, ``ssl.*``; ``tidelog.security.client_config``), read
   from ``--command-config FILE`` as Kafka's tools read theirs; without it, and without
   ``--bootstrap-server``, from ``<--dir>/client.properties`` when that file exists (the
   local cluster's admin login, written by ``tidelog cluster up --security ...``); else
   PLAINTEXT. Other keys in the file (``client.id``, ``request.timeout.ms``, ...) are
   ignored.
3. The file is Java ``.properties`` (``java.util.Properties.load``): ``key=value``,
   ``key: value`` or ``key value``; ``#``/``!`` comment lines; a line ending in an odd
   number of backslashes continues on the next; ``\\t \\n \\r \\f \\uXXXX`` escapes, any
   other escaped character stands for itself. UTF-8, or ISO-8859-1 (Java's) when not.
4. A file that cannot be read, a malformed escape or a bad property is one ``UsageError``
   line naming the file and the key, never a value (it may be a password).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, TextIO

from tidelog.errors import ErrorCode, TidelogError

if TYPE_CHECKING:
    from tidelog.security.client_config import ClientSecurity

#: The local cluster's client properties, beside its state file (rule 2).
CLIENT_PROPERTIES: Final = "client.properties"

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
    ErrorCode.SECURITY_DISABLED: (
        "the brokers run without an authorizer; set authorizer.class.name to manage ACLs"
    ),
    ErrorCode.CLUSTER_AUTHORIZATION_FAILED: (
        "the principal of --command-config needs an ACL on the cluster (ALTER to change "
        "ACLs and users, DESCRIBE to list them) or to be in super.users"
    ),
    ErrorCode.TOPIC_AUTHORIZATION_FAILED: (
        "the principal of --command-config has no ACL for this on the topic; see "
        "`tidelog acls list --topic NAME`"
    ),
    ErrorCode.GROUP_AUTHORIZATION_FAILED: (
        "the principal of --command-config has no ACL for this on the group; see "
        "`tidelog acls list --group NAME`"
    ),
    ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED: (
        "the principal of --command-config has no ACL for this transactional id"
    ),
    ErrorCode.SASL_AUTHENTICATION_FAILED: (
        "check sasl.username/sasl.password (or sasl.jaas.config) in --command-config"
    ),
    ErrorCode.UNSUPPORTED_SASL_MECHANISM: (
        "set sasl.mechanism in --command-config to one the listener enables"
    ),
    ErrorCode.UNACCEPTABLE_CREDENTIAL: "iterations must be 4096-16384 and the user name non-empty",
}


class CommandError(TidelogError):
    """A command failed in a way the user must see; ``main`` prints it and exits non-zero."""

    #: The command's exit status.
    exit_code: int = 1

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


class UsageError(CommandError):
    """The user's options or files are wrong (nothing was sent): exit status 2."""

    exit_code = 2


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


def print_json(data: Any, out: TextIO | None = None) -> None:
    """``data`` as indented JSON on ``out`` (default: the current ``sys.stdout``)."""
    stream = sys.stdout if out is None else out
    json.dump(data, stream, indent=2, sort_keys=False, default=str)
    stream.write("\n")


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
    parser.add_argument(
        "--command-config",
        metavar="FILE",
        type=Path,
        help="client properties: security.protocol, sasl.mechanism, sasl.username/"
        "sasl.password or sasl.jaas.config, ssl.* (default: <dir>/client.properties when "
        "--bootstrap-server is not given and that file exists)",
    )


def resolve_bootstrap(args: argparse.Namespace) -> str:
    """``--bootstrap-server``, else the brokers recorded in the local cluster's state file
    (``cluster.json``, or ``hosts.json`` of a ``--hosts`` cluster)."""
    if args.bootstrap_server:
        return str(args.bootstrap_server)
    from tidelog.testing.cluster import ClusterError, read_state  # noqa: PLC0415
    from tidelog.testing.hosts import HostsCluster, is_hosts_cluster  # noqa: PLC0415

    directory = Path(args.dir).resolve()
    try:
        if is_hosts_cluster(directory):
            return HostsCluster.attach(directory).bootstrap_servers
        state = read_state(directory)
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


# --- client security (rules 2-4) ---------------------------------------------------------

_ESCAPES: Final[Mapping[str, str]] = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}


def _unescape(text: str, line_number: int) -> str:
    out: list[str] = []
    i = 0
    while i < len(text):
        char = text[i]
        if char != "\\" or i + 1 >= len(text):
            out.append(char)
            i += 1
            continue
        escaped = text[i + 1]
        if escaped == "u":
            digits = text[i + 2 : i + 6]
            if len(digits) != 4 or any(c not in "0123456789abcdefABCDEF" for c in digits):
                raise ValueError(f"line {line_number}: malformed \\uxxxx escape")
            out.append(chr(int(digits, 16)))
            i += 6
            continue
        out.append(_ESCAPES.get(escaped, escaped))
        i += 2
    return "".join(out)


def _ends_escaped(line: str) -> bool:
    """Whether ``line`` ends in an odd number of backslashes (a continuation)."""
    count = len(line) - len(line.rstrip("\\"))
    return count % 2 == 1


def _split_key(line: str) -> tuple[str, str]:
    """Rule 3: the key ends at the first unescaped ``=``, ``:`` or whitespace."""
    i = 0
    while i < len(line):
        char = line[i]
        if char == "\\":
            i += 2
            continue
        if char in "=:" or char.isspace():
            break
        i += 1
    key, rest = line[:i], line[i:].lstrip(" \t\f")
    if rest[:1] in ("=", ":"):
        rest = rest[1:].lstrip(" \t\f")
    return key, rest


def parse_java_properties(text: str) -> dict[str, str]:
    """Rule 3. ValueError (naming the line, never its text) for a malformed escape."""
    result: dict[str, str] = {}
    lines = text.splitlines()
    index = 0
    while index < len(lines):
        number = index + 1
        line = lines[index].lstrip(" \t\f")
        index += 1
        if not line or line[0] in "#!":
            continue
        while _ends_escaped(line) and index < len(lines):
            line = line[:-1] + lines[index].lstrip(" \t\f")
            index += 1
        if _ends_escaped(line):
            line = line[:-1]
        key, value = _split_key(line)
        result[_unescape(key, number)] = _unescape(value, number)
    return result


def read_properties_file(path: Path, what: str) -> dict[str, str]:
    """The properties of ``path``; ``UsageError`` naming ``what`` (e.g. ``--command-config
    FILE``) when it cannot be read or parsed (rule 4)."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise UsageError(f"{what}: no such file") from None
    except IsADirectoryError:
        raise UsageError(f"{what}: is a directory, not a properties file") from None
    except OSError as exc:
        raise UsageError(f"{what}: cannot read it: {exc.strerror or exc}") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        text = raw.decode("latin-1")
    try:
        return parse_java_properties(text)
    except ValueError as exc:
        raise UsageError(f"{what}: {exc}") from None


def security_from_properties(props: Mapping[str, str], what: str) -> ClientSecurity:
    """``ClientSecurity.from_properties``; a bad property is a ``UsageError`` naming
    ``what`` and the key (rule 4)."""
    from tidelog.security.client_config import ClientSecurity  # noqa: PLC0415 - start cost
    from tidelog.security.errors import SecurityConfigError  # noqa: PLC0415

    try:
        return ClientSecurity.from_properties(props)
    except SecurityConfigError as exc:
        raise UsageError(
            f"{what}: {exc}",
            hint="see docs for security.protocol, sasl.mechanism, sasl.username/"
            "sasl.password, sasl.jaas.config and ssl.*",
        ) from None


def client_properties_path(args: argparse.Namespace) -> Path | None:
    """Rule 2: the properties file this command's client reads, None when there is none."""
    if getattr(args, "command_config", None) is not None:
        return Path(args.command_config)
    if getattr(args, "bootstrap_server", None):
        return None
    default = Path(getattr(args, "dir", Path(".tidelog"))).resolve() / CLIENT_PROPERTIES
    return default if default.is_file() else None


def resolve_security(args: argparse.Namespace) -> ClientSecurity:
    """Rule 2: the ``ClientSecurity`` every connection of this command uses."""
    from tidelog.security.client_config import PLAINTEXT  # noqa: PLC0415 - start cost

    path = client_properties_path(args)
    if path is None:
        return PLAINTEXT
    what = (
        f"--command-config {path}"
        if getattr(args, "command_config", None) is not None
        else f"{path} (the local cluster's client properties)"
    )
    return security_from_properties(read_properties_file(path, what), what)
