"""``tidelog cluster up|status|down|kill|restart|pause|resume``: a local cluster (``--hosts N``:
one on N network namespaces, ``tidelog.cli.cluster_hosts``); ``status --bootstrap-server``
reports a deployed cluster's health instead (``tidelog.cli.cluster_remote``).

Drives ``tidelog.cli.launcher.LocalCluster``; every invocation re-attaches to the cluster
through ``<dir>/cluster.json``, so ``up`` returns once the cluster serves and later commands
(``status``, ``kill 2``, ``down``) work from any shell.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from tidelog.cli import cluster_hosts, cluster_remote
from tidelog.cli.launcher import LocalCluster
from tidelog.cli.local_security import CLIENT_PROPERTIES, MODES
from tidelog.cli.main import COMMANDS
from tidelog.cli.output import (
    CommandError,
    UsageError,
    add_json_flag,
    format_table,
    parse_key_value,
    print_json,
)
from tidelog.testing.cluster import BrokerStatus, ClusterError
from tidelog.testing.hosts import is_hosts_cluster
from tidelog.testing.netns import NetnsError
from tidelog.testing.zookeeper import ZooKeeperStartError


def rack_list(text: str) -> tuple[str, ...]:
    """``--racks a,b,c``: the rack names, none empty."""
    racks = tuple(part.strip() for part in text.split(","))
    if not all(racks):
        raise argparse.ArgumentTypeError(f"{text!r} is not a comma-separated list of rack names")
    return racks


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="action", metavar="ACTION", required=True)

    def add(name: str, help_text: str) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help_text, description=help_text)
        p.add_argument(
            "--dir", type=Path, default=Path(".tidelog"), help="cluster directory (.tidelog)"
        )
        return p

    up = add("up", "start ZooKeeper and N brokers in the background")
    up.add_argument("--brokers", type=int, default=None, help="number of brokers (default 3)")
    up.add_argument(
        "--hosts",
        type=int,
        default=None,
        metavar="N",
        help="N hosts on this machine (network namespaces on a bridge, needs root): each runs "
        "a ZooKeeper ensemble member and one broker on its own 10.x address",
    )
    up.add_argument(
        "--override",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="broker property for every broker (repeatable)",
    )
    up.add_argument(
        "--no-zookeeper",
        action="store_true",
        help="independent single brokers, no ZooKeeper (for --brokers 1)",
    )
    up.add_argument(
        "--security",
        choices=MODES,
        default="plaintext",
        help="secure the cluster: TLS and/or SASL (SCRAM, PLAIN) listeners, ACLs on, "
        "ZooKeeper closed; the admin's settings go to DIR/client.properties (docs/security.md)",
    )
    up.add_argument(
        "--racks",
        type=rack_list,
        default=(),
        metavar="A,B,C",
        help="broker.rack of each broker: broker i gets the ((i-1) mod n)-th (replicas are "
        "then placed rack-aware)",
    )
    up.add_argument("--timeout", type=float, default=120.0, help="seconds to wait for readiness")
    add_json_flag(up)
    status = add(
        "status",
        "brokers, PIDs, ports, liveness and the controller of --dir's cluster; with "
        "--bootstrap-server, a deployed cluster's health (exit 0 healthy, 3 degraded, "
        "4 critical)",
    )
    add_json_flag(status)
    cluster_remote.add_arguments(status)
    down = add("down", "stop every broker and ZooKeeper (by recorded PID)")
    down.add_argument("--purge", action="store_true", help="also delete the directory")
    for name, help_text in (
        ("kill", "SIGKILL one broker (a crash)"),
        ("stop", "SIGTERM one broker (a clean shutdown)"),
        ("start", "start a stopped broker again"),
        ("restart", "stop (SIGTERM, or SIGKILL with --crash) and start one broker"),
        ("pause", "SIGSTOP one broker (it hangs; its ZooKeeper session times out)"),
        ("resume", "SIGCONT a paused broker"),
    ):
        p = add(name, help_text)
        p.add_argument("broker", type=int, metavar="BROKER", help="broker id")
        if name == "restart":
            p.add_argument("--crash", action="store_true", help="SIGKILL instead of SIGTERM")


def _status_rows(cluster: LocalCluster) -> tuple[list[BrokerStatus], int | None]:
    statuses = cluster.status()
    votes: dict[int, int] = {}
    for s in statuses:
        if s.controller_id is not None and s.controller_id >= 0:
            votes[s.controller_id] = votes.get(s.controller_id, 0) + 1
    controller = max(votes, key=lambda k: votes[k]) if votes else None
    return statuses, controller


def print_status(cluster: LocalCluster, as_json: bool) -> None:
    statuses, controller = _status_rows(cluster)
    zk_state = cluster.zookeeper_state() if cluster.zookeeper_connect else None
    state = cluster.state
    assert state is not None
    if as_json:
        print_json(
            {
                "directory": state.directory,
                "bootstrap_servers": state.bootstrap_servers,
                "zookeeper": None
                if zk_state is None
                else {
                    "connect": cluster.zookeeper_connect,
                    "pid": state.zookeeper_pid,
                    "state": zk_state,
                },
                "controller_id": controller,
                "brokers": [
                    {
                        "id": s.broker_id,
                        "rack": cluster.rack_of(s.broker_id),
                        "pid": s.pid,
                        "port": s.port,
                        "state": s.state,
                        "alive": s.state == "running" and s.sees is not None,
                        "controller": s.broker_id == controller,
                        "metadata_brokers": None if s.sees is None else list(s.sees),
                    }
                    for s in statuses
                ],
            }
        )
        return
    print(f"cluster dir: {state.directory}")
    if zk_state is not None:
        print(f"zookeeper:   {cluster.zookeeper_connect}  pid {state.zookeeper_pid}  {zk_state}")
    print(f"bootstrap:   {state.bootstrap_servers}")
    print(f"controller:  {controller if controller is not None else 'unknown'}")
    racked = bool(cluster.racks)
    rows = []
    for s in statuses:
        answering = "yes" if s.sees is not None else "no"
        rows.append(
            (
                s.broker_id,
                *((cluster.rack_of(s.broker_id),) if racked else ()),
                s.pid,
                f"127.0.0.1:{s.port}",
                s.state,
                answering,
                "*" if s.broker_id == controller else "",
                ",".join(map(str, s.sees)) if s.sees is not None else "-",
            )
        )
    headers = ("PID", "ADDRESS", "PROCESS", "ANSWERS", "CONTROLLER", "SEES")
    print(format_table(("BROKER", *(("RACK",) if racked else ()), *headers), rows))


def run(args: argparse.Namespace) -> int:
    directory: Path = args.dir
    if args.action == "status" and args.bootstrap_server:
        return cluster_remote.run(args)
    if args.action == "status":
        _refuse_remote_options(args)
    try:
        if args.action == "up":
            _up(directory, args)
        elif is_hosts_cluster(directory):
            cluster_hosts.run(directory, args)
        else:
            _drive(LocalCluster.attach(directory), args)
    except (ClusterError, ZooKeeperStartError, NetnsError) as exc:
        raise CommandError(str(exc)) from exc
    return 0


def _refuse_remote_options(args: argparse.Namespace) -> None:
    """``status`` of a directory with an option only a deployed cluster's status takes."""
    for flag, given in (
        ("--zookeeper", args.zookeeper is not None),
        ("--command-config", args.command_config is not None),
    ):
        if given:
            raise UsageError(
                f"{flag} needs --bootstrap-server",
                hint="`cluster status --bootstrap-server H:P [--zookeeper H:P]` reports a "
                "deployed cluster; without it, the cluster in --dir",
            )


