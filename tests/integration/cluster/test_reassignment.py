"""Partition reassignment (KIP-455) on three real brokers, asked with kafka-python's
KafkaAdminClient (AlterPartitionReassignments / ListPartitionReassignments) or through
``/admin/reassign_partitions`` in ZooKeeper, while confluent-kafka produces with acks=all."""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from kafka import TopicPartition as KTopicPartition
from kafka.admin import KafkaAdminClient
from kafka.errors import (
    InvalidReplicationAssignmentError,
    NoReassignmentInProgressError,
    UnknownTopicOrPartitionError,
)
from kazoo.client import KazooClient

from tests.harness import BrokerCluster, wait_until
from tests.integration.cluster.helpers import BackgroundProducer, consume_all

pytestmark = pytest.mark.integration


def create_assigned(
    cluster: BrokerCluster,
    name: str,
    assignment: list[list[int]],
    config: dict[str, str] | None = None,
) -> None:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    futures = admin.create_topics(
        [
            NewTopic(
                name,
                num_partitions=len(assignment),
                replica_assignment=assignment,
                config=config or {},
            )
        ]
    )
    futures[name].result(timeout=30)
    for p in range(len(assignment)):
        cluster.wait_for_leader(name, p)


def kadmin(cluster: BrokerCluster) -> KafkaAdminClient:
    return KafkaAdminClient(bootstrap_servers=cluster.bootstrap, request_timeout_ms=30000)


def wait_reassigned(
    cluster: BrokerCluster, topic: str, targets: dict[int, list[int]], timeout: float = 90.0
) -> None:
    """Until no partition of ``topic`` is listed as reassigning and every partition's
    replicas are its target, in every live broker's metadata."""
    admin = kadmin(cluster)
    seen: list[str] = []  # the last look, for the failure message
    try:

        def done() -> bool:
            ongoing = admin.list_partition_reassignments(
                [KTopicPartition(topic, p) for p in targets]
            )
            views = {
                b.broker_id: {
                    p: (list(m.replicas), list(m.isr), m.leader_id)
                    for p in targets
                    for m in [cluster.partition(topic, p, via=b)]
                }
                for b in cluster.alive
            }
            seen[:] = [f"ongoing {ongoing}; (replicas, isr, leader) by broker {views}"]
            return not ongoing and all(
                view[p][0] == target for view in views.values() for p, target in targets.items()
            )

        try:
            wait_until(done, timeout, f"reassignment of {topic} to {targets}", interval=0.3)
        except AssertionError as exc:
            raise AssertionError(f"{exc}; last seen: {seen}") from None
    finally:
        admin.close()


def has_log(broker_dir: Path, topic: str, partition: int) -> bool:
    return any(broker_dir.glob(f"**/{topic}-{partition}"))


def test_move_a_partition_under_an_acks_all_producer(cluster: BrokerCluster) -> None:
    """[0, 1] -> [1, 2]: 2 joins, leadership leaves 0, 0's replica is deleted; no
    acknowledged record is lost and the producer sees no error."""
    create_assigned(cluster, "mv", [[0, 1]])
    with BackgroundProducer(cluster.bootstrap, "mv") as producer:
        producer.wait_for_acks(300)
        admin = kadmin(cluster)
        try:
            result = admin.alter_partition_reassignments({KTopicPartition("mv", 0): [1, 2]})
            assert result == {KTopicPartition("mv", 0): None}
        finally:
            admin.close()
        wait_reassigned(cluster, "mv", {0: [1, 2]})
        producer.wait_for_acks(300)
    assert not producer.failed, producer.failed[:3]
    p = cluster.partition("mv")
    assert p.leader_id in (1, 2)
    assert set(p.isr) == {1, 2}
    consumed = consume_all(cluster.bootstrap, "mv", len(producer.acked))
    assert set(producer.acked) <= set(consumed)
    wait_until(
        lambda: not has_log(cluster.broker(0).log_dir, "mv", 0),
        30,
        "the removed replica's log to be deleted",
    )
    assert has_log(cluster.broker(2).log_dir, "mv", 0)


