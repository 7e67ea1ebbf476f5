"""Real Kafka clients against one tidelog broker process: confluent-kafka, kafka-python,
aiokafka and kcat, unchanged."""

from __future__ import annotations

import asyncio
import json
import subprocess
import time
import uuid

import pytest
from confluent_kafka import (
    OFFSET_BEGINNING,
    OFFSET_END,
    TIMESTAMP_CREATE_TIME,
    Consumer,
    KafkaError,
    KafkaException,
    Producer,
)
from confluent_kafka import TopicPartition as CTopicPartition
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewPartitions,
    NewTopic,
)

from tests.harness import BrokerProcess

pytestmark = pytest.mark.integration


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def create_topic(broker: BrokerProcess, name: str, partitions: int = 1, **configs: str) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    futures = admin.create_topics([NewTopic(name, partitions, 1, config=configs)])
    futures[name].result(timeout=10)


def consume_all(
    broker: BrokerProcess,
    topic: str,
    partitions: int,
    expected: int,
    *,
    start: int = OFFSET_BEGINNING,
    timeout: float = 15.0,
) -> list[object]:
    consumer = Consumer(
        {
            "bootstrap.servers": broker.bootstrap,
            "group.id": unique("g"),
            "enable.auto.commit": False,
            "enable.partition.eof": False,
        }
    )
    consumer.assign([CTopicPartition(topic, p, start) for p in range(partitions)])
    messages: list[object] = []
    deadline = time.monotonic() + timeout
    try:
        while len(messages) < expected and time.monotonic() < deadline:
            for m in consumer.consume(num_messages=1000, timeout=0.5):
                assert m.error() is None, m.error()
                messages.append(m)
    finally:
        consumer.close()
    return messages


@pytest.mark.parametrize("acks", ["0", "1", "all"])
def test_confluent_produce_acks_and_consume(broker: BrokerProcess, acks: str) -> None:
    topic = unique(f"acks{acks}")
    create_topic(broker, topic, partitions=3)
    producer = Producer({"bootstrap.servers": broker.bootstrap, "acks": acks, "linger.ms": 5})
    errors: list[object] = []
    for i in range(300):
        producer.produce(
            topic,
            key=f"k{i}".encode(),
            value=f"v{i}".encode(),
            partition=i % 3,
            on_delivery=lambda err, _msg: errors.append(err) if err else None,
        )
    assert producer.flush(15) == 0
    assert errors == []
    got = consume_all(broker, topic, 3, 300)
    assert sorted(m.value() for m in got) == sorted(f"v{i}".encode() for i in range(300))
    # Per partition, offsets are dense from 0 and keys follow production order.
    for p in range(3):
        in_p = [m for m in got if m.partition() == p]
        assert [m.offset() for m in in_p] == list(range(100))
        assert [m.key() for m in in_p] == [f"k{i}".encode() for i in range(p, 300, 3)]


@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_confluent_codecs_keys_headers_timestamps(broker: BrokerProcess, codec: str) -> None:
    topic = unique(f"codec-{codec}")
    create_topic(broker, topic)
    producer = Producer(
        {"bootstrap.servers": broker.bootstrap, "compression.type": codec, "linger.ms": 20}
    )
    base_ts = 1_700_000_000_000
    for i in range(200):
        producer.produce(
            topic,
            key=None if i % 7 == 0 else f"key-{i}".encode(),
            value=(f"value-{i}-" * 20).encode(),
            headers=[("n", str(i).encode()), ("codec", codec.encode())],
            timestamp=base_ts + i,
        )
    assert producer.flush(15) == 0
    got = consume_all(broker, topic, 1, 200)
    assert len(got) == 200
    for i, m in enumerate(got):
        assert m.offset() == i
        assert m.key() == (None if i % 7 == 0 else f"key-{i}".encode())
        assert m.value() == (f"value-{i}-" * 20).encode()
        assert m.headers() == [("n", str(i).encode()), ("codec", codec.encode())]
        assert m.timestamp() == (TIMESTAMP_CREATE_TIME, base_ts + i)


