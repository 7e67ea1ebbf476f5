"""``python -m tidelog.testing.faults [--workload transactions] [--mix restarts] --faults N
--seed S --report FILE``

Runs the fault-injection harness (see ``tidelog.testing.faults``) and writes the report.
Exit status 0 when the checker found nothing, 1 otherwise (the findings are printed): a lost
or otherwise wrong record, a stuck cluster, or a client-visible error (an error a client
reported that an application would stop on).

``--workload transactions`` (issue 19) runs transactional producers and read_committed
consumers instead (``txn_run``); its default kinds are ``nemesis.TXN_KINDS`` (the
restart-heavy mix and ``kill_txn_coordinator``), and its checks are ``txn_checker``'s.

``--racks a,b,c`` (issue 32, records workload) gives broker i ``broker.rack`` =
racks[(i - 1) mod len] (``--brokers 6 --racks a,b,c``: two brokers per rack) and adds the
``partition_rack`` kind to the default kinds; that kind needs two racks or more.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from tidelog.testing.faults.nemesis import (
    ALL_KINDS,
    EVERY_KIND,
    MIXES,
    PARTITION_RACK,
    TXN_KINDS,
)
from tidelog.testing.faults.plots import try_write
from tidelog.testing.faults.run import RunConfig, print_err, print_summary, render_report, run
from tidelog.testing.faults.txn_run import TxnRunConfig, render_txn_report, run_transactions


def main(argv: list[str] | None = None) -> int:
    args_list = sys.argv[1:] if argv is None else argv
    parser = _parser()
    args = parser.parse_args(args_list)
    transactions = args.workload == "transactions"
    kinds = _kinds(parser, args, transactions)
    if transactions:
        return main_transactions(args, kinds, args_list)
    return main_records(args, kinds, args_list)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m tidelog.testing.faults")
    parser.add_argument(
        "--workload",
        choices=("records", "transactions"),
        default="records",
        help="'records': acks=all producers of three clients (the default); 'transactions': "
        "confluent-kafka transactional producers and read_committed consumers (issue 19)",
    )
    parser.add_argument("--faults", type=int, default=100)
    parser.add_argument("--brokers", type=int, default=3, help="brokers (at least 3: RF=3)")
    parser.add_argument(
        "--racks",
        type=rack_list,
        default=(),
        help="records workload: comma-separated rack names; broker i gets broker.rack = "
        "racks[(i - 1) mod len], and the kinds include partition_rack",
    )
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--report", type=Path, default=None)
    parser.add_argument(
        "--kinds", default=None, help="comma-separated fault kinds (default: every kind)"
    )
    parser.add_argument(
        "--mix",
        choices=sorted(MIXES),
        default=None,
        help="a named set of kinds: 'restarts' = kill+restart, pause past the session, "
        "clean and rolling restarts (instead of --kinds)",
    )
    parser.add_argument("--dir", type=Path, default=None, help="keep the cluster's files here")
    parser.add_argument(
        "--time-limit", type=float, default=None, help="stop injecting faults after N seconds"
    )
    parser.add_argument(
        "--idempotent",
        action="store_true",
        help="producers with enable.idempotence=true; any duplicate then fails the run",
    )
    parser.add_argument(
        "--commit-ratio",
        type=float,
        default=0.7,
        help="transactions: the share of transactions meant to commit (the others abort)",
    )
    parser.add_argument(
        "--zombie-every",
        type=int,
        default=25,
        help="transactions: every N-th transaction of each producer is a zombie scenario",
    )
    return parser


def rack_list(text: str) -> tuple[str, ...]:
    """``--racks a,b,c``: the rack names, none empty (as ``tidelog cluster up --racks``)."""
    racks = tuple(part.strip() for part in text.split(","))
    if not all(racks):
        raise argparse.ArgumentTypeError(f"{text!r} is not a comma-separated list of rack names")
    return racks


def _kinds(
    parser: argparse.ArgumentParser, args: argparse.Namespace, transactions: bool
) -> tuple[str, ...]:
    """The fault kinds the arguments name; a usage error (exit 2) for a bad combination."""
    if args.mix is not None and args.kinds is not None:
        parser.error("--mix and --kinds exclude each other")
    if transactions and args.idempotent:
        parser.error("--idempotent is for the records workload (transactions are idempotent)")
    if transactions and (args.racks or args.brokers != 3):
        parser.error("--racks and --brokers are for the records workload")
    if args.brokers < 3:
        parser.error("--brokers must be at least 3 (the topic has RF=3)")
    racked = len(set(args.racks)) > 1
    known = EVERY_KIND if transactions else (*ALL_KINDS, PARTITION_RACK)
    if args.mix is not None:
        kinds = MIXES[args.mix]
    elif args.kinds is not None:
        kinds = tuple(k for k in args.kinds.split(",") if k)
    else:
        kinds = TXN_KINDS if transactions else (*ALL_KINDS, *([PARTITION_RACK] * racked))
    unknown = sorted(set(kinds) - set(known))
    if unknown:
        parser.error(f"unknown fault kinds {unknown}; known: {', '.join(known)}")
    if PARTITION_RACK in kinds and not racked:
        parser.error(f"{PARTITION_RACK} needs --racks with two racks or more")
    return kinds


def main_records(args: argparse.Namespace, kinds: tuple[str, ...], argv: list[str]) -> int:
    config = RunConfig(
        faults=args.faults,
        seed=args.seed,
        kinds=kinds,
        directory=args.dir,
        keep_directory=args.dir is not None,
        time_limit_s=args.time_limit,
        idempotent=args.idempotent,
        brokers=args.brokers,
        racks=args.racks,
    )
    result = run(config, log=print_err)
    print_summary(result)
    if args.report is not None:
        command = "python -m tidelog.testing.faults " + " ".join(argv)
        figures = try_write(result.faults, result.unavailable, args.report, print_err)
        args.report.write_text(render_report(result, command, figures=figures), encoding="utf-8")
        print_err(f"report written to {args.report}")
    duplicates_fail = args.idempotent and bool(result.findings.duplicated)
    return 0 if result.findings.ok and not duplicates_fail else 1


def main_transactions(args: argparse.Namespace, kinds: tuple[str, ...], argv: list[str]) -> int:
    config = TxnRunConfig(
        faults=args.faults,
        seed=args.seed,
        kinds=kinds,
        commit_ratio=args.commit_ratio,
        zombie_every=args.zombie_every,
        directory=args.dir,
        keep_directory=args.dir is not None,
        time_limit_s=args.time_limit,
    )
    result = run_transactions(config, log=print_err)
    print(result.findings.summary())
    for s in result.producers:
        print(
            f"{s.transactional_id}: committed {s.committed}, aborted {s.aborted}, "
            f"indeterminate {s.indeterminate}, fenced {s.fenced}, values {s.values}, "
            f"client-visible errors {s.client_visible}"
        )
    print(f"read_committed consumers: client-visible errors {result.consumer_errors}")
    if args.report is not None:
        command = "python -m tidelog.testing.faults " + " ".join(argv)
        figures = try_write(result.faults, result.unavailable, args.report, print_err, "a commit")
        args.report.write_text(
            render_txn_report(result, command, figures=figures), encoding="utf-8"
        )
        print_err(f"report written to {args.report}")
    return 0 if result.findings.ok else 1


if __name__ == "__main__":
    sys.exit(main())
