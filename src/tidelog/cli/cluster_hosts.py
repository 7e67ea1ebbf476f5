"""``tidelog cluster up --hosts N`` and what ``status`` and ``down`` do for such a cluster:
N network namespaces, each a host with its own 10.x address running a ZooKeeper ensemble
member and one broker (``tidelog.testing.hosts``). Needs root.
"""

from __future__ import annotations

import argparse
import shutil
from pathlib import Path

from tidelog.cli.launcher import LocalCluster, client_metadata_view
from tidelog.cli.output import CommandError, format_table, print_json
from tidelog.security.client_config import PLAINTEXT
from tidelog.testing.cluster import STATE_FILE
from tidelog.testing.hosts import HOSTS_STATE_FILE, HostsCluster

#: ``cluster`` actions that a ``--hosts`` cluster does not offer yet.
BROKER_ACTIONS = ("kill", "stop", "start", "restart", "pause", "resume")


def refuse_mixed_options(args: argparse.Namespace) -> None:
    """``--hosts`` with an option it does not support: the user sees which."""
    mixed = [
        flag
        for flag, given in (
            ("--brokers", args.brokers is not None),
            ("--security", args.security != "plaintext"),
            ("--racks", bool(args.racks)),
            ("--no-zookeeper", args.no_zookeeper),
        )
        if given
    ]
    if mixed:
        raise CommandError(
            f"--hosts runs one broker and one ZooKeeper member per host; it does not take "
            f"{', '.join(mixed)}"
        )


def up(directory: Path, args: argparse.Namespace, overrides: dict[str, str]) -> None:
    refuse_mixed_options(args)
    if (directory / STATE_FILE).exists() and LocalCluster.attach(directory).is_running():
        raise CommandError(
            f"a cluster is already running in {directory}; "
            f"`tidelog cluster down --dir {directory}` first"
        )
    cluster = HostsCluster(directory, args.hosts, overrides, metadata_view=client_metadata_view)
    cluster.start(timeout_s=args.timeout)
    print_status(cluster, args.json)


def refuse_hosts_directory(directory: Path) -> None:
    """``cluster up`` without ``--hosts`` where a ``--hosts`` cluster keeps its files."""
    if (directory / HOSTS_STATE_FILE).exists():
        raise CommandError(
            f"{directory} holds a --hosts cluster; `tidelog cluster down --purge --dir "
            f"{directory}` first, or use another --dir"
        )


def print_status(cluster: HostsCluster, as_json: bool) -> None:
    state = cluster.state
    assert state is not None
    rows = []
    for info in state.hosts:
        broker = cluster.broker_state(info.host)
        view = client_metadata_view(info.bootstrap, PLAINTEXT) if broker == "running" else None
        rows.append((info, broker, cluster.zookeeper_state(info.host), view))
    if as_json:
        print_json(
            {
                "directory": state.directory,
                "bootstrap_servers": state.bootstrap_servers,
                "zookeeper_connect": state.zookeeper_connect,
                "hosts": [
                    {
                        "host": info.host,
                        "namespace": info.namespace,
                        "address": info.address,
                        "broker_pid": info.broker_pid,
                        "broker": broker,
                        "zookeeper_pid": info.zookeeper_pid,
                        "zookeeper": zookeeper,
                        "metadata_brokers": None if view is None else list(view[0]),
                    }
                    for info, broker, zookeeper, view in rows
                ],
            }
        )
        return
    print(f"cluster dir: {state.directory}")
    print(f"zookeeper:   {state.zookeeper_connect}")
    print(f"bootstrap:   {state.bootstrap_servers}")
    table = [
        (
            info.host,
            info.namespace,
            info.address,
            f"{info.broker_pid} {broker}",
            f"{info.zookeeper_pid} {zookeeper}",
            "-" if view is None else ",".join(map(str, view[0])),
        )
        for info, broker, zookeeper, view in rows
    ]
    headers = ("HOST", "NAMESPACE", "ADDRESS", "BROKER", "ZOOKEEPER", "SEES")
    print(format_table(headers, table))


def run(directory: Path, args: argparse.Namespace) -> None:
    """``status`` or ``down`` of the ``--hosts`` cluster in ``directory``."""
    cluster = HostsCluster.attach(directory)
    if args.action == "status":
        print_status(cluster, args.json)
    elif args.action == "down":
        errors = cluster.stop()
        if errors:
            raise CommandError(
                "stopped the processes but could not remove every namespace or link:\n"
                + "\n".join(errors)
            )
        if args.purge:
            shutil.rmtree(cluster.directory, ignore_errors=True)
        print(
            f"stopped the cluster in {cluster.directory} and removed its hosts' namespaces"
            + (" and deleted it" if args.purge else "")
        )
    else:
        raise CommandError(
            f"`cluster {args.action}` is not available for a --hosts cluster yet; "
            "`cluster status` and `cluster down` are"
        )