def test_confluent_latest_and_by_timestamp(broker: BrokerProcess) -> None:
    topic = unique("ts")
    create_topic(broker, topic)
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0})
    base_ts = 1_600_000_000_000
    for i in range(50):
        producer.produce(topic, value=b"old-%d" % i, timestamp=base_ts + i * 1000)
        producer.flush(5)  # one batch per record: a timestamp lookup must be record-exact
    consumer = Consumer(
        {
            "bootstrap.servers": broker.bootstrap,
            "group.id": unique("g"),
            "enable.auto.commit": False,
        }
    )
    try:
        found = consumer.offsets_for_times([CTopicPartition(topic, 0, base_ts + 20_500)], 10)
        assert found[0].offset == 21  # first record with timestamp >= the asked one
        found = consumer.offsets_for_times([CTopicPartition(topic, 0, base_ts + 10**9)], 10)
        assert found[0].offset == -1  # nothing that new: Kafka answers -1 (end)
        low, high = consumer.get_watermark_offsets(CTopicPartition(topic, 0), timeout=10)
        assert (low, high) == (0, 50)
    finally:
        consumer.close()
    # Consume from "latest": only what is produced after the assignment.
    latest = Consumer(
        {
            "bootstrap.servers": broker.bootstrap,
            "group.id": unique("g"),
            "enable.auto.commit": False,
        }
    )
    latest.assign([CTopicPartition(topic, 0, OFFSET_END)])
    try:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            latest.poll(0.2)
            if latest.position([CTopicPartition(topic, 0)])[0].offset == 50:
                break
        producer.produce(topic, value=b"new")
        producer.flush(5)
        new = None
        while new is None and time.monotonic() < deadline + 10:
            m = latest.poll(0.5)
            if m is not None and m.error() is None:
                new = m
        assert new is not None
        assert (new.offset(), new.value()) == (50, b"new")
    finally:
        latest.close()


def test_confluent_admin_metadata_configs_partitions(broker: BrokerProcess) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    topic = unique("admin")
    create_topic(broker, topic, partitions=2, **{"retention.ms": "3600000"})
    md = admin.list_topics(timeout=10)
    assert topic in md.topics
    assert sorted(md.topics[topic].partitions) == [0, 1]
    assert md.topics[topic].partitions[0].leader == broker.broker_id
    assert [b.port for b in md.brokers.values()] == [broker.port]

    # Already exists / invalid name / invalid config: each gets Kafka's error.
    futures = admin.create_topics(
        [
            NewTopic(topic, 1, 1),
            NewTopic("bad name!", 1, 1),
            NewTopic(unique("badcfg"), 1, 1, config={"retention.ms": "soon"}),
            NewTopic(unique("rf"), 1, 3),
        ]
    )
    codes = {}
    for name, f in futures.items():
        with pytest.raises(KafkaException) as info:
            f.result(timeout=10)
        codes[name] = info.value.args[0].code()
    assert sorted(codes.values()) == sorted(
        [
            KafkaError.TOPIC_ALREADY_EXISTS,
            KafkaError.TOPIC_EXCEPTION,
            KafkaError.INVALID_CONFIG,
            KafkaError.INVALID_REPLICATION_FACTOR,
        ]
    )

    resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
    described = admin.describe_configs([resource])[resource].result(timeout=10)
    assert described["retention.ms"].value == "3600000"
    assert described["max.message.bytes"].value == "1048588"

    # Alter a topic config and see it take effect: a 1000-byte limit refuses a 5000-byte batch.
    change = ConfigResource(
        ConfigResource.Type.TOPIC,
        topic,
        incremental_configs=[
            ConfigEntry("max.message.bytes", "1000", incremental_operation=AlterConfigOpType.SET)
        ],
    )
    admin.incremental_alter_configs([change])[change].result(timeout=10)
    described = admin.describe_configs([resource])[resource].result(timeout=10)
    assert described["max.message.bytes"].value == "1000"
    assert described["retention.ms"].value == "3600000"  # incremental: others kept
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0})
    outcomes: list[object] = []
    producer.produce(
        topic, value=b"x" * 5000, partition=0, on_delivery=lambda e, m: outcomes.append(e)
    )
    producer.produce(
        topic, value=b"small", partition=1, on_delivery=lambda e, m: outcomes.append(e)
    )
    producer.flush(10)
    codes_seen = sorted(e.code() if e is not None else 0 for e in outcomes)
    assert codes_seen == sorted([0, KafkaError.MSG_SIZE_TOO_LARGE])

    # An invalid value is refused with INVALID_CONFIG and changes nothing.
    bad = ConfigResource(
        ConfigResource.Type.TOPIC,
        topic,
        incremental_configs=[
            ConfigEntry("max.message.bytes", "-5", incremental_operation=AlterConfigOpType.SET)
        ],
    )
    with pytest.raises(KafkaException) as info:
        admin.incremental_alter_configs([bad])[bad].result(timeout=10)
    assert info.value.args[0].code() == KafkaError.INVALID_CONFIG

    # CreatePartitions grows the topic; DeleteTopics removes it.
    admin.create_partitions([NewPartitions(topic, 4)])[topic].result(timeout=10)
    assert sorted(admin.list_topics(topic, timeout=10).topics[topic].partitions) == [0, 1, 2, 3]
    admin.delete_topics([topic])[topic].result(timeout=10)
    assert topic not in admin.list_topics(timeout=10).topics


