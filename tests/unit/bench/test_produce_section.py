"""The produce section like-for-like: tidelog's one-partition row beside the 3-partition
one (``tidelog_rows.produce_rows`` with fake workers), and how the report and its figure
show both shapes, each row's window and a client-bound row."""

from __future__ import annotations

from array import array
from typing import Any

import pytest

from tidelog.bench import plots, tidelog_rows
from tidelog.bench.common import window
from tidelog.bench.report import render_markdown

LAT = {"avg": 1.0, "p50": 1.0, "p95": 2.0, "p99": 3.0, "p99.9": 4.0, "max": 5.0}


def _worker_result(size: int, cpu_s: float) -> dict[str, Any]:
    return {
        "sent": 10,
        "acked": 10,
        "errors": 0,
        "first_errors": [],
        "unflushed": 0,
        "elapsed": 2.0,
        "cpu_s": cpu_s,
        "latencies": array("d", [0.001] * 10).tobytes(),
        "window": window(size),
        "timer": "produce() accepted the record into librdkafka's queue -> delivery report",
    }


def test_produce_rows_put_a_one_partition_row_beside_each_3_partition_row(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    topics: list[tuple[str, int, int]] = []
    runs: list[tuple[str, tuple[Any, ...]]] = []

    def create_topic(
        _bootstrap: str, name: str, partitions: int, rf: int, **_kw: Any
    ) -> tuple[float, float]:
        topics.append((name, partitions, rf))
        return 0.1, 0.2

    def run_parallel(fn: Any, args: list[tuple[Any, ...]]) -> list[dict[str, Any]]:
        runs.append((fn.__name__, args[0]))
        if fn.__name__ == "catch_up_worker":
            return [{"records": 10, "bytes": 1000, "seconds": 1.0}]
        return [_worker_result(args[0][2], cpu_s=1.9)]

    monkeypatch.setattr(tidelog_rows, "create_topic", create_topic)
    monkeypatch.setattr(tidelog_rows, "run_parallel", run_parallel)
    monkeypatch.setattr(tidelog_rows, "settle", lambda: {"sync_s": 0.0, "waited_s": 0.0})
    rows = tidelog_rows.produce_rows("b:9092", [100], 2.0, 1, lambda _s: None, True)

    assert [(r.section, r.workload) for r in rows] == [
        ("produce", "RF=3 acks=all 100 B"),
        ("catch-up", "RF=3 backlog 100 B"),
        ("produce", "RF=3 acks=all 1 partition 100 B"),
        ("produce", "RF=1 acks=1 100 B"),
    ]
    assert topics == [
        ("produce-rf3-p3-100", 3, 3),
        ("produce-rf3-p1-100", 1, 3),
        ("produce-rf1-p3-100", 3, 1),
    ]
    one = rows[2]
    assert one.values["partitions"] == 1
    assert [a for name, a in runs if name == "produce_worker"][1][4:] == ("all", [0])
    assert one.note.startswith("min.insync.replicas=2; one partition")
    assert one.values["window"] == {"bytes": 32 << 20, "records": 335_544}
    assert one.values["client_cpu"] == 0.95
    assert one.values["timer"].startswith("produce() accepted the record")


def _row(system: str, workload: str, values: dict[str, Any]) -> dict[str, Any]:
    return {
        "section": "produce",
        "system": system,
        "workload": workload,
        "values": {"record_bytes": 100, "latency_ms": LAT, **values},
        "note": "",
        "load_average": [1.0, 1.0, 1.0],
    }


def _data(rows: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "command": "tidelog bench",
        "elapsed_s": 10.0,
        "load_at_start": [1.0, 1.0, 1.0],
        "load_at_end": [1.0, 1.0, 1.0],
        "machine": {
            "started_utc": "2026-12-06T00:00:00Z",
            "cpus": 2,
            "cpu_model": "cpu",
            "memory_bytes": 2**30,
            "kernel": "k",
            "python": "3.11",
        },
        "rows": rows,
        "skipped": [],
    }


def _rows() -> list[dict[str, Any]]:
    w = window(100)
    return [
        _row(
            "tidelog",
            "RF=3 acks=all 100 B",
            {
                "records_per_s": 600_000.0,
                "mb_per_s": 60.0,
                "partitions": 3,
                "window": w,
                "client_cpu": 0.95,
                "timer": "produce() -> delivery report",
            },
        ),
        _row(
            "tidelog",
            "RF=3 acks=all 1 partition 100 B",
            {
                "records_per_s": 300_000.0,
                "mb_per_s": 30.0,
                "partitions": 1,
                "window": w,
                "client_cpu": 0.5,
                "timer": "produce() -> delivery report",
            },
        ),
        _row(
            "NATS JetStream R3",
            "R3 publish_async 100 B",
            {
                "records_per_s": 400_000.0,
                "mb_per_s": 40.0,
                "window": w,
                "client_cpu": 1.0,
                "timer": "publish_async -> PubAck",
            },
        ),
        _row("RabbitMQ Streams", "old results file 100 B", {"records_per_s": 1.0, "mb_per_s": 0.5}),
    ]


def test_the_report_marks_a_client_bound_row_and_shows_each_window() -> None:
    text = render_markdown(_data(_rows()))
    lines = text.splitlines()

    def line_of(workload: str) -> str:
        return next(ln for ln in lines if f"| {workload} |" in ln)

    window_cell = "| 32 MiB, 335,544 records |"
    assert f"{window_cell} 0.95 (client-bound) |" in line_of("RF=3 acks=all 100 B")
    assert f"{window_cell} 0.50 |" in line_of("RF=3 acks=all 1 partition 100 B")
    assert f"{window_cell} 1.00 (client-bound) |" in line_of("R3 publish_async 100 B")
    assert "| — | — |" in line_of("old results file 100 B")
    assert "at 0.9 of a core or more a row is **client-bound**" in text
    assert "- tidelog: produce() -> delivery report" in text
    assert "- NATS JetStream R3: publish_async -> PubAck" in text


def test_ratios_and_targets_set_each_peer_beside_both_tidelog_shapes() -> None:
    text = render_markdown(_data(_rows()))
    assert "- 100 B vs NATS JetStream R3: 1.50× (60.0 vs 40.0 MB/s)" in text
    assert "- 100 B vs NATS JetStream R3 (one partition each): 0.75× (30.0 vs 40.0 MB/s)" in text
    assert "| ahead of NATS JetStream R3 at 100 B | 60.0 vs 40.0 MB/s (1.50×) | yes |" in text
    assert (
        "| ahead of NATS JetStream R3 at 100 B, one partition | 30.0 vs 40.0 MB/s (0.75×) "
        "| **no** |" in text
    )


class RecordingAxes:
    """The calls ``plots._grouped_by_size`` makes, with each bar series' label."""

    def __init__(self) -> None:
        self.labels: list[str] = []
        self.heights: list[list[float]] = []

    def bar(self, _xs: Any, ys: list[float], _width: float, *, label: str) -> None:
        self.labels.append(label)
        self.heights.append(ys)

    def set_xticks(self, _ticks: Any) -> None:
        pass

    def set_xticklabels(self, _labels: Any) -> None:
        pass

    def legend(self, **_kw: Any) -> None:
        pass


def test_the_throughput_figure_draws_each_tidelog_shape_as_its_own_bars() -> None:
    ax = RecordingAxes()
    plots._grouped_by_size(ax, _rows()[:3], "mb_per_s")  # type: ignore[arg-type]
    assert ax.labels == [
        "tidelog RF=3 acks=all",
        "tidelog RF=3 acks=all 1 partition",
        "NATS JetStream R3",
    ]
    assert ax.heights == [[60.0], [30.0], [40.0]]
