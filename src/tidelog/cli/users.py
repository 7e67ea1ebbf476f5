"""``tidelog users add|list|remove``: SCRAM users, as ``kafka-configs.sh --entity-type users``
manages them (``--alter --add-config 'SCRAM-SHA-256=[iterations=8192,password=...]'``,
``--describe``, ``--alter --delete-config SCRAM-SHA-256``), with AlterUserScramCredentials
and DescribeUserScramCredentials (KIP-554; ``tidelog.client.security_admin``).

- ``add NAME [--password-file F | --password P] [--mechanism M]... [--iterations N]``
- ``list [NAME...]``: user, mechanism and iterations (every user without a name).
- ``remove NAME [--mechanism M]...``: without ``--mechanism``, every credential it has.

Rules:

1. The password comes from ``--password-file F`` (its text without the trailing newline;
   ``-`` reads standard input), else ``--password P`` (with a warning: other users see it
   in ``ps`` and the shell's history), else a prompt on the terminal (typed twice, not
   echoed); without a terminal and neither option, it is a usage error. An empty password
   is refused.
2. The password never leaves the client, is never printed or logged, and no message
   repeats it: the client sends a random salt and the salted password
   (``tidelog.security.scram``).
3. ``--mechanism``: SCRAM-SHA-256 (default) or SCRAM-SHA-512, any case, repeatable;
   ``--iterations``: 4096 (Kafka's default and minimum) to 16384.
4. Option mistakes are usage errors (exit 2, nothing sent); a broker's refusal (per user:
   RESOURCE_NOT_FOUND for an unknown user or credential, UNACCEPTABLE_CREDENTIAL, ...; or
   CLUSTER_AUTHORIZATION_FAILED) prints its code and message and exits 1, after printing
   what did succeed.
"""

from __future__ import annotations

import argparse
import getpass
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Final

from tidelog.cli.main import COMMANDS
from tidelog.cli.output import (
    CommandError,
    UsageError,
    add_bootstrap_flags,
    add_json_flag,
    format_table,
    print_json,
    resolve_bootstrap,
    resolve_security,
)
from tidelog.client import BlockingClient
from tidelog.client import security_admin as sa
from tidelog.errors import ErrorCode
from tidelog.security.scram import (
    DEFAULT_ITERATIONS,
    MAX_ITERATIONS,
    MIN_ITERATIONS,
    ScramMechanism,
)

DEFAULT_MECHANISM: Final = ScramMechanism.SCRAM_SHA_256
PASSWORD_WARNING: Final = (
    "warning: --password is visible to other users (ps, shell history); prefer "
    "--password-file or the prompt"
)


def mechanism_arg(text: str) -> ScramMechanism:
    mechanism = ScramMechanism.from_name(text.strip().upper())
    if mechanism is None:
        names = " or ".join(m.mechanism_name for m in ScramMechanism)
        raise argparse.ArgumentTypeError(f"{text!r} is not a SCRAM mechanism: use {names}")
    return mechanism


