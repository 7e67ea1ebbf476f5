"""One fault-injection run of the transactional workload (issue 19): start the cluster, run
transactional producers and read_committed consumers, apply N faults (the restart-heavy
kinds and ``kill_txn_coordinator``), heal, read everything back, check, report.

``run_transactions(TxnRunConfig(...))`` returns a ``TxnRunResult``;
``render_txn_report`` renders it as Markdown (``docs/reliability-transactions.md``).
``python -m tidelog.testing.faults --workload transactions`` is the command line.
"""

from __future__ import annotations

import random
import shutil
import tempfile
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from tidelog.testing.faults.checker import check_replicas, unavailability
from tidelog.testing.faults.cluster import FaultCluster
from tidelog.testing.faults.nemesis import EVERY_KIND, TXN_KINDS, FaultRecord, Nemesis, Timings
from tidelog.testing.faults.run import (
    NOTED_ERRORS,
    broker_overrides,
    code_version,
    create_topic,
    describe_error,
    error_notes,
    report_tail,
    run_schedule,
)
from tidelog.testing.faults.txn_checker import TxnFindings, check_transactions
from tidelog.testing.faults.txn_workload import (
    ABORTED,
    COMMITTED,
    FENCED,
    INDETERMINATE,
    Txn,
    TxnProducerWorker,
    read_to_end,
)
from tidelog.testing.faults.workload import ClientError, ConsumerWorker, Read

TOPIC = "txn-faults"
TXN_TOPIC = "__transaction_state"


@dataclass(frozen=True, slots=True)
class TxnRunConfig:
    faults: int = 20
    seed: int = 1
    brokers: int = 3
    partitions: int = 3
    #: Transactional producers (one transactional id each).
    producers: int = 3
    #: read_committed consumers reading during the run.
    consumers: int = 2
    #: The share of transactions meant to commit (the others abort).
    commit_ratio: float = 0.7
    #: Values per transaction, uniform in this range (inclusive).
    values_per_txn: tuple[int, int] = (2, 8)
    #: Every this-many-th transaction of each producer is a zombie scenario (0: none).
    zombie_every: int = 25
    kinds: Sequence[str] = TXN_KINDS
    #: Every kind once first (in a seeded order), then ``rest_kinds`` (default ``kinds``).
    cover_all_first: bool = False
    rest_kinds: Sequence[str] | None = None
    session_ms: int = 6000
    lag_ms: int = 2000
    gap_s: tuple[float, float] = (0.2, 1.0)
    #: Pause between two transactions of one producer.
    interval_s: float = 0.02
    transaction_timeout_ms: int = 60000
    #: ``transaction.state.log.num.partitions`` (Kafka's default is 50; fewer load faster).
    txn_state_partitions: int = 10
    directory: Path | None = None
    keep_directory: bool = False
    time_limit_s: float | None = None


@dataclass(frozen=True, slots=True)
class TxnProducerStats:
    """One transactional producer's figures (the report's per-client table)."""

    transactional_id: str
    committed: int
    aborted: int
    indeterminate: int
    fenced: int
    values: int
    producers_made: int
    client_visible: int


@dataclass(slots=True)
class TxnRunResult:
    config: TxnRunConfig
    findings: TxnFindings
    faults: list[FaultRecord]
    #: (kind, longest time with no transaction committed from the fault's start until healthy).
    unavailable: list[tuple[str, float]]
    duration_s: float = 0.0
    notes: list[str] = field(default_factory=list)
    producers: list[TxnProducerStats] = field(default_factory=list)
    client_errors: list[ClientError] = field(default_factory=list)
    consumer_errors: int = 0
    #: (where, error name) -> how often the producers' client raised or reported it.
    error_counts: Counter[tuple[str, str]] = field(default_factory=Counter)
    #: Why transactions meant to commit were aborted instead (the abortable error).
    abort_reasons: Counter[str] = field(default_factory=Counter)
    #: Per partition: (last stable offset, high watermark) at the final read.
    ends: dict[int, tuple[int, int]] = field(default_factory=dict)


def _overrides(config: TxnRunConfig) -> dict[str, str]:
    return {
        **broker_overrides(config.session_ms, config.lag_ms),
        "transaction.state.log.num.partitions": str(config.txn_state_partitions),
        "transaction.state.log.replication.factor": "3",
        "transaction.state.log.min.isr": "2",
    }