def test_list_shows_a_running_reassignment_and_cancel_restores_the_replicas(
    new_cluster: Callable[..., BrokerCluster], zk_connect: str
) -> None:
    """The added replica cannot catch up: replication is throttled to 1 byte/s (KIP-73; only
    replicas outside the ISR are held back) and a follower fetch carries at most 16 KiB, so
    after its first fetch the new replica waits. Every broker stays up and answering (a
    SIGSTOPped target made kafka-python's metadata requests to it time out). The start and
    the cancel each move the partition epoch (the state znode's version) and keep the
    leader epoch (``decisions.on_replicas_changed``)."""
    cluster = new_cluster(
        overrides={
            "leader.replication.throttled.rate": "1",
            "follower.replication.throttled.rate": "1",
            "replica.fetch.max.bytes": "16384",
        }
    )
    throttled = {
        "leader.replication.throttled.replicas": "*",
        "follower.replication.throttled.replicas": "*",
    }
    create_assigned(cluster, "cx", [[0, 1]], throttled)
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all"})
    for i in range(100):
        producer.produce("cx", b"%04d" % i + b"x" * 2000)
    assert producer.flush(60) == 0
    zk = KazooClient(hosts=zk_connect)
    zk.start(timeout=30)
    admin = kadmin(cluster)
    try:
        before = partition_state(zk, "cx")
        tp = KTopicPartition("cx", 0)
        assert admin.alter_partition_reassignments({tp: [1, 2]}) == {tp: None}
        started = partition_state(zk, "cx")
        assert started == (before[0] + 1, before[1]), (before, started)
        ongoing = admin.list_partition_reassignments([tp])
        assert ongoing == {
            tp: {"replicas": [1, 2, 0], "adding_replicas": [2], "removing_replicas": [0]}
        }
        assert admin.list_partition_reassignments() == ongoing
        time.sleep(2)  # still running: the new replica is held back
        assert admin.list_partition_reassignments() == ongoing
        assert admin.alter_partition_reassignments({tp: None}) == {tp: None}
        assert partition_state(zk, "cx") == (started[0] + 1, before[1])
        assert admin.list_partition_reassignments() == {}
        # Cancelling twice: nothing is running any more.
        assert admin.alter_partition_reassignments({tp: None}) == {
            tp: NoReassignmentInProgressError
        }
    finally:
        admin.close()
        zk.stop()
        zk.close()
    wait_until(
        lambda: all(
            sorted(cluster.partition("cx", via=x).replicas) == [0, 1]
            and set(cluster.partition("cx", via=x).isr) == {0, 1}
            for x in cluster.brokers
        ),
        30,
        "every broker's metadata to show the original replicas",
    )
    wait_until(
        lambda: not has_log(cluster.broker(2).log_dir, "cx", 0),
        30,
        "the cancelled replica's log to be deleted",
    )


def test_bad_reassignments_get_kafkas_errors(cluster: BrokerCluster) -> None:
    create_assigned(cluster, "bad", [[0, 1]])
    admin = kadmin(cluster)
    try:
        tp = KTopicPartition("bad", 0)
        assert admin.alter_partition_reassignments(
            {
                tp: [1, 1],
                KTopicPartition("bad", 5): [0, 1],
                KTopicPartition("nope", 0): [0, 1],
            }
        ) == {
            tp: InvalidReplicationAssignmentError,
            KTopicPartition("bad", 5): UnknownTopicOrPartitionError,
            KTopicPartition("nope", 0): UnknownTopicOrPartitionError,
        }
        assert admin.alter_partition_reassignments({tp: [0, 9]}) == {
            tp: InvalidReplicationAssignmentError
        }
        assert admin.alter_partition_reassignments({tp: None}) == {
            tp: NoReassignmentInProgressError
        }
        assert admin.list_partition_reassignments() == {}
    finally:
        admin.close()
    assert list(cluster.partition("bad").replicas) == [0, 1]


def test_zookeeper_reassign_partitions_znode_is_carried_out_and_removed(
    cluster: BrokerCluster, zk_connect: str
) -> None:
    create_assigned(cluster, "zk", [[0], [1]], {"min.insync.replicas": "1"})
    zk = KazooClient(hosts=zk_connect)
    zk.start(timeout=30)
    try:
        body = {
            "version": 1,
            "partitions": [
                {"topic": "zk", "partition": 0, "replicas": [2, 1]},
                {"topic": "zk", "partition": 1, "replicas": [1, 0]},
            ],
        }
        zk.create("/admin/reassign_partitions", json.dumps(body).encode(), makepath=True)
        wait_reassigned(cluster, "zk", {0: [2, 1], 1: [1, 0]})
        wait_until(
            lambda: zk.exists("/admin/reassign_partitions") is None,
            30,
            "the znode to be deleted once every partition moved",
        )
    finally:
        zk.stop()
        zk.close()


