"""``tidelog brokers decommission N``: move every replica off broker N before it is retired,
with the reassignment machinery of ``tidelog reassign`` (KIP-455); Kafka has no single tool
for this (operators generate a plan per topic with ``kafka-reassign-partitions.sh``).

Theory of operation:

1. The plan (``decommission_plan``, pure): for each partition with a replica on N, in topic
   and partition order, N's replica goes to the live broker, other than N, that hosts the
   fewest replicas so far (counting the plan's own moves; ties: the lowest id) among those
   not already replicas of the partition. When the brokers have racks (``broker.rack``),
   a broker on a rack that none of the partition's other replicas is on comes first, so
   the partition keeps (or gains) its spread over racks; some brokers with a rack and some
   not is refused as ``reassign generate`` refuses it, unless ``--disable-rack-aware``.
   The new broker takes N's place in the list, so the preferred leader (the first
   replica) changes only where N was first.
2. A partition that cannot move refuses the whole decommission before anything changes
   (exit 1, naming each with its replicas and why): its replication factor exceeds the
   live brokers besides N, or another of its replicas is on a broker that is not live (the
   controller refuses a target with a dead broker, as Kafka's does).
3. The plan runs as ``tidelog reassign execute`` runs a file: refused while other
   reassignments run; with ``--throttle B`` the moving replicas are throttled (KIP-73). The
   current assignment (to roll back) and the plan are printed as Kafka's reassignment JSON,
   so ``tidelog reassign verify|cancel --reassignment-json-file`` work on the plan too.
4. ``--wait`` (the default) polls ListPartitionReassignments until none of the plan's
   partitions is being reassigned, then checks with Metadata that each has the planned
   replicas and none lists N; then removes the throttles (unless
   ``--preserve-throttles``) and prints a summary. ``--timeout`` bounds the wait (the
   reassignment goes on; exit 1). ``--dry-run`` prints the plan and changes nothing.

Progress goes to stderr, the JSON and the summary to stdout.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Collection, Mapping, Sequence
from typing import Final

from tidelog.cli import reassign, reassign_cluster
from tidelog.cli.main import COMMANDS
from tidelog.cli.output import CommandError, add_bootstrap_flags
from tidelog.cli.reassign_files import ids_text, partitions_text, plural, reassignment_json
from tidelog.cli.reassign_plans import placement_brokers
from tidelog.cli.reassign_steps import (
    CANNOT_EXECUTE_WITH_EXISTING,
    clear_throttles,
    start_reassignment,
)
from tidelog.errors import ErrorCode
from tidelog.model import TopicPartition

POLL_INTERVAL_S: Final = 1.0
#: A progress line at least this often while nothing changes.
PROGRESS_EVERY_S: Final = 10.0
#: How long the metadata may trail the end of the reassignment (rule 4's check).
METADATA_SETTLE_S: Final = 30.0


def decommission_plan(
    broker: int,
    assignment: Mapping[TopicPartition, Sequence[int]],
    live: Collection[int],
    racks: Mapping[int, str | None] | None = None,
) -> tuple[dict[TopicPartition, list[int]], dict[TopicPartition, str]]:
    """Rules 1 and 2: (partition -> its new replicas, partition that cannot move -> why).
    ``racks``: each live broker's rack (None or missing: no rack preference)."""
    rack_of = dict(racks or {})
    candidates = sorted(set(live) - {broker})
    load = dict.fromkeys(candidates, 0)
    for replicas in assignment.values():
        for r in replicas:
            if r in load:
                load[r] += 1
    plan: dict[TopicPartition, list[int]] = {}
    stuck: dict[TopicPartition, str] = {}
    for tp in sorted(assignment):
        replicas = list(assignment[tp])
        if broker not in replicas:
            continue
        dead = sorted({r for r in replicas if r != broker and r not in live})
        if dead:
            stuck[tp] = f"broker{'s' if len(dead) > 1 else ''} {','.join(map(str, dead))} not live"
            continue
        choices = [b for b in candidates if b not in replicas]
        if not choices:
            stuck[tp] = "no other live broker to take it"
            continue
        taken = {rack_of.get(r) for r in replicas if r != broker} - {None}
        chosen = min(choices, key=lambda b: (rack_of.get(b) in taken, load[b], b))
        load[chosen] += 1
        plan[tp] = [chosen if r == broker else r for r in replicas]
    return plan, stuck


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    help_text = "move every replica off a broker before retiring it (partition reassignment)"
    p = sub.add_parser("decommission", help=help_text, description=help_text)
    add_bootstrap_flags(p)
    p.add_argument("broker", type=int, metavar="BROKER", help="the broker id to empty")
    reassign.add_throttle_flag(p)
    p.add_argument(
        "--wait",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="wait until every replica moved (default), or return once started",
    )
    p.add_argument(
        "--timeout", type=float, default=3600.0, metavar="S", help="for --wait (default: 3600)"
    )
    p.add_argument("--dry-run", action="store_true", help="print the plan, change nothing")
    p.add_argument(
        "--disable-rack-aware",
        action="store_true",
        help="choose the new brokers without regard to their racks (broker.rack)",
    )
    p.add_argument(
        "--preserve-throttles", action="store_true", help="leave the throttles after --wait"
    )


