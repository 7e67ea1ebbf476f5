"""A tidelog broker as a real process on a free loopback port, for integration tests.

``BrokerProcess`` writes a ``server.properties``, starts ``python -m tidelog broker`` as a
subprocess, and waits until a real ApiVersions round trip succeeds (not merely until the
port accepts). It stops the broker by its own PID: ``stop()`` sends SIGTERM (clean
shutdown), ``kill()`` SIGKILL (crash). ``restart()`` keeps the log dirs and the port.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import struct
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

READY_TIMEOUT_S = 60.0


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def api_versions_round_trip(host: str, port: int, timeout: float = 2.0) -> bool:
    """One ApiVersions v0 request; True if a well-formed answer with error 0 came back."""
    client_id = b"tidelog-harness"
    body = struct.pack(">hhih", 18, 0, 7, len(client_id)) + client_id
    try:
        with socket.create_connection((host, port), timeout=timeout) as s:
            s.sendall(struct.pack(">i", len(body)) + body)
            header = _recv_exactly(s, 4)
            (size,) = struct.unpack(">i", header)
            payload = _recv_exactly(s, size)
    except OSError:
        return False
    correlation_id, error_code = struct.unpack_from(">ih", payload)
    return correlation_id == 7 and error_code == 0


def _recv_exactly(s: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = s.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("closed")
        buf += chunk
    return bytes(buf)


class BrokerProcess:
    """One broker process; see the module docstring."""

    def __init__(
        self,
        directory: Path,
        overrides: Mapping[str, str] | None = None,
        *,
        broker_id: int = 0,
        event_loop: str = "uvloop",
    ) -> None:
        self.directory = directory
        self.directory.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.host = "127.0.0.1"
        self.broker_id = broker_id
        self.event_loop = event_loop
        self.log_dir = directory / "logs"
        self.properties: dict[str, str] = {
            "broker.id": str(broker_id),
            "listeners": f"PLAINTEXT://{self.host}:{self.port}",
            "log.dirs": str(self.log_dir),
            "num.partitions": "1",
            "replica.high.watermark.checkpoint.interval.ms": "1000",
        }
        self.properties.update(overrides or {})
        self.config_path = directory / "server.properties"
        self.output_path = directory / "broker.out"
        self.process: subprocess.Popen[bytes] | None = None
        self._output = None
        #: SIGSTOPped (``pause``): running, but answers nothing.
        self.paused = False

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    def write_config(self) -> None:
        self.config_path.write_text(
            "".join(f"{k}={v}\n" for k, v in self.properties.items()), encoding="utf-8"
        )

    def command(self, *extra: str) -> list[str]:
        return [
            sys.executable,
            "-m",
            "tidelog",
            "broker",
            "--config",
            str(self.config_path),
            "--event-loop",
            self.event_loop,
            *extra,
        ]

    def start(self, timeout: float = READY_TIMEOUT_S) -> BrokerProcess:
        self.launch()
        return self.wait_ready(timeout)

    def launch(self) -> None:
        """Start the process without waiting (``wait_ready`` waits)."""
        self.write_config()
        output = open(self.output_path, "ab")  # noqa: SIM115 - closed in _signal
        self._output = output
        self.process = subprocess.Popen(
            self.command(), stdout=output, stderr=subprocess.STDOUT, cwd=self.directory
        )

    def wait_ready(self, timeout: float = READY_TIMEOUT_S) -> BrokerProcess:
        assert self.process is not None
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                status = self._signal(signal.SIGKILL, 10.0)
                raise RuntimeError(f"broker exited with {status}:\n{self.output()}")
            if api_versions_round_trip(self.host, self.port):
                return self
            time.sleep(0.1)
        self.kill()
        raise TimeoutError(f"broker not ready after {timeout}s:\n{self.output()}")

    def output(self) -> str:
        try:
            return self.output_path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return ""

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def stop(self, timeout: float = 90.0) -> int:
        """SIGTERM by PID and wait: the clean shutdown path. Returns the exit status.

        The broker bounds its own shutdown (controlled shutdown <= 10 s, demotion wait
        <= 5 s, six close steps <= 5 s each), about 45 s in the worst case; the margin is for
        a two-core machine shared with ZooKeeper, Spark and other brokers."""
        return self._signal(signal.SIGTERM, timeout)

    def kill(self) -> int:
        """SIGKILL by PID: a crash, nothing flushed by the broker."""
        return self._signal(signal.SIGKILL, 30.0)

    def _signal(self, sig: signal.Signals, timeout: float) -> int:
        process = self.process
        if process is None:
            return 0
        if process.poll() is None:
            os.kill(process.pid, sig)
            try:
                process.wait(timeout)
            except subprocess.TimeoutExpired:
                os.kill(process.pid, signal.SIGKILL)
                process.wait(10)
        self.process = None
        if self._output is not None:
            self._output.close()
            self._output = None
        return int(process.returncode)

    def pause(self) -> None:
        """SIGSTOP by PID: the process stops answering but keeps its sockets open."""
        assert self.process is not None
        os.kill(self.process.pid, signal.SIGSTOP)
        self.paused = True

    def resume(self) -> None:
        assert self.process is not None
        os.kill(self.process.pid, signal.SIGCONT)
        self.paused = False

    def restart(self, *, crash: bool = False) -> BrokerProcess:
        if crash:
            self.kill()
        else:
            self.stop()
        return self.start()


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
