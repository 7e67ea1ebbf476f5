"""``tidelog cluster status --bootstrap-server H:P[,..] [--zookeeper H:P[,..]]``: the health of
a deployed cluster, one line per fact, and an exit code for scripts (issue 33).

Theory of operation:

1. One Metadata request (all topics) to the first bootstrap broker that answers gives the
   registered brokers, the controller and every partition's leader, replicas and ISR. Each
   registered broker is then asked ApiVersions at its advertised address: it is ``up`` when
   it answers, ``not answering`` when it does not (hung, cut off, or not yet deregistered).
   A broker that is a replica of some partition but not registered is ``down``.
2. A partition is offline when it has no leader or its leader is not a registered broker
   (Kafka's OfflinePartitionsCount); it is under-replicated when it is not offline and its
   ISR is smaller than its replicas (Kafka's UnderReplicatedPartitions).
3. ``--zookeeper`` names the ensemble's members; each is asked ``srvr``
   (``tidelog.zk.four_letter``) for its mode, or why it is not serving. Without it the
   ZooKeeper lines are one line saying they were not checked.
4. The health, and the exit status:

   * ``0`` healthy: nothing below.
   * ``3`` degraded: under-replicated partitions, a broker down or not answering, or a
     ZooKeeper member not serving while another serves.
   * ``4`` critical: offline partitions, no controller, no ZooKeeper member serving, or no
     bootstrap broker reachable (then the error is also on stderr).

   Bad options are ``2`` and other failures (e.g. authentication) ``1``, as for every command.
5. The client's security is ``--command-config``'s, as for the other commands.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from tidelog.cli.output import CommandError, UsageError, print_json, resolve_security
from tidelog.client import BlockingClient, Client, ClientConnectionError, ClientTimeoutError
from tidelog.client.client import ClusterMetadata, parse_bootstrap
from tidelog.client.errors import ClientError
from tidelog.zk.four_letter import MemberState, member_state, members

EXIT_HEALTHY: Final = 0
EXIT_DEGRADED: Final = 3
EXIT_CRITICAL: Final = 4
HEALTH_EXIT: Final[Mapping[str, int]] = {
    "healthy": EXIT_HEALTHY,
    "degraded": EXIT_DEGRADED,
    "critical": EXIT_CRITICAL,
}


def add_arguments(status: argparse.ArgumentParser) -> None:
    """The deployed-cluster options of ``cluster status`` (its ``--dir`` form is the default)."""
    status.add_argument(
        "--bootstrap-server",
        metavar="HOST:PORT[,...]",
        help="a deployed cluster's brokers: report its health instead of --dir's processes",
    )
    status.add_argument(
        "--zookeeper",
        metavar="HOST:PORT[,...][/CHROOT]",
        help="with --bootstrap-server: the ensemble's members, each asked its mode (srvr)",
    )
    status.add_argument(
        "--command-config",
        metavar="FILE",
        help="with --bootstrap-server: client properties (security.protocol, sasl.*, ssl.*)",
    )
    status.add_argument(
        "--timeout",
        type=float,
        default=10.0,
        metavar="S",
        help="with --bootstrap-server: seconds for each connection and request (default 10)",
    )


# --- what was seen (gathered), and what it means (pure) ----------------------------------


@dataclass(frozen=True, slots=True)
class Observed:
    """Everything the status is made of; ``metadata`` None when no broker answered."""

    bootstrap: str
    metadata: ClusterMetadata | None
    #: Why no bootstrap broker answered (with ``metadata`` None).
    unreachable: str = ""
    #: Registered broker id -> None when it answered ApiVersions, else why not.
    answers: Mapping[int, str | None] = field(default_factory=dict)
    #: The ZooKeeper members' states; None without ``--zookeeper``.
    zookeeper: Sequence[MemberState] | None = None


@dataclass(frozen=True, slots=True)
class BrokerLine:
    broker_id: int
    address: str | None
    rack: str | None
    state: str
    detail: str = ""


@dataclass(frozen=True, slots=True)
class PartitionLine:
    topic: str
    partition: int
    leader: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]

    @property
    def name(self) -> str:
        return f"{self.topic}-{self.partition}"


@dataclass(frozen=True, slots=True)
class Status:
    observed: Observed
    brokers: tuple[BrokerLine, ...]
    controller_id: int | None
    under_replicated: tuple[PartitionLine, ...]
    offline: tuple[PartitionLine, ...]
    health: str
    reasons: tuple[str, ...]

    @property
    def exit_code(self) -> int:
        return HEALTH_EXIT[self.health]


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def _brokers(observed: Observed, metadata: ClusterMetadata) -> tuple[BrokerLine, ...]:
    """Rule 1."""
    lines = [
        BrokerLine(
            b.node_id,
            f"{b.host}:{b.port}",
            b.rack,
            "up" if observed.answers.get(b.node_id) is None else "not answering",
            observed.answers.get(b.node_id) or "",
        )
        for b in metadata.brokers.values()
    ]
    hosting: dict[int, int] = {}
    for topic in metadata.topics.values():
        for p in topic.partitions.values():
            for r in p.replicas:
                if r not in metadata.brokers:
                    hosting[r] = hosting.get(r, 0) + 1
    lines += [
        BrokerLine(b, None, None, "down", f"not registered; a replica of {_plural(n, 'partition')}")
        for b, n in hosting.items()
    ]
    return tuple(sorted(lines, key=lambda line: line.broker_id))


def _partitions(
    metadata: ClusterMetadata,
) -> tuple[tuple[PartitionLine, ...], tuple[PartitionLine, ...]]:
    """Rule 2: (under-replicated, offline), in topic and partition order."""
    under, offline = [], []
    for name in sorted(metadata.topics):
        for index in sorted(metadata.topics[name].partitions):
            p = metadata.topics[name].partitions[index]
            line = PartitionLine(name, index, p.leader_id, p.replicas, p.isr)
            if p.leader_id < 0 or p.leader_id not in metadata.brokers:
                offline.append(line)
            elif len(p.isr) < len(p.replicas):
                under.append(line)
    return tuple(under), tuple(offline)


def _zookeeper_reasons(states: Sequence[MemberState]) -> tuple[list[str], list[str]]:
    """Rule 4's ZooKeeper part: (critical, degraded) reasons."""
    silent = [s.address for s in states if s.serving is False]
    if states and all(s.serving is False for s in states):
        return ["no ZooKeeper member serving"], []
    if silent:
        return [], [f"ZooKeeper {', '.join(silent)} not serving"]
    return [], []


