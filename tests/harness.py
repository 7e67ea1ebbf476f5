"""The integration tests' fixtures over ``tidelog.testing``: brokers as real processes
(``BrokerProcess``, ``tidelog.testing.broker``), a cluster of them sharing one ZooKeeper
(``BrokerCluster``, with short timeouts and Metadata through tidelog's own client), and
``wait_until``. Ports (``free_port``) and the readiness probe (``api_versions_round_trip``)
are ``tidelog.testing.processes``'.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from tidelog.testing.broker import BrokerProcess
from tidelog.testing.processes import api_versions_round_trip, free_port

__all__ = [
    "CLUSTER_TEST_OVERRIDES",
    "BrokerCluster",
    "BrokerProcess",
    "api_versions_round_trip",
    "free_port",
    "wait_until",
]

#: Short timeouts for cluster tests (the brief: ~6 s sessions, ~3 s replica lag).
CLUSTER_TEST_OVERRIDES: Mapping[str, str] = {
    "zookeeper.session.timeout.ms": "6000",
    "replica.lag.time.max.ms": "3000",
    "replica.fetch.wait.max.ms": "200",
    "replica.fetch.backoff.ms": "200",
    "default.replication.factor": "3",
    "min.insync.replicas": "2",
    "auto.leader.rebalance.enable": "false",
    # Any consumer with a group.id creates __consumer_offsets; 5 partitions instead of Kafka's
    # 50 keep the cluster tests' brokers light (the partition count is not what they test).
    "offsets.topic.num.partitions": "5",
}


def wait_until(
    predicate: Callable[[], object], timeout: float, what: str, interval: float = 0.1
) -> object:
    """Poll ``predicate`` until it returns something other than None/False (0 counts as an
    answer: broker 0 is a leader id); fail naming ``what``."""
    deadline = time.monotonic() + timeout
    last_error: Exception | None = None
    while time.monotonic() < deadline:
        try:
            result = predicate()
        except Exception as exc:
            last_error = exc
            result = None
        if result is not None and result is not False:
            return result
        time.sleep(interval)
    raise AssertionError(
        f"timed out after {timeout}s waiting for {what} (last error: {last_error})"
    )


class BrokerCluster:
    """N broker processes sharing one ZooKeeper (``zk_connect``, with its own chroot)."""

    def __init__(
        self,
        directory: Path,
        zk_connect: str,
        size: int = 3,
        overrides: Mapping[str, str] | None = None,
    ) -> None:
        props = {"zookeeper.connect": zk_connect, **CLUSTER_TEST_OVERRIDES, **(overrides or {})}
        self.brokers = [
            BrokerProcess(directory / f"broker{i}", props, broker_id=i) for i in range(size)
        ]

    def __enter__(self) -> BrokerCluster:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def start(self) -> BrokerCluster:
        try:
            for b in self.brokers:
                b.launch()
            for b in self.brokers:
                b.wait_ready()
            self.wait_for_live(len(self.brokers))
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        """Every broker stopped by its PID (SIGKILL: teardown need not be graceful)."""
        for b in self.brokers:
            if b.process is not None:
                with contextlib.suppress(OSError):
                    b.resume()
                b.kill()

    def broker(self, broker_id: int) -> BrokerProcess:
        return self.brokers[broker_id]

    def log_excerpt(self, lines: int = 60, width: int = 300) -> str:
        """The last ``lines`` lines of each broker's output (ZooKeeper client chatter left
        out), for a failing test's report."""
        parts: list[str] = []
        for b in self.brokers:
            kept = [line[:width] for line in b.output().splitlines() if " kazoo." not in line]
            parts.append(f"== broker {b.broker_id} ({b.output_path}) ==")
            parts.extend(kept[-lines:])
        return "\n".join(parts)

    @property
    def alive(self) -> list[BrokerProcess]:
        """Brokers running and not paused."""
        return [b for b in self.brokers if b.alive() and not b.paused]

    @property
    def bootstrap(self) -> str:
        return ",".join(b.bootstrap for b in self.brokers)

    def metadata(self, topics: list[str] | None = None, via: BrokerProcess | None = None) -> Any:
        """Metadata as one (live) broker answers it (tidelog's own client)."""
        from tidelog.client import BlockingClient

        source = via or self.alive[0]
        with BlockingClient(source.bootstrap, request_timeout_s=5.0) as client:
            return client.metadata(topics)

    def wait_for_live(self, n: int, timeout: float = 60.0) -> None:
        """Until every live broker's metadata lists ``n`` brokers."""

        def ok() -> bool:
            return all(len(self.metadata(via=b).brokers) == n for b in self.alive)

        wait_until(ok, timeout, f"{n} live brokers in every broker's metadata")

    def partition(self, topic: str, partition: int = 0, via: BrokerProcess | None = None) -> Any:
        return self.metadata([topic], via=via).topics[topic].partitions[partition]

    def wait_for_leader(
        self,
        topic: str,
        partition: int = 0,
        *,
        not_in: tuple[int, ...] = (),
        timeout: float = 60.0,
    ) -> int:
        def leader() -> int | None:
            p = self.partition(topic, partition)
            ok = p.leader_id >= 0 and p.leader_id not in not_in
            return p.leader_id if ok else None

        found = wait_until(leader, timeout, f"a leader of {topic}-{partition} not in {not_in}")
        assert isinstance(found, int)
        return found
