"""One fault run on namespace hosts (issue 33 point 2): a ``HostsCluster`` (N network
namespaces, each with a ZooKeeper ensemble member and a broker), the fault harness's own
workload and checker (``run``: acks=all producers of three clients, assign() consumers,
acknowledged-never-lost and the other checks, client-visible errors per client), and the
faults of ``host_nemesis`` (links down, hosts cut from each other, ZooKeeper members killed,
the quorum lost and regained).

``python -m tidelog.testing.faults.host_run --faults N --seed S --report FILE`` (root only;
``make chaos-hosts``) writes the Markdown report, ``<FILE stem>.json`` (the verdict, the
clients, what was served during each fault) and the ``plots`` figures beside it. Exit status
0 when the checker found nothing, 1 otherwise, 2 on a usage error, 77 (skipped) when this
machine cannot make network namespaces (not root, no ``ip``).
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import sys
import tempfile
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Sequence
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any, Final

from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

from tidelog.security.client_config import ClientSecurity
from tidelog.testing.faults.checker import check_histories, check_replicas
from tidelog.testing.faults.host_nemesis import HOST_KINDS, HostNemesis, metadata_at
from tidelog.testing.faults.nemesis import FaultRecord, Timings
from tidelog.testing.faults.plots import try_write
from tidelog.testing.faults.run import (
    RunConfig,
    RunResult,
    broker_overrides,
    client_lines,
    code_version,
    print_err,
    print_summary,
    report_tail,
    run_result,
    run_schedule,
    start_producers,
    verdict_lines,
)
from tidelog.testing.faults.workload import (
    CLIENTS,
    ConsumerWorker,
    ProducerWorkerBase,
    final_read,
)
from tidelog.testing.hosts import HostsCluster
from tidelog.testing.netns import NetnsError, require_root

TOPIC: Final = "faults"
#: Exit status of a run this machine cannot make (automake's "skipped").
EXIT_SKIPPED: Final = 77


def host_config(**settings: Any) -> RunConfig:
    """A ``RunConfig`` for hosts: the host kinds, each once first, then at random."""
    return replace(RunConfig(kinds=HOST_KINDS, cover_all_first=True), **settings)


def run_on_hosts(
    config: RunConfig, log: Callable[[str], None] = print
) -> tuple[RunResult, dict[int, tuple[int, int]]]:
    """Run ``config`` on ``config.brokers`` hosts; the result and, per fault index, (records
    acknowledged, records read) from its start to its heal."""
    require_root()
    directory = config.directory or Path(tempfile.mkdtemp(prefix="tidelog-hostfaults-"))
    rng = random.Random(config.seed)
    overrides = broker_overrides(config.session_ms, config.lag_ms)
    cluster = HostsCluster(
        directory / "hosts",
        hosts=config.brokers,
        overrides=overrides,
        metadata_view=_metadata_view,
    )
    started = time.monotonic()
    producers: list[ProducerWorkerBase] = []
    consumers: list[ConsumerWorker] = []
    try:
        cluster.start()
        _create_topic(cluster, config.partitions)
        bootstrap = cluster.bootstrap_servers
        start_producers(bootstrap, TOPIC, config, producers)
        consumers = [
            ConsumerWorker(bootstrap, TOPIC, config.partitions, f"c{i}").start()
            for i in range(config.consumers)
        ]
        deadline = time.monotonic() + 60
        while sum(p.acked_count() for p in producers) < 50 and time.monotonic() < deadline:
            time.sleep(0.1)
        timings = Timings(config.session_ms / 1000, config.lag_ms / 1000)
        nemesis = HostNemesis(
            cluster, TOPIC, rng, timings, log, progress=_progress(producers, consumers)
        )
        if not nemesis.wait_healthy(60.0):
            log(f"not healthy before the first fault: {nemesis.unhealthy_because()}")
        run_schedule(nemesis, config, rng, log, started)
        healthy = nemesis.wait_healthy(60.0)
        time.sleep(1.0)
        for p in producers:
            p.stop()
        time.sleep(2.0)  # the consumers read up to the end
        for c in consumers:
            c.stop()
        final, hws = final_read(bootstrap, TOPIC, config.partitions)
        md = nemesis.metadata([TOPIC])
        replicas = {} if md is None else {p: list(m.replicas) for p, m in _parts(md).items()}
        log_dirs = {h: cluster.host(h).broker_dir / "logs" for h in nemesis.hosts}
        errors = cluster.stop()  # SIGTERM: the log files compared below are complete
        findings = check_histories(
            [a for p in producers for a in p.history.acks],
            [r for c in consumers for r in c.reads],
            final,
            hws,
            producer_order_guaranteed=config.idempotent,
        )
        findings.divergent.extend(check_replicas(log_dirs, TOPIC, hws, replicas))
        result = run_result(
            config,
            findings,
            nemesis,
            producers=producers,
            consumers=consumers,
            healthy=healthy,
            started=started,
            replica_racks={},
        )
        result.notes.extend(indeterminate_notes(producers, nemesis.records))
        result.notes.extend(f"teardown: {e}" for e in errors)
        return result, dict(nemesis.served)
    finally:
        for p in producers:
            p.abort()
        cluster.stop()
        if not config.keep_directory and config.directory is None:
            shutil.rmtree(directory, ignore_errors=True)


def _metadata_view(bootstrap: str, _security: ClientSecurity) -> tuple[tuple[int, ...], int] | None:
    """``HostsCluster.wait_ready``'s view of one broker: (broker ids, controller id)."""
    md = metadata_at(bootstrap, [])
    return None if md is None else (tuple(sorted(md.brokers)), md.controller_id)


