"""Issue 33 point 2, the quick run: every fault of ``host_nemesis`` once on three namespace
hosts (the leader's host and the controller's host cut off by their link, a host cut from
its peers but not from the clients, a ZooKeeper member killed, the quorum lost and
regained), with the fault harness's workload and checker. The long run (>= 100 faults) is
``make chaos-hosts``."""

from __future__ import annotations

from pathlib import Path

import pytest

from tidelog.testing.faults.host_nemesis import HOST_KINDS
from tidelog.testing.faults.host_run import host_config, render_host_report, run_on_hosts

pytestmark = pytest.mark.integration


@pytest.mark.usefixtures("netns_available")
def test_every_host_fault_once_loses_no_acknowledged_record(tmp_path: Path) -> None:
    config = host_config(
        faults=len(HOST_KINDS),
        seed=7,
        session_ms=4000,
        lag_ms=2000,
        directory=tmp_path,
        keep_directory=True,
    )
    result, served = run_on_hosts(config, log=print)
    f = result.findings
    report = render_host_report(result, served, "test")
    assert f.lost_count == 0, f.summary()
    assert f.client_visible == [], f.client_visible[:5]
    assert f.ok, f.summary()
    assert sorted(r.kind for r in result.faults) == sorted(HOST_KINDS)
    assert all(r.healthy for r in result.faults), [r.detail for r in result.faults]
    assert result.findings.acknowledged > 0
    # Quorum lost: the brokers kept serving produce (acks=all, the ISR unchanged) and fetch
    # on the leaders they had, as Kafka's do.
    (lost,) = [r for r in result.faults if r.kind == "zk_quorum_loss"]
    acked, read = served[lost.index]
    assert acked > 0, lost.detail
    assert read > 0, lost.detail
    assert "| zk_quorum_loss | 1 |" in report
    assert "**acknowledged records lost** | **0**" in report