def assess(observed: Observed) -> Status:
    """Rules 1, 2 and 4 (pure)."""
    zk_critical, zk_degraded = _zookeeper_reasons(observed.zookeeper or ())
    metadata = observed.metadata
    if metadata is None:
        reasons = ("cannot reach the cluster", *zk_critical)
        return Status(observed, (), None, (), (), "critical", reasons)
    brokers = _brokers(observed, metadata)
    under, offline = _partitions(metadata)
    controller = metadata.controller_id if metadata.controller_id in metadata.brokers else None
    critical = [
        *(["no controller"] if controller is None else []),
        *([_plural(len(offline), "offline partition")] if offline else []),
        *zk_critical,
    ]
    degraded = [
        *([_plural(len(under), "under-replicated partition")] if under else []),
        *(f"broker {b.broker_id} {b.state}" for b in brokers if b.state != "up"),
        *zk_degraded,
    ]
    health = "critical" if critical else "degraded" if degraded else "healthy"
    return Status(observed, brokers, controller, under, offline, health, (*critical, *degraded))


# --- output ------------------------------------------------------------------------------


def _ids(ids: Sequence[int]) -> str:
    return ",".join(map(str, ids)) or "-"


def _partition_text(kind: str, p: PartitionLine) -> str:
    leader = str(p.leader) if p.leader >= 0 else "none"
    return f"{kind}: {p.name} leader {leader} replicas {_ids(p.replicas)} isr {_ids(p.isr)}"


def _zookeeper_text(state: MemberState) -> str:
    if state.mode is not None:
        what = state.mode
    elif state.serving:
        what = f"serving, mode unknown ({state.detail})"
    elif state.serving is None:
        what = f"unknown ({state.detail})"
    else:
        what = f"not serving ({state.detail})"
    return f"zookeeper {state.address} {what}"


def format_status(status: Status) -> list[str]:
    """The report, one line per fact (docs/cli.md)."""
    observed = status.observed
    lines = [f"bootstrap: {observed.bootstrap}"]
    metadata = observed.metadata
    if metadata is None:
        lines.append(f"brokers: unreachable ({observed.unreachable})")
    else:
        lines.append(f"cluster id: {metadata.cluster_id or '-'}")
        for b in status.brokers:
            detail = f" ({b.detail})" if b.detail else ""
            lines.append(
                f"broker {b.broker_id} {b.address or '-'} rack {b.rack or '-'} {b.state}{detail}"
            )
        controller = status.controller_id
        lines.append(f"controller: {controller if controller is not None else 'none'}")
    if observed.zookeeper is None:
        lines.append("zookeeper: not checked (no --zookeeper)")
    else:
        lines += [_zookeeper_text(s) for s in observed.zookeeper]
    if metadata is not None:
        lines.append(f"under-replicated partitions: {len(status.under_replicated)}")
        lines += [_partition_text("under-replicated", p) for p in status.under_replicated]
        lines.append(f"offline partitions: {len(status.offline)}")
        lines += [_partition_text("offline", p) for p in status.offline]
    reasons = f": {'; '.join(status.reasons)}" if status.reasons else ""
    lines.append(f"health: {status.health}{reasons}")
    return lines


