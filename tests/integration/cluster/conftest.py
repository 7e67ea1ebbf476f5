"""Cluster fixtures: three broker processes on one real ZooKeeper (a chroot per test)."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

import pytest

from tests.harness import BrokerCluster
from tidelog.testing.zookeeper import ZooKeeperProcess


@pytest.fixture
def new_cluster(tmp_path: Path, zk_connect: str) -> Iterator[Callable[..., BrokerCluster]]:
    """Factory: ``new_cluster(size=3, overrides={...})``; every broker is stopped by PID."""
    made: list[BrokerCluster] = []

    def make(size: int = 3, overrides: Mapping[str, str] | None = None) -> BrokerCluster:
        cluster = BrokerCluster(tmp_path / f"c{len(made)}", zk_connect, size, overrides)
        made.append(cluster)
        return cluster.start()

    yield make
    for cluster in made:
        cluster.stop()


@pytest.fixture
def cluster(new_cluster: Callable[..., BrokerCluster]) -> BrokerCluster:
    """A fresh three-broker cluster for a test that breaks things."""
    return new_cluster()


@pytest.fixture(scope="module")
def shared_cluster(
    tmp_path_factory: pytest.TempPathFactory, zookeeper: ZooKeeperProcess
) -> Iterator[BrokerCluster]:
    """One three-broker cluster for the tests of a module that leave it healthy (topics are
    per test: use unique names)."""
    directory = tmp_path_factory.mktemp("shared-cluster")
    chroot = f"{zookeeper.connect_string}/shared-{directory.name}"
    cluster = BrokerCluster(directory, chroot).start()
    try:
        yield cluster
    finally:
        cluster.stop()
