"""ZooKeeper tests: the server fixtures (``zookeeper``, ``zk_connect``, ``zk_data_dir``) live
in ``tests/integration/conftest.py``, shared with the cluster tests."""

from __future__ import annotations

#: Short session timeouts keep expiry-driven tests quick (PEERS.md: a dead client's session
#: is seen expired about timeout + 2 s later). The server allows 1000..60000 ms.
TEST_SESSION_TIMEOUT_MS = 4000