def iterations_arg(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if not MIN_ITERATIONS <= value <= MAX_ITERATIONS:
        raise argparse.ArgumentTypeError(
            f"{value} is outside {MIN_ITERATIONS}-{MAX_ITERATIONS} (Kafka's SCRAM limits)"
        )
    return value


def user_arg(text: str) -> str:
    if not text:
        raise argparse.ArgumentTypeError("the user name is empty")
    return text


def mechanisms(args: argparse.Namespace) -> list[ScramMechanism]:
    return list(dict.fromkeys(args.mechanism or [DEFAULT_MECHANISM]))


# --- the password (rules 1 and 2) ------------------------------------------------------------


def _strip_newline(text: str) -> str:
    if text.endswith("\r\n"):
        return text[:-2]
    if text.endswith("\n"):
        return text[:-1]
    return text


def read_password_file(path: str) -> str:
    """The password in ``path`` (``-``: standard input), one trailing newline dropped."""
    what = f"--password-file {path}"
    if path == "-":
        text = sys.stdin.read()
    else:
        try:
            text = Path(path).read_text(encoding="utf-8")
        except FileNotFoundError:
            raise UsageError(f"{what}: no such file") from None
        except UnicodeDecodeError:
            raise UsageError(f"{what}: not UTF-8 text") from None
        except OSError as exc:
            raise UsageError(f"{what}: cannot read it: {exc.strerror or exc}") from None
    password = _strip_newline(text)
    if not password:
        raise UsageError(f"{what}: the password is empty")
    return password


def prompt_password(user: str) -> str:
    """Typed twice on the terminal, not echoed."""
    if not sys.stdin.isatty():
        raise UsageError(
            "no password given and standard input is not a terminal",
            hint="use --password-file FILE (or --password-file - to read standard input)",
        )
    first = getpass.getpass(f"Password for user {user}: ")
    if not first:
        raise UsageError("the password is empty")
    if getpass.getpass("Type it again: ") != first:
        raise UsageError("the passwords do not match")
    return first


def password_of(args: argparse.Namespace) -> str:
    """Rule 1."""
    if args.password_file is not None:
        return read_password_file(args.password_file)
    if args.password is not None:
        print(PASSWORD_WARNING, file=sys.stderr)
        if not args.password:
            raise UsageError("--password: the password is empty")
        return str(args.password)
    return prompt_password(args.user)


# --- output ----------------------------------------------------------------------------------


def credential_rows(users: Sequence[sa.UserScramCredentials]) -> list[tuple[str, str, int]]:
    return [
        (u.user, c.mechanism_name, c.iterations)
        for u in sorted(users, key=lambda u: u.user)
        if u.error_code == ErrorCode.NONE
        for c in sorted(u.credentials, key=lambda c: c.mechanism_type)
    ]


def format_credentials(users: Sequence[sa.UserScramCredentials]) -> str:
    return format_table(("USER", "MECHANISM", "ITERATIONS"), credential_rows(users))


def _error(
    failures: Sequence[tuple[str, ErrorCode, str | None]],
) -> CommandError:
    """One error for the per-user refusals (user, code, message)."""
    distinct = list(dict.fromkeys((code, message) for _user, code, message in failures))
    if len(distinct) == 1 and len(failures) == 1:
        user, code, message = failures[0]
        return CommandError(f"user {user}: {message}" if message else f"user {user}", code=code)
    return CommandError(
        "; ".join(
            f"user {user}: {code.name}{': ' + message if message else ''}"
            for user, code, message in failures
        )
    )


# --- commands --------------------------------------------------------------------------------


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="action", metavar="ACTION", required=True)

    def add(name: str, help_text: str) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help_text, description=help_text)
        add_bootstrap_flags(p)
        add_json_flag(p)
        return p

    mechanism_help = "SCRAM-SHA-256 (default) or SCRAM-SHA-512; repeatable"
    p = add("add", "add a SCRAM user or change its password (AlterUserScramCredentials)")
    p.add_argument("user", type=user_arg, metavar="NAME")
    source = p.add_mutually_exclusive_group()
    source.add_argument(
        "--password-file", metavar="FILE", help="file holding the password ('-': stdin)"
    )
    source.add_argument("--password", metavar="PASSWORD", help="visible in ps: prefer a file")
    p.add_argument("--mechanism", action="append", type=mechanism_arg, help=mechanism_help)
    p.add_argument(
        "--iterations",
        type=iterations_arg,
        default=DEFAULT_ITERATIONS,
        help=f"PBKDF2 iterations, {MIN_ITERATIONS}-{MAX_ITERATIONS} (default: "
        f"{DEFAULT_ITERATIONS})",
    )
    p = add("list", "SCRAM users: mechanism and iterations (DescribeUserScramCredentials)")
    p.add_argument("users", nargs="*", type=user_arg, metavar="NAME", help="default: every user")
    p = add("remove", "remove a user's SCRAM credentials (AlterUserScramCredentials)")
    p.add_argument("user", type=user_arg, metavar="NAME")
    p.add_argument(
        "--mechanism",
        action="append",
        type=mechanism_arg,
        help="only these (default: every credential the user has)",
    )


