"""The figures of a ``tidelog bench`` report: matplotlib PNGs beside ``results.md``.

Theory of operation:

1. Each figure is drawn from the rows of ``results.json`` alone (``report.write_report``
   gives them the loaded data), so any committed results file can be drawn again later.
   Nothing is drawn that the rows do not record: rates over the whole row, latency
   percentiles, and for produce rows that carry the per-second series
   (``acks_per_second``), throughput over time.
2. One group of figures per report section (``Chart.section``), embedded by
   ``report.render_markdown`` under that section's table with a relative link:
   produce throughput per record size with tidelog's rows (RF=3 over 3 partitions and over
   one, RF=1) beside each peer (MB/s and records/s), latency percentiles (p50/p99/p99.9,
   log scale) for each row that has them (produce, compression, end-to-end, transactions,
   security), records/s per row of the other throughput sections, and the failover times.
3. matplotlib is the ``bench`` extra's, loaded lazily with the Agg backend (no display).
   Without it ``draw`` raises ``PlotsUnavailableError`` with the reason; the report is written
   all the same, without figures (``report.write_report`` says why).
"""

# ruff: noqa: PLC0415

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure


class PlotsUnavailableError(Exception):
    """matplotlib cannot be imported (the ``bench`` extra is not installed)."""


@dataclass(frozen=True, slots=True)
class Chart:
    """One figure written: the report section it belongs under, its file name (relative
    to the report) and its alt text."""

    section: str
    file: str
    title: str


PERCENTILES = ("p50", "p99", "p99.9")
#: Sections whose rows carry ``latency_ms`` percentiles.
LATENCY_SECTIONS = ("produce", "compression", "e2e", "transactions", "security", "metrics")
#: Sections drawn as records/s per row (produce has its own figure).
THROUGHPUT_SECTIONS = ("compression", "catch-up", "transactions", "security", "metrics")


def _pyplot() -> Any:
    try:
        import matplotlib
    except ImportError as exc:
        raise PlotsUnavailableError(
            f"matplotlib is not installed ({exc}); install the bench extra: "
            "pip install -e '.[bench]'"
        ) from exc
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _slug(section: str) -> str:
    return section.replace("-", "_")


def _label(row: dict[str, Any]) -> str:
    return f"{row['system']}\n{row['workload']}"


def draw(data: dict[str, Any], directory: Path) -> list[Chart]:
    """Write every figure the rows allow into ``directory``; the charts written, in report
    order. Raises ``PlotsUnavailableError`` without matplotlib."""
    plt = _pyplot()
    rows: list[dict[str, Any]] = data["rows"]
    cpus = data.get("machine", {}).get("cpus", "?")
    charts: list[Chart] = []

    def save(fig: Figure, section: str, name: str, title: str) -> None:
        fig.tight_layout()
        fig.savefig(directory / name, dpi=100)
        plt.close(fig)
        charts.append(Chart(section, name, title))

    def section(name: str) -> list[dict[str, Any]]:
        return [r for r in rows if r["section"] == name]

    if prod := [r for r in section("produce") if "record_bytes" in r["values"]]:
        for key, name, ylabel in (
            ("mb_per_s", "produce_mb_s.png", "MB/s acknowledged"),
            ("records_per_s", "produce_records_s.png", "records/s acknowledged"),
        ):
            fig, ax = plt.subplots(figsize=(9, 4.5))
            _grouped_by_size(ax, prod, key)
            ax.set_ylabel(ylabel)
            title = f"Produce throughput ({ylabel}), one {cpus}-CPU host"
            ax.set_title(title)
            save(fig, "produce", name, title)
    if timed := [r for r in section("produce") if r["values"].get("acks_per_second")]:
        fig, ax = plt.subplots(figsize=(9, 4.5))
        for r in timed:
            per_s = r["values"]["acks_per_second"]
            ax.plot(range(1, len(per_s) + 1), per_s, label=f"{r['system']} {r['workload']}")
        ax.set_xlabel("second of the row")
        ax.set_ylabel("records acknowledged per second")
        ax.legend(fontsize=7)
        title = "Produce throughput over time, per row"
        ax.set_title(title)
        save(fig, "produce", "produce_over_time.png", title)
    for name in LATENCY_SECTIONS:
        with_lat = [r for r in section(name) if r["values"].get("latency_ms")]
        if with_lat:
            fig, ax = plt.subplots(figsize=(max(6.0, 1.1 * len(with_lat) + 2), 5))
            _latency_bars(ax, with_lat)
            title = f"{name}: latency percentiles per row"
            ax.set_title(title)
            save(fig, name, f"{_slug(name)}_latency.png", title)
    for name in THROUGHPUT_SECTIONS:
        with_rate = [r for r in section(name) if r["values"].get("records_per_s") is not None]
        if with_rate:
            fig, ax = plt.subplots(figsize=(9, max(2.5, 0.45 * len(with_rate) + 1.5)))
            _rate_bars(ax, with_rate)
            title = f"{name}: records/s per row"
            ax.set_title(title)
            save(fig, name, f"{_slug(name)}_records_s.png", title)
    if fo := section("failover"):
        fig, ax = plt.subplots(figsize=(8, 4))
        _failover(ax, fo)
        title = "Failover: seconds after the signal"
        ax.set_title(title)
        save(fig, "failover", "failover.png", title)
    return charts


