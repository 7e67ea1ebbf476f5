"""Bugs the fault harness found, each pinned by the smallest scenario that shows it."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

from tidelog.testing.faults.cluster import FaultCluster

pytestmark = pytest.mark.integration

SESSION_S = 6.0


def _wait(cluster: FaultCluster, what: str, predicate: object, timeout_s: float = 45.0) -> None:
    assert callable(predicate)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.2)
    raise AssertionError(
        f"timed out after {timeout_s}s waiting for {what}: {cluster.partitions('epoch')}"
    )


@pytest.mark.slow  # ~1.5 min (two session expiries)
def test_leader_after_session_expiry_can_still_change_its_isr(tmp_path: Path) -> None:
    """A broker whose ZooKeeper session expired registers again with a new broker epoch
    (czxid) and sends it in AlterPartition: with the old epoch, as a leader it could never
    add a returning follower to the ISR again (STALE_BROKER_EPOCH forever, and acks=all
    refused with min.insync.replicas=2 once the ISR was down to it)."""
    cluster = FaultCluster(
        tmp_path / "cluster",
        overrides={
            "zookeeper.session.timeout.ms": str(int(SESSION_S * 1000)),
            "replica.lag.time.max.ms": "2000",
            "replica.fetch.wait.max.ms": "200",
            "auto.leader.rebalance.enable": "false",
        },
    )
    try:
        cluster.start()
        admin = AdminClient({"bootstrap.servers": cluster.admin_bootstrap})
        admin.create_topics(
            [
                NewTopic(
                    "epoch",
                    num_partitions=1,
                    replica_assignment=[[1, 2, 3]],
                    config={"min.insync.replicas": "2"},
                )
            ]
        )["epoch"].result(timeout=30)
        assert cluster.wait_healthy("epoch", 30.0)
        assert cluster.partitions("epoch")[0].leader_id == 1
        # Broker 1 loses its session (cut from ZooKeeper longer than the session timeout).
        cluster.zk_proxy[1].cut()
        _wait(cluster, "a new leader", lambda: cluster.partitions("epoch")[0].leader_id == 2)
        time.sleep(SESSION_S * 0.5)
        cluster.zk_proxy[1].heal()
        assert cluster.wait_healthy("epoch", 45.0), cluster.partitions("epoch")
        # Broker 1 leads again (first live ISR member in assignment order once 2 dies) ...
        cluster.kill_broker(2)
        _wait(cluster, "broker 1 leading", lambda: cluster.partitions("epoch")[0].leader_id == 1)
        # ... and must be able to add broker 2 back to the ISR itself (AlterPartition).
        cluster.start_broker(2)
        _wait(
            cluster,
            "broker 2 back in the ISR",
            lambda: set(cluster.partitions("epoch")[0].isr) == {1, 2, 3},
        )
        log = (cluster.broker(1).output_path).read_text(encoding="utf-8", errors="replace")
        assert "STALE_BROKER_EPOCH" not in log
    finally:
        cluster.stop()
