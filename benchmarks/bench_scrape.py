"""What a Prometheus scrape costs a broker's event loop, with many hosted partitions.

    .venv/bin/python benchmarks/bench_scrape.py [--partitions 1000,5000] [--scrapes 10]

For each partition count: one broker in this process (on its own, its event loop the
asyncio loop here), a topic of that many partitions created, the heap frozen as the broker
process does after start-up. A ticker task on the loop sleeps 1 ms at a time and records
how late each wake-up was; ``--scrapes`` HTTP scrapes of ``/metrics`` run 200 ms apart. The
same ticker runs as long again with no scrape, so the lateness the machine causes by itself
is printed beside it. Prints, per count: the scrape's wall time (min/median/max), the
longest ticker lateness during the scrapes and during the quiet window, and the answer's
size. Nothing else should run beside it. The broker is the ``tidelog`` the interpreter
imports: set ``PYTHONPATH=<tree>/src`` to measure another tree.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import statistics
import tempfile
import time

from tidelog.server.broker import Broker
from tidelog.server.config.broker_config import load_broker_config


class Ticker:
    """The longest lateness of a 1 ms sleep on the loop since the last ``reset``."""

    def __init__(self) -> None:
        self.worst_s = 0.0
        self._task: asyncio.Task[None] | None = None

    async def _run(self) -> None:
        while True:
            start = time.perf_counter()
            await asyncio.sleep(0.001)
            self.worst_s = max(self.worst_s, time.perf_counter() - start - 0.001)

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run())

    def reset(self) -> None:
        self.worst_s = 0.0

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)


async def scrape(port: int) -> tuple[float, int]:
    start = time.perf_counter()
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"GET /metrics HTTP/1.1\r\n\r\n")
    body = await reader.read()
    writer.close()
    return time.perf_counter() - start, len(body)


async def measure(partitions: int, scrapes: int) -> dict[str, float]:
    directory = tempfile.mkdtemp(prefix="bench-scrape-")
    config = load_broker_config(
        {
            "log.dirs": directory,
            "listeners": "PLAINTEXT://127.0.0.1:0",
            "metrics.listener": "http://127.0.0.1:0",
        }
    )
    broker = Broker(config)
    await broker.start()
    try:
        broker.backend.create_topic_now("scrape-bench", partitions, {})
        gc.collect()
        gc.freeze()
        endpoint = broker.metrics_endpoint
        assert endpoint is not None
        ticker = Ticker()
        ticker.start()
        await asyncio.sleep(1.0)
        ticker.reset()
        times, size = [], 0
        for _ in range(scrapes):
            took, size = await scrape(endpoint.bound_port)
            times.append(took)
            await asyncio.sleep(0.2)
        during = ticker.worst_s
        ticker.reset()
        await asyncio.sleep(sum(times) + 0.2 * scrapes)
        quiet = ticker.worst_s
        await ticker.stop()
    finally:
        await broker.stop()
    return {
        "partitions": partitions,
        "scrape_ms_min": 1000 * min(times),
        "scrape_ms_median": 1000 * statistics.median(times),
        "scrape_ms_max": 1000 * max(times),
        "loop_stall_ms_scraping": 1000 * during,
        "loop_stall_ms_quiet": 1000 * quiet,
        "bytes": size,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--partitions", default="1000,5000")
    parser.add_argument("--scrapes", type=int, default=10)
    args = parser.parse_args()
    print("partitions | scrape ms min/median/max | longest loop stall scraping | quiet | bytes")
    for count in (int(p) for p in args.partitions.split(",")):
        r = asyncio.run(measure(count, args.scrapes))
        print(
            f"{count:,} | {r['scrape_ms_min']:.0f} / {r['scrape_ms_median']:.0f} / "
            f"{r['scrape_ms_max']:.0f} | {r['loop_stall_ms_scraping']:.0f} ms | "
            f"{r['loop_stall_ms_quiet']:.0f} ms | {r['bytes']:,}",
            flush=True,
        )


if __name__ == "__main__":
    main()
