"""A replica fetcher retrying a refused connection ends on one cancel.

On CPython 3.11 ``asyncio.wait_for`` lost a cancellation that arrived in the loop iteration
after the awaited connect had failed; the fetcher then retried forever. ``cancel_and_wait``
repeats its cancel, but ``asyncio.run`` cancels what is left once: a broker whose fetcher
outlived its stop hung after "shut down cleanly" until SIGKILL. The cancel comes at varied
moments of the retry loop (connect refused, backoff) so that the race is hit many times.
"""

from __future__ import annotations

import asyncio
import random
import socket
from pathlib import Path

from tidelog.model import TopicPartition
from tidelog.server.cluster.fetcher import FetchState, LeaderFetcher

from .nodes import cluster_node


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_one_cancel_ends_a_fetcher_whenever_it_comes(tmp_path: Path) -> None:
    node = cluster_node(tmp_path, replica_fetch_backoff_ms="1")
    port = _closed_port()
    rng = random.Random(5000)

    async def body() -> int:
        hung = 0
        for _ in range(300):
            fetcher = LeaderFetcher(node, 2, "127.0.0.1", port)
            fetcher.partitions[TopicPartition("t", 0)] = FetchState(0)
            fetcher.start()
            await asyncio.sleep(rng.random() * 0.005)
            task = fetcher.task
            assert task is not None
            task.cancel()  # once, as asyncio.run does with the tasks left at its end
            done, _ = await asyncio.wait([task], timeout=0.5)
            if not done:
                hung += 1
                # It retries on. With nothing to fetch it waits for work, where a cancel
                # cannot be lost: end it so that the event loop can close.
                fetcher.partitions.clear()
                while not task.done():
                    task.cancel()
                    await asyncio.wait([task], timeout=0.1)
        return hung

    assert asyncio.run(body()) == 0