def producer_stats(workers: Sequence[TxnProducerWorker]) -> list[TxnProducerStats]:
    stats = []
    for w in workers:
        outcomes = Counter(t.outcome for t in w.txns)
        stats.append(
            TxnProducerStats(
                w.transactional_id,
                outcomes[COMMITTED],
                outcomes[ABORTED],
                outcomes[INDETERMINATE],
                outcomes[FENCED],
                sum(len(t.values) for t in w.txns),
                w.producers_made,
                len(w.visible),
            )
        )
    return stats


def _end_offsets(
    cluster: FaultCluster, partitions: int, timeout_s: float = 60.0
) -> tuple[dict[int, int], dict[int, int]]:
    """(last stable offsets, high watermarks) once they agree, or as they are after
    ``timeout_s`` (markers are written after EndTxn is answered: the LSO follows shortly)."""
    deadline = time.monotonic() + timeout_s
    lso: dict[int, int] = {}
    hw: dict[int, int] = {}
    while True:
        got_hw = cluster.end_offsets(TOPIC, partitions, read_committed=False)
        got_lso = cluster.end_offsets(TOPIC, partitions, read_committed=True)
        if got_hw is not None and got_lso is not None:
            lso, hw = got_lso, got_hw
            if lso == hw:
                return lso, hw
        if time.monotonic() > deadline:
            if not hw:
                raise RuntimeError("no end offsets from the leaders after the final heal")
            return lso, hw
        time.sleep(0.5)


def run_transactions(config: TxnRunConfig, log: Callable[[str], None] = print) -> TxnRunResult:
    directory = config.directory or Path(tempfile.mkdtemp(prefix="tidelog-txn-faults-"))
    rng = random.Random(config.seed)
    cluster = FaultCluster(
        directory / "cluster", brokers=config.brokers, overrides=_overrides(config)
    )
    started = time.monotonic()
    producers: list[TxnProducerWorker] = []
    consumers: list[ConsumerWorker] = []
    try:
        cluster.start()
        create_topic(
            cluster,
            TOPIC,
            config.partitions,
            {"min.insync.replicas": "2", "unclean.leader.election.enable": "false"},
        )
        producers = _start_producers(cluster.client_bootstrap, config)
        consumers = [
            ConsumerWorker(
                cluster.client_bootstrap, TOPIC, config.partitions, f"rc{i}", read_committed=True
            ).start()
            for i in range(config.consumers)
        ]
        deadline = time.monotonic() + 120
        while (
            sum(p.committed_count() for p in producers) < 10 * config.producers
            and time.monotonic() < deadline
        ):
            time.sleep(0.2)
        nemesis = Nemesis(
            cluster,
            TOPIC,
            rng,
            Timings(config.session_ms / 1000, config.lag_ms / 1000),
            log,
            transactional_ids=[p.transactional_id for p in producers],
            health_topics=[TXN_TOPIC],
        )
        healthy = _inject_faults(cluster, nemesis, config, rng=rng, log=log, started=started)
        time.sleep(1.0)
        for p in producers:
            p.stop()
        time.sleep(2.0)  # the consumers read up to the end
        for c in consumers:
            c.stop()
        end = _read_to_the_end(cluster, config.partitions)
        cluster.stop()
        return _result(
            config,
            cluster,
            nemesis,
            producers=producers,
            consumers=consumers,
            end=end,
            healthy=healthy,
            started=started,
        )
    finally:
        for p in producers:
            p.abort()
        cluster.stop()
        if not config.keep_directory and config.directory is None:
            shutil.rmtree(directory, ignore_errors=True)


def _start_producers(bootstrap: str, config: TxnRunConfig) -> list[TxnProducerWorker]:
    return [
        TxnProducerWorker(
            bootstrap,
            TOPIC,
            config.partitions,
            i,
            seed=config.seed,
            commit_ratio=config.commit_ratio,
            values_per_txn=config.values_per_txn,
            zombie_every=config.zombie_every,
            interval_s=config.interval_s,
            transaction_timeout_ms=config.transaction_timeout_ms,
        ).start()
        for i in range(config.producers)
    ]


def _inject_faults(
    cluster: FaultCluster,
    nemesis: Nemesis,
    config: TxnRunConfig,
    *,
    rng: random.Random,
    log: Callable[[str], None],
    started: float,
) -> bool:
    """The fault schedule, one fault at a time, then the final heal: whether the cluster was
    healthy within 60 s of it."""
    if not nemesis.wait_healthy(60.0):
        log(f"before the first fault: {cluster.unhealthy_because(TOPIC, also=[TXN_TOPIC])}")
    run_schedule(nemesis, config, rng, log, started)
    return nemesis.wait_healthy(60.0)


