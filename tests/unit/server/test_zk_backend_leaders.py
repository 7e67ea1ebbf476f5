"""The ZooKeeper backend's partition leaders: from the metadata cache, on the inter-broker
listener or on the listener of the current request (FindCoordinator)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tidelog.model import TopicPartition
from tidelog.protocol.responses import NodeEndpoint
from tidelog.server.cluster.backend import ZkBackend
from tidelog.server.cluster.metadata_cache import CachedBroker, CachedPartition
from tidelog.server.network.request_context import (
    INTERNAL,
    RequestContext,
    set_request,
)

from .nodes import cluster_node

TP = TopicPartition("t", 0)
OWN = ("ignored.in.a.cluster", 1)


@pytest.fixture
def backend(tmp_path: Path) -> Iterator[ZkBackend]:
    node = cluster_node(tmp_path)
    cache = node.metadata
    cache.brokers[2] = CachedBroker(
        2, "inter.host", 9091, endpoints={"INTERNAL": ("inter.host", 9091), "SSL": ("b2", 9094)}
    )
    cache.partitions[TP] = CachedPartition(2, 5, (2, 1), (2, 1), 3)
    yield ZkBackend(node.config, node)
    set_request(INTERNAL)
    node.replica_manager.log_manager.close()


def _on_listener(name: str) -> None:
    set_request(RequestContext(INTERNAL.principal, "10.0.0.1", name, "SSL"))


def test_the_leader_on_the_inter_broker_listener(backend: ZkBackend) -> None:
    assert backend.partition_leader(TP) == (2, "inter.host", 9091)


def test_the_leader_on_the_request_listener(backend: ZkBackend) -> None:
    _on_listener("SSL")
    assert backend.partition_leader(TP, OWN) == (2, "b2", 9094)
    _on_listener("SASL_SSL")  # the leader has no such listener: no coordinator there
    assert backend.partition_leader(TP, OWN) is None


def test_no_leader_known(backend: ZkBackend) -> None:
    assert backend.partition_leader(TopicPartition("t", 1)) is None
    backend.cache.partitions[TP] = CachedPartition(-1, 6, (1,), (2, 1), 4)
    assert backend.partition_leader(TP) is None
    backend.cache.partitions[TP] = CachedPartition(3, 6, (3,), (3,), 4)  # not a live broker
    assert backend.partition_leader(TP) is None


def test_peers_are_reached_with_the_inter_broker_security(backend: ZkBackend) -> None:
    assert backend.peer_security is backend.node.peer_security


def test_kip_951_hint_on_the_request_listener(backend: ZkBackend) -> None:
    _on_listener("SSL")
    assert backend.current_leader(TP, OWN) == (2, 5, NodeEndpoint(2, "b2", 9094, None))
    _on_listener("SASL_SSL")  # named, but with no endpoint there
    assert backend.current_leader(TP, OWN) == (2, 5, None)
    assert backend.current_leader(TopicPartition("t", 1), OWN) == (-1, -1, None)
    backend.cache.partitions[TP] = CachedPartition(3, 6, (3,), (3,), 4)  # not a live broker
    assert backend.current_leader(TP, OWN) == (3, 6, None)
