"""Brokers form a cluster through a real ZooKeeper and replicate with the pure core."""

from __future__ import annotations

import pytest
from confluent_kafka import Consumer, KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from tests.harness import BrokerCluster, wait_until
from tidelog.client import BlockingClient
from tidelog.errors import ErrorCode

pytestmark = pytest.mark.integration


def create_topic(cluster: BrokerCluster, name: str, partitions: int = 1, rf: int = 3,
                 config: dict[str, str] | None = None) -> None:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    futures = admin.create_topics(
        [NewTopic(name, num_partitions=partitions, replication_factor=rf, config=config or {})]
    )
    futures[name].result(timeout=30)
    for p in range(partitions):
        cluster.wait_for_leader(name, p)


def produce(bootstrap: str, topic: str, values: list[bytes], acks: str = "all") -> list[int]:
    """Produce and return the offsets acknowledged (failures raise)."""
    producer = Producer({"bootstrap.servers": bootstrap, "acks": acks, "linger.ms": 5})
    offsets: list[int] = []
    errors: list[object] = []

    def on_delivery(err: object, msg: object) -> None:
        if err is not None:
            errors.append(err)
        else:
            offsets.append(msg.offset())  # type: ignore[attr-defined]

    for v in values:
        producer.produce(topic, v, on_delivery=on_delivery)
    assert producer.flush(60) == 0
    assert not errors, errors
    return offsets


def consume_all(bootstrap: str, topic: str, expected: int, timeout: float = 60.0) -> list[bytes]:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "unused",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
        }
    )
    from confluent_kafka import TopicPartition as CTP  # noqa: PLC0415

    consumer.assign([CTP(topic, 0, 0)])
    got: list[bytes] = []
    try:
        def enough() -> bool:
            for msg in consumer.consume(1000, 0.5):
                if msg.error() is None:
                    got.append(msg.value())
            return len(got) >= expected

        wait_until(enough, timeout, f"{expected} records from {topic}")
    finally:
        consumer.close()
    return got


def test_metadata_lists_every_broker_and_one_controller(cluster: BrokerCluster) -> None:
    views = [cluster.metadata(via=b) for b in cluster.brokers]
    assert all(sorted(v.brokers) == [0, 1, 2] for v in views)
    controllers = {v.controller_id for v in views}
    assert len(controllers) == 1
    assert controllers.pop() in (0, 1, 2)


def test_rf3_topic_replicates_to_every_broker(cluster: BrokerCluster) -> None:
    create_topic(cluster, "rep")
    p = cluster.partition("rep")
    assert sorted(p.replicas) == [0, 1, 2]
    assert sorted(p.isr) == [0, 1, 2]
    values = [f"v{i}".encode() for i in range(200)]
    offsets = produce(cluster.bootstrap, "rep", values)
    assert sorted(offsets) == list(range(200))
    assert consume_all(cluster.bootstrap, "rep", 200) == values

    def replicas_have_all() -> bool:
        with BlockingClient(cluster.bootstrap) as client:
            leader = client.metadata(["rep"]).topics["rep"].partitions[0].leader_id
            del leader
        return all(
            (b.log_dir / "rep-0").is_dir() for b in cluster.brokers
        )

    wait_until(replicas_have_all, 30, "a log of rep-0 on every broker")


def test_replication_factor_above_live_brokers_is_refused(cluster: BrokerCluster) -> None:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    futures = admin.create_topics([NewTopic("too-many", num_partitions=1, replication_factor=4)])
    with pytest.raises(KafkaException) as info:
        futures["too-many"].result(timeout=30)
    error = info.value.args[0]
    assert error.code() == ErrorCode.INVALID_REPLICATION_FACTOR.value
    assert "larger than available brokers: 3" in error.str()