@dataclass(frozen=True, slots=True)
class _FinalRead:
    """Every partition read after the final heal, with its ends and replicas."""

    lso: dict[int, int]
    hw: dict[int, int]
    final: list[Read]
    reached: dict[int, int]
    uncommitted: list[Read]
    replicas: dict[int, list[int]]


def _read_to_the_end(cluster: FaultCluster, partitions: int) -> _FinalRead:
    lso, hw = _end_offsets(cluster, partitions)
    final, reached = read_to_end(cluster.admin_bootstrap, TOPIC, lso, read_committed=True)
    uncommitted, _ = read_to_end(
        cluster.admin_bootstrap, TOPIC, hw, read_committed=False, reader="final-uncommitted"
    )
    replicas = {p: list(m.replicas) for p, m in cluster.partitions(TOPIC).items()}
    return _FinalRead(lso, hw, final, reached, uncommitted, replicas)


def _result(
    config: TxnRunConfig,
    cluster: FaultCluster,
    nemesis: Nemesis,
    *,
    producers: Sequence[TxnProducerWorker],
    consumers: Sequence[ConsumerWorker],
    end: _FinalRead,
    healthy: bool,
    started: float,
) -> TxnRunResult:
    """The checks over the histories and the final read, and what the report shows."""
    lso, hw = end.lso, end.hw
    txns: list[Txn] = [t for p in producers for t in p.history()]
    reads = [r for c in consumers for r in c.reads]
    findings = check_transactions(
        txns,
        reads,
        end.final,
        uncommitted=end.uncommitted,
        ends=lso,
        reached=end.reached,
        high_watermarks=hw,
    )
    findings.divergent.extend(
        check_replicas({b: cluster.log_dir(b) for b in cluster.broker_ids}, TOPIC, hw, end.replicas)
    )
    windows = [(r.kind, r.start, r.settled) for r in nemesis.records]
    commits = [at for p in producers for at in p.commit_times()]
    result = TxnRunResult(
        config=config,
        findings=findings,
        faults=nemesis.records,
        unavailable=unavailability(commits, windows),
        duration_s=time.monotonic() - started,
        ends={p: (lso.get(p, -1), hw[p]) for p in sorted(hw)},
    )
    if not healthy:
        findings.stuck.append("the cluster was not healthy 60 s after the final heal")
    findings.stuck.extend(
        f"fault {r.index} ({r.kind}, broker {r.target}): not healthy within the heal timeout"
        for r in nemesis.records
        if not r.healthy
    )
    findings.stuck.extend(s for p in producers for s in p.stuck)
    result.notes.extend(nemesis.harness_errors)
    for c in consumers:
        result.notes.extend(f"consumer {c.name}: {e}" for e in c.errors[:5])
    result.producers = producer_stats(producers)
    result.client_errors = sorted(
        [e for p in producers for e in p.visible] + [e for c in consumers for e in c.visible],
        key=lambda e: e.at,
    )
    result.consumer_errors = sum(len(c.visible) for c in consumers)
    findings.client_visible.extend(
        describe_error(e, started, nemesis.records) for e in result.client_errors
    )
    result.notes.extend(error_notes(result.client_errors, started, nemesis.records))
    for p in producers:
        result.error_counts.update(p.error_counts)
    result.abort_reasons = Counter(
        t.abort_reason
        for t in txns
        if t.outcome == ABORTED and t.abort_reason not in (None, "intended")
    )
    return result


