"""The host fault run's report and JSON from a hand-made result: per kind what was served
while the fault was in force, a lost record shown plainly, and the CLI refusing bad input
(no cluster is started)."""

from __future__ import annotations

import json
from types import SimpleNamespace
from typing import Any

import pytest

from tidelog.testing.faults.checker import Findings
from tidelog.testing.faults.host_run import (
    host_config,
    indeterminate_notes,
    main,
    render_host_report,
    report_json,
)
from tidelog.testing.faults.nemesis import FaultRecord
from tidelog.testing.faults.run import RunResult
from tidelog.testing.faults.workload import AIOKAFKA, ProducerHistory


def _result(findings: Findings) -> RunResult:
    faults = [
        FaultRecord(0, "zk_quorum_loss", None, 10.0, 17.0, 20.0, True, "members [1, 3]"),
        FaultRecord(1, "host_link_down_leader", 2, 21.0, 30.0, 33.0, True, "leader host"),
    ]
    return RunResult(
        config=host_config(faults=2, seed=5),
        findings=findings,
        faults=faults,
        unavailable=[("zk_quorum_loss", 0.3), ("host_link_down_leader", 6.5)],
        sent=100,
        duration_s=40.0,
    )


def test_the_report_gives_per_kind_what_was_served_during_the_faults() -> None:
    result = _result(Findings(acknowledged=100))
    served = {0: (700, 1400), 1: (0, 12)}
    text = render_host_report(result, served, "python -m tidelog.testing.faults.host_run", "abc")
    assert "| zk_quorum_loss | 1 | 0.3 | 0 | 700 | 1400 | 0 |" in text
    assert "| host_link_down_leader | 1 | 6.5 | 0 | 0 | 12 | 1 |" in text
    assert "**acknowledged records lost** | **0**" in text
    assert "## Findings" not in text
    data = json.loads(report_json(result, served))
    assert data["ok"] is True
    assert data["faults"][0]["acknowledged_meanwhile"] == 700
    assert data["faults"][1]["host"] == 2


def test_a_lost_record_is_in_the_verdict_the_findings_and_the_json() -> None:
    findings = Findings(acknowledged=100, lost=["p0-7 at (0, 7)"], lost_count=1)
    result = _result(findings)
    text = render_host_report(result, {}, "cmd", "abc")
    assert "**acknowledged records lost** | **1**" in text
    assert "p0-7 at (0, 7)" in text
    data = json.loads(report_json(result, {}))
    assert data["ok"] is False
    assert data["lost"] == 1
    assert data["failures"] == {"lost": 1}


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--kinds", "kill_leader"], "unknown fault kinds ['kill_leader']"),
        (["--hosts", "2"], "--hosts must be at least 3"),
    ],
)
def test_the_command_refuses_bad_arguments(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    assert message in capsys.readouterr().err


def test_the_command_skips_with_the_reason_when_not_root(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr("tidelog.testing.netns.os.geteuid", lambda: 1000)
    assert main(["--faults", "1"]) == 77
    assert "skipped: hosts need network namespaces, which need root" in capsys.readouterr().err


def test_indeterminate_deliveries_are_noted_by_the_fault_they_fell_in() -> None:
    history = ProducerHistory(3, client=AIOKAFKA)
    history.failed += [
        (b"p0-1", "RequestTimedOutError", 12.0),
        (b"p0-2", "RequestTimedOutError", 25.0),
        (b"p0-3", "NotEnoughReplicasError", 40.0),
    ]
    producers: list[Any] = [SimpleNamespace(history=history)]
    faults = _result(Findings()).faults
    (note,) = indeterminate_notes(producers, faults)
    assert note.startswith("3 indeterminate aiokafka deliveries: ")
    assert "1 during zk_quorum_loss" in note
    assert "1 during host_link_down_leader" in note
    assert "1 between faults" in note
    assert "`RequestTimedOutError` (2x)" in note
