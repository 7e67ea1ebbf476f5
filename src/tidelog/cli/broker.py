"""``tidelog broker --config server.properties [--override key=value ...]``.

Starts one broker in the foreground; SIGTERM or Ctrl-C shuts it down cleanly. A bad setting
stops start-up with exit status 2 and a message naming the key.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
from pathlib import Path

import uvloop

from tidelog.cli.main import COMMANDS
from tidelog.errors import ConfigError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--config", required=True, type=Path, help="server.properties (Kafka property names)"
    )
    parser.add_argument(
        "--override",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override one property (repeatable), as kafka-server-start.sh takes them",
    )
    parser.add_argument(
        "--event-loop",
        choices=("uvloop", "asyncio"),
        default="uvloop",
        help="event loop implementation (default: uvloop)",
    )
    parser.add_argument(
        "--log-level", default="INFO", choices=("DEBUG", "INFO", "WARNING", "ERROR")
    )
    parser.add_argument(
        "--log-format",
        default=None,
        choices=("text", "json"),
        help="log lines as text or one JSON object each (default: the log.format setting)",
    )


def run(args: argparse.Namespace) -> int:
    # Imported here: the server is heavy, and every `tidelog` command builds this parser.
    from tidelog.server.broker import run_broker  # noqa: PLC0415
    from tidelog.server.config.broker_config import load_broker_config_file, parse_override  # noqa: PLC0415
    from tidelog.server.config.policies import Policies  # noqa: PLC0415

    logging.basicConfig(
        level=getattr(logging, args.log_level),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    try:
        overrides = [parse_override(item) for item in args.override]
        config = load_broker_config_file(args.config, overrides)
        Policies.from_config(config.values)  # a policy class that cannot load: say so now
    except ConfigError as exc:
        print(f"tidelog broker: invalid configuration: {exc}", file=sys.stderr)
        return 2
    from tidelog.server.observability.log_format import use_log_format  # noqa: PLC0415

    use_log_format(args.log_format or config.get_str("log.format"), config.broker_id)
    for key in sorted(config.ignored):
        logging.getLogger("tidelog.broker").info("ignoring Kafka setting %s (no effect here)", key)

    try:
        if args.event_loop == "uvloop":
            return uvloop.run(run_broker(config))
        return asyncio.run(run_broker(config))
    except OSError as exc:
        # Port in use, log dir not writable, ...: a local fault, said plainly.
        print(f"tidelog broker: cannot start: {exc}", file=sys.stderr)
        return 1


COMMANDS["broker"] = ("run one tidelog broker", add_arguments, run)
