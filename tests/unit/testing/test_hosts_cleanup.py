"""``HostsCluster`` removes every namespace and link it made when its start fails, and
records them until then, with a fake ``ip`` runner (nothing is made for real)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import pytest

from tidelog.testing import hosts as hosts_module
from tidelog.testing.hosts import HOSTS_STATE_FILE, HostsCluster
from tidelog.testing.netns import NetnsError
from tidelog.testing.zookeeper import ZooKeeperProcess, ZooKeeperStartError


def test_a_failed_start_removes_what_it_made_and_says_so_in_the_state_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    commands: list[tuple[str, ...]] = []
    recorded: list[object] = []

    def fake_ip(argv: Sequence[str]) -> None:
        commands.append(tuple(argv))

    def no_java(self: ZooKeeperProcess) -> None:
        # The state file lists every namespace and link while the start is under way.
        recorded.append(json.loads((tmp_path / HOSTS_STATE_FILE).read_text())["made"])
        raise ZooKeeperStartError("`java` not found on PATH (ZooKeeper needs Java 17)")

    monkeypatch.setattr(hosts_module, "require_root", lambda: None)
    monkeypatch.setattr(hosts_module, "free_subnet", lambda: (77, 9))
    monkeypatch.setattr(hosts_module, "shares_subnet", lambda network: False)
    monkeypatch.setattr(ZooKeeperProcess, "launch", no_java)
    cluster = HostsCluster(tmp_path, hosts=2, runner=fake_ip)
    with pytest.raises(ZooKeeperStartError, match="java"):
        cluster.start()
    assert cluster.state is not None
    prefix = cluster.state.prefix
    assert recorded == [
        [
            {"kind": "link", "name": f"{prefix}br"},
            {"kind": "netns", "name": f"{prefix}-h1"},
            {"kind": "link", "name": f"{prefix}v1"},
            {"kind": "netns", "name": f"{prefix}-h2"},
            {"kind": "link", "name": f"{prefix}v2"},
        ]
    ]
    assert [cmd for cmd in commands if cmd[1] == "del"] == [
        ("link", "del", f"{prefix}v2"),
        ("netns", "del", f"{prefix}-h2"),
        ("link", "del", f"{prefix}v1"),
        ("netns", "del", f"{prefix}-h1"),
        ("link", "del", f"{prefix}br"),
    ]
    assert json.loads((tmp_path / HOSTS_STATE_FILE).read_text())["made"] == []
    assert ("-n", f"{prefix}-h2", "addr", "add", "10.77.9.2/24", "dev", f"{prefix}p2") in commands


def test_a_subnet_another_run_also_took_is_given_up_and_everything_removed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    commands: list[tuple[str, ...]] = []
    monkeypatch.setattr(hosts_module, "require_root", lambda: None)
    monkeypatch.setattr(hosts_module, "free_subnet", lambda: (77, 9))
    monkeypatch.setattr(hosts_module, "shares_subnet", lambda network: True)
    cluster = HostsCluster(tmp_path, hosts=1, runner=lambda argv: commands.append(tuple(argv)))
    with pytest.raises(NetnsError, match=r"another run held each subnet picked \(3 attempts\)"):
        cluster.start()
    made = [cmd for cmd in commands if cmd[1] == "add" and cmd[0] in ("link", "netns")]
    removed = [cmd for cmd in commands if cmd[1] == "del"]
    assert len(made) == 3 * 3  # bridge, namespace, veth per attempt
    assert len(removed) == 3 * 3
    assert {cmd[2] for cmd in made} == {cmd[2] for cmd in removed}
    assert json.loads((tmp_path / HOSTS_STATE_FILE).read_text())["made"] == []
