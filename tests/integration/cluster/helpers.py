"""Shared steps of the cluster tests: create topics, produce in the background, consume,
ask a leader for its replicas' state (DescribeQuorum), compare replicas' log files."""

from __future__ import annotations

import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, Producer
from confluent_kafka import TopicPartition as CTopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kio.schema.describe_quorum.v2 import request as dq

from tests.harness import BrokerCluster, wait_until
from tidelog.client import BlockingClient


def create_topic(
    cluster: BrokerCluster,
    name: str,
    partitions: int = 1,
    rf: int = 3,
    config: dict[str, str] | None = None,
) -> None:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    futures = admin.create_topics(
        [NewTopic(name, num_partitions=partitions, replication_factor=rf, config=config or {})]
    )
    futures[name].result(timeout=30)
    for p in range(partitions):
        cluster.wait_for_leader(name, p)


def produce(bootstrap: str, topic: str, values: list[bytes], acks: str = "all") -> list[int]:
    """Produce and return the acknowledged offsets; any delivery failure fails the test."""
    producer = Producer({"bootstrap.servers": bootstrap, "acks": acks, "linger.ms": 5})
    offsets: list[int] = []
    errors: list[object] = []

    def on_delivery(err: Any, msg: Any) -> None:
        if err is not None:
            errors.append(err)
        else:
            offsets.append(msg.offset())

    for v in values:
        producer.produce(topic, v, on_delivery=on_delivery)
    assert producer.flush(60) == 0
    assert not errors, errors
    return offsets


class BackgroundProducer:
    """A confluent-kafka producer (acks=all) sending numbered records until stopped; it
    records which values were acknowledged and which deliveries failed."""

    def __init__(
        self,
        bootstrap: str,
        topic: str,
        interval_s: float = 0.01,
        config: Mapping[str, str | int] | None = None,
    ) -> None:
        self.topic = topic
        self.interval_s = interval_s
        self.producer = Producer(
            {
                "bootstrap.servers": bootstrap,
                "acks": "all",
                "linger.ms": 5,
                "message.timeout.ms": 120000,
                "topic.metadata.refresh.interval.ms": 1000,
                "retry.backoff.ms": 100,
                **(config or {}),
            }
        )
        self.acked: list[bytes] = []
        self.failed: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self.sent = 0

    def _on_delivery(self, err: Any, msg: Any) -> None:
        if err is not None:
            self.failed.append(str(err))
        else:
            self.acked.append(msg.value())

    def _run(self) -> None:
        while not self._stop.is_set():
            self.producer.produce(self.topic, b"m%08d" % self.sent, on_delivery=self._on_delivery)
            self.sent += 1
            self.producer.poll(self.interval_s)

    def __enter__(self) -> BackgroundProducer:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def wait_for_acks(self, n: int, timeout: float = 90.0) -> None:
        start = len(self.acked)
        wait_until(lambda: len(self.acked) >= start + n, timeout, f"{n} more acks")

    def stop(self) -> None:
        if self._thread.is_alive():
            self._stop.set()
            self._thread.join()
        assert self.producer.flush(150) == 0


def consume_all(
    bootstrap: str, topic: str, expected: int, timeout: float = 90.0, partition: int = 0
) -> list[bytes]:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "unused",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
        }
    )
    consumer.assign([CTopicPartition(topic, partition, 0)])
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


def describe_quorum(cluster: BrokerCluster, topic: str, partition: int = 0) -> Any:
    """DescribeQuorum (API 55) for ``topic``-``partition``, asked of its leader."""
    leader = cluster.wait_for_leader(topic, partition)
    with BlockingClient(cluster.broker(leader).bootstrap, request_timeout_s=5.0) as client:
        response = client.send(
            dq.DescribeQuorumRequest(
                topics=(
                    dq.TopicData(
                        topic_name=topic, partitions=(dq.PartitionData(partition_index=partition),)
                    ),
                )
            )
        )
    return response.topics[0].partitions[0]


def wait_for_isr(
    cluster: BrokerCluster, topic: str, isr: set[int], partition: int = 0, timeout: float = 60.0
) -> None:
    wait_until(
        lambda: set(cluster.partition(topic, partition).isr) == isr,
        timeout,
        f"ISR of {topic}-{partition} to be {sorted(isr)}",
    )


def wait_for_replicas_in_sync(
    cluster: BrokerCluster, topic: str, partition: int = 0, timeout: float = 60.0
) -> int:
    """Until every replica's LEO equals the leader's (per DescribeQuorum); returns it."""

    def same() -> int | None:
        q = describe_quorum(cluster, topic, partition)
        leos = {int(r.log_end_offset) for r in (*q.current_voters, *q.observers)}
        return leos.pop() if len(leos) == 1 and len(q.observers) == 0 else None

    found = wait_until(same, timeout, f"every replica of {topic}-{partition} at one LEO")
    assert isinstance(found, int)
    return found


def log_bytes(log_dir: Path, topic: str, partition: int = 0) -> bytes:
    """The concatenated segment files of one replica (written by the leader, copied as is)."""
    directory = log_dir / f"{topic}-{partition}"
    return b"".join(p.read_bytes() for p in sorted(directory.glob("*.log")))
