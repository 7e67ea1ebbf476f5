"""``tidelog cluster`` with real ZooKeeper + 3 broker processes, driven as subprocesses.

One scenario (starting a cluster is the expensive part): up -> status -> create an RF 3
topic -> produce/consume -> SIGKILL a leader -> describe shows the shrunken ISR and the
new leader -> start it again -> preferred election moves leadership back -> pause/resume
-> down, after which no recorded process runs.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from tests.integration.cli.conftest import Tidelog
from tidelog.cli.launcher import LocalCluster
from tidelog.testing.processes import process_state

pytestmark = pytest.mark.integration


def _describe(tidelog: Tidelog, d: str, topic: str) -> dict[str, object]:
    result = tidelog("topics", "describe", "--dir", d, "--topic", topic, "--json")
    assert result.returncode == 0, result.stderr
    topics = json.loads(result.stdout)["topics"]
    assert isinstance(topics, list)
    return topics[0]  # type: ignore[no-any-return]


def _wait_for(
    tidelog: Tidelog, d: str, topic: str, ok: object, timeout: float = 60.0
) -> dict[str, object]:
    deadline = time.monotonic() + timeout
    while True:
        described = _describe(tidelog, d, topic)
        if ok(described):  # type: ignore[operator]
            return described
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not reached; last describe: {described}")
        time.sleep(0.5)


def test_cluster_lifecycle_and_failover(tmp_path: Path, tidelog: Tidelog) -> None:
    d = str(tmp_path / "cluster")
    up = tidelog("cluster", "up", "--brokers", "3", "--dir", d, "--json", timeout=180)
    try:
        assert up.returncode == 0, up.stderr
        status = json.loads(tidelog("cluster", "status", "--dir", d, "--json").stdout)
        assert [b["id"] for b in status["brokers"]] == [1, 2, 3]
        assert all(b["alive"] and b["metadata_brokers"] == [1, 2, 3] for b in status["brokers"])
        assert status["controller_id"] in (1, 2, 3)
        assert status["zookeeper"]["state"] == "running"

        again = tidelog("cluster", "up", "--dir", d)
        assert again.returncode == 1
        assert "a cluster is already running in" in again.stderr

        created = tidelog(
            "topics", "create", "--dir", d, "--topic", "orders", "--partitions", "3",
            "--replication-factor", "3", "--config", "min.insync.replicas=2",
        )  # fmt: skip
        assert created.returncode == 0, created.stderr
        lines = "\n".join(f"o-{i}:order {i}" for i in range(60)) + "\n"
        produced = tidelog("produce", "--dir", d, "--topic", "orders", "--key-separator", ":",
                           input=lines)  # fmt: skip
        assert produced.returncode == 0, produced.stderr

        full = _wait_for(
            tidelog, d, "orders",
            lambda t: all(
                len(p["isr"]) == 3 and all(r["lag"] == 0 for r in p["replica_states"])
                for p in t["partitions"]
            ),
        )  # fmt: skip
        assert full["replication_factor"] == 3
        assert full["configs"] == {"min.insync.replicas": "2"}
        hws = [p["high_watermark"] for p in full["partitions"]]
        assert sum(hws) == 60
        for p in full["partitions"]:
            assert {r["log_end_offset"] for r in p["replica_states"]} == {p["high_watermark"]}

        # The text form: kafka-topics' lines plus replica lines.
        text = tidelog("topics", "describe", "--dir", d, "--topic", "orders").stdout
        assert "\tPartitionCount: 3\tReplicationFactor: 3\tConfigs: min.insync.replicas=2" in text
        assert "\t\tReplica: " in text
        assert "\tLEO: " in text

        victim = full["partitions"][0]["leader"]
        killed = tidelog("cluster", "kill", str(victim), "--dir", d)
        assert killed.stdout.strip() == f"broker {victim} killed (SIGKILL)"
        shrunk = _wait_for(
            tidelog, d, "orders",
            lambda t: all(victim not in p["isr"] and p["leader"] != victim
                          for p in t["partitions"]),
        )  # fmt: skip
        assert all(p["under_replicated"] for p in shrunk["partitions"])
        under = tidelog("topics", "describe", "--dir", d, "--under-replicated-partitions")
        assert under.stdout.count("\tTopic: orders\tPartition: ") == 3
        assert tidelog("topics", "describe", "--dir", d, "--unavailable-partitions").stdout == ""

        consumed = tidelog("consume", "--dir", d, "--topic", "orders", "--from-beginning",
                           "--max-messages", "60", "--print-key")  # fmt: skip
        assert consumed.returncode == 0, consumed.stderr
        assert sorted(consumed.stdout.splitlines()) == sorted(
            f"o-{i}\torder {i}" for i in range(60)
        )

        status = json.loads(tidelog("cluster", "status", "--dir", d, "--json").stdout)
        states = {b["id"]: b["state"] for b in status["brokers"]}
        assert states[victim] == "stopped"

        started = tidelog("cluster", "start", str(victim), "--dir", d)
        assert started.returncode == 0, started.stderr
        _wait_for(tidelog, d, "orders",
                  lambda t: all(len(p["isr"]) == 3 for p in t["partitions"]))  # fmt: skip
        elected = tidelog("elect-leaders", "--dir", d, "--preferred", "--topic", "orders")
        assert elected.returncode == 0, elected.stdout + elected.stderr
        assert "Successfully completed leader election (PREFERRED) for partitions" in elected.stdout
        back = _describe(tidelog, d, "orders")
        assert all(p["leader"] == p["replicas"][0] for p in back["partitions"])

        paused = tidelog("cluster", "pause", "3", "--dir", d)
        assert paused.stdout.strip() == "broker 3 paused (SIGSTOP)"
        status = json.loads(tidelog("cluster", "status", "--dir", d, "--json").stdout)
        assert {b["id"]: (b["state"], b["alive"]) for b in status["brokers"]}[3] == (
            "paused",
            False,
        )
        assert tidelog("cluster", "resume", "3", "--dir", d).returncode == 0
        status = json.loads(tidelog("cluster", "status", "--dir", d, "--json").stdout)
        assert {b["id"]: b["state"] for b in status["brokers"]}[3] == "running"

        unknown = tidelog("cluster", "kill", "9", "--dir", d)
        assert unknown.returncode == 1
        assert "no broker 9 in this cluster (brokers: 1, 2, 3)" in unknown.stderr
    finally:
        cluster = LocalCluster.attach(Path(d))
        down = tidelog("cluster", "down", "--dir", d)
        assert down.returncode == 0, down.stderr
        state = cluster.state
        assert state is not None
        config_markers = [(b.pid, str(b.config_path)) for b in state.brokers]
        assert all(process_state(pid, marker) == "stopped" for pid, marker in config_markers)
        assert cluster.zookeeper_state() == "stopped"
