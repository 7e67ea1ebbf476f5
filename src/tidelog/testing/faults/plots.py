"""The fault report's figures (issue 22): a failover timeline and a histogram of recovery
times, matplotlib PNGs beside the Markdown report, plus the per-fault times they are drawn
from as JSON (so a committed report's figures can be drawn again).

Theory of operation:

1. What a run records per fault (``FaultRecord``): when it was injected (``start``), when
   its heal action finished (``healed``: the broker restarted, the pause or partition
   lifted), when the cluster was healthy again (``settled``: every broker up, every ISR
   full), and, from the producers' acknowledgement times, the longest stretch without any
   acknowledgement from the injection until healthy (``RunResult.unavailable``; for the
   transactional workload, without any commit). Nothing finer is recorded (when each
   partition had a leader again is not), so nothing finer is drawn.
2. ``fault_times`` turns those into seconds since the first fault's injection (the
   records hold ``time.monotonic()`` values): one ``FaultTimes`` per fault.
3. ``<report>-timeline.png``: top, one lane per fault kind, each fault a bar from its
   injection to its heal (dark) then on to healthy again (light); bottom, per fault at its
   injection time, the seconds until healthy again and the longest time without an
   acknowledgement. ``<report>-recovery.png``: histograms of both. ``<report>-faults.json``:
   the ``FaultTimes`` rows. ``python -m tidelog.testing.faults.plots FAULTS.json`` draws
   the two figures again from such a file.
4. matplotlib is the ``bench`` extra's (Agg backend, loaded lazily); without it the report
   is written without figures and ``try_write`` says why once.
"""

# ruff: noqa: PLC0415

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from tidelog.testing.faults.nemesis import FaultRecord


class PlotsUnavailableError(Exception):
    """matplotlib cannot be imported (the ``bench`` extra is not installed)."""


@dataclass(frozen=True, slots=True)
class FaultTimes:
    """One fault's times, in seconds since the first fault's injection (rule 2)."""

    index: int
    kind: str
    target: int | None
    injected_s: float
    healed_s: float
    healthy_s: float
    healthy: bool
    #: The longest time without an acknowledgement (or commit) from injection to healthy.
    longest_unavailable_s: float | None

    @property
    def recovery_s(self) -> float:
        """Injection to healthy again."""
        return self.healthy_s - self.injected_s


def fault_times(
    faults: Sequence[FaultRecord], unavailable: Sequence[tuple[str, float]]
) -> list[FaultTimes]:
    """Rule 2. ``unavailable`` is in the faults' order (``checker.unavailability``)."""
    if not faults:
        return []
    origin = faults[0].start
    gaps: list[float | None] = [gap for _kind, gap in unavailable]
    gaps += [None] * (len(faults) - len(gaps))
    return [
        FaultTimes(
            index=r.index,
            kind=r.kind,
            target=r.target,
            injected_s=round(r.start - origin, 3),
            healed_s=round(r.healed - origin, 3),
            healthy_s=round(r.settled - origin, 3),
            healthy=r.healthy,
            longest_unavailable_s=None if gap is None else round(gap, 3),
        )
        for r, gap in zip(faults, gaps, strict=True)
    ]


def save_times(times: Sequence[FaultTimes], path: Path) -> None:
    path.write_text(json.dumps([asdict(t) for t in times], indent=1) + "\n", encoding="utf-8")


def load_times(path: Path) -> list[FaultTimes]:
    rows: list[dict[str, Any]] = json.loads(path.read_text(encoding="utf-8"))
    return [FaultTimes(**row) for row in rows]


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


def draw(
    times: Sequence[FaultTimes], stem: Path, unavailable_what: str = "an acknowledgement"
) -> list[tuple[str, Path]]:
    """Rule 3: ``<stem>-timeline.png`` and ``<stem>-recovery.png``; (alt text, path) of
    each. Raises ``PlotsUnavailableError`` without matplotlib."""
    if not times:
        return []
    plt = _pyplot()
    return [
        ("Failover timeline", _draw_timeline(plt, times, stem, unavailable_what)),
        ("Recovery times", _draw_recovery(plt, times, stem, unavailable_what)),
    ]


def _draw_timeline(
    plt: Any, times: Sequence[FaultTimes], stem: Path, unavailable_what: str
) -> Path:
    """``<stem>-timeline.png``: a lane per fault kind over the per-fault recovery points."""
    kinds = sorted({t.kind for t in times})
    colors = {k: plt.get_cmap("tab10")(i % 10) for i, k in enumerate(kinds)}
    fig, (lanes, points) = plt.subplots(
        2,
        1,
        figsize=(11, 3 + 0.35 * len(kinds) + 3),
        sharex=True,
        gridspec_kw={"height_ratios": [max(1.0, 0.35 * len(kinds)), 3]},
    )
    _draw_lanes(lanes, times, kinds, colors)
    _draw_points(points, times, kinds, colors, unavailable_what)
    fig.tight_layout()
    timeline = stem.with_name(f"{stem.name}-timeline.png")
    fig.savefig(timeline, dpi=100)
    plt.close(fig)
    return timeline


