"""An ISR change the controller applied after the leader's request had timed out
(replication rule 5a). Found by `tidelog bench`: a leader that took the timeout for "not
applied" kept an ISR the controller no longer had, every later change of it was refused with
INVALID_UPDATE_VERSION, and the controller's ISR stayed shrunk to the leader for good."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

from tests.harness import BrokerCluster, wait_until
from tests.integration.cluster.helpers import produce, wait_for_isr
from tidelog.testing.zookeeper import ZooKeeperProcess

pytestmark = pytest.mark.integration

TOPIC = "lost-answer"


def test_isr_change_applied_after_the_leaders_timeout_is_learned(tmp_path: Path) -> None:
    # A ZooKeeper of this test's own: it is paused (SIGSTOP, by its PID) so that the
    # controller's write of the leader's ISR change waits past the leader's 10 s timeout and
    # is applied after it gave up. Sessions of 30 s survive the pause.
    zookeeper = ZooKeeperProcess(tmp_path / "zk", tick_time_ms=250)
    zookeeper.start()
    cluster = BrokerCluster(
        tmp_path / "cluster",
        f"{zookeeper.connect_string}/lost",
        3,
        {"zookeeper.session.timeout.ms": "30000", "replica.lag.time.max.ms": "2000"},
    )
    zk_paused = False
    try:
        cluster.start()
        controller_id = cluster.metadata([]).controller_id
        leader_id = next(b.broker_id for b in cluster.brokers if b.broker_id != controller_id)
        third_id = ({0, 1, 2} - {controller_id, leader_id}).pop()
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
        admin.create_topics(
            [
                NewTopic(
                    TOPIC,
                    num_partitions=1,
                    replica_assignment=[[leader_id, controller_id, third_id]],
                    config={"min.insync.replicas": "1"},
                )
            ]
        )[TOPIC].result(timeout=30)
        wait_for_isr(cluster, TOPIC, {0, 1, 2})
        leader = cluster.broker(leader_id)
        third = cluster.broker(third_id)
        zk_pid = zookeeper.pid
        assert zk_pid is not None
        os.kill(zk_pid, signal.SIGSTOP)
        zk_paused = True
        third.pause()
        try:
            produce(leader.bootstrap, TOPIC, [b"while-paused-%d" % i for i in range(5)], acks="1")
            wait_until(lambda: "proposing ISR shrink" in leader.output(), 30, "a shrink proposal")
            wait_until(
                lambda: "AlterPartition failed" in leader.output(), 30, "its request to time out"
            )
        finally:
            os.kill(zk_pid, signal.SIGCONT)
            zk_paused = False
            third.resume()
        # The controller wrote the shrink once ZooKeeper woke up; the leader must learn it
        # (its retry is answered with the state in force) and bring the follower back in.
        # Every broker's metadata (the controller's UpdateMetadata), not one cache.
        wait_until(
            lambda: all(
                set(cluster.partition(TOPIC, via=b).isr) == {0, 1, 2} for b in cluster.brokers
            ),
            60,
            "every broker to see the full ISR again",
        )
        assert "INVALID_UPDATE_VERSION" not in leader.output()
        produce(cluster.bootstrap, TOPIC, [b"after"], acks="all")
    finally:
        if zk_paused and zookeeper.pid is not None:
            os.kill(zookeeper.pid, signal.SIGCONT)
        cluster.stop()
        zookeeper.stop()