METHOD = """## How it works

- **Processes and faults**: as in [reliability.md](reliability.md): ZooKeeper and every
  broker are real processes behind loopback proxies (`FaultCluster`), one fault at a time
  from a seeded RNG, each healed and the cluster awaited healthy: every broker up and in
  every ISR of the topic **and of `__transaction_state`**. Besides the restart-heavy kinds,
  `kill_txn_coordinator` asks a broker (FindCoordinator, key type 1, over tidelog's own
  client) which broker coordinates one of the transactional ids in use, SIGKILLs it and
  restarts it after 0.5-3 s.
- **Producers**: confluent-kafka (librdkafka) with a `transactional.id` each (idempotence and
  `acks=all` implied), `transaction.timeout.ms` as above. Each loops: `begin_transaction()`,
  2-8 unique values `t<producer>-<txn>-<i>` over the partitions, then commit or abort (the
  mix above; an abort is preceded by a flush, so the aborted records are in the log). The
  outcome is what the client reported: **committed** (`commit_transaction()` returned),
  **aborted** (`abort_transaction()` returned: meant, or after an abortable error),
  **indeterminate** (a fatal error, or one with no flag, which librdkafka says to treat as
  fatal: the producer is replaced, and the error is client-visible), **fenced** (the zombie
  scenario: every Nth transaction is flushed, then a second producer with the same
  transactional id is initialised, which fences the first and aborts its open transaction,
  and the first one's `commit_transaction()` must fail). Retriable errors are retried in
  place (a call still failing after 120 s is reported stuck).
- **Consumers**: confluent-kafka with `isolation.level=read_committed`, `assign()`-ed to every
  partition from offset 0, recording every record with its `time.monotonic()`; after the
  final heal and every producer's stop, one read_committed read of every partition up to its
  last stable offset (and one read_uncommitted read, for the count of aborted records
  physically in the log).
- **Checks** (`tidelog/testing/faults/txn_checker.py`): (a) every value of a committed
  transaction is in the final read, exactly once, where its delivery report said; (b) no
  value of an aborted or fenced transaction is ever read by a read_committed consumer,
  during the run or in the final read; (c) every transaction, indeterminate ones included,
  is in the final read entirely or not at all; (d) no value was read before its
  transaction's `commit_transaction()` was called, and none of a transaction whose commit
  was never called is visible; (e) every zombie's commit failed. Also: no value read that no
  transaction wrote, one value per offset for every reader, nothing read during the run and
  gone at the end, per-consumer offsets increasing, one transaction's values in a partition
  in produce order, the last stable offset equal to the high watermark once every producer
  stopped (no transaction left hanging), replicas byte-identical below the HW, and no
  client-visible error (an error an application would stop on: a fatal error other than the
  zombie's fencing, a delivery report the record workload's table calls client-visible, a
  consumer's fatal error)."""


def render_txn_report(
    result: TxnRunResult,
    command: str,
    code: str | None = None,
    figures: Sequence[tuple[str, str]] = (),
) -> str:
    f = result.findings
    lines = [
        *_report_header(result, command, code),
        *_report_verdict(result),
        *_report_producers(result),
        *_report_errors(result),
        *_report_faults(result),
    ]
    notes = result.notes[: NOTED_ERRORS * 2]
    lines += report_tail(f.ok, f.summary(20), notes, METHOD, result.faults, figures=figures)
    return "\n".join(lines) + "\n"


def _report_header(result: TxnRunResult, command: str, code: str | None) -> list[str]:
    """The title, the command that made the report, and the cluster and workload run."""
    c = result.config
    return [
        "# Reliability: transactions under faults (issue 19)",
        "",
        "Generated by `tidelog.testing.faults --workload transactions`; do not edit by hand. "
        "Command:",
        "",
        f"    {command}",
        "",
        f"Code: tidelog commit {code or code_version()}.",
        "",
        f"Cluster: {c.brokers} brokers + ZooKeeper on loopback, topic `{TOPIC}` with "
        f"{c.partitions} partitions, RF=3, `min.insync.replicas=2`, "
        "`unclean.leader.election.enable=false`; `__transaction_state` with "
        f"{c.txn_state_partitions} partitions, RF=3, min ISR 2. {c.producers} confluent-kafka "
        f"transactional producers ({c.values_per_txn[0]}-{c.values_per_txn[1]} values per "
        f"transaction, {c.commit_ratio:.0%} meant to commit, every "
        f"{c.zombie_every}th transaction a zombie scenario, "
        f"`transaction.timeout.ms={c.transaction_timeout_ms}`), {c.consumers} confluent-kafka "
        "read_committed consumers (`assign()`), "
        f"`zookeeper.session.timeout.ms={c.session_ms}`, `replica.lag.time.max.ms={c.lag_ms}`, "
        f"seed {c.seed}. One fault at a time; after each, the cluster is awaited healthy.",
        "",
    ]


def _verdict(items: Sequence[str]) -> str:
    return "**pass**" if not items else f"**FAIL** ({len(items)})"


