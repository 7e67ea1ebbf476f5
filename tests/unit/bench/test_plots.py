"""``tidelog bench``'s figures (``tidelog.bench.plots``): drawn from recorded rows, written as
PNGs beside ``results.md``, linked under their section's table; a missing matplotlib leaves
the report without figures, and says so."""

from __future__ import annotations

import builtins
import json
from pathlib import Path
from typing import Any

import pytest

from tidelog.bench import plots, report

PNG = b"\x89PNG\r\n\x1a\n"


def _row(section: str, system: str, workload: str, values: dict[str, Any]) -> dict[str, Any]:
    return {
        "section": section,
        "system": system,
        "workload": workload,
        "values": values,
        "note": "",
        "load_average": [0.5, 0.5, 0.5],
    }


def _lat(p50: float) -> dict[str, float]:
    return {"p50": p50, "p99": p50 * 4, "p99.9": p50 * 8, "max": p50 * 10}


def _produce(system: str, workload: str, size: int, rate: float) -> dict[str, Any]:
    values = {
        "records_per_s": rate,
        "mb_per_s": rate * size / 1e6,
        "record_bytes": size,
        "latency_ms": _lat(5.0),
    }
    return _row("produce", system, workload, values)


def results() -> dict[str, Any]:
    """A small results.json: produce rows of tidelog and a peer, e2e, catch-up, failover."""
    failover = {
        "partitions_led_by_victim": 333,
        "leaders_s": 5.1,
        "all_produced_s": 5.6,
        "process_exit_s": 0.01,
        "zookeeper_session_timeout_s": 6.0,
    }
    return {
        "command": "tidelog bench",
        "elapsed_s": 600.0,
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
        "rows": [
            _produce("tidelog", "RF=3 acks=all 100 B", 100, 900_000.0),
            _produce("tidelog", "RF=3 acks=all 64 KiB", 65536, 4_000.0),
            _produce("tidelog", "RF=1 acks=1 100 B", 100, 1_200_000.0),
            _produce("NATS JetStream R3", "R3 publish_async 100 B", 100, 40_000.0),
            _row(
                "catch-up",
                "tidelog",
                "RF=3 backlog 100 B",
                {"records": 10, "records_per_s": 2e6, "mb_per_s": 200.0, "record_bytes": 100},
            ),
            _row(
                "e2e",
                "tidelog",
                "RF=3 acks=all 1000 rec/s",
                {"latency_ms": _lat(2.0), "received": 10, "sent": 10},
            ),
            _row("failover", "tidelog", "SIGKILL of a broker, 1000 partitions RF=3", failover),
            _row(
                "failover",
                "tidelog",
                "SIGTERM (controlled shutdown) of a broker, 1000 partitions RF=3",
                {**failover, "leaders_s": None, "all_produced_s": None},
            ),
        ],
        "skipped": [],
    }


def test_draw_writes_a_png_per_figure(tmp_path: Path) -> None:
    charts = plots.draw(results(), tmp_path)
    assert [(c.section, c.file) for c in charts] == [
        ("produce", "produce_mb_s.png"),
        ("produce", "produce_records_s.png"),
        ("produce", "produce_latency.png"),
        ("e2e", "e2e_latency.png"),
        ("catch-up", "catch_up_records_s.png"),
        ("failover", "failover.png"),
    ]
    for c in charts:
        data = (tmp_path / c.file).read_bytes()
        assert data.startswith(PNG), c.file
        assert len(data) > 5_000, c.file
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(c.file for c in charts)


def test_no_rows_no_figures(tmp_path: Path) -> None:
    data = results()
    data["rows"] = [r for r in data["rows"] if r["section"] == "failover"]
    assert [c.file for c in plots.draw(data, tmp_path)] == ["failover.png"]
    data["rows"] = []
    assert plots.draw(data, tmp_path) == []


