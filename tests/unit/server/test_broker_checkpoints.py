"""The periodic checkpoints (high watermark, recovery point, log start offset files) are
written off the event loop: each file is fsynced, and an fsync under write load takes
milliseconds to tens of milliseconds, which on the loop would stall every request."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Mapping
from pathlib import Path

from tidelog.model import TopicPartition
from tidelog.server.broker import Broker
from tidelog.server.config.broker_config import load_broker_config


def test_periodic_checkpoints_are_written_in_a_worker_thread(tmp_path: Path) -> None:
    async def body() -> tuple[list[str], str]:
        config = load_broker_config(
            {
                "log.dirs": str(tmp_path / "logs"),
                "listeners": "PLAINTEXT://127.0.0.1:0",
                "replica.high.watermark.checkpoint.interval.ms": "20",
            }
        )
        broker = Broker(config)
        await broker.start()
        writers: list[str] = []
        written = asyncio.Event()
        loop = asyncio.get_running_loop()
        original = broker.log_manager.checkpoint

        def checkpoint(high_watermarks: Mapping[TopicPartition, int]) -> None:
            writers.append(threading.current_thread().name)
            original(high_watermarks)
            loop.call_soon_threadsafe(written.set)

        broker.log_manager.checkpoint = checkpoint  # type: ignore[method-assign]
        try:
            await asyncio.wait_for(written.wait(), 30)
        finally:
            broker.log_manager.checkpoint = original  # type: ignore[method-assign]
            await broker.stop()
        return writers, threading.current_thread().name

    writers, loop_thread = asyncio.run(body())
    assert writers
    assert loop_thread not in writers
