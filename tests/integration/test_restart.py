"""Restart a broker - cleanly (SIGTERM) and after SIGKILL - and read back everything that was
acknowledged before."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer
from confluent_kafka import TopicPartition as CTopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic

from tests.harness import BrokerProcess

pytestmark = pytest.mark.integration


def produce_acknowledged(
    broker: BrokerProcess, topic: str, count: int, *, acks: str, prefix: str, partitions: int
) -> list[tuple[int, int, bytes]]:
    """Produce ``count`` records; return (partition, offset, value) of each acknowledged one."""
    producer = Producer(
        {
            "bootstrap.servers": broker.bootstrap,
            "acks": acks,
            "linger.ms": 2,
            "compression.type": "lz4",
        }
    )
    acked: list[tuple[int, int, bytes]] = []

    def on_delivery(err: object, msg: object) -> None:
        if err is None:
            acked.append((msg.partition(), msg.offset(), msg.value()))  # type: ignore[attr-defined]

    for i in range(count):
        producer.produce(
            topic, value=f"{prefix}-{i}".encode(), partition=i % partitions, on_delivery=on_delivery
        )
        if i % 500 == 0:
            producer.poll(0)
    assert producer.flush(20) == 0
    return acked


def read_everything(
    broker: BrokerProcess, topic: str, partitions: int, expected: int
) -> list[tuple[int, int, bytes]]:
    consumer = Consumer(
        {
            "bootstrap.servers": broker.bootstrap,
            "group.id": f"g-{uuid.uuid4().hex[:6]}",
            "enable.auto.commit": False,
        }
    )
    consumer.assign([CTopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
    got: list[tuple[int, int, bytes]] = []
    deadline = time.monotonic() + 20
    try:
        while len(got) < expected and time.monotonic() < deadline:
            for m in consumer.consume(num_messages=5000, timeout=0.5):
                assert m.error() is None, m.error()
                got.append((m.partition(), m.offset(), m.value()))
    finally:
        consumer.close()
    return got


@pytest.mark.parametrize("crash", [False, True], ids=["sigterm", "sigkill"])
def test_restart_keeps_acknowledged_records_topics_and_configs(
    new_broker: Callable[..., BrokerProcess], crash: bool
) -> None:
    broker = new_broker({"log.segment.bytes": "65536"})  # several segments per partition
    topic = "durable"
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(topic, 3, 1, config={"retention.ms": "86400000"})])[topic].result(
        timeout=10
    )
    acked = produce_acknowledged(broker, topic, 3000, acks="1", prefix="a1", partitions=3)
    acked += produce_acknowledged(broker, topic, 3000, acks="all", prefix="all", partitions=3)
    assert len(acked) == 6000

    if crash:
        assert broker.kill() == -9
    else:
        assert broker.stop() == 0
        assert "shut down cleanly" in broker.output()
    broker.start()

    got = read_everything(broker, topic, 3, len(acked))
    assert sorted(got) == sorted(acked)
    # The topic and its override survive, and new writes continue after the old offsets.
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
    assert admin.describe_configs([resource])[resource].result(10)["retention.ms"].value == (
        "86400000"
    )
    more = produce_acknowledged(broker, topic, 30, acks="all", prefix="after", partitions=3)
    assert sorted(offset for p, offset, _ in more if p == 0) == list(range(2000, 2010))


def test_invalid_config_stops_start_up_naming_the_key(tmp_path: object) -> None:
    """The process exits with status 2 and names the key (every rule: unit/server/test_config)."""
    from pathlib import Path

    base = Path(str(tmp_path))
    for key, value, expected in [
        ("log.retention.bytse", "1", "log.retention.bytse: unknown configuration key"),
        ("num.partitions", "zero", "num.partitions: invalid value 'zero'"),
    ]:
        process = BrokerProcess(base / key, {key: value})
        with pytest.raises(RuntimeError) as info:
            process.start(timeout=30)
        assert "exited with 2" in str(info.value)
        assert expected in str(info.value)


def test_sigterm_answers_parked_long_polls_before_closing(
    new_broker: Callable[..., BrokerProcess],
) -> None:
    from tests.integration.rawclient import FETCH_V, Raw, batch, create, produce
    from tidelog.protocol.apis import ApiKey
    from tidelog.protocol.codec import decode_response

    broker = new_broker()
    raw = Raw(broker)
    assert create(raw, "parked").error_code == 0
    assert produce(raw, "parked", 0, batch(b"x")).error_code == 0
    correlation_id, frame = raw.encode(
        ApiKey.FETCH,
        FETCH_V,
        {
            "replica_id": -1,
            "max_wait": 60_000,
            "min_bytes": 1,
            "max_bytes": 1 << 20,
            "isolation_level": 0,
            "session_id": 0,
            "session_epoch": -1,
            "topics": [
                {
                    "topic": "parked",
                    "partitions": [
                        {"partition": 0, "fetch_offset": 1, "partition_max_bytes": 1 << 20}
                    ],
                }
            ],
            "forgotten_topics_data": [],
            "rack_id": "",
        },
    )
    raw.send_bytes(frame)
    time.sleep(0.5)  # let the fetch park (nothing above offset 1 yet)
    assert broker.stop() == 0
    answer = raw.recv_frame()
    assert answer is not None  # answered (empty), not just dropped
    got_id, body = decode_response(ApiKey.FETCH, FETCH_V, answer)
    assert got_id == correlation_id
    part = body.responses[0].partitions[0]
    assert (part.error_code, part.high_watermark, part.records) == (0, 1, b"")
    assert raw.recv_frame() is None  # then the connection is closed
    raw.close()
