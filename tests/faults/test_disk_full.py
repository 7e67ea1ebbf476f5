"""A broker whose log dir fills up (a small tmpfs) takes the dir offline (Kafka's log dir
failure, KIP-112): its appends are refused with KAFKA_STORAGE_ERROR (56), the controller
moves the partitions it led to a clean successor and takes it out of every ISR, so writes
go on through the other two brokers; once space returns it catches up and rejoins every
ISR without a restart. Nothing acknowledged is lost."""

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


def _acked_on(producer: ProducerWorker, partition: int) -> int:
    return sum(1 for a in list(producer.history.acks) if a.partition == partition)


def test_full_log_dir_goes_offline_moves_leaders_and_comes_back(tmp_path: Path) -> None:
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
        # What a client sees first: Kafka's storage error, on a connection that stays open,
        # from a broker that stays up.
        assert ErrorCode.KAFKA_STORAGE_ERROR in answers, answers
        assert cluster.broker_state(3) == "running"

        # The controller moves partition 0 to a clean successor and takes broker 3 out of
        # every ISR (it cannot append what it fetches either).
        _until(
            "partition 0 led by another broker",
            lambda: cluster.partitions(TOPIC)[0].leader_id in (1, 2),
            timeout_s=20.0,
        )
        _until(
            "broker 3 out of every ISR",
            lambda: all(3 not in p.isr for p in cluster.partitions(TOPIC).values()),
            timeout_s=20.0,
        )
        parts = cluster.partitions(TOPIC)
        new_leader = parts[0].leader_id
        assert set(parts[0].isr) == {1, 2}, parts
        # Broker 3 now answers as a follower: clients go to the new leader, whose acks=all
        # writes succeed with the two in-sync replicas (min.insync.replicas=2).
        with BlockingClient(cluster.broker(3).bootstrap, request_timeout_s=10.0) as client:
            result = client.produce(
                TopicPartition(TOPIC, 0), build_batch([Record(value=b"y")]), acks=-1, node_id=3
            )
            assert result is not None
            assert result.error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER
        with BlockingClient(cluster.broker(new_leader).bootstrap, request_timeout_s=10.0) as c:
            result = c.produce(
                TopicPartition(TOPIC, 0),
                build_batch([Record(value=b"z")]),
                acks=-1,
                node_id=new_leader,
            )
            assert result is not None
            assert result.error_code == ErrorCode.NONE
        for partition in (0, 1):
            acked = _acked_on(producer, partition)
            _until(
                f"acks on partition {partition} while broker 3's disk is full",
                lambda p=partition, a=acked: _acked_on(producer, p) > a + 20,
            )
        assert cluster.broker_state(3) == "running"

        # Room again: without a restart broker 3 catches up and rejoins every ISR.
        filler.unlink()
        assert cluster.wait_healthy(TOPIC, 45.0), cluster.unhealthy_because(TOPIC)
        assert cluster.broker_state(3) == "running"
        acked = producer.acked_count()
        _until("acks after the disk has room again", lambda: producer.acked_count() > acked + 50)
        producer.stop()

        final, hws = final_read(cluster.admin_bootstrap, TOPIC, 2)
        replicas = {p: list(m.replicas) for p, m in cluster.partitions(TOPIC).items()}
        cluster.stop(unmount=False)
        # The producer is not idempotent: across the leader change a batch retried after
        # KAFKA_STORAGE_ERROR may land after a later one (reported, not a failure).
        findings = check_histories(
            producer.history.acks, [], final, hws, producer_order_guaranteed=False
        )
        assert findings.lost_count == 0
        assert findings.failures == {}, findings.summary()
        logs = {b: cluster.log_dir(b) for b in cluster.broker_ids}
        assert check_replicas(logs, TOPIC, hws, replicas) == []
    finally:
        if producer is not None:
            producer.stop(flush_timeout_s=5.0)
        cluster.stop()


@pytest.mark.slow  # ~60 s
def test_a_new_controller_learns_of_a_full_log_dir(tmp_path: Path) -> None:
    """Broker 3's disk is full and the controller (another broker) dies: broker 3 reports its
    offline dir again to the new controller (which knows nothing of the first report); the
    dead broker comes back and rejoins; after space returns broker 3 does too; nothing
    acknowledged is lost."""
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
        admin.create_topics(
            [
                NewTopic(
                    TOPIC, num_partitions=3, replica_assignment=[[3, 1, 2], [1, 2, 3], [2, 3, 1]]
                )
            ]
        )[TOPIC].result(timeout=30)
        assert cluster.wait_healthy(TOPIC, 30.0)
        if cluster.controller() == 3:  # move the controller off the broker whose disk fills
            cluster.stop_broker(3)
            cluster.start_broker(3)
            assert cluster.wait_healthy(TOPIC, 45.0)
        producer = ProducerWorker(cluster.client_bootstrap, TOPIC, 3, 0, interval_s=0.01).start()
        _until("first acks", lambda: producer.acked_count() > 50)
        assert cluster.tmpfs_mount is not None
        filler = cluster.tmpfs_mount / "filler"
        fill(filler)
        # Nothing is written to broker 3 until the producer's next batch for partition 0.
        _until(
            "broker 3 leads nothing and is in no ISR",
            lambda: all(
                p.leader_id != 3 and 3 not in p.isr for p in cluster.partitions(TOPIC).values()
            ),
        )
        controller = cluster.controller()
        assert controller in (1, 2)
        cluster.kill_broker(controller)
        _until("a new controller", lambda: cluster.controller() not in (None, controller))
        new_controller = cluster.controller()
        assert new_controller is not None
        # The new controller heard broker 3's report again (its own log says so).
        log_file = cluster.broker(new_controller).output_path
        _until(
            "the new controller marks broker 3 offline",
            lambda: "log dir offline on brokers [3]" in log_file.read_text(errors="replace"),
            timeout_s=20.0,
        )
        cluster.start_broker(controller)
        _until(
            f"broker {controller} back in every ISR, broker 3 still out",
            lambda: all(
                controller in p.isr and 3 not in p.isr for p in cluster.partitions(TOPIC).values()
            ),
        )
        filler.unlink()
        assert cluster.wait_healthy(TOPIC, 45.0), cluster.unhealthy_because(TOPIC)
        acked = producer.acked_count()
        _until("acks after the disk has room again", lambda: producer.acked_count() > acked + 50)
        producer.stop()
        final, hws = final_read(cluster.admin_bootstrap, TOPIC, 3)
        # The producer is not idempotent: across the leader change a batch retried after
        # KAFKA_STORAGE_ERROR may land after a later one (reported, not a failure).
        findings = check_histories(
            producer.history.acks, [], final, hws, producer_order_guaranteed=False
        )
        assert findings.lost_count == 0
        assert findings.failures == {}, findings.summary()
    finally:
        if producer is not None:
            producer.stop(flush_timeout_s=5.0)
        cluster.stop()
