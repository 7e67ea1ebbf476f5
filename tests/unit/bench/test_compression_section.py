"""`tidelog bench --only compression`: its payloads compress as real events do, and its
rows get their own table (not the produce table, the peer ratios or the issue-8 targets)."""

from __future__ import annotations

import cramjam
import lz4.frame

from tidelog.bench import runner, tidelog_rows
from tidelog.bench.kafka import text_payloads
from tidelog.bench.report import render_markdown
from tidelog.cli.bench import SECTION_NAMES


def test_section_is_selectable() -> None:
    assert "compression" in SECTION_NAMES
    assert set(SECTION_NAMES) == set(runner.SECTIONS)
    assert tidelog_rows.COMPRESSION_CODECS == ("none", "lz4", "zstd")


def test_text_payloads_are_distinct_and_compress_like_events() -> None:
    for size in (100, 1024, 65536):
        values = text_payloads(size, seed=1)
        assert all(len(v) == size for v in values)
        assert len(set(values)) == len(values) >= 16
        batch = b"".join(values[: max(1, 1_000_000 // size)])
        lz4_ratio = len(lz4.frame.compress(batch)) / len(batch)
        zstd_ratio = len(bytes(cramjam.zstd.compress(batch, level=3))) / len(batch)
        assert 0.2 < zstd_ratio < lz4_ratio < 0.7  # compressible, far from one record repeated
    assert text_payloads(100, seed=1) == text_payloads(100, seed=1)


def _row(codec: str, records_per_s: float) -> dict[str, object]:
    return {
        "section": "compression",
        "system": "tidelog",
        "workload": f"RF=3 acks=all {codec} 1 KiB",
        "values": {
            "records_per_s": records_per_s,
            "mb_per_s": records_per_s * 1024 / 2**20,
            "record_bytes": 1024,
            "stored_bytes_per_record": 480.0,
            "latency_ms": {"p50": 5.0, "p99": 20.0, "p99.9": 40.0},
        },
        "note": "text records, min.insync.replicas=2",
        "load_average": [0.5, 0.5, 0.5],
    }


def test_report_has_a_compression_table() -> None:
    data = {
        "command": "tidelog bench --only compression",
        "elapsed_s": 100.0,
        "load_at_start": [0.1, 0.1, 0.1],
        "load_at_end": [1.0, 1.0, 1.0],
        "machine": {
            "started_utc": "2026-11-26T04:00:00Z",
            "cpus": 2,
            "cpu_model": "cpu",
            "memory_bytes": 2**30,
            "kernel": "k",
            "python": "3.11",
        },
        "rows": [_row("none", 10_000.0), _row("lz4", 8_000.0)],
        "skipped": [],
    }
    text = render_markdown(data)
    assert "## Compressed produce (RF=3 acks=all, text records)" in text
    assert (
        "| RF=3 acks=all lz4 1 KiB | 8,000 | 7.8 | 5.0 | 20.0 | 40.0 | 480 | 0.50 0.50 0.50 |"
        in text
    )
    assert "## Produce throughput" not in text
    assert "## Targets" not in text
