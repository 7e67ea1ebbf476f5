"""`tidelog bench --only zones`: the section is selectable, and the report's table shows each
row's rate, tail latency and the share of bytes from the broker meant to serve it (no
cluster: hand-made rows)."""

from __future__ import annotations

from typing import Any

from tidelog.bench import runner, zones
from tidelog.bench.report import render_markdown
from tidelog.cli.bench import SECTION_NAMES


def _row(workload: str, values: dict[str, Any]) -> dict[str, Any]:
    return {
        "section": "zones",
        "system": "tidelog",
        "workload": workload,
        "values": values,
        "note": "",
        "load_average": [1.0, 1.0, 1.0],
    }


def test_zones_is_a_section() -> None:
    assert "zones" in SECTION_NAMES
    assert "zones" in runner.SECTIONS


def test_the_table_shows_rates_latency_and_the_serving_share() -> None:
    rows = [
        _row(
            "produce RF=3 acks=all 100 B, no quota set",
            {"records_per_s": 400_000.0, "mb_per_s": 40.0, "latency_ms": {"p99": 12.25}},
        ),
        _row(
            "consume 1 partition 100 B from the follower",
            {"records_per_s": 120_000.0, "mb_per_s": 12.0, "share_from_read_from": 0.999},
        ),
    ]
    lines = zones.markdown(rows)
    assert lines[0] == "## Quotas and follower reads (`--only zones`)"
    assert "| produce RF=3 acks=all 100 B, no quota set | 400,000 | 40.0 | 12.2 |  |" in lines
    assert "| consume 1 partition 100 B from the follower | 120,000 | 12.0 |  | 100% |" in lines
    assert zones.markdown([]) == []


def test_the_report_includes_the_table() -> None:
    data: dict[str, Any] = {
        "rows": [
            _row(
                "consume 1 partition 100 B from the leader",
                {"records_per_s": 150_000.0, "mb_per_s": 15.0, "share_from_read_from": 1.0},
            )
        ],
        "machine": {
            "started_utc": "2026-12-06T23:00:00Z",
            "cpus": 2,
            "cpu_model": "AMD EPYC",
            "memory_bytes": 2**34,
            "kernel": "6.18",
            "python": "3.11.7",
        },
        "command": "tidelog bench --only zones",
        "elapsed_s": 60.0,
        "load_at_start": [0.3, 0.3, 0.3],
        "load_at_end": [1.0, 1.0, 1.0],
        "skipped": [],
    }
    text = render_markdown(data)
    assert "## Quotas and follower reads (`--only zones`)" in text
    assert "| consume 1 partition 100 B from the leader | 150,000 | 15.0 |  | 100% |" in text


def test_the_steady_rate_leaves_out_the_first_burst() -> None:
    # 100-byte records: bursts of 100,000 records are 10 MB each. After the first burst (second
    # 1), two more arrive by second 11: 20 MB over 10 s.
    acks = [0, 100_000, 0, 0, 0, 0, 100_000, 0, 0, 0, 0, 100_000, 0]
    assert zones.steady_mb_per_s(acks, 100) == 20_000_000 / 10 / zones.MB
    assert zones.steady_mb_per_s([5, 0, 0], 100) == 0.0
    assert zones.steady_mb_per_s([], 100) == 0.0
