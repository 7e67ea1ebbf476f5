"""``tidelog bench``: measure tidelog beside its peers and the machine (see tidelog.bench).

Writes ``results.json``, ``results.md`` and PNG charts to ``--output``
(``benchmarks/results`` by default). ``--quick`` shortens every run (a few minutes in all).

``--bootstrap-server H:P[,H:P]`` measures that Kafka-compatible cluster instead, as
kafka-producer-perf-test does (``tidelog.bench.external``): only the sections in
``EXTERNAL_SECTIONS``, with ``--command-config``'s client settings, on topics it creates
(``--replication-factor``, ``--partitions``, ``--topic-prefix``) and deletes afterwards.
Options that make no sense for the chosen mode are usage errors (exit 2); a cluster that
does not answer, or refuses a topic, is one error line (exit 1), with Kafka's error name
when the cluster gave one (INVALID_REPLICATION_FACTOR, TOPIC_AUTHORIZATION_FAILED, ...).

A SIGTERM ends the bench as Ctrl-C does, through the ``finally`` blocks that stop the
clusters it started (``sigterm_exits``); a second one during that cleanup is ignored.
"""

# The benchmark package loads only when the command runs.
# ruff: noqa: PLC0415

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import signal
import threading
from collections.abc import Iterator
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING

from tidelog.cli.main import COMMANDS

if TYPE_CHECKING:
    from tidelog.bench.external import ExternalClusterError, Target
    from tidelog.bench.runner import Options
    from tidelog.cli.output import CommandError
    from tidelog.errors import ErrorCode

SECTION_NAMES = (
    "limits",
    "produce",
    "compression",
    "e2e",
    "transactions",
    "peers",
    "failover",
    "cleaner",
    "metrics",
    "zones",
    "spark",
    "security",
)
#: Sections run only when ``--only`` names them (spark: needs the spark extra, a JVM).
OPT_IN_SECTIONS = ("spark",)
#: The sections measured with ``--bootstrap-server``, and those run when ``--only`` is not
#: given (the limits of this machine only when asked for: the cluster is elsewhere).
EXTERNAL_SECTIONS = ("limits", "produce", "e2e")
EXTERNAL_DEFAULT_SECTIONS = ("produce", "e2e")
#: Options of ``--bootstrap-server`` only.
_EXTERNAL_ONLY = ("command_config", "replication_factor", "topic_prefix")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--quick", action="store_true", help="short runs (a few minutes in all)")
    parser.add_argument(
        "--output", type=Path, default=Path("benchmarks/results"), help="where results go"
    )
    parser.add_argument(
        "--work-dir", type=Path, default=None, help="data directory (default: a new temp dir)"
    )
    parser.add_argument(
        "--only",
        default=None,
        help=f"comma-separated sections to run, of {','.join(SECTION_NAMES)} (default all but "
        f"{','.join(OPT_IN_SECTIONS)}; "
        f"with --bootstrap-server: of {','.join(EXTERNAL_SECTIONS)}, default "
        f"{','.join(EXTERNAL_DEFAULT_SECTIONS)})",
    )
    parser.add_argument(
        "--seconds", type=float, default=None, help="seconds per produce run (default 15, quick 5)"
    )
    parser.add_argument(
        "--producers", type=int, default=1, help="producer processes per produce run"
    )
    parser.add_argument("--sizes", default="100,1024,65536", help="record sizes in bytes")
    parser.add_argument("--peers", default="nats,rabbitmq", help="peers to measure")
    parser.add_argument(
        "--partitions",
        type=int,
        default=None,
        help="partitions of the failover topic (default 1000); with --bootstrap-server, of "
        "each topic the bench creates (default 3)",
    )
    parser.add_argument(
        "--scale-partitions",
        type=int,
        default=None,
        help="replicas per broker for the second scale point (default 5000, quick: skipped)",
    )
    parser.add_argument("--no-charts", action="store_true", help="skip the PNG charts")
    ext = parser.add_argument_group(
        "an existing cluster (kafka-producer-perf-test's job; nothing is started)"
    )
    ext.add_argument(
        "--bootstrap-server",
        metavar="HOST:PORT[,...]",
        help="measure this Kafka-compatible cluster: produce, catch-up and e2e rows",
    )
    ext.add_argument(
        "--command-config",
        metavar="FILE",
        type=Path,
        help="client properties (security.protocol, sasl.*, ssl.*) for every producer, "
        "consumer and admin client",
    )
    ext.add_argument(
        "--replication-factor",
        type=int,
        default=None,
        help="of the acks=all and e2e topics (default: 3, or the brokers the cluster reports "
        "when fewer)",
    )
    ext.add_argument(
        "--topic-prefix",
        default=None,
        help="names of the topics the bench creates and deletes (default tidelog-bench-)",
    )