def indeterminate_notes(
    producers: Sequence[ProducerWorkerBase], faults: Sequence[FaultRecord], most: int = 5
) -> list[str]:
    """Where the indeterminate deliveries (timed out or retriable: the write may be in the
    log) fell: per client, the fault kinds they fell in and their most frequent texts."""
    notes = []
    for client in CLIENTS:
        failed = [f for p in producers if p.history.client == client for f in p.history.failed]
        if not failed:
            continue
        kinds = Counter(_kind_at(at, faults) for _value, _error, at in failed)
        texts = Counter(error for _value, error, _at in failed)
        notes.append(
            f"{len(failed)} indeterminate {client} deliveries: "
            + ", ".join(f"{n} {kind}" for kind, n in kinds.most_common())
            + "; "
            + "; ".join(f"`{text}` ({n}x)" for text, n in texts.most_common(most))
        )
    return notes


def _kind_at(at: float, faults: Sequence[FaultRecord]) -> str:
    """``during <kind>`` for the fault whose start..healthy window holds ``at``."""
    for r in faults:
        if r.start <= at <= r.settled:
            return f"during {r.kind}"
    return "between faults"


def _parts(md: Any) -> dict[int, Any]:
    return dict(md.topics[TOPIC].partitions) if TOPIC in md.topics else {}


