"""Reading from the nearest replica (KIP-392): three real brokers on racks a, b, c with
``replica.selector.class`` = Kafka's RackAwareReplicaSelector, a confluent-kafka consumer
with ``client.rack`` = b. The leader (broker 0, rack a) sends it to broker 1, which serves
it (the follower's consumer fetches and bytes out in /metrics); then the leader is killed
and the consumer reads on, nothing twice and nothing out of order."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer
from confluent_kafka import TopicPartition as KafkaTopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.harness import BrokerCluster
from tests.integration.cluster.test_metrics import metrics_port, scrape
from tidelog.server.config.values import RACK_AWARE_REPLICA_SELECTOR

pytestmark = pytest.mark.integration

TOPIC = "near"
FETCH_CONSUMER = 'kafka_network_requestmetrics_requests_total{request="FetchConsumer"}'
BYTES_OUT = f'kafka_server_brokertopicmetrics_bytesout_total{{topic="{TOPIC}"}}'


def produce(producer: Producer, values: range) -> None:
    for i in values:
        producer.produce(TOPIC, value=str(i).encode())
    assert producer.flush(30) == 0


def read(consumer: Consumer, into: list[str], until: int, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while len(into) < until and time.monotonic() < deadline:
        message = consumer.poll(0.2)
        if message is None:
            continue
        assert message.error() is None, message.error()
        value = message.value()
        assert value is not None
        into.append(value.decode())


def test_a_consumer_reads_from_the_follower_of_its_rack_across_a_leader_kill(
    tmp_path: Path, zk_connect: str
) -> None:
    cluster = BrokerCluster(
        tmp_path,
        zk_connect,
        3,
        {
            "replica.selector.class": RACK_AWARE_REPLICA_SELECTOR,
            "metrics.listener": "http://127.0.0.1:0",
        },
    )
    for broker, rack in zip(cluster.brokers, "abc", strict=True):
        broker.properties["broker.rack"] = rack
    with cluster:
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
        created = admin.create_topics([NewTopic(TOPIC, 1, replica_assignment=[[0, 1, 2]])])
        created[TOPIC].result(timeout=30)
        assert cluster.wait_for_leader(TOPIC) == 0
        producer = Producer(
            {"bootstrap.servers": cluster.bootstrap, "acks": "all", "enable.idempotence": True}
        )
        produce(producer, range(100))
        follower_port = metrics_port(cluster.broker(1))
        assert scrape(follower_port).get(FETCH_CONSUMER, 0.0) == 0.0

        consumer = Consumer(
            {
                "bootstrap.servers": cluster.bootstrap,
                "group.id": "near-readers",
                "client.rack": "b",
                "enable.auto.commit": False,
                "fetch.wait.max.ms": 100,
                "topic.metadata.refresh.interval.ms": 1000,
            }
        )
        try:
            consumer.assign([KafkaTopicPartition(TOPIC, 0, OFFSET_BEGINNING)])
            values: list[str] = []
            read(consumer, values, 100, 20.0)
            assert values == [str(i) for i in range(100)]
            # Broker 1, a follower, answered the consumer's fetches with the records.
            on_follower = scrape(follower_port)
            assert on_follower.get(FETCH_CONSUMER, 0.0) > 0
            assert on_follower.get(BYTES_OUT, 0.0) > 0

            cluster.broker(0).kill()
            assert cluster.wait_for_leader(TOPIC, not_in=(0,), timeout=30) in {1, 2}
            produce(producer, range(100, 200))
            read(consumer, values, 200, 20.0)
            read(consumer, values, 201, 1.0)  # nothing more: no record read twice
            assert values == [str(i) for i in range(200)]
        finally:
            consumer.close()
