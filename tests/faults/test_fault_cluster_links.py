"""FaultCluster's wiring of the links between brokers, without broker processes: loopback
servers stand in for the brokers' listeners. Each broker gets one proxy per peer, named in
its ``tidelog.testing.peer.addresses`` (its own id: its real listener), the same proxies
again when it is restarted; a link cuts one way or both; ``partition`` and ``isolate``
cut what they say and nothing else."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.faults.test_proxy import Target, nothing_arrives, recv_exactly
from tidelog.server.config.broker_config import load_broker_config
from tidelog.testing.cluster import BrokerInfo, ClusterState
from tidelog.testing.faults.cluster import FaultCluster

BROKERS = (1, 2, 3)


@pytest.fixture
def wired(tmp_path: Path) -> Iterator[tuple[FaultCluster, dict[int, Target]]]:
    targets = {b: Target() for b in BROKERS}
    cluster = FaultCluster(tmp_path / "cluster", brokers=len(BROKERS))
    cluster.directory.mkdir(parents=True)
    cluster._save(
        ClusterState(
            directory=str(cluster.directory),
            zookeeper_port=None,
            zookeeper_pid=None,
            brokers=tuple(
                BrokerInfo(b, targets[b].port, str(cluster.directory / f"broker-{b}"))
                for b in BROKERS
            ),
        )
    )
    try:
        yield cluster, targets
    finally:
        cluster.stop()
        for target in targets.values():
            target.close()


def test_one_proxy_per_ordered_pair_named_in_each_brokers_config_and_kept_on_restart(
    wired: tuple[FaultCluster, dict[int, Target]],
) -> None:
    cluster, targets = wired
    properties = {b: cluster.broker_properties(cluster.broker(b)) for b in BROKERS}
    assert sorted(cluster.peer_proxy) == [(1, 2), (1, 3), (2, 1), (2, 3), (3, 1), (3, 2)]
    for a in BROKERS:
        config = load_broker_config(properties[a])
        assert config.peer_address(a, "registered", 1) == ("127.0.0.1", targets[a].port)
        for b in BROKERS:
            if b != a:
                link = cluster.peer_proxy[(a, b)]
                assert config.peer_address(b, "registered", 1) == ("127.0.0.1", link.port)
                assert link.target_port == targets[b].port
    # A restart writes the broker's properties again: the same proxies, the same ports.
    assert cluster.broker_properties(cluster.broker(2)) == properties[2]
    assert len(cluster.peer_proxy) == 6


def connect(cluster: FaultCluster, source: int, target: int) -> socket.socket:
    return socket.create_connection(("127.0.0.1", cluster.peer_proxy[(source, target)].port))


def test_links_cut_one_way_or_both_partition_and_isolate(
    wired: tuple[FaultCluster, dict[int, Target]],
) -> None:
    cluster, _ = wired
    for b in BROKERS:
        cluster.broker_properties(cluster.broker(b))
    with connect(cluster, 1, 2) as one_to_two, connect(cluster, 2, 1) as two_to_one:
        cluster.cut_link(1, 2)
        assert cluster.cut_links() == [(1, 2)]
        one_to_two.sendall(b"a")
        assert nothing_arrives(one_to_two)
        two_to_one.sendall(b"b")  # the other way still carries
        assert recv_exactly(two_to_one, 1) == b"b"
        cluster.heal_link(1, 2)
        assert recv_exactly(one_to_two, 1) == b"a"
        cluster.cut_link(1, 2, both_ways=True)
        assert cluster.cut_links() == [(1, 2), (2, 1)]
        cluster.heal_link(1, 2, both_ways=True)
        assert cluster.cut_links() == []

    # One broker vs the rest: every link across, both ways; clients untouched.
    assert cluster.partition([3]) == [(1, 3), (2, 3), (3, 1), (3, 2)]
    assert cluster.cut_links() == [(1, 3), (2, 3), (3, 1), (3, 2)]
    assert [p.is_cut for p in cluster.broker_proxy.values()] == [False] * 3
    cluster.heal_links()
    assert cluster.cut_links() == []

    # Isolated: its clients and every link from and to it.
    cluster.isolate(2)
    assert cluster.cut_links() == [(1, 2), (2, 1), (2, 3), (3, 2)]
    assert [b for b, p in cluster.broker_proxy.items() if p.is_cut] == [2]
    cluster.unisolate(2)
    assert cluster.cut_links() == []
    assert [p.is_cut for p in cluster.broker_proxy.values()] == [False] * 3