def _report_verdict(result: TxnRunResult) -> list[str]:
    """What ran (counts) and every check's verdict."""
    f = result.findings
    total = sum(f.outcomes.values())
    return [
        "## Verdict",
        "",
        "| | |",
        "|---|---|",
        f"| faults injected | {len(result.faults)} |",
        f"| transactions | {total} |",
        f"| committed (`commit_transaction()` returned) | {f.outcomes[COMMITTED]} "
        f"({f.values[COMMITTED]} values) |",
        f"| aborted (`abort_transaction()` returned) | {f.outcomes[ABORTED]} "
        f"({f.values[ABORTED]} values; {sum(result.abort_reasons.values())} of them after an "
        "abortable error) |",
        f"| indeterminate (a fatal error) | {f.outcomes[INDETERMINATE]} "
        f"({f.indeterminate_visible} visible in full, {f.indeterminate_invisible} not at all) |",
        f"| fenced zombies | {f.outcomes[FENCED]} ({f.values[FENCED]} values) |",
        f"| aborted or fenced values in the log (read_uncommitted), to be skipped | "
        f"{f.aborted_values_in_log} |",
        f"| records read by the read_committed consumers during the run | {f.reads} |",
        f"| records in the final read_committed read | {f.final_reads} |",
        f"| wall time | {result.duration_s:.0f} s |",
        "",
        "| check | verdict |",
        "|---|---|",
        f"| (a) no committed record lost: {f.committed_values_lost} committed values missing | "
        f"{_verdict(f.lost)} |",
        f"| (a) exactly once: values stored more than once | {_verdict(f.duplicated)} |",
        f"| (a) stored where the delivery report said | {_verdict(f.moved)} |",
        f"| (b) no aborted record visible: {f.aborted_values_visible} aborted or fenced values "
        f"read | {_verdict(f.aborted_visible)} |",
        f"| (c) atomicity: every transaction all or nothing | {_verdict(f.partial)} |",
        f"| (d) nothing visible before its commit was called | {_verdict(f.early)} |",
        f"| (e) zombies fenced: {f.zombies_fenced} of {f.zombies} zombie commits failed | "
        f"{_verdict(f.not_fenced)} |",
        f"| values no transaction wrote | {_verdict(f.unknown)} |",
        f"| one offset, one value | {_verdict(f.inconsistent)} |",
        f"| read during the run, gone at the end | {_verdict(f.vanished)} |",
        f"| order (per consumer, per transaction and partition) | {_verdict(f.reordered)} |",
        f"| final read complete, no transaction left hanging (LSO = HW) | "
        f"{_verdict(f.incomplete)} |",
        f"| replicas identical below the HW | {_verdict(f.divergent)} |",
        f"| cluster healed after every fault, no call stuck | {_verdict(f.stuck)} |",
        f"| **client-visible errors (an application would stop)** | {_verdict(f.client_visible)} |",
        "",
    ]


def _report_producers(result: TxnRunResult) -> list[str]:
    c = result.config
    return [
        "## Producers",
        "",
        "| transactional id | committed | aborted | indeterminate | fenced | values | "
        "producer instances | client-visible errors |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
        *(
            f"| {s.transactional_id} | {s.committed} | {s.aborted} | {s.indeterminate} | "
            f"{s.fenced} | {s.values} | {s.producers_made} | {s.client_visible} |"
            for s in result.producers
        ),
        f"| read_committed consumers ({c.consumers}) | - | - | - | - | - | - | "
        f"{result.consumer_errors} |",
        "",
        "Producer instances: the first, one successor per zombie scenario, and one replacement "
        "per fatal error.",
        "",
    ]


def _report_errors(result: TxnRunResult) -> list[str]:
    """The errors the producers' client raised or reported, by where and name."""
    lines: list[str] = []
    if result.error_counts:
        lines += [
            "## Errors the producers' client raised or reported",
            "",
            "| where | error | count |",
            "|---|---|---:|",
            *(
                f"| {where} | `{name}` | {n} |"
                for (where, name), n in sorted(result.error_counts.items())
            ),
            "",
            "Retriable errors were retried in place; abortable ones ended in "
            "`abort_transaction()`; fencing errors are the zombies' (expected).",
            "",
        ]
    return lines


def _report_faults(result: TxnRunResult) -> list[str]:
    """Faults by kind, with the longest time without a commit, and the final ends."""
    by_kind = Counter(r.kind for r in result.faults)
    worst: dict[str, float] = defaultdict(float)
    for kind, gap in result.unavailable:
        worst[kind] = max(worst[kind], gap)
    unhealthy = Counter(r.kind for r in result.faults if not r.healthy)
    lines: list[str] = []
    lines += [
        "## Faults by kind",
        "",
        "| kind | count | longest time without a commit (s) | not healthy within the heal "
        "timeout |",
        "|---|---:|---:|---:|",
    ]
    for kind in EVERY_KIND:
        if by_kind[kind]:
            lines.append(f"| {kind} | {by_kind[kind]} | {worst[kind]:.1f} | {unhealthy[kind]} |")
    lines += [
        "",
        "The longest time without any `commit_transaction()` returning, from the fault's start "
        "until the cluster was healthy again.",
        "",
        "End offsets at the final read (last stable offset / high watermark): "
        + ", ".join(f"p{p} {lso}/{hw}" for p, (lso, hw) in result.ends.items())
        + ".",
        "",
    ]
    return lines