@contextlib.contextmanager
def sigterm_exits() -> Iterator[None]:
    """Within: a SIGTERM raises SystemExit(143) in the main thread (once), so the bench's
    ``finally`` blocks stop the brokers and ZooKeeper it started, which Python's default
    (die at once) left running. The previous handler is restored on the way out."""

    def handler(signum: int, _frame: FrameType | None) -> None:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # the cleanup is not cut short
        raise SystemExit(128 + signum)

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def run(args: argparse.Namespace) -> int:
    from tidelog.bench.launch import Launcher
    from tidelog.bench.runner import Options
    from tidelog.bench.runner import run as run_bench
    from tidelog.cli.launcher import LocalCluster
    from tidelog.cli.local_security import CLIENT_PROPERTIES
    from tidelog.testing.processes import free_port

    external = args.bootstrap_server is not None
    sections = _sections(args.only, external=external)
    scale = args.scale_partitions
    if scale is None:
        scale = 0 if args.quick else 5000
    options = Options(
        quick=args.quick,
        output=args.output,
        work_dir=args.work_dir,
        sections=sections,
        seconds=args.seconds or (5.0 if args.quick else 15.0),
        producers=args.producers,
        sizes=tuple(int(s) for s in args.sizes.split(",")),
        failover_partitions=1000 if args.partitions is None else args.partitions,
        scale_partitions=scale,
        peers=tuple(p.strip() for p in args.peers.split(",") if p.strip()),
        charts=not args.no_charts,
        launcher=Launcher(LocalCluster, free_port, CLIENT_PROPERTIES),
    )
    if not external:
        given = [
            f"--{name.replace('_', '-')}"
            for name in _EXTERNAL_ONLY
            if getattr(args, name) is not None
        ]
        if given:
            raise _usage(f"{', '.join(given)}: only with --bootstrap-server")
        with sigterm_exits():
            return run_bench(options)
    target = _target(args, options)
    with sigterm_exits():
        return _run_external(target, options)


def _sections(only: str | None, *, external: bool) -> tuple[str, ...]:
    from tidelog.cli.output import CommandError

    if only is None:
        if external:
            return EXTERNAL_DEFAULT_SECTIONS
        return tuple(s for s in SECTION_NAMES if s not in OPT_IN_SECTIONS)
    sections = tuple(s.strip() for s in only.split(",") if s.strip())
    unknown = [s for s in sections if s not in SECTION_NAMES]
    if unknown:
        raise CommandError(
            f"unknown section(s): {', '.join(unknown)}",
            hint=f"sections: {', '.join(SECTION_NAMES)}",
        )
    local = [s for s in sections if s not in EXTERNAL_SECTIONS]
    if external and local:
        raise _usage(
            f"--only {','.join(local)}: not with --bootstrap-server (these sections start "
            "clusters of their own)",
            hint=f"with --bootstrap-server: {', '.join(EXTERNAL_SECTIONS)}",
        )
    return sections


def _usage(message: str, *, hint: str | None = None, code: ErrorCode | None = None) -> CommandError:
    from tidelog.cli.output import UsageError

    return UsageError(message, hint=hint, code=code)


def _target(args: argparse.Namespace, options: Options) -> Target:
    """The cluster and topics ``--bootstrap-server`` names; UsageError for a bad option or
    ``--command-config`` file (nothing sent yet)."""
    from tidelog.bench.client_conf import librdkafka_settings
    from tidelog.bench.external import (
        DEFAULT_PARTITIONS,
        DEFAULT_PREFIX,
        E2E_RATES,
        Target,
        topic_names,
    )
    from tidelog.cli.output import read_properties_file, security_from_properties
    from tidelog.errors import ErrorCode

    if not args.bootstrap_server.strip():
        raise _usage("--bootstrap-server: give HOST:PORT[,HOST:PORT...]")
    if args.replication_factor is not None and args.replication_factor < 1:
        raise _usage(f"--replication-factor {args.replication_factor}: must be at least 1")
    partitions = DEFAULT_PARTITIONS if args.partitions is None else args.partitions
    if partitions < 1:
        raise _usage(f"--partitions {partitions}: must be at least 1")
    prefix = DEFAULT_PREFIX if args.topic_prefix is None else args.topic_prefix
    try:
        topic_names(prefix, "0" * 8, options.sizes, E2E_RATES)
    except ValueError as exc:
        raise _usage(
            f"--topic-prefix {prefix!r}: {exc}", code=ErrorCode.INVALID_TOPIC_EXCEPTION
        ) from None
    settings: dict[str, str] = {}
    if args.command_config is not None:
        what = f"--command-config {args.command_config}"
        props = read_properties_file(args.command_config, what)
        security_from_properties(props, what)
        try:
            settings = librdkafka_settings(props)
        except ValueError as exc:
            raise _usage(f"{what}: {exc}") from None
    return Target(args.bootstrap_server, settings, args.replication_factor, partitions, prefix)


def _run_external(target: Target, options: Options) -> int:
    from tidelog.bench.external import E2E_RATES, ExternalClusterError, prepared
    from tidelog.bench.runner import run as run_bench

    sizes = options.sizes if "produce" in options.sections else ()
    rates = E2E_RATES if "e2e" in options.sections else ()
    try:
        with prepared(target, sizes, rates, _say) as cluster:
            return run_bench(dataclasses.replace(options, external=cluster))
    except ExternalClusterError as exc:
        raise _cluster_error(exc) from None


def _say(text: str) -> None:
    print(text, flush=True)


def _cluster_error(exc: ExternalClusterError) -> CommandError:
    from tidelog.cli.output import CommandError
    from tidelog.errors import ErrorCode

    if exc.code is not None:
        code = {c.value: c for c in ErrorCode}.get(exc.code)
        if code is None:  # a code tidelog has no name for
            return CommandError(f"{exc} (Kafka error code {exc.code})")
        return CommandError(str(exc), code=code)
    return CommandError(
        str(exc), hint="check --bootstrap-server, and the security settings of --command-config"
    )


COMMANDS["bench"] = (
    "measure tidelog beside NATS JetStream, RabbitMQ Streams and the machine's limits, "
    "or any Kafka-compatible cluster (--bootstrap-server)",
    add_arguments,
    run,
)
