"""A real ZooKeeper server (Debian's package) for the tests in this directory.

One server per test session (``zookeeper``); each test gets its own chroot
(``zk_connect`` = ``127.0.0.1:<port>/t<n>-<test name>``) so tests stay independent.
The server is stopped by its PID when the session ends.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from tidelog.cli.zookeeper import ZooKeeperProcess

#: Short session timeouts keep expiry-driven tests quick (PEERS.md: a dead client's session
#: is seen expired about timeout + 2 s later). The server allows 1000..60000 ms.
TEST_SESSION_TIMEOUT_MS = 4000

_chroots = itertools.count()


@pytest.fixture(scope="session")
def zookeeper(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ZooKeeperProcess]:
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
