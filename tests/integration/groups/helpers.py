"""Group members as processes (``member.py``) and small client helpers for the group tests."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tests.harness import wait_until

ROOT = Path(__file__).resolve().parents[3]

#: Broker settings that make group tests quick: no initial delay, short sessions allowed,
#: few offsets partitions (50 logs per broker cost start-up time on a loaded machine).
GROUP_OVERRIDES: Mapping[str, str] = {
    "group.initial.rebalance.delay.ms": "0",
    "group.min.session.timeout.ms": "1000",
    "offsets.topic.num.partitions": "5",
}


class Member:
    """A consumer group member process; its JSON lines are collected by a reader thread."""

    def __init__(
        self, client: str, bootstrap: str, group: str, topic: str, *, records: bool = False
    ) -> None:
        self.client = client
        command = [
            sys.executable,
            "-m",
            "tests.integration.groups.member",
            client,
            bootstrap,
            group,
            topic,
        ]
        if records:
            command.append("--records")
        self._stderr = tempfile.TemporaryFile()  # noqa: SIM115 - closed in _finish
        self.process = subprocess.Popen(
            command,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            cwd=ROOT,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
        )
        self.lines: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for raw in self.process.stdout:
            try:
                line = json.loads(raw)
            except ValueError:
                continue
            with self._lock:
                self.lines.append(line)

    @property
    def assignment(self) -> list[int]:
        with self._lock:
            for line in reversed(self.lines):
                if "assignment" in line:
                    return list(line["assignment"])
        return []

    @property
    def records(self) -> list[tuple[int, int]]:
        with self._lock:
            return [tuple(line["record"]) for line in self.lines if "record" in line]  # type: ignore[misc]

    def leave(self, timeout: float = 30.0) -> int:
        """SIGTERM: the member closes its consumer (LeaveGroup) and exits."""
        self.process.send_signal(signal.SIGTERM)
        code = self.process.wait(timeout)
        self._finish()
        return code

    def kill(self) -> None:
        """SIGKILL: the member vanishes without a word; only its session can expire."""
        self.process.kill()
        self.process.wait(10)
        self._finish()

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(10)
        self._finish()

    def _finish(self) -> None:
        self._reader.join(10)
        if self.process.stdout is not None:
            self.process.stdout.close()
        self._stderr.close()

    def __str__(self) -> str:
        """What the member said (last lines of stdout and stderr), for failure messages."""
        with self._lock:
            said = self.lines[:3] + self.lines[-8:]
        err = b""
        if not self._stderr.closed:
            self._stderr.seek(0)
            err = self._stderr.read()[-3000:]
        return f"{self.client} member: last lines {said}; stderr: {err.decode(errors='replace')}"


def wait_for_split(members: list[Member], partitions: int, timeout: float = 60.0) -> None:
    """Until the members' assignments are non-empty, disjoint and cover every partition."""

    def split() -> bool:
        assignments = [m.assignment for m in members]
        flat = sorted(p for a in assignments for p in a)
        return all(assignments) and flat == list(range(partitions))

    wait_until(
        split,
        timeout,
        f"{partitions} partitions split over {[m.client for m in members]} "
        f"(now {[m.assignment for m in members]})",
        interval=0.2,
    )


def create_topic(bootstrap: str, topic: str, partitions: int, replication_factor: int = 1) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, partitions, replication_factor)])[topic].result(30)


def produce(bootstrap: str, topic: str, partitions: int, per_partition: int) -> None:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    for p in range(partitions):
        for i in range(per_partition):
            producer.produce(topic, f"{p}-{i}".encode(), partition=p)
    assert producer.flush(30) == 0
