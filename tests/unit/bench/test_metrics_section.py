"""`tidelog bench --only metrics`: the section is selectable, and the report shows the
on ÷ off table and the scrape cost from hand-made rows (no cluster)."""

from __future__ import annotations

from typing import Any

from tidelog.bench import metrics, runner
from tidelog.bench.report import render_markdown
from tidelog.cli.bench import SECTION_NAMES


def _row(section: str, workload: str, values: dict[str, Any]) -> dict[str, Any]:
    return {
        "section": section,
        "system": "tidelog",
        "workload": workload,
        "values": values,
        "note": "",
        "load_average": [1.5, 1.0, 0.5],
    }


def _produce(mode: str, records_per_s: float, ratio: float | None = None) -> dict[str, Any]:
    values: dict[str, Any] = {
        "records_per_s": records_per_s,
        "mb_per_s": records_per_s * 100 / 1e6,
        "latency_ms": {"p50": 12.5, "p99": 80.25},
        "scrapes": 45 if mode == "on" else 0,
    }
    if ratio is not None:
        values["ratio_to_off"] = ratio
    return _row("metrics", f"RF=3 acks=all 100 B metrics {mode} (round 1)", values)


def test_metrics_is_a_section() -> None:
    assert "metrics" in SECTION_NAMES
    assert "metrics" in runner.SECTIONS


def test_the_report_shows_on_and_off_and_the_scrape_cost() -> None:
    rows = [
        _produce("off", 200_000),
        _produce("on", 190_000, 0.95),
        _row(
            "metrics scrape",
            "1 broker(s), 5000 partitions RF=1",
            {
                "replicas_per_broker": 5000,
                "scrape_ms_median": 130.2,
                "scrape_ms_p95": 259.6,
                "scrape_ms_max": 268.0,
                "answer_bytes": 1_348_345,
            },
        ),
    ]
    lines = metrics.markdown(rows[:2], rows[2:])
    assert lines[0] == "## Metrics on and off (RF=3 acks=all; on: scraped every second)"
    assert (
        "| RF=3 acks=all 100 B metrics off (round 1) | 200,000 | 20.0 | 12.5 | 80.2 |  | 0 |"
        in ("\n".join(lines))
    )
    assert (
        "| RF=3 acks=all 100 B metrics on (round 1) | 190,000 | 19.0 | 12.5 | 80.2 | 0.950 | 45 |"
        in ("\n".join(lines))
    )
    assert "| 1 broker(s), 5000 partitions RF=1 | 5000 | 130 | 260 | 268 | 1.3 MB |" in lines
    data = {
        "rows": rows,
        "machine": {
            "started_utc": "2026-11-26T07:25:24Z",
            "cpus": 2,
            "cpu_model": "AMD EPYC",
            "memory_bytes": 2**34,
            "kernel": "6.18",
            "python": "3.11.7",
        },
        "command": "tidelog bench --only metrics",
        "elapsed_s": 234.0,
        "load_at_start": [0.3, 0.3, 0.3],
        "load_at_end": [3.0, 3.0, 3.0],
        "skipped": [],
    }
    text = render_markdown(data)
    assert "## Metrics on and off" in text
    assert "## Scrape cost" in text