def test_kafka_python_idempotent_acks_all_and_consume(broker: BrokerProcess) -> None:
    """kafka-python 3 turns idempotence on with acks=all: InitProducerId must work."""
    from kafka import KafkaConsumer, KafkaProducer
    from kafka import TopicPartition as KTopicPartition

    topic = unique("kp")
    create_topic(broker, topic)
    for codec in (None, "gzip", "snappy", "lz4", "zstd"):
        producer = KafkaProducer(
            bootstrap_servers=broker.bootstrap, acks="all", compression_type=codec
        )
        for i in range(20):
            producer.send(
                topic, key=b"k", value=f"{codec}-{i}".encode(), headers=[("h", b"1")]
            ).get(timeout=10)
        producer.close()
    consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap, consumer_timeout_ms=3000)
    consumer.assign([KTopicPartition(topic, 0)])
    consumer.seek_to_beginning()
    records = list(consumer)
    consumer.close()
    assert [r.value for r in records] == [
        f"{codec}-{i}".encode()
        for codec in (None, "gzip", "snappy", "lz4", "zstd")
        for i in range(20)
    ]
    assert [r.offset for r in records] == list(range(100))
    assert all(r.headers == [("h", b"1")] for r in records)


def test_aiokafka_produce_consume(broker: BrokerProcess) -> None:
    import aiokafka

    topic = unique("aio")

    async def scenario() -> list[tuple[int, bytes | None, bytes | None]]:
        producer = aiokafka.AIOKafkaProducer(
            bootstrap_servers=broker.bootstrap, acks="all", compression_type="lz4"
        )
        await producer.start()
        try:
            for i in range(30):
                await producer.send_and_wait(topic, value=b"a%d" % i, key=b"k%d" % i)
        finally:
            await producer.stop()
        consumer = aiokafka.AIOKafkaConsumer(bootstrap_servers=broker.bootstrap)
        await consumer.start()
        got: list[tuple[int, bytes | None, bytes | None]] = []
        try:
            consumer.assign([aiokafka.TopicPartition(topic, 0)])
            await consumer.seek_to_beginning()
            deadline = time.monotonic() + 15
            while len(got) < 30 and time.monotonic() < deadline:
                batch = await consumer.getmany(timeout_ms=1000)
                for records in batch.values():
                    got += [(r.offset, r.key, r.value) for r in records]
        finally:
            await consumer.stop()
        return got

    got = asyncio.run(scenario())  # the topic is auto-created by aiokafka's Metadata request
    assert got == [(i, b"k%d" % i, b"a%d" % i) for i in range(30)]


def test_kcat_metadata_produce_consume(broker: BrokerProcess) -> None:
    topic = unique("kcat")
    lines = [f"line-{i}" for i in range(100)]
    subprocess.run(
        ["kcat", "-b", broker.bootstrap, "-P", "-t", topic, "-X", "acks=all", "-K", ":"],
        input="\n".join(f"key{i}:{line}" for i, line in enumerate(lines)) + "\n",
        text=True,
        check=True,
        timeout=30,
    )
    metadata = json.loads(
        subprocess.run(
            ["kcat", "-b", broker.bootstrap, "-L", "-J", "-t", topic],
            capture_output=True,
            text=True,
            check=True,
            timeout=30,
        ).stdout
    )
    assert [t["topic"] for t in metadata["topics"]] == [topic]
    assert metadata["brokers"][0]["id"] == broker.broker_id
    out = subprocess.run(
        ["kcat", "-b", broker.bootstrap, "-C", "-t", topic, "-e", "-J", "-o", "beginning"],
        capture_output=True,
        text=True,
        check=True,
        timeout=30,
    ).stdout
    records = [json.loads(line) for line in out.splitlines() if line.strip()]
    assert [(r["offset"], r["key"], r["payload"]) for r in records] == [
        (i, f"key{i}", line) for i, line in enumerate(lines)
    ]
