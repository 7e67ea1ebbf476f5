"""``tidelog bench``: measure tidelog beside its peers and the machine (see tidelog.bench).

Writes ``results.json``, ``results.md`` and PNG charts to ``--output``
(``benchmarks/results`` by default). ``--quick`` shortens every run (a few minutes in all).
"""

# The benchmark package loads only when the command runs.
# ruff: noqa: PLC0415

from __future__ import annotations

import argparse
from pathlib import Path

from tidelog.cli.main import COMMANDS

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
    "security",
)


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
        default=",".join(SECTION_NAMES),
        help=f"comma-separated sections to run, of {','.join(SECTION_NAMES)} (default all)",
    )
    parser.add_argument(
        "--seconds", type=float, default=None, help="seconds per produce run (default 15, quick 5)"
    )
    parser.add_argument(
        "--producers", type=int, default=1, help="producer processes per produce run"
    )
    parser.add_argument("--sizes", default="100,1024,65536", help="record sizes in bytes")
    parser.add_argument("--peers", default="nats,rabbitmq", help="peers to measure")
    parser.add_argument("--partitions", type=int, default=1000, help="failover partitions")
    parser.add_argument(
        "--scale-partitions",
        type=int,
        default=None,
        help="replicas per broker for the second scale point (default 5000, quick: skipped)",
    )
    parser.add_argument("--no-charts", action="store_true", help="skip the PNG charts")


def run(args: argparse.Namespace) -> int:
    from tidelog.bench.launch import Launcher
    from tidelog.bench.runner import Options
    from tidelog.bench.runner import run as run_bench
    from tidelog.cli.launcher import LocalCluster
    from tidelog.cli.local_security import CLIENT_PROPERTIES
    from tidelog.cli.output import CommandError
    from tidelog.testing.processes import free_port

    sections = tuple(s.strip() for s in args.only.split(",") if s.strip())
    unknown = [s for s in sections if s not in SECTION_NAMES]
    if unknown:
        raise CommandError(
            f"unknown section(s): {', '.join(unknown)}",
            hint=f"sections: {', '.join(SECTION_NAMES)}",
        )
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
        failover_partitions=args.partitions,
        scale_partitions=scale,
        peers=tuple(p.strip() for p in args.peers.split(",") if p.strip()),
        charts=not args.no_charts,
        launcher=Launcher(LocalCluster, free_port, CLIENT_PROPERTIES),
    )
    return run_bench(options)


COMMANDS["bench"] = (
    "measure tidelog beside NATS JetStream, RabbitMQ Streams and the machine's limits",
    add_arguments,
    run,
)
