"""A broker whose log dir fills up (a small tmpfs): writes to the partitions it leads are
refused with KAFKA_STORAGE_ERROR (56), the broker stays up, it leaves the ISR of the
partitions it follows, and once space returns it catches up and rejoins; nothing
acknowledged is lost."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

from tidelog.client import BlockingClient, Record, build_batch
from tidelog.errors import ErrorCode
from tidelog.model import TopicPartition
from tidelog.testing.faults.checker import check_histories, check_replicas
from tidelog.testing.faults.cluster import FaultCluster
from tidelog.testing.faults.nemesis import fill
from tidelog.testing.faults.workload import ProducerWorker, final_read

pytestmark = pytest.mark.integration

TOPIC = "disk"


def _until(what: str, predicate: object, timeout_s: float = 45.0) -> None:
    assert callable(predicate)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.2)
    raise AssertionError(f"timed out after {timeout_s}s waiting for {what}")


@pytest.mark.slow  # ~1-2 min; the short run in make test includes disk_full faults
def test_full_log_dir_refuses_writes_with_storage_error_and_recovers(tmp_path: Path) -> None:
    cluster = FaultCluster(
        tmp_path / "cluster",
        overrides={
            "zookeeper.session.timeout.ms": "6000",
            "replica.lag.time.max.ms": "2000",
            "replica.fetch.wait.max.ms": "200",
            "auto.leader.rebalance.enable": "false",
            "min.insync.replicas": "2",
        },
        tmpfs_broker=3,
        tmpfs_size="16m",
    )
    producer: ProducerWorker | None = None
    try:
        cluster.start()
        admin = AdminClient({"bootstrap.servers": cluster.admin_bootstrap})
        # Partition 0 is led by the tmpfs broker 3; it follows partition 1.
        admin.create_topics(
            [NewTopic(TOPIC, num_partitions=2, replica_assignment=[[3, 1, 2], [1, 2, 3]])]
        )[TOPIC].result(timeout=30)
        assert cluster.wait_healthy(TOPIC, 30.0)
        producer = ProducerWorker(cluster.client_bootstrap, TOPIC, 2, 0, interval_s=0.01).start()
        _until("first acks", lambda: producer.acked_count() > 50)

        assert cluster.tmpfs_mount is not None
        filler = cluster.tmpfs_mount / "filler"
        fill(filler)
        answers = []
        with BlockingClient(cluster.broker(3).bootstrap, request_timeout_s=10.0) as client:
            for i in range(40):
                batch = build_batch([Record(value=b"x" * 8192, key=b"%d" % i)])
                result = client.produce(TopicPartition(TOPIC, 0), batch, acks=-1, node_id=3)
                assert result is not None
                answers.append(result.error_code)
                if result.error_code == ErrorCode.KAFKA_STORAGE_ERROR:
                    break
        # What a client sees: Kafka's storage error, on a connection that stays open.
        assert ErrorCode.KAFKA_STORAGE_ERROR in answers, answers
        assert cluster.broker_state(3) == "running"
        # Broker 3 cannot append what it fetches as a follower: it leaves partition 1's ISR,
        # and acks=all keeps working there with the two others.
        _until(
            "broker 3 out of the ISR of partition 1",
            lambda: 3 not in cluster.partitions(TOPIC)[1].isr,
        )
        acked = producer.acked_count()
        _until("acks on partition 1 without broker 3", lambda: producer.acked_count() > acked + 20)

        filler.unlink()
        assert cluster.wait_healthy(TOPIC, 45.0), cluster.partitions(TOPIC)
        acked = producer.acked_count()
        _until("acks after the disk has room again", lambda: producer.acked_count() > acked + 50)
        producer.stop()

        final, hws = final_read(cluster.admin_bootstrap, TOPIC, 2)
        replicas = {p: list(m.replicas) for p, m in cluster.partitions(TOPIC).items()}
        cluster.stop(unmount=False)
        findings = check_histories(producer.history.acks, [], final, hws)
        assert findings.lost_count == 0
        assert findings.failures == {}, findings.summary()
        logs = {b: cluster.log_dir(b) for b in cluster.broker_ids}
        assert check_replicas(logs, TOPIC, hws, replicas) == []
    finally:
        if producer is not None:
            producer.stop(flush_timeout_s=5.0)
        cluster.stop()
