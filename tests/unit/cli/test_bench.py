"""`tidelog bench`: argument errors the user sees, and the report built from results."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tidelog.bench.common import Latency, percentile
from tidelog.bench.report import render_markdown
from tidelog.cli.main import main


def test_unknown_section_is_refused_with_the_list_of_sections(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["bench", "--only", "produce,nope", "--output", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert "unknown section(s): nope" in err
    assert "limits, produce, e2e, peers, failover" in err
    assert not (tmp_path / "results.json").exists()


def test_nearest_rank_percentiles() -> None:
    values = [float(v) for v in range(1, 1001)]  # 1..1000
    assert percentile(values, 0.5) == 500.0
    assert percentile(values, 0.99) == 990.0
    assert percentile(values, 0.999) == 999.0
    assert percentile([], 0.5) == 0.0
    lat = Latency.of_seconds([0.002, 0.001, 0.003])
    assert (lat.count, lat.p50_ms, lat.max_ms) == (3, 2.0, 3.0)


def _row(section: str, system: str, workload: str, values: dict[str, Any]) -> dict[str, Any]:
    return {
        "section": section,
        "system": system,
        "workload": workload,
        "values": values,
        "note": "",
        "load_average": [1.0, 1.0, 1.0],
    }


def test_report_states_targets_met_and_missed_and_what_was_not_measured() -> None:
    lat = {"avg": 1.0, "p50": 1.0, "p95": 2.0, "p99": 3.0, "p99.9": 4.0, "max": 5.0}
    data = {
        "command": "tidelog bench",
        "elapsed_s": 10.0,
        "load_at_start": [1.0, 1.0, 1.0],
        "load_at_end": [2.0, 2.0, 2.0],
        "machine": {
            "started_utc": "2026-11-22T00:00:00Z",
            "cpus": 2,
            "cpu_model": "cpu",
            "memory_bytes": 2**30,
            "kernel": "k",
            "python": "3.11",
        },
        "rows": [
            _row(
                "produce",
                "tidelog",
                "RF=3 acks=all 100 B",
                {
                    "records_per_s": 350_000.0,
                    "mb_per_s": 35.0,
                    "record_bytes": 100,
                    "latency_ms": lat,
                },
            ),
            _row(
                "produce",
                "tidelog",
                "RF=3 acks=all 64 KiB",
                {
                    "records_per_s": 2_000.0,
                    "mb_per_s": 150.0,
                    "record_bytes": 65536,
                    "latency_ms": lat,
                },
            ),
            _row(
                "limits",
                "machine",
                "same bytes written 3x to one disk by three processes in parallel",
                {"payload_mb_s": 300.0, "disk_mb_s": 900.0},
            ),
            _row(
                "limits",
                "machine",
                "same bytes written 3x to one disk by three processes in parallel (page cache "
                "kept to the last 64 MiB as a broker does)",
                {"payload_mb_s": 1200.0, "disk_mb_s": 3600.0},
            ),
            _row(
                "produce",
                "NATS JetStream R3",
                "R3 publish_async 100 B",
                {
                    "records_per_s": 500_000.0,
                    "mb_per_s": 50.0,
                    "record_bytes": 100,
                    "latency_ms": lat,
                },
            ),
        ],
        "skipped": [{"section": "peer rabbitmq", "reason": "apt-get install failed"}],
    }
    text = render_markdown(data)
    assert "| acks=all RF=3 100 B ≥ 300,000 records/s | 350,000 | yes |" in text
    assert "| ahead of NATS JetStream R3 at 100 B | 35.0 vs 50.0 MB/s (0.70×) | **no** |" in text
    assert "- **peer rabbitmq**: apt-get install failed" in text
    assert (
        "| acks=all RF=3 64 KiB ≥ 200 MB/s | 150.0 MB/s (50% of this run's three-copy ceiling,"
        " 300; 12% of this run's three-copy ceiling written as the brokers write, 1,200)"
        " | **no** |" in text
    )
    assert "| same bytes written 3x to one disk by three processes in parallel | 300 MB/s" in text


def test_a_writing_row_waits_until_freed_memory_has_settled(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from tidelog.bench import common

    slept: list[float] = []
    synced: list[bool] = []
    clock = [1000.0]
    monkeypatch.setattr(common.time, "monotonic", lambda: clock[0])
    monkeypatch.setattr(common.time, "sleep", slept.append)
    monkeypatch.setattr(common.os, "sync", lambda: synced.append(True))
    monkeypatch.setattr(common, "_last_freed", 0.0)

    assert common.settle() == {"sync_s": 0.0, "waited_s": 0.0}  # nothing freed yet
    common.note_freed()
    clock[0] += 12.0
    assert common.settle()["waited_s"] == common.SETTLE_AFTER_FREE_S - 12.0
    clock[0] += common.SETTLE_AFTER_FREE_S
    assert common.settle()["waited_s"] == 0.0  # long enough ago
    assert slept == [common.SETTLE_AFTER_FREE_S - 12.0, 0.0]
    assert synced == [True, True, True]  # dirty pages written back before every row