def _draw_lanes(
    lanes: Any, times: Sequence[FaultTimes], kinds: list[str], colors: dict[str, Any]
) -> None:
    """Each fault from injection to heal (dark), then to healthy again (light)."""
    for lane, kind in enumerate(kinds):
        mine = [t for t in times if t.kind == kind]
        lanes.broken_barh(
            [(t.injected_s, max(t.healed_s - t.injected_s, 0.05)) for t in mine],
            (lane - 0.35, 0.7),
            facecolors=colors[kind],
        )
        lanes.broken_barh(
            [(t.healed_s, max(t.healthy_s - t.healed_s, 0.05)) for t in mine],
            (lane - 0.35, 0.7),
            facecolors=colors[kind],
            alpha=0.35,
        )
    lanes.set_yticks(range(len(kinds)))
    lanes.set_yticklabels(kinds, fontsize=8)
    lanes.set_title(
        "Failover timeline: each fault from injection to heal (dark), then to healthy again "
        "(light)",
        fontsize=10,
    )


def _draw_points(
    points: Any,
    times: Sequence[FaultTimes],
    kinds: list[str],
    colors: dict[str, Any],
    unavailable_what: str,
) -> None:
    """Per fault: injection to healthy again (o) and the longest unavailability (x)."""
    for kind in kinds:
        mine = [t for t in times if t.kind == kind]
        points.scatter(
            [t.injected_s for t in mine],
            [t.recovery_s for t in mine],
            s=14,
            color=colors[kind],
            label=kind,
        )
        gaps = [t for t in mine if t.longest_unavailable_s is not None]
        points.scatter(
            [t.injected_s for t in gaps],
            [t.longest_unavailable_s for t in gaps],
            s=14,
            color=colors[kind],
            marker="x",
        )
    points.set_xlabel("seconds since the first fault")
    points.set_ylabel("seconds")
    points.set_title(
        f"per fault: injection to healthy again (o), longest time without {unavailable_what} (x)",
        fontsize=10,
    )
    points.legend(fontsize=7, ncol=min(4, len(kinds)))


def _draw_recovery(
    plt: Any, times: Sequence[FaultTimes], stem: Path, unavailable_what: str
) -> Path:
    """``<stem>-recovery.png``: a histogram of the recovery times and the unavailabilities."""
    fig, ax = plt.subplots(figsize=(8, 4))
    recovery = [t.recovery_s for t in times]
    gaps_s = [t.longest_unavailable_s for t in times if t.longest_unavailable_s is not None]
    top = max([*recovery, *gaps_s, 1.0])
    bins = [top * i / 30 for i in range(31)]
    ax.hist(recovery, bins=bins, alpha=0.6, label="injection to healthy again")
    if gaps_s:
        ax.hist(gaps_s, bins=bins, alpha=0.6, label=f"longest time without {unavailable_what}")
    ax.set_xlabel("seconds")
    ax.set_ylabel("faults")
    ax.set_title(f"Recovery times of {len(times)} faults")
    ax.legend(fontsize=8)
    fig.tight_layout()
    histogram = stem.with_name(f"{stem.name}-recovery.png")
    fig.savefig(histogram, dpi=100)
    plt.close(fig)
    return histogram


def try_write(
    faults: Sequence[FaultRecord],
    unavailable: Sequence[tuple[str, float]],
    report: Path,
    say: Callable[[str], None],
    unavailable_what: str = "an acknowledgement",
) -> list[tuple[str, str]]:
    """Beside ``report``: the times as JSON, and the figures when matplotlib is there.
    (alt text, path relative to the report) of each figure, for its Markdown links."""
    stem = report.with_suffix("")
    times = fault_times(faults, unavailable)
    if not times:
        return []
    save_times(times, stem.with_name(f"{stem.name}-faults.json"))
    try:
        drawn = draw(times, stem, unavailable_what)
    except PlotsUnavailableError as exc:
        say(f"no figures: {exc}")
        return []
    return [(title, path.name) for title, path in drawn]


def figure_lines(figures: Sequence[tuple[str, str]]) -> list[str]:
    """The report's Figures section (empty without figures)."""
    if not figures:
        return []
    return [
        "## Figures",
        "",
        *(line for title, file in figures for line in (f"![{title}]({file})", "")),
        f"The per-fault times these are drawn from: `{Path(figures[0][1]).name.rsplit('-', 1)[0]}"
        "-faults.json` (seconds since the first fault).",
        "",
    ]


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m tidelog.testing.faults.plots REPORT-faults.json``: draw the figures again."""
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 1 or not args[0].endswith("-faults.json"):
        print("usage: python -m tidelog.testing.faults.plots REPORT-faults.json", file=sys.stderr)
        return 2
    source = Path(args[0])
    stem = source.with_name(source.name.removesuffix("-faults.json"))
    for _title, path in draw(load_times(source), stem):
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
