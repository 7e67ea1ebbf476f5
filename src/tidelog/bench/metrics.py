"""``--only metrics``: what the Prometheus metrics cost (issue 22, docs/metrics.md).

1. Throughput with metrics on and off, in one run: the produce rows' RF=3 acks=all shape
   (3 partitions, min.insync.replicas=2, ``produce_worker``) on a three-broker cluster
   without ``metrics.listener``, then on one with it set and every broker scraped once a
   second by a thread doing HTTP GETs (what Prometheus does). Each cluster is new and the
   page cache settled (``settle``) before every row; the "on" rows carry the ratio of
   their records/s to the "off" row of the same size just before. Two rounds (off, on,
   off, on) by default.
2. Scrape cost at scale: a broker hosting ``SCRAPE_REPLICAS`` replicas (one broker with
   that many RF=1 partitions, and three brokers with a third as many RF=3 partitions, each
   then hosting as many), scraped ``SCRAPES`` times one after the other; the figures are
   the client-side time of a whole GET (the collectors, the text, the transfer) and the
   answer's size.
"""

# Optional dependencies (the bench extra) load lazily.

from __future__ import annotations

import re
import statistics
import threading
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tidelog.bench.common import Row, remove_data, settle
from tidelog.bench.kafka import perf_test_line, produce_worker, run_parallel, summarise_produce
from tidelog.bench.launch import Cluster, ClusterFactory
from tidelog.bench.tidelog_rows import CLUSTER_OVERRIDES, create_topic

Say = Callable[[str], None]

METRICS_ON = {"metrics.listener": "http://127.0.0.1:0"}
#: Seconds between two scrapes of one broker by the scraper thread.
SCRAPE_INTERVAL_S = 1.0
#: Replicas per broker for the scrape cost (issue 22: "5,000 replicas per broker").
SCRAPE_REPLICAS = 5000
SCRAPES = 20
#: Partitions per topic created for the scrape cost.
TOPIC_PARTITIONS = 1000
_SERVED = re.compile(r"metrics served on http://127\.0\.0\.1:(\d+)/metrics")


def metrics_ports(cluster: Cluster, timeout_s: float = 30.0) -> list[int]:
    """Each broker's metrics port, from its log line (``metrics.listener`` port 0)."""
    state = cluster.state
    assert state is not None
    deadline = time.monotonic() + timeout_s
    ports: list[int] = []
    for info in state.brokers:
        while True:
            found = _SERVED.findall(info.output_path.read_text(errors="replace"))
            if found:
                ports.append(int(found[-1]))
                break
            if time.monotonic() > deadline:
                raise RuntimeError(f"broker {info.broker_id}: no 'metrics served on' line")
            time.sleep(0.2)
    return ports


def get_metrics(port: int) -> tuple[float, int]:
    """One scrape: (seconds the GET took, bytes of the answer)."""
    start = time.perf_counter()
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30) as answer:
        body = answer.read()
    return time.perf_counter() - start, len(body)


class Scraper:
    """A thread scraping every port once per ``interval_s``, like a Prometheus server."""

    def __init__(self, ports: list[int], interval_s: float = SCRAPE_INTERVAL_S) -> None:
        self.ports = ports
        self.interval_s = interval_s
        self.seconds: list[float] = []
        self.failures = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="scraper", daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            started = time.monotonic()
            for port in self.ports:
                try:
                    took, _size = get_metrics(port)
                    self.seconds.append(took)
                except OSError:
                    self.failures += 1
            self._stop.wait(max(0.0, self.interval_s - (time.monotonic() - started)))

    def __enter__(self) -> Scraper:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stop.set()
        self._thread.join()


def on_off_rows(
    work: Path,
    sizes: list[int],
    seconds: float,
    producers: int,
    say: Say,
    *,
    launch: ClusterFactory,
    rounds: int = 2,
) -> list[Row]:
    """Rule 1, ``rounds`` times off then on (a drift of the machine over the run shows
    as rounds that disagree)."""
    rows: list[Row] = []
    off: dict[int, float] = {}
    for round_, mode in [(n + 1, m) for n in range(rounds) for m in ("off", "on")]:
        directory = work / f"metrics-{mode}-{round_}"
        overrides = {**CLUSTER_OVERRIDES, **(METRICS_ON if mode == "on" else {})}
        cluster = launch(directory, brokers=3, overrides=overrides).start(timeout_s=120)
        try:
            bootstrap = cluster.bootstrap_servers
            ports = metrics_ports(cluster) if mode == "on" else []
            for size in sizes:
                topic = f"metrics-{mode}-{round_}-{size}"
                partitions = 3
                create_topic(bootstrap, topic, partitions, 3, min_isr=2)
                args = [
                    (bootstrap, topic, size, seconds, "all", list(range(partitions)))
                    for _ in range(producers)
                ]
                settled = settle()
                with Scraper(ports) as scraper:
                    results = run_parallel(produce_worker, args)
                values = summarise_produce(results, size)
                values.update(
                    record_bytes=size,
                    partitions=partitions,
                    producers=producers,
                    settled=settled,
                    metrics=mode,
                    round=round_,
                    scrapes=len(scraper.seconds),
                    scrape_failures=scraper.failures,
                )
                if scraper.seconds:
                    values["scrape_ms_median"] = statistics.median(scraper.seconds) * 1000
                if mode == "off":
                    off[size] = values["records_per_s"]
                elif off.get(size):
                    values["ratio_to_off"] = values["records_per_s"] / off[size]
                row = Row(
                    "metrics",
                    "tidelog",
                    f"RF=3 acks=all {_size(size)} metrics {mode} (round {round_})",
                )
                row.values = values
                row.note = "min.insync.replicas=2; on: every broker scraped once a second"
                rows.append(row)
                ratio = values.get("ratio_to_off")
                say(
                    f"metrics {mode} {_size(size)} round {round_}: {perf_test_line(values)}"
                    + (f" (x{ratio:.3f} of off)" if ratio else "")
                )
        finally:
            cluster.stop()
            remove_data(directory)
    return rows


