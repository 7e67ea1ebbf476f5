"""Fixtures: one broker process per test module (``broker``), or a fresh one (``new_broker``);
a real ZooKeeper server per test session (``zookeeper``) with a chroot per test
(``zk_connect``), shared by the ZooKeeper and cluster tests."""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

import pytest

from tests.harness import BrokerProcess
from tidelog.testing.zookeeper import ZooKeeperProcess

_chroots = itertools.count()
_HERE = Path(__file__).parent


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Every test under tests/integration starts real processes: it carries the
    ``integration`` mark whether or not its module says so, so ``make test-fast`` (and the
    half of ``make test`` that runs beside the process tests) never starts a broker."""
    for item in items:
        if item.path.is_relative_to(_HERE):
            item.add_marker(pytest.mark.integration)


@pytest.fixture(scope="session")
def zookeeper(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ZooKeeperProcess]:
    """One ZooKeeper server (Debian's package) for the test session, stopped by its PID."""
    server = ZooKeeperProcess(tmp_path_factory.mktemp("zookeeper"), tick_time_ms=250)
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def zk_connect(zookeeper: ZooKeeperProcess, request: pytest.FixtureRequest) -> str:
    """``zookeeper.connect`` with a chroot of this test's own."""
    name = re.sub(r"[^A-Za-z0-9_]", "_", request.node.name)[:60]
    return f"{zookeeper.connect_string}/t{next(_chroots)}-{name}"


@pytest.fixture
def zk_data_dir(zookeeper: ZooKeeperProcess) -> Path:
    return zookeeper.data_dir


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """A broker shared by the tests of one module (topics are per test: use unique names)."""
    process = BrokerProcess(tmp_path_factory.mktemp("broker")).start()
    try:
        yield process
    finally:
        process.stop()


@pytest.fixture
def new_broker(tmp_path: Path) -> Iterator[Callable[..., BrokerProcess]]:
    """Factory for brokers owned by one test; all are stopped (by PID) afterwards."""
    started: list[BrokerProcess] = []

    def make(overrides: Mapping[str, str] | None = None, **kwargs: object) -> BrokerProcess:
        process = BrokerProcess(tmp_path / f"b{len(started)}", overrides, **kwargs)  # type: ignore[arg-type]
        started.append(process)
        return process.start()

    yield make
    for process in started:
        process.stop()
