"""``tidelog reassign generate|execute|verify|cancel|list``: move partition replicas between
brokers, like ``kafka-reassign-partitions.sh`` (KIP-455: AlterPartitionReassignments and
ListPartitionReassignments at the controller, ``tidelog.client.reassign_admin``; the log dir
half, KIP-113, with AlterReplicaLogDirs and DescribeLogDirs at each broker).

- ``generate --topics-to-move-json-file F --broker-list 1,2,3``: prints "Current partition
  replica assignment" and "Proposed partition reassignment configuration", each one line of
  Kafka's reassignment JSON (``{"version":1,"partitions":[{"topic":..,"partition":..,
  "replicas":[..],"log_dirs":["any",..]}]}``). The proposal keeps each topic's replication
  factor and spreads its replicas round-robin over the broker list with the controller's
  placement rule (``tidelog.controller.placement``, Kafka's ``AdminUtils.
  assignReplicasToBrokers``): rack-aware when the brokers have a ``broker.rack`` (each
  partition's replicas on as many racks as it can), unless ``--disable-rack-aware``; some
  with a rack and some not is refused with Kafka's "Not all brokers have rack information.
  Add --disable-rack-aware ..." (exit 1). Kafka starts each topic at a random broker; here
  the first topic starts at the first broker and each next topic where the previous one
  ended, so the same input gives the same proposal. Nothing changes in the cluster.
- ``execute --reassignment-json-file F [--throttle B/s] [--replica-alter-log-dirs-throttle
  B/s] [--additional] [--timeout MS]``: prints the current assignment of those partitions
  ("Save this to use as the --reassignment-json-file option during rollback"), sets the
  throttles, sends AlterPartitionReassignments and prints "Successfully started partition
  reassignments for t-0,t-1"; then, for replicas the file puts in a given log dir, sends
  AlterReplicaLogDirs to their brokers until each has started (a replica being added is
  not there yet: REPLICA_NOT_AVAILABLE is asked again every 100 ms for ``--timeout`` ms, as
  Kafka's tool does). Refused while other reassignments run, unless ``--additional`` (which
  also changes the throttle of running ones when they are resubmitted).
- ``verify --reassignment-json-file F [--preserve-throttles]``: per partition "Reassignment
  of partition t-0 is completed." / "... is still in progress." / "There is no active
  reassignment of partition t-0, but replica set is 1 rather than 2,3."; per log dir move
  Kafka's lines too. Once nothing runs in the cluster any more, removes every throttle
  (below) unless ``--preserve-throttles``.
- ``cancel --reassignment-json-file F [--preserve-throttles]``: cancels those of the
  partitions still being reassigned (their replicas go back to the original ones), prints
  "Successfully cancelled partition reassignments for: t-0" (or "None of the specified
  partition reassignments are active."), sends running log dir moves back to the dir the
  replica is in, and removes the throttles.
- ``list``: Kafka's ``--list``, the reassignments running in the cluster.

Throttles (KIP-73), as Kafka's tool sets them: with ``--throttle B``, every broker that holds
or receives a replica of a partition of the file (or of a running reassignment) gets the
dynamic broker configs ``leader.replication.throttled.rate`` and
``follower.replication.throttled.rate`` = B, and each topic
``leader.replication.throttled.replicas`` = the existing replicas and
``follower.replication.throttled.replicas`` = the added ones (``p:b,...``);
``--replica-alter-log-dirs-throttle`` sets ``replica.alter.log.dirs.io.max.bytes.per.second``
on the brokers with a log dir move. Verify and cancel delete all of these from every live
broker and from the file's topics.

Exit status: 0 done; 1 the cluster refused or could not be reached (Kafka's error code and
message); 2 a bad option or file (Kafka's message; nothing was changed). ``verify`` improves
on Kafka's tool, which exits 0 in every case, so a script can poll it: 3 while a
reassignment or log dir move of the file is still in progress, 4 when none is but a
partition's replicas differ from the file (cancelled, or replaced by another reassignment).

This module holds the commands; the files are :mod:`tidelog.cli.reassign_files`, the plans
:mod:`tidelog.cli.reassign_plans`, the log dir moves :mod:`tidelog.cli.reassign_log_dirs`,
the cluster steps shared with ``tidelog brokers decommission``
:mod:`tidelog.cli.reassign_steps`, and the cluster they run on
:mod:`tidelog.cli.reassign_cluster`.
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Final

from tidelog.cli import reassign_cluster
from tidelog.cli.main import COMMANDS
from tidelog.cli.output import CommandError, UsageError, add_bootstrap_flags
from tidelog.cli.reassign_cluster import Admin
from tidelog.cli.reassign_files import (
    parse_reassignment_json,
    parse_topics_json,
    partitions_text,
    plural,
    reassignment_json,
)
from tidelog.cli.reassign_log_dirs import Replica, execute_moves, move_states, replica_dirs
from tidelog.cli.reassign_plans import (
    partition_states,
    placement_brokers,
    propose_assignment,
)
from tidelog.cli.reassign_steps import (
    check_brokers,
    clear_throttles,
    current_of,
    start_reassignment,
)
from tidelog.errors import ErrorCode
from tidelog.model import TopicPartition

#: How long verify looks again at a partition whose metadata differs from the file while
#: no reassignment of it runs (the metadata may trail the controller's).
VERIFY_SETTLE_S: Final = 3.0
#: verify's exit statuses beyond 0/1/2 (module docstring).
EXIT_IN_PROGRESS: Final = 3
EXIT_DIFFERENT: Final = 4


def _read(path: Path, option: str) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except OSError as exc:
        raise UsageError(f"{option} {path}: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise UsageError(f"{option} {path}: not UTF-8 text") from None


def broker_list(text: str) -> list[int]:
    try:
        ids = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a comma-separated list of broker ids"
        ) from None
    if not ids:
        raise argparse.ArgumentTypeError("the broker list is empty")
    duplicates = sorted({b for b in ids if ids.count(b) > 1})
    if duplicates:
        raise argparse.ArgumentTypeError(
            f"Broker list contains duplicate entries: {','.join(map(str, duplicates))}"
        )
    return ids


def rate(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of bytes a second") from None
    if value <= 0:
        raise argparse.ArgumentTypeError("a throttle must be at least 1 byte a second")
    return value


def add_throttle_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--throttle",
        type=rate,
        default=-1,
        metavar="B/s",
        help="replication throttle for the moving replicas, bytes a second (KIP-73)",
    )


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="action", metavar="ACTION", required=True)

    def add(name: str, help_text: str) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help_text, description=help_text)
        add_bootstrap_flags(p)
        return p

    p = add("generate", "propose a reassignment of whole topics onto a broker list")
    p.add_argument(
        "--topics-to-move-json-file",
        type=Path,
        required=True,
        metavar="FILE",
        help='{"topics":[{"topic":"t"}],"version":1}',
    )
    p.add_argument(
        "--broker-list",
        type=broker_list,
        required=True,
        metavar="1,2,3",
        help="the brokers to place the replicas on",
    )
    p.add_argument(
        "--disable-rack-aware",
        action="store_true",
        help="place replicas without regard to the brokers' racks (broker.rack)",
    )
    p = add("execute", "start the reassignment of a JSON file")
    p.add_argument("--reassignment-json-file", type=Path, required=True, metavar="FILE")
    add_throttle_flag(p)
    p.add_argument(
        "--replica-alter-log-dirs-throttle",
        type=rate,
        default=-1,
        metavar="B/s",
        help="replica.alter.log.dirs.io.max.bytes.per.second on the brokers of log dir moves",
    )
    p.add_argument(
        "--additional",
        action="store_true",
        help="start although other reassignments run (or re-throttle them)",
    )
    p.add_argument(
        "--timeout",
        type=int,
        default=10_000,
        metavar="MS",
        help="how long to try to start the log dir moves, in ms as Kafka's (default: 10000)",
    )
    for name, help_text in (
        ("verify", "whether the reassignment of a JSON file is done (exit 3 while it runs)"),
        ("cancel", "cancel the running reassignments of a JSON file"),
    ):
        p = add(name, help_text)
        p.add_argument("--reassignment-json-file", type=Path, required=True, metavar="FILE")
        p.add_argument(
            "--preserve-throttles", action="store_true", help="leave the throttles in place"
        )
        if name == "cancel":
            p.add_argument(
                "--timeout",
                type=int,
                default=10_000,
                metavar="MS",
                help="how long to try to stop log dir moves (default: 10000)",
            )
    add("list", "the partition reassignments running in the cluster")


def run(args: argparse.Namespace) -> int:
    if args.action == "generate":
        topics = parse_topics_json(
            _read(args.topics_to_move_json_file, "--topics-to-move-json-file")
        )
        with reassign_cluster.open_admin(args) as admin:
            return generate(admin, topics, args.broker_list, rack_aware=not args.disable_rack_aware)
    if args.action == "list":
        with reassign_cluster.open_admin(args) as admin:
            return list_command(admin)
    moves = parse_reassignment_json(_read(args.reassignment_json_file, "--reassignment-json-file"))
    targets = {m.partition: list(m.replicas) for m in moves}
    dirs = replica_dirs(moves)
    with reassign_cluster.open_admin(args) as admin:
        if args.action == "execute":
            return execute(
                admin,
                targets,
                throttle=args.throttle,
                log_dir_throttle=args.replica_alter_log_dirs_throttle,
                additional=args.additional,
                dirs=dirs,
                timeout_ms=args.timeout,
            )
        if args.action == "verify":
            return verify(admin, targets, dirs, preserve_throttles=args.preserve_throttles)
        return cancel(
            admin,
            targets,
            dirs,
            preserve_throttles=args.preserve_throttles,
            timeout_ms=args.timeout,
        )


def generate(
    admin: Admin, topics: Sequence[str], brokers: Sequence[int], *, rack_aware: bool = True
) -> int:
    current = admin.assignment(topics)
    missing = [t for t in topics if not any(tp.topic == t for tp in current)]
    if missing:
        raise UsageError(
            f"Topic{plural(len(missing))} {', '.join(missing)} not found",
            code=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        )
    check_brokers(admin, brokers)
    racks = placement_brokers(brokers, admin.broker_racks(), rack_aware=rack_aware)
    proposal = propose_assignment(current, topics, racks)
    print(f"Current partition replica assignment\n{reassignment_json(current)}\n")
    print(f"Proposed partition reassignment configuration\n{reassignment_json(proposal)}")
    return 0


def execute(
    admin: Admin,
    targets: Mapping[TopicPartition, Sequence[int]],
    *,
    throttle: int = -1,
    log_dir_throttle: int = -1,
    additional: bool = False,
    dirs: Mapping[Replica, str] | None = None,
    timeout_ms: int = 10_000,
) -> int:
    check_brokers(admin, {b for replicas in targets.values() for b in replicas})
    current = current_of(admin, targets)
    print(
        f"Current partition replica assignment\n\n{reassignment_json(current)}\n\n"
        "Save this to use as the --reassignment-json-file option during rollback"
    )
    start_reassignment(
        admin,
        targets,
        current,
        throttle=throttle,
        log_dir_throttle=log_dir_throttle,
        additional=additional,
        dirs=dirs,
        timeout_ms=timeout_ms,
    )
    return 0


def verify(
    admin: Admin,
    targets: Mapping[TopicPartition, Sequence[int]],
    dirs: Mapping[Replica, str] | None = None,
    *,
    preserve_throttles: bool,
) -> int:
    """Kafka's ``verifyAssignment``; the exit status of the module docstring. The throttles
    go only once no reassignment at all runs in the cluster (Kafka's rule: the others may
    be throttled by the same configs)."""
    ongoing = admin.list_reassignments(None)
    topics = sorted({tp.topic for tp in targets})
    states = partition_states(targets, ongoing, admin.assignment(topics))
    # A reassignment that just ended: the metadata of the broker asked may trail the
    # controller's for a moment (RS instead of the target); look again before saying so.
    settle = time.monotonic() + VERIFY_SETTLE_S
    while (
        any(s.done and s.current != s.target for s in states.values()) and time.monotonic() < settle
    ):
        time.sleep(0.5)
        states = partition_states(targets, ongoing, admin.assignment(topics))
    print("Status of partition reassignment:")
    for tp in sorted(states):
        print(states[tp].describe(tp))
    moves = move_states(admin, dirs) if dirs else {}
    for replica in sorted(moves, key=lambda r: r.order):
        print(moves[replica][1])
    in_progress = any(not s.done for s in states.values()) or any(
        not done for done, _ in moves.values()
    )
    others = sorted(tp for tp in ongoing if tp not in targets)
    if not in_progress and others:
        print(f"Throttles kept: other partition reassignments run ({partitions_text(others)}).")
    if not in_progress and not others and not preserve_throttles:
        clear_throttles(
            admin, {tp.topic for tp in targets}, {b for r in targets.values() for b in r}
        )
    if in_progress:
        return EXIT_IN_PROGRESS
    if any(s.current != s.target for s in states.values()):
        return EXIT_DIFFERENT
    return 0


def cancel(
    admin: Admin,
    targets: Mapping[TopicPartition, Sequence[int]],
    dirs: Mapping[Replica, str] | None = None,
    *,
    preserve_throttles: bool,
    timeout_ms: int = 10_000,
) -> int:
    """Kafka's ``cancelAssignment``: running reassignments of the file's partitions are
    cancelled, running log dir moves sent back to the dir the replica is in."""
    ongoing = admin.list_reassignments(targets)
    running = sorted(tp for tp, r in ongoing.items() if tp in targets and (r.adding or r.removing))
    cancelled = []
    if running:
        answers = admin.alter_reassignments(dict.fromkeys(running))
        # One that completed in the meantime is no error: there is nothing left to cancel.
        refused = {
            tp: a
            for tp, a in answers.items()
            if a.error_code not in (ErrorCode.NONE, ErrorCode.NO_REASSIGNMENT_IN_PROGRESS)
        }
        if refused:
            details = "\n".join(
                f"{tp}: {a.error_code.name}" + (f": {a.error_message}" if a.error_message else "")
                for tp, a in sorted(refused.items())
            )
            raise CommandError(
                f"Error cancelling partition reassignment{plural(len(refused))} for:\n{details}"
            )
        cancelled = [tp for tp in running if answers[tp].error_code == ErrorCode.NONE]
    if cancelled:
        print(
            f"Successfully cancelled partition reassignment{plural(len(cancelled))} for: "
            f"{partitions_text(cancelled)}"
        )
    else:
        print("None of the specified partition reassignments are active.")
    if dirs:
        back = {}
        for replica, (done, _line) in move_states(admin, dirs).items():
            if not done:
                described = admin.describe_log_dirs(replica.broker, [replica.partition])
                here = [
                    os.path.normpath(d.path)
                    for d in described.log_dirs
                    for r in d.replicas
                    if r.partition == replica.partition and not r.is_future
                ]
                if here:
                    back[replica] = here[0]
        if back:
            execute_moves(admin, back, timeout_ms)
        else:
            print("None of the specified partition moves are active.")
    if not preserve_throttles:
        clear_throttles(
            admin, {tp.topic for tp in targets}, {b for r in targets.values() for b in r}
        )
    return 0


def list_command(admin: Admin) -> int:
    """Kafka's ``--list``."""
    ongoing = admin.list_reassignments(None)
    if not ongoing:
        print("No partition reassignments found.")
        return 0
    print("Current partition reassignments:")
    for tp in sorted(ongoing):
        r = ongoing[tp]
        line = f"{tp}: replicas: {','.join(map(str, r.replicas))}."
        if r.adding:
            line += f" adding: {','.join(map(str, r.adding))}."
        if r.removing:
            line += f" removing: {','.join(map(str, r.removing))}."
        print(line)
    return 0


COMMANDS["reassign"] = (
    "move partition replicas between brokers (like kafka-reassign-partitions.sh)",
    add_arguments,
    run,
)