def run(args: argparse.Namespace) -> int:
    with reassign_cluster.open_admin(args) as admin:
        return decommission(
            admin,
            args.broker,
            throttle=args.throttle,
            wait=args.wait,
            timeout_s=args.timeout,
            dry_run=args.dry_run,
            preserve_throttles=args.preserve_throttles,
            rack_aware=not args.disable_rack_aware,
        )


def _err(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def decommission(
    admin: reassign_cluster.Admin,
    broker: int,
    *,
    throttle: int = -1,
    wait: bool = True,
    timeout_s: float = 3600.0,
    dry_run: bool = False,
    preserve_throttles: bool = False,
    poll_interval_s: float = POLL_INTERVAL_S,
    rack_aware: bool = True,
) -> int:
    _refuse_while_reassigning(admin)
    live = admin.live_brokers()
    placed = placement_brokers(live, admin.broker_racks(), rack_aware=rack_aware)
    racks: dict[int, str | None] = {int(b): r for b, r in placed.items()}
    assignment = admin.assignment(None)
    plan = _plan_or_refuse(broker, assignment, live, racks)
    if not plan:
        note = "" if broker in live else f" (nor is it live: {','.join(map(str, live))} are)"
        print(f"Broker {broker} hosts no replicas: nothing to move{note}.")
        return 0
    current = {tp: tuple(assignment[tp]) for tp in plan}
    _print_plan(broker, plan, current)
    if dry_run:
        print("Dry run: nothing was changed.")
        return 0
    started = time.monotonic()
    start_reassignment(admin, plan, current, throttle=throttle)
    if not wait:
        if throttle >= 0:
            _err(
                "Save the proposed configuration to a file and run `tidelog reassign verify "
                "--reassignment-json-file FILE` until it completes, to remove the throttle."
            )
        return 0
    _wait(admin, plan, broker, timeout_s=timeout_s, poll_interval_s=poll_interval_s)
    if not preserve_throttles and throttle >= 0:
        clear_throttles(admin, {tp.topic for tp in plan})
    _check_moved(admin, broker, plan, current, started=started, poll_interval_s=poll_interval_s)
    return 0


def _refuse_while_reassigning(admin: reassign_cluster.Admin) -> None:
    if admin.list_reassignments(None):
        # Rule 3, before planning: a partition being reassigned lists RS, not its replicas.
        raise CommandError(
            CANNOT_EXECUTE_WITH_EXISTING.partition("  ")[0],
            code=ErrorCode.REASSIGNMENT_IN_PROGRESS,
            hint="wait for it (`tidelog reassign verify`) or cancel it (`tidelog reassign "
            "cancel`) first",
        )


def _plan_or_refuse(
    broker: int,
    assignment: Mapping[TopicPartition, Sequence[int]],
    live: Collection[int],
    racks: Mapping[int, str | None],
) -> dict[TopicPartition, list[int]]:
    """The decommission plan; refused, with nothing changed, if a replica cannot move."""
    plan, stuck = decommission_plan(broker, assignment, live, racks)
    if stuck:
        others = sorted(set(live) - {broker})
        details = "; ".join(
            f"{tp} (replicas {ids_text(assignment[tp])}: {why})"
            for tp, why in sorted(stuck.items())
        )
        raise CommandError(
            f"cannot move every replica off broker {broker} (live brokers besides it: "
            f"{','.join(map(str, others)) or 'none'}): {len(stuck)} partition"
            f"{plural(len(stuck))} cannot move: {details}",
            code=ErrorCode.INVALID_REPLICATION_FACTOR,
            hint="start another broker (or the dead ones), or lower those topics' replication "
            "factor first; nothing was changed",
        )
    return plan


def _print_plan(
    broker: int,
    plan: Mapping[TopicPartition, Sequence[int]],
    current: Mapping[TopicPartition, Sequence[int]],
) -> None:
    """The current assignment (for a rollback) and the proposed one, as Kafka prints them."""
    print(
        f"Current partition replica assignment\n\n{reassignment_json(current)}\n\n"
        "Save this to use as the --reassignment-json-file option during rollback"
    )
    print(f"Proposed partition reassignment configuration\n{reassignment_json(plan)}")
    gaining = sorted({b for tp, rs in plan.items() for b in rs if b not in current[tp]})
    _err(
        f"Moving {len(plan)} replica{plural(len(plan))} off broker {broker} "
        f"onto broker{plural(len(gaining))} {','.join(map(str, gaining))}"
    )


def _check_moved(
    admin: reassign_cluster.Admin,
    broker: int,
    plan: Mapping[TopicPartition, Sequence[int]],
    current: Mapping[TopicPartition, Sequence[int]],
    *,
    started: float,
    poll_interval_s: float,
) -> None:
    """Every planned partition has its planned replicas and ``broker`` hosts none."""
    # The metadata of the broker asked may trail the controller for a moment.
    settle = time.monotonic() + METADATA_SETTLE_S
    while True:
        after = admin.assignment(sorted({tp.topic for tp in plan}))
        wrong = {
            tp: after.get(tp, ()) for tp in plan if tuple(after.get(tp, ())) != tuple(plan[tp])
        }
        if not wrong or time.monotonic() >= settle:
            break
        time.sleep(poll_interval_s)
    if wrong:
        details = ", ".join(f"{tp} has {ids_text(r)}" for tp, r in sorted(wrong.items()))
        raise CommandError(
            f"the reassignment ended, but not as planned: {details}",
            hint="was it cancelled or replaced? run `tidelog brokers decommission` again",
        )
    still = sorted(tp for tp, r in admin.assignment(None).items() if broker in r)
    elapsed = time.monotonic() - started
    for tp in sorted(plan):
        print(f"{tp}: {ids_text(current[tp])} -> {ids_text(plan[tp])}")
    if still:
        raise CommandError(
            f"moved {len(plan)} replicas in {elapsed:.1f} s, but broker {broker} hosts "
            f"replicas again: {partitions_text(still)}",
            hint="topics created meanwhile may have been placed on it; run the command again",
        )
    print(
        f"Broker {broker} hosts no replicas any more: moved {len(plan)} "
        f"replica{plural(len(plan))} in {elapsed:.1f} s."
    )


def _wait(
    admin: reassign_cluster.Admin,
    plan: Mapping[TopicPartition, Sequence[int]],
    broker: int,
    *,
    timeout_s: float,
    poll_interval_s: float,
) -> None:
    """Rule 4: until none of ``plan``'s partitions is being reassigned."""
    deadline = time.monotonic() + timeout_s
    last: tuple[int, float] | None = None
    while True:
        ongoing = admin.list_reassignments(plan)
        running = sorted(tp for tp, r in ongoing.items() if tp in plan and (r.adding or r.removing))
        if not running:
            return
        now = time.monotonic()
        if last is None or last[0] != len(running) or now - last[1] >= PROGRESS_EVERY_S:
            _err(
                f"{len(plan) - len(running)} of {len(plan)} moved off broker {broker}; still "
                f"moving: {partitions_text(running[:10])}" + (" ..." if len(running) > 10 else "")
            )
            last = (len(running), now)
        if now >= deadline:
            raise CommandError(
                f"{len(running)} partition{plural(len(running))} still moving off "
                f"broker {broker} after {timeout_s:g} s",
                code=ErrorCode.REQUEST_TIMED_OUT,
                hint="the reassignment goes on: save the proposed configuration above and "
                "follow it with `tidelog reassign verify --reassignment-json-file FILE`",
            )
        time.sleep(poll_interval_s)


COMMANDS["brokers"] = (
    "operate on brokers: decommission one (move every replica off it)",
    add_arguments,
    run,
)