def _partition_json(p: PartitionLine) -> dict[str, Any]:
    return {
        "topic": p.topic,
        "partition": p.partition,
        "leader": p.leader,
        "replicas": list(p.replicas),
        "isr": list(p.isr),
    }


def status_json(status: Status) -> dict[str, Any]:
    observed, metadata = status.observed, status.observed.metadata
    return {
        "bootstrap_servers": observed.bootstrap,
        "reachable": metadata is not None,
        "unreachable": observed.unreachable or None,
        "cluster_id": None if metadata is None else metadata.cluster_id,
        "controller_id": status.controller_id,
        "brokers": [
            {
                "id": b.broker_id,
                "address": b.address,
                "rack": b.rack,
                "state": b.state,
                "detail": b.detail or None,
            }
            for b in status.brokers
        ],
        "zookeeper": None
        if observed.zookeeper is None
        else [
            {"address": s.address, "mode": s.mode, "serving": s.serving, "detail": s.detail or None}
            for s in observed.zookeeper
        ],
        "under_replicated_partitions": [_partition_json(p) for p in status.under_replicated],
        "offline_partitions": [_partition_json(p) for p in status.offline],
        "health": status.health,
        "reasons": list(status.reasons),
        "exit_code": status.exit_code,
    }


# --- gathering (IO) ----------------------------------------------------------------------


async def _answers(
    client: Client, metadata: ClusterMetadata, timeout_s: float
) -> dict[int, str | None]:
    async def ask(broker_id: int) -> str | None:
        try:
            await asyncio.wait_for(client.api_versions(broker_id), timeout_s)
        except TimeoutError:
            return f"no answer within {timeout_s:g}s"
        except ClientError as exc:
            return str(exc) or type(exc).__name__
        return None

    ids = sorted(metadata.brokers)
    return dict(zip(ids, await asyncio.gather(*(ask(b) for b in ids)), strict=True))


def _check_options(args: argparse.Namespace) -> list[tuple[str, int]] | None:
    """The ZooKeeper members (None without ``--zookeeper``); UsageError for bad options."""
    try:
        parse_bootstrap(args.bootstrap_server)
    except ValueError as exc:
        raise UsageError(f"--bootstrap-server: {exc}") from None
    if args.timeout <= 0:
        raise UsageError("--timeout must be positive")
    if args.zookeeper is None:
        return None
    try:
        return members(args.zookeeper)
    except ValueError as exc:
        raise UsageError(f"--zookeeper: {exc}") from None


def observe(args: argparse.Namespace) -> Observed:
    """Rules 1, 3 and 5: ask each bootstrap broker in turn until one answers Metadata (the
    client's own fallback skips only a refused connection, not a hung broker)."""
    zk_members = _check_options(args)
    security = resolve_security(args)
    bootstrap = str(args.bootstrap_server)
    zookeeper = (
        None
        if zk_members is None
        else tuple(member_state(host, port, min(args.timeout, 5.0)) for host, port in zk_members)
    )
    errors = []
    for host, port in parse_bootstrap(bootstrap):
        with BlockingClient(
            f"{host}:{port}",
            client_id="tidelog-cli",
            security=security,
            request_timeout_s=args.timeout,
            connect_timeout_s=args.timeout,
        ) as client:
            try:
                metadata = client.metadata(None)
            except (ClientConnectionError, ClientTimeoutError) as exc:
                text = str(exc).removeprefix("no broker reachable: ") or type(exc).__name__
                errors.append(text if f"{host}:{port}" in text else f"{host}:{port}: {text}")
                continue
            answers = client.run(_answers(client.client, metadata, args.timeout))
        return Observed(bootstrap, metadata, answers=answers, zookeeper=zookeeper)
    return Observed(bootstrap, None, "; ".join(errors), zookeeper=zookeeper)


def run(args: argparse.Namespace) -> int:
    """Rule 4: print the status, return its exit code."""
    status = assess(observe(args))
    if args.json:
        print_json(status_json(status))
    else:
        print("\n".join(format_status(status)))
    if status.observed.metadata is None:
        error = CommandError(
            f"cannot reach the cluster at {status.observed.bootstrap}: "
            f"{status.observed.unreachable}",
            hint="check --bootstrap-server (and --command-config for a secured listener)",
        )
        print(error.render("cluster"), file=sys.stderr)
    return status.exit_code
