"""One tidelog broker as a real process on a free loopback port, owned by a test.

``BrokerProcess`` writes a ``server.properties``, starts ``python -m tidelog broker`` as a
subprocess (``tidelog.testing.processes``, as ``tidelog.testing.cluster`` does for each of
its brokers), and waits until a real ApiVersions round trip succeeds (not merely until the
port accepts). It stops the broker by its own PID: ``stop()`` sends SIGTERM (clean
shutdown), ``kill()`` SIGKILL (crash). ``restart()`` keeps the log dirs and the port.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path

from tidelog.testing.processes import (
    api_versions_round_trip,
    broker_command,
    free_port,
    spawn_broker,
    write_properties,
)

READY_TIMEOUT_S = 60.0


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
        #: SIGSTOPped (``pause``): running, but answers nothing.
        self.paused = False

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    def write_config(self) -> None:
        write_properties(self.config_path, self.properties)

    def command(self, *extra: str) -> list[str]:
        return [*broker_command(sys.executable, self.config_path, self.event_loop), *extra]

    def start(self, timeout: float = READY_TIMEOUT_S) -> BrokerProcess:
        self.launch()
        return self.wait_ready(timeout)

    def launch(self) -> None:
        """Start the process without waiting (``wait_ready`` waits)."""
        self.write_config()
        self.process = spawn_broker(self.command(), self.output_path, self.directory)

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