def test_the_report_links_each_figure_under_its_section(tmp_path: Path) -> None:
    source = tmp_path / "results.json"
    source.write_text(json.dumps(results()), encoding="utf-8")
    said: list[str] = []
    charts = report.write_report(source, tmp_path, say=said.append)
    assert said == []
    text = (tmp_path / "results.md").read_text(encoding="utf-8")
    for c in charts:
        link = f"![{c.title}]({c.file})"
        assert text.count(link) == 1
        assert (tmp_path / c.file).is_file()
    # Under its own section: after that section's heading, before the next one.
    produce = text.index("## Produce throughput")
    e2e = text.index("## End-to-end latency")
    assert produce < text.index("(produce_latency.png)") < text.index("## Consumer catch-up")
    assert e2e < text.index("(e2e_latency.png)") < text.index("## Failover")
    assert text.index("## Failover") < text.index("(failover.png)")
    # The report without figures is the same text less the links.
    bare = report.render_markdown(results())
    linked = [line for line in text.splitlines() if line.startswith("![")]
    assert len(linked) == len(charts)
    assert "![" not in bare


def test_without_matplotlib_the_report_is_written_and_says_why(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_import = builtins.__import__

    def no_matplotlib(name: str, *args: Any, **kwargs: Any) -> Any:
        if name == "matplotlib" or name.startswith("matplotlib."):
            raise ImportError("No module named 'matplotlib'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_matplotlib)
    source = tmp_path / "results.json"
    source.write_text(json.dumps(results()), encoding="utf-8")
    said: list[str] = []
    assert report.write_report(source, tmp_path, say=said.append) == []
    assert said == [
        "no charts: matplotlib is not installed (No module named 'matplotlib'); install the "
        "bench extra: pip install -e '.[bench]'"
    ]
    text = (tmp_path / "results.md").read_text(encoding="utf-8")
    assert "## Produce throughput" in text
    assert "![" not in text
    with pytest.raises(plots.PlotsUnavailableError):
        report.write_charts(source, tmp_path)


def test_charts_off_draws_nothing(tmp_path: Path) -> None:
    source = tmp_path / "results.json"
    source.write_text(json.dumps(results()), encoding="utf-8")
    assert report.write_report(source, tmp_path, charts=False) == []
    assert sorted(p.name for p in tmp_path.iterdir()) == ["results.json", "results.md"]


def test_figures_of_a_section_without_a_table_are_still_linked(tmp_path: Path) -> None:
    data = results()
    data["rows"] = [
        _row("newsection", "tidelog", f"RF=3 acks=all 100 B {mode}", {"records_per_s": rate})
        for mode, rate in (("a", 1e6), ("b", 0.98e6))
    ]
    source = tmp_path / "results.json"
    source.write_text(json.dumps(data), encoding="utf-8")
    charts = [plots.Chart("newsection", "newsection.png", "New")]
    text = report.render_markdown(data, charts)
    assert text.split("## More figures", 1)[1].startswith("\n\n![New](newsection.png)\n")


def test_acks_per_second_sums_producers_per_whole_second() -> None:
    from array import array

    from tidelog.bench.kafka import acks_per_second

    def result(samples: list[tuple[float, int]]) -> dict[str, Any]:
        raw = array("d")
        for at, count in samples:
            raw.extend((at, float(count)))
        return {"progress": raw.tobytes()}

    first = result([(0, 0), (0.5, 10), (1.0, 20), (1.7, 35), (2.2, 50), (3.0, 60)])
    second = result([(0, 0), (1.1, 5), (2.5, 9)])
    assert acks_per_second([first, second]) == [20, 20, 25]
    assert acks_per_second([{"latencies": b""}]) == []


def test_produce_rows_with_a_per_second_series_get_a_throughput_over_time_figure(
    tmp_path: Path,
) -> None:
    data = results()
    data["rows"][0]["values"]["acks_per_second"] = [100, 250, 240, 10]
    files = [c.file for c in plots.draw(data, tmp_path)]
    assert "produce_over_time.png" in files
    assert (tmp_path / "produce_over_time.png").stat().st_size > 0
    assert "produce_over_time.png" not in [c.file for c in plots.draw(results(), tmp_path)]
