"""The fault report's figures (``tidelog.testing.faults.plots``): per-fault times from the
recorded ``FaultRecord``s, a timeline and a recovery-time histogram beside the report, the
report's links to them, and a report without figures when matplotlib is missing."""

from __future__ import annotations

import builtins
from pathlib import Path
from typing import Any

import pytest

from tidelog.testing.faults import __main__ as faults_main
from tidelog.testing.faults import plots
from tidelog.testing.faults.checker import check_histories
from tidelog.testing.faults.nemesis import FaultRecord
from tidelog.testing.faults.run import RunConfig, RunResult, render_report
from tidelog.testing.faults.workload import Ack, Read

PNG = b"\x89PNG\r\n\x1a\n"

#: Three faults as a run records them (time.monotonic() values).
FAULTS = [
    FaultRecord(0, "kill_leader", 1, 100.0, 100.5, 107.0, True, "SIGKILL leader"),
    FaultRecord(1, "pause_long", 2, 108.0, 117.0, 121.5, True, "SIGSTOP 9.0s"),
    FaultRecord(2, "kill_leader", 3, 122.0, 122.4, 190.0, False, "SIGKILL leader"),
]
UNAVAILABLE = [("kill_leader", 6.2), ("pause_long", 0.3), ("kill_leader", 61.0)]


def _result() -> RunResult:
    acks = [Ack(0, 0, o, b"p0-%d" % o, 0.0) for o in range(3)]
    final = [Read("final", 0, o, b"p0-%d" % o, 0.0) for o in range(3)]
    findings = check_histories(acks, [], final, {0: 3})
    return RunResult(RunConfig(faults=3), findings, list(FAULTS), list(UNAVAILABLE), sent=3)


def test_fault_times_are_seconds_since_the_first_fault() -> None:
    times = plots.fault_times(FAULTS, UNAVAILABLE)
    assert times[0] == plots.FaultTimes(0, "kill_leader", 1, 0.0, 0.5, 7.0, True, 6.2)
    assert times[1].injected_s == 8.0
    assert times[1].healed_s == 17.0
    assert times[1].recovery_s == pytest.approx(13.5)
    assert times[2].healthy is False
    assert times[2].longest_unavailable_s == 61.0
    # An unavailability not recorded (a run cut short) is None, not zero.
    assert plots.fault_times(FAULTS, UNAVAILABLE[:1])[2].longest_unavailable_s is None
    assert plots.fault_times([], []) == []


def test_figures_and_times_are_written_beside_the_report(tmp_path: Path) -> None:
    report = tmp_path / "reliability.md"
    said: list[str] = []
    figures = plots.try_write(FAULTS, UNAVAILABLE, report, said.append)
    assert said == []
    assert figures == [
        ("Failover timeline", "reliability-timeline.png"),
        ("Recovery times", "reliability-recovery.png"),
    ]
    for _title, name in figures:
        data = (tmp_path / name).read_bytes()
        assert data.startswith(PNG)
        assert len(data) > 5_000
    saved = tmp_path / "reliability-faults.json"
    assert plots.load_times(saved) == plots.fault_times(FAULTS, UNAVAILABLE)
    # Drawn again from the JSON alone.
    (tmp_path / "reliability-timeline.png").unlink()
    assert plots.main([str(saved)]) == 0
    assert (tmp_path / "reliability-timeline.png").read_bytes().startswith(PNG)
    assert plots.main(["other.json"]) == 2


def test_the_report_links_its_figures() -> None:
    figures = [("Failover timeline", "r-timeline.png"), ("Recovery times", "r-recovery.png")]
    text = render_report(_result(), "cmd", code="abc", figures=figures)
    section = text.split("## Figures", 1)[1].split("## How it works", 1)[0]
    assert "![Failover timeline](r-timeline.png)" in section
    assert "![Recovery times](r-recovery.png)" in section
    assert "`r-faults.json`" in section
    assert "## Figures" not in render_report(_result(), "cmd", code="abc")


def test_the_command_line_writes_the_figures_and_links_them(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(faults_main, "run", lambda config, log=None: _result())
    report = tmp_path / "reliability-x.md"
    assert faults_main.main(["--faults", "3", "--report", str(report)]) == 0
    text = report.read_text(encoding="utf-8")
    for name in ("reliability-x-timeline.png", "reliability-x-recovery.png"):
        assert f"]({name})" in text
        assert (tmp_path / name).is_file()
    assert (tmp_path / "reliability-x-faults.json").is_file()


def test_without_matplotlib_the_report_is_written_without_figures(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    real_import = builtins.__import__

    def no_matplotlib(name: str, *args: Any, **kwargs: Any) -> Any:
        if name == "matplotlib" or name.startswith("matplotlib."):
            raise ImportError("No module named 'matplotlib'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_matplotlib)
    monkeypatch.setattr(faults_main, "run", lambda config, log=None: _result())
    report = tmp_path / "r.md"
    assert faults_main.main(["--faults", "3", "--report", str(report)]) == 0
    assert "## Verdict" in report.read_text(encoding="utf-8")
    assert "## Figures" not in report.read_text(encoding="utf-8")
    err = capsys.readouterr().err
    assert "no figures: matplotlib is not installed" in err
    assert "pip install -e '.[bench]'" in err
    assert not list(tmp_path.glob("*.png"))
