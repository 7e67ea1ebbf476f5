"""Run the benchmark rows in order and write the results (JSON after every section)."""

# Optional dependencies (the bench extra) load lazily; workers take positional arguments
# because they run through multiprocessing's starmap.
# ruff: noqa: PLC0415

from __future__ import annotations

import json
import shutil
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tidelog.bench import limits
from tidelog.bench.common import Row, load_average, machine, remove_data
from tidelog.bench.launch import Launcher
from tidelog.storage import page_cache

if TYPE_CHECKING:
    from tidelog.bench.external import ExternalCluster

SECTIONS = (
    "limits",
    "produce",
    "compression",
    "e2e",
    "transactions",
    "peers",
    "failover",
    "cleaner",
    "metrics",
    "zones",
    "spark",
    "security",
)


@dataclass(frozen=True, slots=True)
class Options:
    quick: bool
    output: Path
    work_dir: Path | None
    sections: tuple[str, ...]
    seconds: float
    producers: int
    sizes: tuple[int, ...]
    failover_partitions: int
    scale_partitions: int
    peers: tuple[str, ...]
    charts: bool
    #: The CLI's cluster launcher (this package does not import tidelog.cli).
    launcher: Launcher
    #: ``--bootstrap-server``: the cluster measured instead of starting any
    #: (:mod:`tidelog.bench.external`; only its limits, produce and e2e sections run).
    external: ExternalCluster | None = None


class Run:
    """Collects rows and failures; writes ``results.json`` as it goes."""

    def __init__(self, options: Options) -> None:
        self.options = options
        self.rows: list[Row] = []
        self.skipped: list[dict[str, str]] = []
        self.started = time.time()
        self.info: dict[str, Any] = {"machine": machine(), "load_at_start": load_average()}

    def say(self, text: str) -> None:
        load = load_average()
        stamp = time.strftime("%H:%M:%S", time.gmtime())
        print(f"[{stamp} load {load[0]:.2f}] {text}", flush=True)

    def section(self, name: str, fn: Callable[[], list[Row]]) -> None:
        self.say(f"== {name}")
        try:
            self.rows.extend(fn())
        except Exception as exc:
            traceback.print_exc()
            self.skipped.append({"section": name, "reason": f"{type(exc).__name__}: {exc}"})
            self.say(f"{name} failed: {type(exc).__name__}: {exc}")
        self.write()

    def to_json(self) -> dict[str, Any]:
        o = self.options
        return {
            **self.info,
            "command": " ".join(["tidelog", "bench", *sys.argv[2:]]),
            "quick": o.quick,
            "seconds_per_produce_run": o.seconds,
            "producers": o.producers,
            "load_at_end": load_average(),
            "elapsed_s": time.time() - self.started,
            "rows": [r.to_json() for r in self.rows],
            "skipped": self.skipped,
        }

    def write(self) -> None:
        self.options.output.mkdir(parents=True, exist_ok=True)
        path = self.options.output / "results.json"
        tmp = path.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(self.to_json(), indent=2) + "\n", encoding="utf-8")
        tmp.replace(path)


def run(options: Options) -> int:
    """Every chosen section in order, then the report; 0 (a failed section is recorded as
    skipped, not raised)."""
    r = Run(options)
    own_tmp = options.work_dir is None
    work = Path(tempfile.mkdtemp(prefix="tidelog-bench-")) if own_tmp else options.work_dir
    assert work is not None
    work.mkdir(parents=True, exist_ok=True)
    # The RabbitMQ nodes run as user rabbitmq and must reach their directories below.
    work.chmod(0o755)
    steps: tuple[Callable[[Run, Path, bool], None], ...] = (
        (_limits, _external)
        if options.external is not None
        else (
            _limits,
            _one_cluster,
            _peers,
            _failover,
            _cleaner,
            _metrics,
            _zones,
            _spark,
            _security,
        )
    )
    try:
        for step in steps:
            step(r, work, own_tmp)
    finally:
        r.write()
        if own_tmp:
            shutil.rmtree(work, ignore_errors=True)
    from tidelog.bench import report

    report.write_report(
        options.output / "results.json", options.output, charts=options.charts, say=r.say
    )
    r.say(f"results in {options.output}")
    return 0


def _limits(r: Run, work: Path, own_tmp: bool) -> None:
    options = r.options
    if "limits" not in options.sections:
        return
    r.section(
        "limits",
        lambda: [
            limits.triple_write(work / "limits", options.seconds),
            limits.parallel_triple_write(work / "limits", options.seconds),
            limits.parallel_triple_write(
                work / "limits", options.seconds, keep=page_cache.DEFAULT_KEEP
            ),
            limits.loopback_sendfile(work / "limits", 256 << 20, 3.0 if options.quick else 8.0),
        ],
    )
    for row in r.rows:
        if row.section == "limits":
            r.say(f"{row.workload}: {row.values}")


