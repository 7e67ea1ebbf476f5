"""One fault-injection run: start the cluster, run the workload, apply N faults from a
seeded RNG, heal, read everything back, check, report.

``run(RunConfig(...))`` returns a ``RunResult``; ``write_report`` renders it as Markdown
(``docs/reliability.md``). ``python -m tidelog.testing.faults`` is the command line.
"""

from __future__ import annotations

import random
import shutil
import sys
import tempfile
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

from tidelog.testing.faults.checker import (
    Findings,
    check_histories,
    check_replicas,
    unavailability,
)
from tidelog.testing.faults.clients import AiokafkaProducerWorker, KafkaPythonProducerWorker
from tidelog.testing.faults.cluster import FaultCluster
from tidelog.testing.faults.nemesis import ALL_KINDS, EVERY_KIND, FaultRecord, Nemesis, Timings
from tidelog.testing.faults.plots import figure_lines
from tidelog.testing.faults.workload import (
    CLIENTS,
    Ack,
    ClientError,
    ConsumerWorker,
    ProducerWorker,
    ProducerWorkerBase,
    final_read,
)


@dataclass(frozen=True, slots=True)
class RunConfig:
    faults: int = 20
    seed: int = 1
    brokers: int = 3
    partitions: int = 3
    #: confluent-kafka producers; then the kafka-python and aiokafka ones (issue 18), each
    #: with the next producer number.
    producers: int = 2
    kafka_python_producers: int = 1
    aiokafka_producers: int = 1
    consumers: int = 2
    kinds: Sequence[str] = ALL_KINDS
    #: Every kind once first (in a seeded order), then ``rest_kinds`` (default ``kinds``).
    cover_all_first: bool = False
    rest_kinds: Sequence[str] | None = None
    session_ms: int = 6000
    lag_ms: int = 2000
    #: Between two faults (after the cluster is healthy again), uniform in this range.
    gap_s: tuple[float, float] = (0.2, 1.0)
    produce_interval_s: float = 0.01
    tmpfs_size: str = "64m"
    directory: Path | None = None
    keep_directory: bool = False
    #: Stop scheduling faults after this many seconds (the report says how many ran).
    time_limit_s: float | None = None
    #: Producers with ``enable.idempotence=true``: then a duplicate is a failure (issue 9).
    idempotent: bool = False
    #: Issue 32: broker i's ``broker.rack`` is racks[(i - 1) mod len] (none when empty); the
    #: topic is then placed rack-aware, and ``partition_rack`` can cut a rack away.
    racks: Sequence[str] = ()


@dataclass(frozen=True, slots=True)
class ClientStats:
    """One client's producers, summed (the report's per-client table)."""

    client: str
    producers: int
    sent: int
    acknowledged: int
    indeterminate: int
    client_visible: int


def client_stats(
    producers: Sequence[ProducerWorkerBase], clients: Sequence[str] = CLIENTS
) -> list[ClientStats]:
    stats = []
    for client in clients:
        mine = [p.history for p in producers if p.history.client == client]
        stats.append(
            ClientStats(
                client,
                len(mine),
                sum(h.sent for h in mine),
                sum(len(h.acks) for h in mine),
                sum(len(h.failed) for h in mine),
                sum(len(h.visible) for h in mine),
            )
        )
    return stats


def when(at: float, faults: Sequence[FaultRecord]) -> str:
    """Where ``at`` (time.monotonic()) falls in the fault schedule."""
    last: FaultRecord | None = None
    for r in faults:
        if r.start <= at <= r.settled:
            return f"during fault {r.index} ({r.kind}, broker {r.target})"
        if r.settled < at:
            last = r
    if last is None:
        return "before the first fault"
    return f"{at - last.settled:.1f}s after fault {last.index} ({last.kind}) healed"


def describe_error(e: ClientError, started: float, faults: Sequence[FaultRecord]) -> str:
    value = f" of {e.value!r}" if e.value is not None else ""
    return (
        f"{e.client} {e.worker}, {e.where}{value}, t+{e.at - started:.1f}s "
        f"({when(e.at, faults)}): {e.error}"
    )


