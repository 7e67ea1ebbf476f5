"""``tidelog cluster up --hosts N`` refusals and the other actions on a recorded ``--hosts``
cluster, in-process, without making any namespace."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from tidelog.cli.main import main
from tidelog.cli.output import resolve_bootstrap
from tidelog.testing.hosts import HOSTS_STATE_FILE, HostInfo, HostsState
from tidelog.testing.netns import Made


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(["cluster", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_up_hosts_as_a_user_other_than_root_says_it_needs_root(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("os.geteuid", lambda: 1000)
    code, _, err = run(capsys, "up", "--hosts", "3", "--dir", str(tmp_path / "c"))
    assert code == 1
    assert "tidelog cluster: error: hosts need network namespaces, which need root" in err
    assert not (tmp_path / "c").exists()


@pytest.mark.parametrize(
    ("extra", "flags"),
    [
        (["--racks", "a,b"], "--racks"),
        (["--brokers", "2", "--security", "ssl"], "--brokers, --security"),
        (["--no-zookeeper"], "--no-zookeeper"),
    ],
)
def test_up_hosts_refuses_options_it_does_not_take(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], extra: list[str], flags: str
) -> None:
    code, _, err = run(capsys, "up", "--hosts", "3", "--dir", str(tmp_path), *extra)
    assert code == 1
    assert f"does not take {flags}" in err


def _recorded_hosts(directory: Path) -> None:
    """A stopped --hosts cluster's state file: PIDs that run none of our processes, nothing
    left to remove."""
    hosts = tuple(
        HostInfo(i, f"tlzz-h{i}", f"10.77.9.{i}", str(directory / f"host-{i}"), 999999, 999999)
        for i in (1, 2)
    )
    state = HostsState(str(directory), "tlzz", (77, 9), hosts, made=())
    (directory / HOSTS_STATE_FILE).write_text(state.to_json())


def test_broker_actions_on_a_hosts_cluster_are_refused_by_name(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _recorded_hosts(tmp_path)
    code, _, err = run(capsys, "kill", "2", "--dir", str(tmp_path))
    assert code == 1
    assert "`cluster kill` is not available for a --hosts cluster yet" in err


def test_status_bootstrap_and_down_of_a_stopped_hosts_cluster(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _recorded_hosts(tmp_path)
    code, out, _ = run(capsys, "status", "--dir", str(tmp_path))
    assert code == 0
    assert "10.77.9.2:9092" in out
    assert "999999 stopped" in out
    assert resolve_bootstrap(argparse.Namespace(bootstrap_server=None, dir=tmp_path)) == (
        "10.77.9.1:9092,10.77.9.2:9092"
    )
    code, out, _ = run(capsys, "down", "--dir", str(tmp_path))
    assert code == 0
    assert "removed its hosts' namespaces" in out
    code, _, err = run(capsys, "up", "--dir", str(tmp_path))
    assert code == 1
    assert "holds a --hosts cluster" in err


def test_state_file_round_trip() -> None:
    info = HostInfo(1, "tlzz-h1", "10.77.9.1", "/d/host-1", 10, 11)
    state = HostsState("/d", "tlzz", (77, 9), (info,), (Made("link", "tlzzbr"),), {"a": "b"})
    assert HostsState.from_json(state.to_json()) == state
