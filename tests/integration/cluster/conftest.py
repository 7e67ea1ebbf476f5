"""Cluster fixtures: three broker processes on one real ZooKeeper (a chroot per test)."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

import pytest

from tests.harness import BrokerCluster
from tidelog.testing.zookeeper import ZooKeeperProcess

#: The clusters a test made, for the report of a failing test.
_CLUSTERS = pytest.StashKey[list[BrokerCluster]]()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """A failing test's report carries the end of each of its brokers' output: a failure
    seen once in CI can then be read without reproducing it."""
    outcome = yield
    report: pytest.TestReport = outcome.get_result()  # type: ignore[attr-defined]
    if report.when == "call" and report.failed and _CLUSTERS in item.stash:
        clusters: list[BrokerCluster] = item.stash[_CLUSTERS]
        for i, made in enumerate(clusters):
            report.sections.append((f"broker output (cluster {i})", made.log_excerpt()))


@pytest.fixture
def new_cluster(
    tmp_path: Path, zk_connect: str, request: pytest.FixtureRequest
) -> Iterator[Callable[..., BrokerCluster]]:
    """Factory: ``new_cluster(size=3, overrides={...})``; every broker is stopped by PID."""
    made: list[BrokerCluster] = []
    request.node.stash[_CLUSTERS] = made

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
