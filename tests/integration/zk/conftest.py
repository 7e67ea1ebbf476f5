"""ZooKeeper tests: the server fixtures (``zookeeper``, ``zk_connect``, ``zk_data_dir``) live
in ``tests/integration/conftest.py``, shared with the cluster tests."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import TypeVar

from tidelog.zk import ZkClient

#: Short session timeouts keep expiry-driven tests quick (PEERS.md: a dead client's session
#: is seen expired about timeout + 2 s later). The server allows 1000..60000 ms.
TEST_SESSION_TIMEOUT_MS = 4000


T = TypeVar("T")


def run(coro: Awaitable[T]) -> T:
    """Run one coroutine to completion in a new event loop."""

    async def main() -> T:
        return await coro

    return asyncio.run(main())


async def connect(zk_connect: str) -> ZkClient:
    return await ZkClient.connect(zk_connect, session_timeout_ms=TEST_SESSION_TIMEOUT_MS)
