"""``tidelog cluster status --bootstrap-server ... --zookeeper ...`` on three hosts (network
namespaces, a three-member ZooKeeper ensemble): each member's mode, one leader and two
followers; a host cut off is a member not serving and a broker not up (exit 3), and the
cluster is healthy again once the link is back."""

from __future__ import annotations

import time

import pytest

from tests.integration.cli.conftest import Result
from tidelog.cli.cluster_remote import EXIT_DEGRADED, EXIT_HEALTHY
from tidelog.cli.main import main
from tidelog.testing.hosts import BROKER_PORT, ZOOKEEPER_PORT, HostsCluster

pytestmark = pytest.mark.integration


def test_status_shows_each_ensemble_member_mode_and_a_host_cut_off(
    hosts: HostsCluster, capsys: pytest.CaptureFixture[str]
) -> None:
    ensemble = ",".join(hosts.host(i).zookeeper_connect for i in (1, 2, 3))
    argv = ["cluster", "status", "--bootstrap-server", hosts.bootstrap_servers]
    argv += ["--zookeeper", ensemble, "--timeout", "3"]

    def status_until(exit_code: int, needle: str, timeout: float = 90.0) -> list[str]:
        deadline = time.monotonic() + timeout
        while True:
            code = main(argv)
            out, err = capsys.readouterr()
            if code == exit_code and needle in out:
                return out.splitlines()
            if time.monotonic() > deadline:
                last = Result(code, out, err)
                raise AssertionError(f"no exit {exit_code} with {needle!r}; last: {last}")
            time.sleep(0.5)

    lines = status_until(EXIT_HEALTHY, "health: healthy")
    members = [line.split() for line in lines if line.startswith("zookeeper ")]
    assert [m[1] for m in members] == [
        f"{hosts.host(i).address}:{ZOOKEEPER_PORT}" for i in (1, 2, 3)
    ]
    assert sorted(m[2] for m in members) == ["follower", "follower", "leader"]
    assert [line for line in lines if line.startswith("broker ")] == [
        f"broker {i} {hosts.host(i).address}:{BROKER_PORT} rack - up" for i in (1, 2, 3)
    ]

    hosts.link_down(3)
    try:
        cut = f"zookeeper {hosts.host(3).address}:{ZOOKEEPER_PORT} not serving"
        lines = status_until(EXIT_DEGRADED, cut)
        (broker_3,) = [line for line in lines if line.startswith("broker 3 ")]
        assert not broker_3.endswith(" up"), broker_3
        assert lines[-1].startswith("health: degraded: ")
        assert f"ZooKeeper {hosts.host(3).address}:{ZOOKEEPER_PORT} not serving" in lines[-1]
    finally:
        hosts.link_up(3)
    status_until(EXIT_HEALTHY, "health: healthy", timeout=120.0)