def _grouped_by_size(ax: Axes, prod: Sequence[dict[str, Any]], key: str) -> None:
    """One group of bars per record size; one bar per system (each of tidelog's row shapes,
    its workload less the size: "RF=3 acks=all", "RF=3 acks=all 1 partition", "RF=1 acks=1",
    is a system of its own, and so is each of an external cluster's)."""
    sizes = sorted({int(r["values"]["record_bytes"]) for r in prod})
    series: dict[str, dict[int, float]] = {}
    for r in prod:
        size = int(r["values"]["record_bytes"])
        label = r["system"]
        if label in ("tidelog", "external"):
            label = f"{label} {r['workload'].removesuffix(_size(size)).strip()}"
        series.setdefault(label, {})[size] = float(r["values"][key])
    width = 0.8 / max(1, len(series))
    for i, (label, by_size) in enumerate(series.items()):
        xs = [j + i * width for j, size in enumerate(sizes) if size in by_size]
        ys = [by_size[size] for size in sizes if size in by_size]
        ax.bar(xs, ys, width, label=label)
    ax.set_xticks([j + width * (len(series) - 1) / 2 for j in range(len(sizes))])
    ax.set_xticklabels([_size(s) for s in sizes])
    ax.legend(fontsize=8)


def _size(size: int) -> str:
    return f"{size // 1024} KiB" if size >= 1024 and size % 1024 == 0 else f"{size} B"


def _latency_bars(ax: Axes, rows: Sequence[dict[str, Any]]) -> None:
    """p50/p99/p99.9 of each row side by side, on a log scale (a p99.9 is often 10x a
    p50). A missing percentile is left out, not drawn as zero."""
    width = 0.8 / len(PERCENTILES)
    for i, pct in enumerate(PERCENTILES):
        xs, ys = [], []
        for j, r in enumerate(rows):
            value = r["values"]["latency_ms"].get(pct)
            if value is not None:
                xs.append(j + i * width)
                ys.append(max(0.01, float(value)))
        ax.bar(xs, ys, width, label=pct)
    ax.set_yscale("log")
    ax.set_ylabel("ms (log scale)")
    ax.set_xticks([j + width for j in range(len(rows))])
    ax.set_xticklabels([_label(r) for r in rows], fontsize=7, rotation=30, ha="right")
    ax.legend(fontsize=8)


def _rate_bars(ax: Axes, rows: Sequence[dict[str, Any]]) -> None:
    labels = [f"{r['system']} — {r['workload']}" for r in rows]
    values = [float(r["values"]["records_per_s"]) for r in rows]
    ax.barh(range(len(rows)), values)
    ax.set_yticks(range(len(rows)))
    ax.set_yticklabels(labels, fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel("records/s")
    for y, value in enumerate(values):
        ax.annotate(
            f"{value:,.0f}",
            (value, y),
            fontsize=7,
            va="center",
            xytext=(3, 0),
            textcoords="offset points",
        )


def _failover(ax: Axes, rows: Sequence[dict[str, Any]]) -> None:
    """Per failover row: every partition led again, and a produce to every partition
    acknowledged (seconds after the signal); a phase never reached is not drawn."""
    phases: Sequence[tuple[str, str]] = (
        ("leaders_s", "every partition led"),
        ("all_produced_s", "produce to every partition acked"),
    )
    width = 0.8 / len(phases)
    for i, (key, label) in enumerate(phases):
        points = [(j, r["values"].get(key)) for j, r in enumerate(rows)]
        ax.bar(
            [j + (i - 0.5) * width for j, v in points if v is not None],
            [float(v) for _j, v in points if v is not None],
            width,
            label=label,
        )
    ax.set_xticks(range(len(rows)))
    ax.set_xticklabels([r["workload"].split(",")[0] for r in rows], fontsize=8)
    ax.set_ylabel("seconds after the signal")
    ax.legend(fontsize=8)


def try_draw(
    data: dict[str, Any], directory: Path, say: Callable[[str], None] = print
) -> list[Chart]:
    """``draw``, or no charts and one line saying why (a run never fails for its plots)."""
    try:
        return draw(data, directory)
    except PlotsUnavailableError as exc:
        say(f"no charts: {exc}")
        return []