def _one_cluster(r: Run, work: Path, own_tmp: bool) -> None:
    """produce, compression, e2e and transactions: one cluster for all four."""
    from tidelog.bench import tidelog_rows

    options = r.options
    if not {"produce", "compression", "e2e", "transactions"} & set(options.sections):
        return
    sizes = list(options.sizes)
    cluster = tidelog_rows.start_cluster(options.launcher.cluster, work / "cluster")
    try:
        bootstrap = cluster.bootstrap_servers
        r.info["tidelog_cluster"] = {
            "brokers": 3,
            "overrides": dict(tidelog_rows.CLUSTER_OVERRIDES),
            "event_loop": cluster.event_loop,
        }
        if "produce" in options.sections:
            r.section(
                "produce",
                lambda: tidelog_rows.produce_rows(
                    bootstrap, sizes, options.seconds, options.producers, r.say, True
                ),
            )
        if "compression" in options.sections:
            r.section(
                "compression",
                lambda: tidelog_rows.compression_rows(
                    bootstrap, work / "cluster", sizes, options.seconds, options.producers, r.say
                ),
            )
        if "e2e" in options.sections:
            r.section(
                "e2e",
                lambda: tidelog_rows.e2e_rows(
                    cluster, [1000, 10_000], 5.0 if options.quick else 15.0, r.say
                ),
            )
        if "transactions" in options.sections:
            _transactions(r, bootstrap)
    finally:
        cluster.stop()
        if own_tmp:
            remove_data(work / "cluster")


def _external(r: Run, work: Path, own_tmp: bool) -> None:
    """produce (with catch-up) and e2e on the cluster the user named."""
    from tidelog.bench.external import E2E_RATES

    options = r.options
    cluster = options.external
    assert cluster is not None
    r.info["external_cluster"] = cluster.to_json()
    if "produce" in options.sections:
        r.section(
            "produce",
            lambda: cluster.produce_rows(options.sizes, options.seconds, options.producers, r.say),
        )
    if "e2e" in options.sections:
        r.section("e2e", lambda: cluster.e2e_rows(E2E_RATES, 5.0 if options.quick else 15.0, r.say))


def _transactions(r: Run, bootstrap: str) -> None:
    from tidelog.bench import transactions

    options = r.options
    r.section(
        "transactions",
        lambda: transactions.throughput_rows(bootstrap, options.seconds, options.producers, r.say),
    )
    r.section(
        "e2e read_committed",
        lambda: transactions.read_committed_e2e_rows(
            bootstrap, 5.0 if options.quick else 15.0, r.say
        ),
    )


def _peers(r: Run, work: Path, own_tmp: bool) -> None:
    options = r.options
    if "peers" not in options.sections:
        return
    from tidelog.bench import peers

    for name in options.peers:
        r.section(
            f"peer {name}",
            lambda name=name: peers.run_peer(  # type: ignore[misc]
                name,
                work / name,
                list(options.sizes),
                options.seconds,
                options.producers,
                r.say,
                r.skipped,
                options.launcher.free_port,
            ),
        )


def _failover(r: Run, work: Path, own_tmp: bool) -> None:
    from tidelog.bench import tidelog_rows

    options = r.options
    if "failover" not in options.sections:
        return
    r.section(
        "failover",
        lambda: (
            tidelog_rows.failover_rows(
                options.launcher.cluster,
                work / "failover",
                options.failover_partitions,
                options.scale_partitions,
                5.0 if options.quick else 10.0,
                r.say,
                r.rows,
            )
            and []
        ),
    )
    if own_tmp:
        remove_data(work / "failover")


def _cleaner(r: Run, work: Path, own_tmp: bool) -> None:
    if "cleaner" not in r.options.sections:
        return
    from tidelog.bench import cleaner

    r.section("cleaner", lambda: cleaner.cleaner_rows(work / "cleaner", r.say))


def _zones(r: Run, work: Path, own_tmp: bool) -> None:
    options = r.options
    if "zones" not in options.sections:
        return
    from tidelog.bench import zones

    r.section(
        "zones",
        lambda: zones.zone_rows(
            options.launcher.cluster,
            work / "zones",
            options.seconds,
            options.producers,
            r.say,
            own_tmp=own_tmp,
        ),
    )


def _metrics(r: Run, work: Path, own_tmp: bool) -> None:
    options = r.options
    if "metrics" not in options.sections:
        return
    from tidelog.bench import metrics

    sizes = list(options.sizes)
    launch = options.launcher.cluster
    # Clusters of its own (metrics off, then on), one at a time.
    r.section(
        "metrics",
        lambda: metrics.on_off_rows(
            work,
            [s for s in sizes if s <= 1024] or sizes,
            options.seconds,
            options.producers,
            r.say,
            launch=launch,
        ),
    )
    if options.scale_partitions > 0:  # replicas per broker (quick: skipped)
        r.section(
            "metrics scrape",
            lambda: metrics.scrape_cost_rows(launch, work, r.say, options.scale_partitions),
        )


def _security(r: Run, work: Path, own_tmp: bool) -> None:
    options = r.options
    if "security" not in options.sections:
        return
    from tidelog.bench import security

    # Two clusters, one after the other, and last: the rows above run in the same
    # conditions whether this section runs or not.
    r.section(
        "security",
        lambda: (
            security.security_rows(
                options.launcher,
                work,
                security.SIZES,
                options.seconds,
                options.producers,
                5.0 if options.quick else 15.0,
                r.say,
                r.rows,
                remove=own_tmp,
            )
            and []
        ),
    )


def _spark(r: Run, work: Path, own_tmp: bool) -> None:
    options = r.options
    if "spark" not in options.sections:
        return
    from tidelog.bench import spark

    r.section(
        "spark",
        lambda: spark.spark_rows(options.launcher.cluster, work, r.say, quick=options.quick),
    )
