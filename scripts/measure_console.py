"""Measure the web console with many partitions (docs/console.md, "Measured").

Starts ZooKeeper and three real brokers (the test harness), creates one topic of
``--partitions`` partitions with replication factor 3, and measures, with Debian's chromium
driven by Playwright:

- snapshot build time on a broker (``build_ms`` of ``/api/snapshot``), and its JSON size;
- page load: ``goto /console`` until every partition's row is rendered with its LEO/HW;
- update latency: a record produced to one partition until the page shows its new LEO
  (end to end: produce ack, the SSE tick, the DescribeQuorum, the render);
- the browser's time to render one snapshot (JS, measured in the page).

    .venv/bin/python scripts/measure_console.py --partitions 1000
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from confluent_kafka import Producer
from playwright.sync_api import sync_playwright
from tests.harness import BrokerCluster, wait_until
from tests.integration.cluster.helpers import create_topic
from tests.integration.cluster.test_console import CHROMIUM, CHROMIUM_ARGS
from tests.integration.cluster.test_metrics import metrics_port

from tidelog.testing.zookeeper import ZooKeeperProcess


def fetch(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=30) as answer:
        return bytes(answer.read())


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--partitions", type=int, default=1000)
    parser.add_argument("--samples", type=int, default=10)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="console-measure-"))
    zk = ZooKeeperProcess(work / "zk", tick_time_ms=250)
    zk.start()
    try:
        cluster = BrokerCluster(
            work / "cluster",
            f"{zk.connect_string}/measure",
            3,
            {"metrics.listener": "http://127.0.0.1:0"},
        ).start()
        try:
            return measure(cluster, args.partitions, args.samples, work)
        finally:
            cluster.stop()
    finally:
        zk.stop()


def measure(cluster: BrokerCluster, partitions: int, samples: int, work: Path) -> int:
    ports = {b.broker_id: metrics_port(b) for b in cluster.brokers}
    t0 = time.monotonic()
    create_topic(cluster, "wide", partitions=partitions, rf=3)
    base = f"http://127.0.0.1:{ports[0]}"

    def all_known() -> bool:
        snap = json.loads(fetch(f"{base}/api/snapshot"))
        rows = [p for t in snap["topics"] if t["name"] == "wide" for p in t["partitions"]]
        return len(rows) == partitions and all(
            p["status"] == "ok" and len(p["isr"]) == 3 for p in rows
        )

    wait_until(all_known, 300.0, f"{partitions} partitions with leaders and full ISRs")
    print(f"topic of {partitions} partitions ready in {time.monotonic() - t0:.1f} s")
    builds, sizes = [], []
    for _ in range(samples):
        time.sleep(0.6)  # past the snapshot cache (0.5 s)
        body = fetch(f"{base}/api/snapshot")
        builds.append(json.loads(body)["build_ms"])
        sizes.append(len(body))
    print(
        f"snapshot build: median {statistics.median(builds):.1f} ms, "
        f"max {max(builds):.1f} ms; JSON {statistics.median(sizes) / 1024:.0f} KiB"
    )
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        loads = []
        for _ in range(3):
            started = time.monotonic()
            page.goto(f"{base}/console")
            page.wait_for_function(
                f"() => document.querySelectorAll('.partition').length >= {partitions}"
                " && document.querySelector('.partition').dataset.hw !== ''",
                timeout=120_000,
            )
            loads.append(time.monotonic() - started)
        print(
            f"page load (to {partitions} rendered rows): " + ", ".join(f"{s:.2f} s" for s in loads)
        )
        render_ms = page.evaluate(
            """() => new Promise((resolve) => {
                const times = [];
                const es = new EventSource('/api/events');
                es.addEventListener('snapshot', (m) => {
                    const t = performance.now();
                    onSnapshot(JSON.parse(m.data));
                    times.push(performance.now() - t);
                    if (times.length >= 5) { es.close(); resolve(times); }
                });
            })"""
        )
        print(
            "browser render of one snapshot (parse + DOM): "
            f"median {statistics.median(render_ms):.0f} ms, max {max(render_ms):.0f} ms"
        )
        latencies = []
        producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all"})
        for i in range(samples):
            p = (i * 37) % partitions
            tp = f"wide-{p}"
            before = int(page.get_attribute(f'.partition[data-tp="{tp}"]', "data-hw") or 0)
            producer.produce("wide", b"x", partition=p)
            assert producer.flush(30) == 0
            started = time.monotonic()  # acked: the leader's HW has moved
            page.wait_for_function(
                f"""() => {{
                    const el = document.querySelector('.partition[data-tp="{tp}"]');
                    return el && Number(el.dataset.hw || 0) > {before};
                }}""",
                timeout=60_000,
            )
            latencies.append(time.monotonic() - started)
        print(
            "update latency (produce acked -> new HW on the page): "
            f"median {statistics.median(latencies) * 1000:.0f} ms, "
            f"max {max(latencies) * 1000:.0f} ms"
        )
        page.screenshot(path=str(work / "console-wide.png"))
        print(f"screenshot: {work / 'console-wide.png'}")
        browser.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