def scrape_cost_rows(
    launch: ClusterFactory,
    work: Path,
    say: Say,
    replicas: int = SCRAPE_REPLICAS,
    setups: tuple[tuple[int, int], ...] = ((1, 1), (3, 3)),
) -> list[Row]:
    """Rule 2; ``setups``: (brokers, replication factor) pairs."""
    rows: list[Row] = []
    for brokers, rf in setups:
        partitions = replicas * brokers // rf
        directory = work / f"metrics-scrape-{brokers}"
        overrides = {**CLUSTER_OVERRIDES, **METRICS_ON, "min.insync.replicas": "1"}
        cluster = launch(directory, brokers=brokers, overrides=overrides).start(timeout_s=120)
        try:
            ports = metrics_ports(cluster)
            # Topics of at most TOPIC_PARTITIONS partitions: one CreateTopics of 5,000 takes
            # longer than the admin client waits for an answer on a busy machine.
            left, n = partitions, 0
            while left > 0:
                chunk = min(left, TOPIC_PARTITIONS)
                create_topic(
                    cluster.bootstrap_servers, f"scrape-{n}", chunk, rf, min_isr=1, timeout_s=600
                )
                left -= chunk
                n += 1
            time.sleep(5.0)  # the followers' first fetches
            took: list[float] = []
            size = 0
            for _ in range(SCRAPES):
                for port in ports:
                    seconds, size = get_metrics(port)
                    took.append(seconds)
            took.sort()
            values: dict[str, Any] = {
                "brokers": brokers,
                "partitions": partitions,
                "rf": rf,
                "replicas_per_broker": partitions * rf // brokers,
                "scrapes": len(took),
                "scrape_ms_median": statistics.median(took) * 1000,
                "scrape_ms_p95": took[int(len(took) * 0.95) - 1] * 1000,
                "scrape_ms_max": took[-1] * 1000,
                "answer_bytes": size,
            }
            workload = f"{brokers} broker(s), {partitions} partitions RF={rf}"
            rows.append(Row("metrics scrape", "tidelog", workload, values))
            say(
                f"scrape of {values['replicas_per_broker']} replicas ({workload}): median "
                f"{values['scrape_ms_median']:.0f} ms, p95 {values['scrape_ms_p95']:.0f} ms, "
                f"{size / 1e6:.1f} MB"
            )
        finally:
            cluster.stop()
            remove_data(directory)
    return rows


def markdown(rows: list[dict[str, Any]], scrape: list[dict[str, Any]]) -> list[str]:
    """The report's section (``report.write_markdown``)."""
    out: list[str] = []
    if rows:
        out += [
            "## Metrics on and off (RF=3 acks=all; on: scraped every second)",
            "",
            "| workload | records/s | MB/s | p50 ms | p99 ms | on ÷ off | scrapes | load |",
            "|---|---:|---:|---:|---:|---:|---:|---|",
        ]
        for r in rows:
            v = r["values"]
            lat = v.get("latency_ms", {})
            ratio = v.get("ratio_to_off")
            out.append(
                f"| {r['workload']} | {v['records_per_s']:,.0f} | {v['mb_per_s']:.1f} | "
                f"{lat.get('p50', 0):.1f} | {lat.get('p99', 0):.1f} | "
                f"{'' if ratio is None else f'{ratio:.3f}'} | {v.get('scrapes', 0)} | "
                f"{' '.join(f'{x:.2f}' for x in r['load_average'])} |"
            )
        out.append("")
    if scrape:
        out += [
            "## Scrape cost",
            "",
            "| cluster | replicas per broker | median ms | p95 ms | max ms | answer |",
            "|---|---:|---:|---:|---:|---:|",
        ]
        for r in scrape:
            v = r["values"]
            out.append(
                f"| {r['workload']} | {v['replicas_per_broker']} | "
                f"{v['scrape_ms_median']:.0f} | {v['scrape_ms_p95']:.0f} | "
                f"{v['scrape_ms_max']:.0f} | {v['answer_bytes'] / 1e6:.1f} MB |"
            )
        out.append("")
    return out


def _size(size: int) -> str:
    return f"{size // 1024} KiB" if size >= 1024 else f"{size} B"
