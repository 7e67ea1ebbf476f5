"""The ``tidelog`` command. Subcommands register themselves in ``COMMANDS``."""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Callable, Sequence

import tidelog

#: name -> (help, add_arguments, run). Each subcommand module adds its entry.
Command = tuple[str, Callable[[argparse.ArgumentParser], None], Callable[[argparse.Namespace], int]]
COMMANDS: dict[str, Command] = {}

#: Modules that register subcommands (imported lazily, so each may import this module).
COMMAND_MODULES: tuple[str, ...] = (
    "tidelog.cli.broker",
    "tidelog.cli.cluster",
    "tidelog.cli.topics",
    "tidelog.cli.produce",
    "tidelog.cli.consume",
    "tidelog.cli.groups",
    "tidelog.cli.group_offsets",
    "tidelog.cli.group_offset_delete",
    "tidelog.cli.delete_records",
    "tidelog.cli.get_offsets",
    "tidelog.cli.transactions",
    "tidelog.cli.acls",
    "tidelog.cli.users",
    "tidelog.cli.log_dirs",
    "tidelog.cli.configs",
    "tidelog.cli.bench",
    "tidelog.cli.dump_log",
    "tidelog.cli.reassign",
    "tidelog.cli.brokers",
    "tidelog.cli.console",
    "tidelog.cli.api_versions",
    "tidelog.cli.features",
)


def _load_commands() -> None:
    for module in COMMAND_MODULES:
        importlib.import_module(module)


def build_parser() -> argparse.ArgumentParser:
    _load_commands()
    parser = argparse.ArgumentParser(
        prog="tidelog", description=tidelog.__doc__.splitlines()[0] if tidelog.__doc__ else None
    )
    parser.add_argument("--version", action="version", version=f"tidelog {tidelog.__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (help_text, add_arguments, _run) in sorted(COMMANDS.items()):
        add_arguments(sub.add_parser(name, help=help_text, description=help_text))
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 2
    from tidelog.cli.output import CommandError  # noqa: PLC0415 - registered modules load first
    from tidelog.client.errors import (  # noqa: PLC0415
        AuthenticationFailedError,
        BrokerError,
        ClientConnectionError,
        ClientTimeoutError,
        NoCompatibleVersionError,
    )
    from tidelog.errors import ErrorCode  # noqa: PLC0415

    try:
        return COMMANDS[args.command][2](args)
    except CommandError as exc:
        print(exc.render(args.command), file=sys.stderr)
        return exc.exit_code
    except AuthenticationFailedError as exc:
        error = CommandError(
            f"authentication failed: {exc}",
            hint="check security.protocol, the SASL credentials and ssl.* in --command-config",
        )
        print(error.render(args.command), file=sys.stderr)
        return 1
    except NoCompatibleVersionError as exc:
        print(
            CommandError(str(exc), code=ErrorCode.UNSUPPORTED_VERSION).render(args.command),
            file=sys.stderr,
        )
        return 1
    except BrokerError as exc:
        print(
            CommandError(str(exc).partition(": ")[2] or exc.code.name, code=exc.code).render(
                args.command
            ),
            file=sys.stderr,
        )
        return 1
    except (ClientConnectionError, ClientTimeoutError) as exc:
        error = CommandError(
            f"cannot reach the cluster: {exc}",
            hint="check --bootstrap-server, or `tidelog cluster status`",
        )
        print(error.render(args.command), file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


def console() -> int:
    """The ``tidelog`` console script and ``python -m tidelog``: a process of its own.

    kio registers Hypothesis strategies for its types whenever ``hypothesis`` is importable
    (it is, in a dev venv), which costs every broker and CLI process ~0.2 s of start-up
    CPU for nothing. A process that is only tidelog marks the module absent before kio is
    imported; code that calls ``main`` in-process (tests) is left alone.
    """
    sys.modules.setdefault("hypothesis", None)  # type: ignore[arg-type]
    return main()


if __name__ == "__main__":
    sys.exit(console())