def _create_topic(cluster: HostsCluster, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    config = {"min.insync.replicas": "2", "unclean.leader.election.enable": "false"}
    new = NewTopic(TOPIC, num_partitions=partitions, replication_factor=3, config=config)
    admin.create_topics([new])[TOPIC].result(timeout=30)


def _progress(
    producers: Sequence[ProducerWorkerBase], consumers: Sequence[ConsumerWorker]
) -> Callable[[float, float], tuple[int, int]]:
    def progress(start: float, end: float) -> tuple[int, int]:
        acked = sum(1 for p in producers for a in list(p.history.acks) if start <= a.at <= end)
        read = sum(1 for c in consumers for r in list(c.reads) if start <= r.at <= end)
        return acked, read

    return progress


# -- the report --------------------------------------------------------------------------------

METHOD = """## How it works

- **Hosts**: `tidelog.testing.hosts.HostsCluster`: one Linux network namespace per host on
  a bridge, each running a ZooKeeper ensemble member (myid = host) and a broker
  (broker.id = host) bound to the host's own 10.x address; clients (producers, consumers,
  the harness' own metadata requests) run in the root namespace and reach the hosts over
  the bridge. No proxy is in the path: the faults are the kernel's.
- **Faults** (`tidelog/testing/faults/host_nemesis.py`): `host_link_down_*` sets the host's
  root-side veth down (a real partition: its packets go nowhere, its ZooKeeper member is
  cut from the ensemble too); `host_cut_from_hosts` adds blackhole /32 routes inside the
  host to every other host and inside every other host to it (both ways; the bridge and
  the root namespace still carry the clients' traffic), so its broker loses its peers and
  its ZooKeeper member the quorum while clients still reach it; `zk_member_kill` SIGKILLs
  one member by its PID and starts it again; `zk_quorum_loss` SIGKILLs a majority of the
  members (2 of 3), holds, and starts them again. One fault at a time; after each the
  cluster is awaited healthy (every process running, the ensemble with one leader, every
  broker listing every broker and full ISRs).
- **Served meanwhile**: for every fault, the records acknowledged and read between its
  start and its heal (from the producers' and consumers' histories): while ZooKeeper has
  no quorum, Kafka's brokers keep serving produce (acks=all, the ISR unchanged) and fetch
  on the leaders they have.
- **Workload and checker**: those of the loopback fault harness (docs/reliability.md):
  acks=all producers of confluent-kafka, kafka-python and aiokafka, one request in flight,
  confluent-kafka consumers `assign()`-ed to every partition; after the final heal every
  partition is read from 0 to its high watermark: lost, moved, vanished, inconsistent,
  reordered, replicas differing below the HW (segment files compared byte for byte after
  a clean stop), stuck, and every client-visible error counted per client."""


def render_host_report(
    result: RunResult,
    served: dict[int, tuple[int, int]],
    command: str,
    code: str | None = None,
    figures: Sequence[tuple[str, str]] = (),
) -> str:
    """The Markdown report of one run on hosts."""
    f = result.findings
    lines = [
        *_setup_lines(result.config, command, code),
        *verdict_lines(result),
        *client_lines(result),
        *_kind_lines(result, served),
    ]
    lines += report_tail(f.ok, f.summary(20), result.notes, METHOD, result.faults, figures=figures)
    return "\n".join(lines) + "\n"


def _setup_lines(c: RunConfig, command: str, code: str | None) -> list[str]:
    return [
        "# Reliability: partitions and ZooKeeper ensemble faults on namespace hosts",
        "",
        "Generated by `tidelog.testing.faults.host_run` (issue 33); do not edit by hand. Command:",
        "",
        f"    {command}",
        "",
        f"Code: tidelog commit {code or code_version()}.",
        "",
        f"Cluster: {c.brokers} hosts (network namespaces), each a ZooKeeper ensemble member "
        f"and a broker on its own address; topic with {c.partitions} partitions, RF=3, "
        "`min.insync.replicas=2`, `unclean.leader.election.enable=false`, producers with "
        f"`acks=all` ({c.producers} confluent-kafka, {c.kafka_python_producers} kafka-python, "
        f"{c.aiokafka_producers} aiokafka; one request in flight per connection, not "
        f"idempotent), {c.consumers} confluent-kafka consumers (`assign()`), "
        f"`zookeeper.session.timeout.ms={c.session_ms}`, `replica.lag.time.max.ms={c.lag_ms}`, "
        f"seed {c.seed}. One fault at a time; after each, the cluster is awaited healthy.",
        "",
    ]


def _kind_lines(result: RunResult, served: dict[int, tuple[int, int]]) -> list[str]:
    """Per kind: count, longest unavailability, not healthy in time, served meanwhile."""
    by_kind = Counter(r.kind for r in result.faults)
    worst: dict[str, float] = defaultdict(float)
    for kind, gap in result.unavailable:
        worst[kind] = max(worst[kind], gap)
    unhealthy = Counter(r.kind for r in result.faults if not r.healthy)
    acked: Counter[str] = Counter()
    read: Counter[str] = Counter()
    none_acked: Counter[str] = Counter()
    for r in result.faults:
        a, n = served.get(r.index, (0, 0))
        acked[r.kind] += a
        read[r.kind] += n
        none_acked[r.kind] += a == 0
    lines = [
        "## Faults by kind",
        "",
        "| kind | count | longest unavailability (s) | not healthy within the heal timeout "
        "| acknowledged during the faults | read during the faults | faults with no "
        "acknowledgement before the heal |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for kind in HOST_KINDS:
        if by_kind[kind]:
            lines.append(
                f"| {kind} | {by_kind[kind]} | {worst[kind]:.1f} | {unhealthy[kind]} | "
                f"{acked[kind]} | {read[kind]} | {none_acked[kind]} |"
            )
    lines += [
        "",
        "Unavailability: the longest time without any successful acknowledgement from the "
        "fault's start until the cluster was healthy again. During the faults: from the "
        "fault's start to its heal (link up, routes removed, members started again).",
        "",
    ]
    return lines


def report_json(result: RunResult, served: dict[int, tuple[int, int]]) -> str:
    f = result.findings
    data = {
        "config": {
            "hosts": result.config.brokers,
            "faults": result.config.faults,
            "seed": result.config.seed,
            "session_ms": result.config.session_ms,
            "lag_ms": result.config.lag_ms,
        },
        "ok": f.ok,
        "sent": result.sent,
        "acknowledged": f.acknowledged,
        "lost": f.lost_count,
        "client_visible_errors": len(f.client_visible),
        "failures": {k: len(v) for k, v in f.failures.items()},
        "duration_s": round(result.duration_s, 1),
        "clients": [asdict(s) for s in result.clients],
        "faults": [
            {
                "index": r.index,
                "kind": r.kind,
                "host": r.target,
                "detail": r.detail,
                "healthy": r.healthy,
                "heal_s": round(r.healed - r.start, 2),
                "healthy_after_heal_s": round(r.settled - r.healed, 2),
                "acknowledged_meanwhile": served.get(r.index, (0, 0))[0],
                "read_meanwhile": served.get(r.index, (0, 0))[1],
            }
            for r in result.faults
        ],
    }
    return json.dumps(data, indent=1) + "\n"


def main(argv: list[str] | None = None) -> int:
    args_list = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(prog="python -m tidelog.testing.faults.host_run")
    parser.add_argument("--faults", type=int, default=100)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--hosts", type=int, default=3)
    parser.add_argument("--report", type=Path, default=None)
    parser.add_argument("--kinds", default=None, help="comma-separated (default: every kind)")
    parser.add_argument("--dir", type=Path, default=None, help="keep the cluster's files here")
    parser.add_argument("--time-limit", type=float, default=None)
    args = parser.parse_args(args_list)
    kinds = HOST_KINDS if args.kinds is None else tuple(k for k in args.kinds.split(",") if k)
    unknown = sorted(set(kinds) - set(HOST_KINDS))
    if unknown:
        parser.error(f"unknown fault kinds {unknown}; known: {', '.join(HOST_KINDS)}")
    if args.hosts < 3:
        parser.error("--hosts must be at least 3 (RF=3)")
    try:
        require_root()
    except NetnsError as exc:
        print_err(f"skipped: {exc}")
        return EXIT_SKIPPED
    config = host_config(
        faults=args.faults,
        seed=args.seed,
        brokers=args.hosts,
        kinds=kinds,
        directory=args.dir,
        keep_directory=args.dir is not None,
        time_limit_s=args.time_limit,
    )
    result, served = run_on_hosts(config, log=print_err)
    print_summary(result)
    if args.report is not None:
        command = "python -m tidelog.testing.faults.host_run " + " ".join(args_list)
        figures = try_write(result.faults, result.unavailable, args.report, print_err)
        text = render_host_report(result, served, command, figures=figures)
        args.report.write_text(text, encoding="utf-8")
        args.report.with_suffix(".json").write_text(report_json(result, served))
        print_err(f"report written to {args.report}")
    return 0 if result.findings.ok else 1


if __name__ == "__main__":
    sys.exit(main())
