"""The launcher's state file and PID checks (no brokers started)."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from tidelog.cli.launcher import LocalCluster
from tidelog.cli.main import main
from tidelog.testing.cluster import (
    LOCAL_DEFAULTS,
    BrokerInfo,
    ClusterError,
    ClusterState,
    read_state,
)
from tidelog.testing.processes import process_state


def _state(tmp_path: Path) -> ClusterState:
    return ClusterState(
        directory=str(tmp_path),
        zookeeper_port=2181,
        zookeeper_pid=None,
        brokers=(
            BrokerInfo(1, 9092, str(tmp_path / "broker-1"), pid=None),
            BrokerInfo(2, 9093, str(tmp_path / "broker-2"), pid=None),
        ),
        overrides={"num.partitions": "6"},
        started_at_ms=1,
    )


def test_state_round_trips_and_gives_bootstrap(tmp_path: Path) -> None:
    state = _state(tmp_path)
    (tmp_path / "cluster.json").write_text(state.to_json())
    assert read_state(tmp_path) == state
    assert state.bootstrap_servers == "127.0.0.1:9092,127.0.0.1:9093"


def test_missing_or_bad_state_file_says_what_to_do(tmp_path: Path) -> None:
    with pytest.raises(ClusterError, match=r"no local cluster in .*tidelog cluster up"):
        read_state(tmp_path)
    (tmp_path / "cluster.json").write_text("{not json")
    with pytest.raises(ClusterError, match="is not a tidelog cluster state file"):
        read_state(tmp_path)


def test_broker_properties_overrides_win_over_local_defaults(tmp_path: Path) -> None:
    (tmp_path / "cluster.json").write_text(_state(tmp_path).to_json())
    cluster = LocalCluster.attach(tmp_path)
    props = cluster.broker_properties(cluster.broker(2))
    assert props["broker.id"] == "2"
    assert props["listeners"] == "PLAINTEXT://127.0.0.1:9093"
    assert props["zookeeper.connect"] == "127.0.0.1:2181"
    assert props["num.partitions"] == "6"  # the override, not LOCAL_DEFAULTS' 1
    assert props["zookeeper.session.timeout.ms"] == LOCAL_DEFAULTS["zookeeper.session.timeout.ms"]
    assert props["default.replication.factor"] == "2"
    with pytest.raises(ClusterError, match=r"no broker 7 in this cluster \(brokers: 1, 2\)"):
        cluster.broker(7)


def test_racks_are_recorded_and_given_to_the_brokers_in_turn(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``cluster up --racks a,b``: broker i gets racks[(i - 1) mod 2]; the state file keeps
    them for ``attach`` (a restarted broker keeps its rack); a bad list is a usage error."""
    state = _state(tmp_path)
    racked = replace(state, racks=("a",))
    (tmp_path / "cluster.json").write_text(racked.to_json())
    assert read_state(tmp_path).racks == ("a",)
    cluster = LocalCluster.attach(tmp_path)
    assert [cluster.broker_properties(cluster.broker(b))["broker.rack"] for b in (1, 2)] == [
        "a",
        "a",
    ]
    two = LocalCluster(tmp_path / "other", brokers=3, racks=("a", "b"))
    assert [two.rack_of(b) for b in (1, 2, 3)] == ["a", "b", "a"]
    (tmp_path / "cluster.json").write_text(state.to_json())
    plain = LocalCluster.attach(tmp_path)
    assert plain.rack_of(1) is None
    assert "broker.rack" not in plain.broker_properties(plain.broker(1))
    with pytest.raises(SystemExit) as exited:
        main(["cluster", "up", "--dir", str(tmp_path / "x"), "--racks", "a,,b"])
    assert exited.value.code == 2
    assert "'a,,b' is not a comma-separated list of rack names" in capsys.readouterr().err


def test_process_state_checks_the_command_line_not_just_the_pid(tmp_path: Path) -> None:
    marker = str(tmp_path / "marker.cfg")
    child = subprocess.Popen(
        [sys.executable, "-c", "import sys, time; print(1, flush=True); time.sleep(30)", marker],
        stdout=subprocess.PIPE,
    )
    try:
        assert child.stdout is not None
        child.stdout.readline()  # exec'd and running (before exec the command line is ours)
        assert process_state(child.pid, marker) == "running"
        assert process_state(child.pid, "some-other-config") == "stopped"  # a recycled PID
        assert process_state(os.getpid(), marker) == "stopped"
    finally:
        child.kill()
        child.wait()
        if child.stdout is not None:
            child.stdout.close()
    assert process_state(child.pid, marker) == "stopped"
    assert process_state(None, marker) == "stopped"


def test_cluster_command_without_state_file_fails_with_message(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["cluster", "status", "--dir", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert err.startswith("tidelog cluster: error: no local cluster in")
    assert "tidelog cluster up" in err


def test_topics_without_bootstrap_or_cluster_fails_with_hint(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["topics", "list", "--dir", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert "no --bootstrap-server given" in err
    assert "hint: pass --bootstrap-server HOST:PORT or start a local cluster" in err