def _up(directory: Path, args: argparse.Namespace) -> None:
    overrides = dict(parse_key_value(item, "override") for item in args.override)
    if args.hosts is not None:
        cluster_hosts.up(directory, args, overrides)
        return
    cluster_hosts.refuse_hosts_directory(directory)
    cluster = LocalCluster(
        directory,
        brokers=3 if args.brokers is None else args.brokers,
        overrides=overrides,
        zookeeper=not args.no_zookeeper,
        security=args.security,
        racks=args.racks,
    )
    cluster.start(timeout_s=args.timeout)
    print_status(cluster, args.json)
    if args.security != "plaintext" and not args.json:
        print(
            f"security:    {args.security.upper()}, ACLs on; admin client settings in "
            f"{cluster.directory / CLIENT_PROPERTIES} (User:admin is a super user)"
        )


def _drive(cluster: LocalCluster, args: argparse.Namespace) -> None:
    """Every action but ``up`` on a one-machine (loopback) cluster."""
    if args.action == "status":
        print_status(cluster, args.json)
    elif args.action == "down":
        cluster.stop()
        if args.purge:
            cluster.destroy()
        print(
            f"stopped the cluster in {cluster.directory}"
            + (" and deleted it" if args.purge else "")
        )
    elif args.action == "kill":
        cluster.kill_broker(args.broker)
        print(f"broker {args.broker} killed (SIGKILL)")
    elif args.action == "stop":
        cluster.broker(args.broker)
        cluster.stop_broker(args.broker)
        print(f"broker {args.broker} stopped (SIGTERM)")
    elif args.action == "start":
        cluster.start_broker(args.broker)
        print(f"broker {args.broker} started (pid {cluster.broker(args.broker).pid})")
    elif args.action == "restart":
        cluster.restart_broker(args.broker, crash=args.crash)
        print(f"broker {args.broker} restarted (pid {cluster.broker(args.broker).pid})")
    elif args.action == "pause":
        cluster.pause_broker(args.broker)
        print(f"broker {args.broker} paused (SIGSTOP)")
    elif args.action == "resume":
        cluster.resume_broker(args.broker)
        print(f"broker {args.broker} resumed (SIGCONT)")


COMMANDS["cluster"] = ("run a local cluster (ZooKeeper + brokers)", add_arguments, run)
