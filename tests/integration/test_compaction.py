"""Log compaction on one real broker process: confluent-kafka writes many updates over a few
keys and some tombstones to a ``cleanup.policy=compact`` topic; once the cleaner ran, a
consumer reading from the beginning (confluent-kafka and kafka-python alike) sees exactly the
latest value of every key at its original offset, and after ``delete.retention.ms`` nothing
of the tombstoned keys. A keyless record sent to a compacted topic gets INVALID_RECORD. A
replica that was down while its leader compacted catches up across the offset gaps."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from confluent_kafka import TopicPartition as CTopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.harness import BrokerCluster, BrokerProcess, wait_until
from tidelog.client.records import decode_records

pytestmark = pytest.mark.integration

KEYS = 20
UPDATES = 1500
TOMBSTONED = ("k0", "k1", "k2", "k3", "k4")
DELETE_RETENTION_MS = 12_000
SEGMENT_MS = 1000

Seen = dict[int, tuple[str, str | None]]


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def create_topic(broker: BrokerProcess, name: str, **configs: str) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    for future in admin.create_topics([NewTopic(name, 1, 1, config=configs)]).values():
        future.result(timeout=15)


def produce(
    broker: BrokerProcess, topic: str, pairs: list[tuple[str, str | None]], acks: str = "all"
) -> Seen:
    """Produce in order; returns offset -> (key, value) from the delivery reports."""
    producer = Producer(
        {"bootstrap.servers": broker.bootstrap, "linger.ms": 5, "acks": acks, "batch.size": 2048}
    )
    written: Seen = {}
    errors: list[KafkaError] = []

    def report(err: KafkaError | None, msg: object) -> None:
        if err is not None:
            errors.append(err)
            return
        key = msg.key().decode()  # type: ignore[attr-defined]
        value = msg.value()  # type: ignore[attr-defined]
        written[msg.offset()] = (key, None if value is None else value.decode())  # type: ignore[attr-defined]

    for key, value in pairs:
        producer.produce(
            topic,
            key=key.encode(),
            value=None if value is None else value.encode(),
            on_delivery=report,
        )
        producer.poll(0)
    assert producer.flush(30) == 0
    assert not errors
    return written


def latest(written: Seen) -> Seen:
    by_key: dict[str, int] = {}
    for offset in sorted(written):
        by_key[written[offset][0]] = offset
    return {o: written[o] for o in sorted(by_key.values())}


def read_confluent(broker: BrokerProcess, topic: str) -> Seen:
    consumer = Consumer(
        {
            "bootstrap.servers": broker.bootstrap,
            "group.id": unique("g"),
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
        }
    )
    try:
        _, high = consumer.get_watermark_offsets(CTopicPartition(topic, 0), timeout=10)
        consumer.assign([CTopicPartition(topic, 0, 0)])
        seen: Seen = {}
        deadline = time.monotonic() + 30
        position = 0
        while position < high and time.monotonic() < deadline:
            msg = consumer.poll(1.0)
            if msg is None or msg.error() is not None:
                continue
            value = msg.value()
            seen[msg.offset()] = (msg.key().decode(), None if value is None else value.decode())
            position = msg.offset() + 1
        assert position >= high or high == 0 or seen, "confluent consumer did not reach the end"
        return seen
    finally:
        consumer.close()


def read_kafka_python(broker: BrokerProcess, topic: str, end: int) -> Seen:
    from kafka import KafkaConsumer
    from kafka import TopicPartition as KTopicPartition

    consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap, enable_auto_commit=False)
    try:
        tp = KTopicPartition(topic, 0)
        consumer.assign([tp])
        consumer.seek_to_beginning(tp)
        seen: Seen = {}
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=1000).values():
                for r in records:
                    seen[r.offset] = (r.key.decode(), None if r.value is None else r.value.decode())
            if consumer.position(tp) >= end:
                break
        return seen
    finally:
        consumer.close()


def wait_for(check: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(1.0)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.fixture
def compacting_broker(new_broker: Callable[..., BrokerProcess]) -> BrokerProcess:
    return new_broker({"log.cleaner.backoff.ms": "200"})


def test_consumers_see_the_latest_value_of_every_key(compacting_broker: BrokerProcess) -> None:
    broker = compacting_broker
    topic = unique("compacted")
    create_topic(
        broker,
        topic,
        **{
            "cleanup.policy": "compact",
            "segment.bytes": "4096",
            "segment.ms": str(SEGMENT_MS),
            "min.cleanable.dirty.ratio": "0.01",
            "delete.retention.ms": str(DELETE_RETENTION_MS),
        },
    )
    updates = [(f"k{i % KEYS}", f"v{i}-" + "x" * 60) for i in range(UPDATES)]
    written = produce(broker, topic, updates)
    written.update(produce(broker, topic, [(k, None) for k in TOMBSTONED]))
    tombstoned_at = time.monotonic()
    # A record after segment.ms rolls the segment holding the tombstones: cleanable now.
    time.sleep(SEGMENT_MS / 1000 + 0.5)
    written.update(produce(broker, topic, [("filler1", "1")]))
    expected = latest(written)
    assert len(written) == UPDATES + len(TOMBSTONED) + 1

    state: dict[str, Seen] = {}

    def compacted() -> bool:
        state["seen"] = read_confluent(broker, topic)
        return state["seen"] == expected

    wait_for(compacted, 90, "the cleaner to leave the latest value per key")
    # The tombstones are there (delete.retention.ms has not passed), at their offsets.
    assert {k for k, v in expected.values() if v is None} == set(TOMBSTONED)
    end = max(written) + 1
    assert read_kafka_python(broker, topic, end) == expected
    segments = sorted((broker.log_dir / f"{topic}-0").glob("*.log"))
    on_disk = sum(p.stat().st_size for p in segments)
    assert on_disk < 20_000  # 1,500 records of ~80 bytes were written

    # delete.retention.ms later (counted from the tombstones' timestamps), new dirt makes the
    # cleaner run again and the tombstones go.
    time.sleep(max(0.0, DELETE_RETENTION_MS / 1000 + 2 - (time.monotonic() - tombstoned_at)))
    written.update(produce(broker, topic, [("filler2", "2")]))
    time.sleep(SEGMENT_MS / 1000 + 0.5)
    written.update(produce(broker, topic, [("filler3", "3")]))
    expected = {o: kv for o, kv in latest(written).items() if kv[1] is not None}
    assert not any(k in TOMBSTONED for k, _ in expected.values())
    wait_for(compacted, 90, "the cleaner to remove the tombstones")
    end = max(written) + 1
    assert read_kafka_python(broker, topic, end) == expected
    assert (broker.log_dir / "cleaner-offset-checkpoint").read_text().startswith("0\n1\n")


def test_keyless_record_to_a_compacted_topic_is_refused(compacting_broker: BrokerProcess) -> None:
    broker = compacting_broker
    topic = unique("compacted")
    create_topic(broker, topic, **{"cleanup.policy": "compact,delete"})
    producer = Producer({"bootstrap.servers": broker.bootstrap, "retries": 0})
    errors: list[KafkaError] = []

    def report(err: KafkaError | None, msg: object) -> None:
        if err is not None:
            errors.append(err)

    producer.produce(topic, value=b"no key", on_delivery=report)
    producer.flush(30)
    assert [e.code() for e in errors] == [KafkaError.INVALID_RECORD]
    # Kafka refuses the whole batch holding it; a batch of keyed records goes in.
    producer.produce(topic, key=b"k", value=b"keyed", on_delivery=report)
    producer.flush(30)
    assert len(errors) == 1
    assert read_confluent(broker, topic) == {0: ("k", "keyed")}


def test_invalid_compaction_configs_are_refused(compacting_broker: BrokerProcess) -> None:
    admin = AdminClient({"bootstrap.servers": compacting_broker.bootstrap})
    for configs, fragment in [
        ({"cleanup.policy": "shred"}, "cleanup.policy"),
        ({"min.cleanable.dirty.ratio": "2"}, "min.cleanable.dirty.ratio"),
        ({"delete.retention.ms": "-5"}, "delete.retention.ms"),
    ]:
        future = admin.create_topics([NewTopic(unique("bad"), 1, 1, config=configs)])
        with pytest.raises(KafkaException) as info:
            next(iter(future.values())).result(timeout=15)
        error = info.value.args[0]
        assert error.code() == KafkaError.INVALID_CONFIG
        assert fragment in error.str()


def test_a_follower_catches_up_from_a_compacted_leader(tmp_path: Path, zk_connect: str) -> None:
    """A replica that was down while its leader compacted fetches batches with offset gaps
    (and batches holding fewer records than their offsets), stores them, and serves exactly
    the latest values once it leads."""
    cluster = BrokerCluster(tmp_path / "c", zk_connect, 2, {"log.cleaner.backoff.ms": "200"})
    cluster.start()
    try:
        topic = unique("replicated")
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
        configs = {
            "cleanup.policy": "compact",
            "segment.bytes": "4096",
            "segment.ms": str(SEGMENT_MS),
            "min.cleanable.dirty.ratio": "0.01",
        }
        for future in admin.create_topics([NewTopic(topic, 1, 2, config=configs)]).values():
            future.result(timeout=30)
        leader_id = cluster.wait_for_leader(topic)
        leader = cluster.broker(leader_id)
        follower = cluster.broker(1 - leader_id)
        follower.stop()
        # acks=1: the ISR still names the stopped replica for a while.
        pairs: list[tuple[str, str | None]] = [(f"k{i % KEYS}", f"v{i}") for i in range(600)]
        written = produce(leader, topic, pairs, acks="1")
        time.sleep(SEGMENT_MS / 1000 + 0.5)
        written.update(produce(leader, topic, [("filler", "1")], acks="1"))
        expected = latest(written)
        wait_for(lambda: read_confluent(leader, topic) == expected, 90, "the leader's clean")

        follower.start()
        directory = follower.log_dir / f"{topic}-0"

        def caught_up() -> bool:
            data = b"".join(p.read_bytes() for p in sorted(directory.glob("*.log")))
            seen = {
                r.offset: ((r.key or b"").decode(), None if r.value is None else r.value.decode())
                for r in decode_records(data)
            }
            return seen == expected

        wait_for(caught_up, 90, "the follower to copy the compacted log")
        wait_until(
            lambda: set(cluster.partition(topic).isr) == {0, 1}, 60, "the follower in the ISR"
        )
        leader.stop()
        assert cluster.wait_for_leader(topic, not_in=(leader_id,)) == follower.broker_id
        assert read_confluent(follower, topic) == expected
    finally:
        cluster.stop()