def run(args: argparse.Namespace) -> int:
    bootstrap = resolve_bootstrap(args)
    security = resolve_security(args)
    password = password_of(args) if args.action == "add" else ""
    with BlockingClient(bootstrap, client_id="tidelog-cli", security=security) as client:
        if args.action == "add":
            return _add(client, args, password)
        if args.action == "remove":
            return _remove(client, args)
        return _list(client, args)


def _add(client: BlockingClient, args: argparse.Namespace, password: str) -> int:
    chosen = mechanisms(args)
    upsertions = [
        sa.ScramUpsertion(args.user, m, password, iterations=args.iterations) for m in chosen
    ]
    results = client.run(sa.alter_user_scram_credentials(client.client, upsertions))
    result = results.get(args.user)
    if result is None:
        raise CommandError(f"user {args.user}: the broker's answer does not name the user")
    if result.error_code != ErrorCode.NONE:
        raise _error([(args.user, result.error_code, result.error_message)])
    if args.json:
        print_json(
            {
                "user": args.user,
                "added": [
                    {"mechanism": m.mechanism_name, "iterations": args.iterations} for m in chosen
                ],
            }
        )
    else:
        configs = ",".join(f"{m.mechanism_name}=[iterations={args.iterations}]" for m in chosen)
        print(f"Completed updating SCRAM credentials for user {args.user}: {configs}.")
    return 0


def _describe(client: BlockingClient, users: Sequence[str] | None) -> sa.DescribeScramResult:
    result = client.run(sa.describe_user_scram_credentials(client.client, users))
    if result.error_code != ErrorCode.NONE:
        raise CommandError(result.error_message or result.error_code.name, code=result.error_code)
    return result


def _remove(client: BlockingClient, args: argparse.Namespace) -> int:
    chosen: list[ScramMechanism] = list(dict.fromkeys(args.mechanism or ()))
    if not chosen:
        described = _describe(client, [args.user])
        mine = [u for u in described.users if u.user == args.user]
        failed = [u for u in mine if u.error_code != ErrorCode.NONE]
        if failed:
            raise _error([(args.user, failed[0].error_code, failed[0].error_message)])
        chosen = [c.mechanism for u in mine for c in u.credentials if c.mechanism is not None]
        if not chosen:
            raise CommandError(
                f"user {args.user} has no SCRAM credentials", code=ErrorCode.RESOURCE_NOT_FOUND
            )
    deletions = [sa.ScramDeletion(args.user, m) for m in chosen]
    results = client.run(sa.alter_user_scram_credentials(client.client, (), deletions))
    result = results.get(args.user)
    if result is None:
        raise CommandError(f"user {args.user}: the broker's answer does not name the user")
    if result.error_code != ErrorCode.NONE:
        raise _error([(args.user, result.error_code, result.error_message)])
    names = [m.mechanism_name for m in chosen]
    if args.json:
        print_json({"user": args.user, "removed": names})
    else:
        print(f"Completed deleting SCRAM credentials for user {args.user}: {','.join(names)}.")
    return 0


def _list(client: BlockingClient, args: argparse.Namespace) -> int:
    names: list[str] = list(dict.fromkeys(args.users))
    result = _describe(client, names or None)
    failures = [
        (u.user, u.error_code, u.error_message)
        for u in result.users
        if u.error_code != ErrorCode.NONE
    ]
    if args.json:
        data: list[dict[str, Any]] = [
            {"user": user, "mechanism": mechanism, "iterations": iterations}
            for user, mechanism, iterations in credential_rows(result.users)
        ]
        print_json(data)
    else:
        print(format_credentials(result.users))
    if failures:
        raise _error(failures)
    return 0


COMMANDS["users"] = (
    "add, list and remove SCRAM users (like kafka-configs.sh --entity-type users)",
    add_arguments,
    run,
)