def error_notes(
    errors: Sequence[ClientError], started: float, faults: Sequence[FaultRecord]
) -> list[str]:
    """The report's notes on client-visible errors: how many per client, the most frequent
    texts, the first few in full (every one is in the Findings)."""
    if not errors:
        return []
    per_client = Counter(e.client for e in errors)
    texts = Counter((e.client, e.where, e.error) for e in errors)
    notes = [
        f"**{len(errors)} client-visible errors** (an application would stop): "
        + ", ".join(f"{client} {n}" for client, n in per_client.items())
        + "; the most frequent: "
        + "; ".join(
            f"{client} {where}: `{error}` ({n}x)"
            for (client, where, error), n in texts.most_common(NOTED_ERRORS // 2)
        )
    ]
    notes += [
        f"client-visible error {i + 1}: {describe_error(e, started, faults)}"
        for i, e in enumerate(errors[: NOTED_ERRORS // 2])
    ]
    return notes


@dataclass(slots=True)
class RunResult:
    config: RunConfig
    findings: Findings
    faults: list[FaultRecord]
    #: (kind, longest time with no acknowledgement from the fault's start until healthy).
    unavailable: list[tuple[str, float]]
    sent: int = 0
    failed_deliveries: int = 0
    reads: int = 0
    duration_s: float = 0.0
    notes: list[str] = field(default_factory=list)
    #: Per client (confluent-kafka, kafka-python, aiokafka): its producers' totals.
    clients: list[ClientStats] = field(default_factory=list)
    #: Every client-visible error, producers' and consumers', in time order.
    client_errors: list[ClientError] = field(default_factory=list)
    #: Client-visible errors of the (confluent-kafka) consumers.
    consumer_errors: int = 0
    #: Per partition, the racks of its replicas (in replica order) as Metadata gave them
    #: after the final heal (None: a broker without a rack).
    replica_racks: dict[int, tuple[str | None, ...]] = field(default_factory=dict)


def _overrides(config: RunConfig) -> dict[str, str]:
    return broker_overrides(config.session_ms, config.lag_ms)


def broker_overrides(session_ms: int, lag_ms: int) -> dict[str, str]:
    """The brokers' settings of a fault run (the transactional run adds its own)."""
    return {
        "zookeeper.session.timeout.ms": str(session_ms),
        "replica.lag.time.max.ms": str(lag_ms),
        "replica.fetch.wait.max.ms": "200",
        "replica.fetch.backoff.ms": "200",
        "default.replication.factor": "3",
        "min.insync.replicas": "2",
        "unclean.leader.election.enable": "false",
        "auto.leader.rebalance.enable": "false",
        "log.segment.bytes": str(256 * 1024),
        "log.index.size.max.bytes": str(64 * 1024),
        "replica.high.watermark.checkpoint.interval.ms": "1000",
    }


def create_topic(
    cluster: FaultCluster, topic: str, partitions: int, config: dict[str, str]
) -> None:
    admin = AdminClient({"bootstrap.servers": cluster.admin_bootstrap})
    futures = admin.create_topics(
        [NewTopic(topic, num_partitions=partitions, replication_factor=3, config=config)]
    )
    futures[topic].result(timeout=30)
    if not cluster.wait_healthy(topic, 60.0):
        raise RuntimeError(f"topic {topic} not healthy after creation")


class FaultSchedule(Protocol):
    """The settings ``run_schedule`` reads (``RunConfig``, ``TxnRunConfig``)."""

    @property
    def faults(self) -> int: ...
    @property
    def kinds(self) -> Sequence[str]: ...
    @property
    def rest_kinds(self) -> Sequence[str] | None: ...
    @property
    def cover_all_first(self) -> bool: ...
    @property
    def time_limit_s(self) -> float | None: ...
    @property
    def gap_s(self) -> tuple[float, float]: ...


class Injector(Protocol):
    """What ``run_schedule`` and the report read of a nemesis (``Nemesis``, and
    ``host_nemesis.HostNemesis`` on namespace hosts)."""

    records: list[FaultRecord]
    harness_errors: list[str]
    #: Acknowledgements of records the nemesis itself wrote (partition_rack's probes).
    probe_acks: list[Ack]

    def kinds(self) -> list[str]: ...
    def run_one(self, index: int, kind: str) -> FaultRecord: ...
    def heal_all(self) -> None: ...


def run_schedule(
    nemesis: Injector,
    config: FaultSchedule,
    rng: random.Random,
    log: Callable[[str], None],
    started: float,
) -> None:
    """One fault at a time from the seeded ``rng`` (every kind once first when
    ``cover_all_first``), until ``config.faults`` or the time limit, then heal everything."""
    available = [k for k in config.kinds if k in nemesis.kinds()]
    rest = [k for k in (config.rest_kinds or available) if k in available]
    schedule = rng.sample(available, len(available)) if config.cover_all_first else []
    for i in range(config.faults):
        if config.time_limit_s is not None and time.monotonic() - started > config.time_limit_s:
            log(f"time limit reached after {i} faults")
            break
        kind = schedule[i] if i < len(schedule) else rng.choice(rest)
        nemesis.run_one(i, kind)
        time.sleep(rng.uniform(*config.gap_s))
    nemesis.heal_all()


def run(config: RunConfig, log: Callable[[str], None] = print) -> RunResult:
    directory = config.directory or Path(tempfile.mkdtemp(prefix="tidelog-faults-"))
    rng = random.Random(config.seed)
    topic = "faults"
    use_tmpfs = "disk_full" in config.kinds
    cluster = FaultCluster(
        directory / "cluster",
        brokers=config.brokers,
        overrides=_overrides(config),
        tmpfs_broker=config.brokers if use_tmpfs else None,
        tmpfs_size=config.tmpfs_size,
        racks=config.racks,
    )
    started = time.monotonic()
    producers: list[ProducerWorkerBase] = []
    consumers: list[ConsumerWorker] = []
    try:
        cluster.start()
        create_topic(
            cluster,
            topic,
            config.partitions,
            {"min.insync.replicas": "2", "unclean.leader.election.enable": "false"},
        )
        bootstrap = cluster.client_bootstrap
        start_producers(bootstrap, topic, config, producers)
        consumers = [
            ConsumerWorker(bootstrap, topic, config.partitions, f"c{i}").start()
            for i in range(config.consumers)
        ]
        deadline = time.monotonic() + 60
        while sum(p.acked_count() for p in producers) < 50 and time.monotonic() < deadline:
            time.sleep(0.1)
        nemesis = Nemesis(
            cluster, topic, rng, Timings(config.session_ms / 1000, config.lag_ms / 1000), log
        )
        run_schedule(nemesis, config, rng, log, started)
        healthy = cluster.wait_healthy(topic, 60.0)
        time.sleep(1.0)
        for p in producers:
            p.stop()
        # Let the consumers read up to the end before stopping them.
        time.sleep(2.0)
        for c in consumers:
            c.stop()
        final, hws = final_read(cluster.admin_bootstrap, topic, config.partitions)
        replicas = {p: list(m.replicas) for p, m in cluster.partitions(topic).items()}
        racks = replica_racks(cluster, replicas)
        cluster.stop(unmount=False)  # the tmpfs log dir is compared below
        findings = check_histories(
            [a for p in producers for a in p.history.acks] + nemesis.probe_acks,
            [r for c in consumers for r in c.reads],
            final,
            hws,
            producer_order_guaranteed=config.idempotent,
        )
        findings.divergent.extend(
            check_replicas(
                {b: cluster.log_dir(b) for b in cluster.broker_ids}, topic, hws, replicas
            )
        )
        return run_result(
            config,
            findings,
            nemesis,
            producers=producers,
            consumers=consumers,
            healthy=healthy,
            started=started,
            replica_racks=racks,
        )
    finally:
        for p in producers:
            p.abort()
        cluster.stop()
        if not config.keep_directory and config.directory is None:
            shutil.rmtree(directory, ignore_errors=True)


def replica_racks(
    cluster: FaultCluster, replicas: dict[int, list[int]]
) -> dict[int, tuple[str | None, ...]]:
    """Per partition, its replicas' racks as the brokers registered them (Metadata)."""
    md = cluster.metadata([])
    registered = {} if md is None else {b: m.rack for b, m in md.brokers.items()}
    return {p: tuple(registered.get(b) for b in r) for p, r in replicas.items()}


def start_producers(
    bootstrap: str, topic: str, config: RunConfig, producers: list[ProducerWorkerBase]
) -> None:
    """Start the producers of every client library, appending each to ``producers`` as it
    starts (the caller aborts those on failure); the loopback and the host runs share it."""
    kinds_of_producer = (
        [ProducerWorker] * config.producers
        + [KafkaPythonProducerWorker] * config.kafka_python_producers
        + [AiokafkaProducerWorker] * config.aiokafka_producers
    )
    for i, worker in enumerate(kinds_of_producer):
        producers.append(
            worker(
                bootstrap,
                topic,
                config.partitions,
                i,
                interval_s=config.produce_interval_s,
                idempotent=config.idempotent,
            ).start()
        )


def run_result(
    config: RunConfig,
    findings: Findings,
    nemesis: Injector,
    *,
    producers: Sequence[ProducerWorkerBase],
    consumers: Sequence[ConsumerWorker],
    healthy: bool,
    started: float,
    replica_racks: dict[int, tuple[str | None, ...]],
) -> RunResult:
    """The run's figures and the findings the histories alone do not give (stuck, client
    errors)."""
    acks = [a for p in producers for a in p.history.acks]
    windows = [(r.kind, r.start, r.settled) for r in nemesis.records]
    result = RunResult(
        config=config,
        findings=findings,
        faults=nemesis.records,
        unavailable=unavailability([a.at for a in acks], windows),
        sent=sum(p.history.sent for p in producers),
        failed_deliveries=sum(len(p.history.failed) for p in producers),
        reads=sum(len(c.reads) for c in consumers),
        duration_s=time.monotonic() - started,
        replica_racks=replica_racks,
    )
    if nemesis.probe_acks:
        result.notes.append(
            f"acknowledged includes {len(nemesis.probe_acks)} acks=all records of "
            "partition_rack's writability probe (not counted as sent)"
        )
    if not healthy:
        findings.stuck.append("the cluster was not healthy 60 s after the final heal")
    findings.stuck.extend(
        f"fault {r.index} ({r.kind}, broker {r.target}): not healthy within the heal timeout"
        for r in nemesis.records
        if not r.healthy
    )
    result.notes.extend(nemesis.harness_errors)
    for c in consumers:
        result.notes.extend(f"consumer {c.name}: {e}" for e in c.errors[:5])
    result.clients = client_stats(producers)
    result.client_errors = sorted(
        [e for p in producers for e in p.history.visible]
        + [e for c in consumers for e in c.visible],
        key=lambda e: e.at,
    )
    result.consumer_errors = sum(len(c.visible) for c in consumers)
    findings.client_visible.extend(
        describe_error(e, started, nemesis.records) for e in result.client_errors
    )
    result.notes.extend(error_notes(result.client_errors, started, nemesis.records))
    return result


#: Client-visible errors in the report's notes: this many/2 most frequent texts, and the
#: first this many/2 errors in full.
NOTED_ERRORS = 10

METHOD = """## How it works

- **Processes**: ZooKeeper and every broker are real processes (`FaultCluster`, a
  `LocalCluster`), signalled by their own PIDs. Every link goes through a loopback TCP
  proxy of its own: clients -> each broker (the advertised listener), each broker ->
  ZooKeeper, and each broker -> each peer broker, one proxy per ordered pair (the
  testing-only broker config `tidelog.testing.peer.addresses` points a broker's peer
  connections at them). So the nemesis can cut one broker off from clients and peers
  (`isolate_broker`), from ZooKeeper (`partition_zk`), split the brokers from each other
  while ZooKeeper and clients still see everyone (`partition_brokers`), or cut one link
  one way (`partition_asymmetric`), cut every broker of one rack off at once
  (`partition_rack`, with racks), and heal (held bytes flow again, as after a real
  partition). One broker's log dir is a small tmpfs for the disk-full fault. The kinds
  are listed in `tidelog/testing/faults/nemesis.py` and docs/faults.md.
- **Workload**: producers of three clients (confluent-kafka, kafka-python, aiokafka), all
  `acks=all`, one request in flight per connection, record every acknowledgement
  (partition, offset, value) and every error their client reported; confluent-kafka
  consumers `assign()`-ed to every partition record every read.
- **Client-visible errors** (issue 18): each client's errors go through its own table
  (`tidelog/testing/faults/workload.py` and `clients.py`, docs/faults.md). A delivery that
  timed out or ended on an error Kafka marks retriable (leader moved, not enough replicas,
  disconnected) is indeterminate: the write may be in the log, an application retries it.
  Anything an application would stop on is a failure of the run: a non-retriable or fatal
  error in a delivery report (the existing topic or partition reported unknown, ...), an
  exception from `produce()`/`send()` other than local back-pressure (a full queue), a
  consumer's fatal error or the topic reported unknown to it. The producers count such an
  error and go on.
- **Checker** (Jepsen's Kafka checker in spirit): after the final heal every partition is
  read from 0 to its high watermark. Lost = an acknowledged value found nowhere; moved =
  found at another offset than acknowledged; vanished = read by a consumer, gone later;
  inconsistent = one offset with different values for different readers; reordered = a
  consumer reading offsets backwards, or one producer's values stored out of sending order;
  divergent = replicas' segment files holding different batches below the HW (compared
  byte for byte after a clean stop); stuck = a fault after which the cluster did not heal
  (every broker up and in every ISR) within the heal timeout. Duplicates are counted, not
  failures: the producers retry without idempotence.
- **Not covered**: a client impersonating a follower (Fetch with a real broker's
  `replica_id`) is outside Kafka's failure model; two simultaneous faults are not
  scheduled (RF=3 with `min.insync.replicas=2` promises nothing for them).
- **The checker can fail**: `tests/faults/test_faults.py` runs seed 000's scenario with
  `unclean.leader.election.enable=true` and asserts the loss is reported exactly."""


def code_version() -> str:
    """The git commit of the tidelog tree running (and whether it had uncommitted changes),
    or "unknown" outside a git checkout."""
    import subprocess  # noqa: PLC0415 - only reports need it

    here = Path(__file__).resolve().parent

    def git(*args: str) -> str:
        return subprocess.run(
            ["git", "-C", str(here), *args], capture_output=True, text=True, check=True, timeout=10
        ).stdout.strip()

    try:
        sha = git("rev-parse", "--short=12", "HEAD")
        dirty = git("status", "--porcelain", "--untracked-files=no")
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return f"{sha} (with uncommitted changes)" if dirty else sha


def render_report(
    result: RunResult,
    command: str,
    code: str | None = None,
    figures: Sequence[tuple[str, str]] = (),
) -> str:
    """The Markdown report of one run: setup, verdict, clients, faults by kind, then
    ``report_tail``."""
    f = result.findings
    lines = [
        *_setup_lines(result.config, command, code),
        *verdict_lines(result),
        *client_lines(result),
        *_fault_kind_lines(result),
    ]
    lines += report_tail(f.ok, f.summary(20), result.notes, METHOD, result.faults, figures=figures)
    return "\n".join(lines) + "\n"


def _setup_lines(c: RunConfig, command: str, code: str | None) -> list[str]:
    """The title, the command, the code version and the cluster under test."""
    return [
        "# Reliability: fault injection against real processes",
        "",
        "Generated by `tidelog.testing.faults` (issue 7); do not edit by hand. Command:",
        "",
        f"    {command}",
        "",
        f"Code: tidelog commit {code or code_version()}.",
        "",
        f"Cluster: {c.brokers} brokers + ZooKeeper on loopback"
        + (f" in racks {', '.join(c.racks)} (`broker.rack`)" if c.racks else "")
        + f", topic with {c.partitions} "
        f"partitions, RF=3, `min.insync.replicas=2`, `unclean.leader.election.enable=false`, "
        f"producers with `acks=all` ({c.producers} confluent-kafka, "
        f"{c.kafka_python_producers} kafka-python, {c.aiokafka_producers} aiokafka; one request "
        f"in flight per connection, "
        f"{'`enable.idempotence=true`' if c.idempotent else 'not idempotent'}), {c.consumers} "
        f"confluent-kafka consumers (`assign()`), `zookeeper.session.timeout.ms={c.session_ms}`, "
        f"`replica.lag.time.max.ms={c.lag_ms}`, seed {c.seed}. One fault at a time; after "
        "each, the cluster is awaited healthy (every broker up, every ISR full).",
        "",
    ]


def print_summary(result: RunResult) -> None:
    """The run's findings and each client family's counts, on standard output."""
    print(result.findings.summary())
    for s in result.clients:
        print(
            f"{s.client}: {s.producers} producers, sent {s.sent}, acknowledged "
            f"{s.acknowledged}, indeterminate {s.indeterminate}, client-visible errors "
            f"{s.client_visible}"
        )
    print(f"confluent-kafka consumers: client-visible errors {result.consumer_errors}")


def verdict_lines(result: RunResult) -> list[str]:
    """The verdict table of both reports: sent, acknowledged, read, and each check's count."""
    f = result.findings
    c = result.config
    return [
        "## Verdict",
        "",
        "| | |",
        "|---|---|",
        f"| faults injected | {len(result.faults)} |",
        f"| records sent / acknowledged | {result.sent} / {f.acknowledged} |",
        f"| failed deliveries (indeterminate) | {result.failed_deliveries} |",
        f"| records read by the consumers | {result.reads} |",
        f"| **acknowledged records lost** | **{f.lost_count}** |",
        f"| **client-visible errors (an application would stop)** | **{len(f.client_visible)}** |",
        f"| acknowledged at one offset, stored at another | {len(f.moved)} |",
        f"| read, then vanished | {len(f.vanished)} |",
        f"| one offset, different values | {len(f.inconsistent)} |",
        f"| reordered | {len(f.reordered)} |",
        f"| replicas differing below the HW | {len(f.divergent)} |",
        (
            f"| **duplicated (idempotent producers: a failure)** | **{len(f.duplicated)}** |"
            if c.idempotent
            else f"| duplicated (retries, not a failure) | {len(f.duplicated)} |"
        ),
        (
            f"| producer order changed by a retry across a leader change (not idempotent, "
            f"not a failure) | {len(f.producer_reordered)} |"
        ),
        f"| wall time | {result.duration_s:.0f} s |",
        "",
    ]


def client_lines(result: RunResult) -> list[str]:
    """The clients table of both reports: a row per producer client library, one for consumers."""
    return [
        "## Clients",
        "",
        "| client | producers | sent | acknowledged | failed (indeterminate) | "
        "client-visible errors |",
        "|---|---:|---:|---:|---:|---:|",
        *(
            f"| {s.client} | {s.producers} | {s.sent} | {s.acknowledged} | "
            f"{s.indeterminate} | {s.client_visible} |"
            for s in result.clients
        ),
        f"| confluent-kafka consumers | {result.config.consumers} | - | - | - | "
        f"{result.consumer_errors} |",
        "",
    ]


def _fault_kind_lines(result: RunResult) -> list[str]:
    """Per fault kind: how often, the longest unavailability, how many never healed."""
    by_kind = Counter(r.kind for r in result.faults)
    worst: dict[str, float] = defaultdict(float)
    for kind, gap in result.unavailable:
        worst[kind] = max(worst[kind], gap)
    unhealthy = Counter(r.kind for r in result.faults if not r.healthy)
    lines = [
        "## Faults by kind",
        "",
        "| kind | count | longest unavailability (s) | not healthy within the heal timeout |",
        "|---|---:|---:|---:|",
    ]
    for kind in EVERY_KIND:
        if by_kind[kind]:
            lines.append(f"| {kind} | {by_kind[kind]} | {worst[kind]:.1f} | {unhealthy[kind]} |")
    lines += [
        "",
        "Unavailability: the longest time without any successful acknowledgement from the "
        "fault's start until the cluster was healthy again (a time with no record sent "
        "counts too; producers send every "
        f"{result.config.produce_interval_s * 1000:.0f} ms).",
        "",
    ]
    return lines


def report_tail(
    ok: bool,
    findings: str,
    notes: Sequence[str],
    method: str,
    faults: Sequence[FaultRecord],
    *,
    figures: Sequence[tuple[str, str]] = (),
) -> list[str]:
    """What every fault report ends with: the findings (when a check failed), the notes,
    the figures (``faults.plots``: (alt text, relative path) each), how the run works,
    and the fault schedule."""
    lines: list[str] = []
    if not ok:
        lines += ["## Findings", "", "```", findings, "```", ""]
    if notes:
        lines += ["## Notes", "", *(f"- {n}" for n in notes), ""]
    lines += figure_lines(figures)
    lines += [method, ""]
    lines += [
        "## Fault schedule",
        "",
        "| # | kind | broker | what | healthy |",
        "|---:|---|---|---|---|",
    ]
    for r in faults:
        lines.append(
            f"| {r.index} | {r.kind} | {r.target if r.target is not None else '-'} | "
            f"{r.detail} | {r.healthy} |"
        )
    return lines


def main_command(argv: Sequence[str]) -> str:
    return "python -m tidelog.testing.faults " + " ".join(argv)


def print_err(line: str) -> None:
    print(line, file=sys.stderr, flush=True)