def new_controller_isr(zk: KazooClient, topic: str, partition: int, old_epoch: int) -> int:
    """How many replicas the partition's state znode lists in sync, once a controller newer
    than ``old_epoch`` wrote it; 0 before."""
    data, _ = zk.get(f"/brokers/topics/{topic}/partitions/{partition}/state")
    state = json.loads(data)
    return len(state["isr"]) if int(state["controller_epoch"]) > old_epoch else 0


def test_brokers_killed_during_reassignments_lose_nothing(
    cluster: BrokerCluster, zk_connect: str
) -> None:
    """Three partitions rotate their replicas while the controller, then a leader of a
    moving partition, are SIGKILLed and restarted: every reassignment completes, every
    acknowledged record is readable, the producer sees no error."""
    create_assigned(cluster, "fk", [[0, 1], [1, 2], [2, 0]])
    targets = {0: [1, 2], 1: [2, 0], 2: [0, 1]}
    zk = KazooClient(hosts=zk_connect)
    zk.start(timeout=30)
    with contextlib.ExitStack() as stack:
        stack.callback(zk.close)
        stack.callback(zk.stop)
        producer = stack.enter_context(
            BackgroundProducer(cluster.bootstrap, "fk", interval_s=0.002)
        )
        old_epoch = int(zk.get("/controller_epoch")[0])
        producer.wait_for_acks(1000)
        admin = kadmin(cluster)
        try:
            controller = admin.describe_cluster()["controller_id"]
            result = admin.alter_partition_reassignments(
                {KTopicPartition("fk", p): t for p, t in targets.items()}
            )
            assert set(result.values()) == {None}
        finally:
            admin.close()
        victim = cluster.broker(int(controller))
        victim.kill()
        producer.wait_for_acks(200)
        victim.start()
        cluster.wait_for_live(3)
        # The new controller takes a broker that came back while there was no controller
        # out of the ISRs it was in (it may have lost its unflushed tail), so fk-1's ISR may
        # be its leader alone for a moment. Killing the only in-sync replica takes a
        # partition offline under clean election, which is not this test's case: wait until
        # the new controller has written fk-1's state with a second in-sync replica.
        wait_until(
            lambda: new_controller_isr(zk, "fk", 1, old_epoch) >= 2,
            60,
            "a second in-sync replica of fk-1, written by the new controller",
        )
        leader = cluster.wait_for_leader("fk", 1)
        second = cluster.broker(leader)
        second.kill()
        producer.wait_for_acks(200)
        second.start()
        cluster.wait_for_live(3)
        wait_reassigned(cluster, "fk", targets, timeout=120)
        producer.wait_for_acks(200)
    assert not producer.failed, producer.failed[:3]
    acked = set(producer.acked)
    consumed: set[bytes] = set()
    for p in targets:
        consumed |= set(read_partition(cluster, "fk", p))
    missing = acked - consumed
    assert not missing, f"{len(missing)} acknowledged records lost, e.g. {sorted(missing)[:3]}"
    for p, target in targets.items():
        for broker in cluster.brokers:
            if broker.broker_id not in target:
                wait_until(
                    lambda b=broker, q=p: not has_log(b.log_dir, "fk", q),
                    60,
                    f"broker {broker.broker_id}'s replica of fk-{p} to be deleted",
                )


def partition_state(zk: KazooClient, topic: str, partition: int = 0) -> tuple[int, int]:
    """(partition epoch, leader epoch) from the partition's state znode (the partition
    epoch is the znode's version, as in Kafka's ZooKeeper mode)."""
    data, stat = zk.get(f"/brokers/topics/{topic}/partitions/{partition}/state")
    return stat.version, int(json.loads(data)["leader_epoch"])


def read_partition(cluster: BrokerCluster, topic: str, partition: int) -> list[bytes]:
    """Every record of one partition, up to its high watermark."""
    from confluent_kafka import Consumer
    from confluent_kafka import TopicPartition as CTopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": cluster.bootstrap,
            "group.id": "unused",
            "enable.auto.commit": False,
        }
    )
    try:
        _low, high = consumer.get_watermark_offsets(CTopicPartition(topic, partition), timeout=30)
    finally:
        consumer.close()
    return consume_all(cluster.bootstrap, topic, high, partition=partition)
