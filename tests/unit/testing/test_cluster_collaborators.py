"""``tidelog.testing.cluster.LocalCluster`` and its collaborators (no process started): a
secured cluster is the CLI's, and without a Metadata view no broker's Metadata is read."""

from __future__ import annotations

from pathlib import Path

import pytest

from tidelog.cli import launcher
from tidelog.security.client_config import ClientSecurity
from tidelog.testing.cluster import (
    BrokerInfo,
    ClusterError,
    ClusterState,
    LocalCluster,
    read_state,
)


def _write_state(directory: Path, security: str) -> None:
    state = ClusterState(
        directory=str(directory),
        zookeeper_port=2181,
        zookeeper_pid=None,
        brokers=(BrokerInfo(1, 9092, str(directory / "broker-1")),),
        security=security,
    )
    (directory / "cluster.json").write_text(state.to_json())


def test_a_secured_cluster_needs_the_clis_launcher(tmp_path: Path) -> None:
    _write_state(tmp_path, "sasl_ssl")
    with pytest.raises(ClusterError, match=r"tidelog.cli.launcher.LocalCluster"):
        _ = LocalCluster.attach(tmp_path).security
    secured = launcher.LocalCluster.attach(tmp_path)
    assert secured.security is not None
    assert secured.security.protocol == "SASL_SSL"
    properties = secured.broker_properties(secured.broker(1))
    assert properties["listeners"] == "SASL_SSL://127.0.0.1:9092"


def test_the_cli_refuses_an_unknown_security_mode(tmp_path: Path) -> None:
    with pytest.raises(ClusterError, match="--security must be one of"):
        launcher.LocalCluster(tmp_path, security="tls")


def test_the_metadata_view_is_the_one_given(tmp_path: Path) -> None:
    _write_state(tmp_path, "plaintext")
    asked: list[str] = []

    def view(bootstrap: str, security: ClientSecurity) -> tuple[tuple[int, ...], int] | None:
        asked.append(bootstrap)
        return (1,), 1

    cluster = LocalCluster(tmp_path, brokers=1, metadata_view=view)
    cluster.state = read_state(tmp_path)
    assert [s.sees for s in cluster.status()] == [None]  # not running: not asked
    assert cluster._metadata_view(1) == ((1,), 1)
    assert asked == ["127.0.0.1:9092"]
    assert LocalCluster.attach(tmp_path)._metadata_view(1) is None  # no view: never read


def test_broker_ports_are_picked_once_zookeeper_listens(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Picked before, a broker's port could be the one ZooKeeper then picked: that broker
    failed with EADDRINUSE (``tidelog cluster up`` once gave broker 1 ZooKeeper's port)."""
    from tidelog.testing import cluster as cluster_module

    events: list[str] = []

    class FakeZooKeeper:
        pid = 4242
        client_port = 20000

        def __init__(self, directory: Path) -> None:
            del directory

        def start(self, timeout_s: float) -> None:
            del timeout_s
            events.append("zookeeper listens")

    def fake_free_ports(count: int) -> list[int]:
        events.append("broker ports picked")
        return [30000 + i for i in range(count)]

    monkeypatch.setattr(cluster_module, "ZooKeeperProcess", FakeZooKeeper)
    monkeypatch.setattr(cluster_module, "free_ports", fake_free_ports)
    monkeypatch.setattr(LocalCluster, "_launch_broker", lambda self, info: events.append("launch"))
    monkeypatch.setattr(LocalCluster, "wait_ready", lambda self, timeout_s: None)
    cluster = LocalCluster(tmp_path, brokers=2).start()
    assert events == ["zookeeper listens", "broker ports picked", "launch", "launch"]
    state = read_state(tmp_path)
    assert [b.port for b in state.brokers] == [30000, 30001]
    assert state.zookeeper_port == 20000
    assert cluster.state is not None
