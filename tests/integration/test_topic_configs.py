"""Every topic config key Kafka 3.9 has (``tests.kafka_topic_configs``) through a real broker
and real clients: CreateTopics with each, DescribeConfigs with Kafka's defaults,
IncrementalAlterConfigs SET / DELETE / SUBTRACT; and the keys that change behaviour seen by
producers and consumers: message.timestamp.type=LogAppendTime and KIP-937's window
(issue 30 point 2), whose refusal names the records (Produce v8+ record_errors, KIP-467)."""

from __future__ import annotations

import time
import uuid

import pytest
from confluent_kafka import (
    OFFSET_BEGINNING,
    TIMESTAMP_CREATE_TIME,
    TIMESTAMP_LOG_APPEND_TIME,
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
    ConfigSource,
    NewTopic,
)
from kafka import KafkaProducer

from tests.harness import BrokerProcess
from tests.integration.rawclient import Raw, produce
from tests.kafka_topic_configs import KAFKA_TOPIC_CONFIGS
from tidelog.client.records import Record, build_batch

pytestmark = pytest.mark.integration

DAY_MS = 86_400_000
HOUR_MS = 3_600_000


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def admin(broker: BrokerProcess) -> AdminClient:
    return AdminClient({"bootstrap.servers": broker.bootstrap})


def create(admin: AdminClient, name: str, **configs: str) -> None:
    admin.create_topics([NewTopic(name, 1, 1, config=configs)])[name].result(timeout=15)


def describe(admin: AdminClient, topic: str) -> dict[str, ConfigEntry]:
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
    entries: dict[str, ConfigEntry] = admin.describe_configs([resource])[resource].result(
        timeout=15
    )
    return entries


def alter(admin: AdminClient, topic: str, *entries: ConfigEntry) -> None:
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic, incremental_configs=list(entries))
    admin.incremental_alter_configs([resource])[resource].result(timeout=15)


def test_describe_shows_every_kafka_key_with_its_default(admin: AdminClient) -> None:
    topic = unique("defaults")
    create(admin, topic)
    described = describe(admin, topic)
    assert sorted(described) == sorted(KAFKA_TOPIC_CONFIGS)
    for key, kafka in KAFKA_TOPIC_CONFIGS.items():
        entry = described[key]
        assert (key, entry.value, entry.source) == (
            key,
            kafka.default,
            ConfigSource.DEFAULT_CONFIG.value,
        )


def test_create_topics_with_every_key(admin: AdminClient) -> None:
    topic = unique("every-key")
    create(admin, topic, **{k: c.other for k, c in KAFKA_TOPIC_CONFIGS.items()})
    described = describe(admin, topic)
    for key, kafka in KAFKA_TOPIC_CONFIGS.items():
        entry = described[key]
        assert (key, entry.value, entry.source) == (
            key,
            kafka.other,
            ConfigSource.DYNAMIC_TOPIC_CONFIG.value,
        )


def test_create_topic_with_the_deprecated_difference_max_ms(admin: AdminClient) -> None:
    topic = unique("difference")
    create(admin, topic, **{"message.timestamp.difference.max.ms": str(DAY_MS)})
    assert describe(admin, topic)["message.timestamp.difference.max.ms"].value == str(DAY_MS)


def test_incremental_set_and_delete_each_key(admin: AdminClient) -> None:
    topic = unique("set-delete")
    create(admin, topic)
    for key, kafka in KAFKA_TOPIC_CONFIGS.items():
        alter(
            admin, topic, ConfigEntry(key, kafka.other, incremental_operation=AlterConfigOpType.SET)
        )
        entry = describe(admin, topic)[key]
        assert (key, entry.value, entry.source) == (
            key,
            kafka.other,
            ConfigSource.DYNAMIC_TOPIC_CONFIG.value,
        )
        alter(admin, topic, ConfigEntry(key, None, incremental_operation=AlterConfigOpType.DELETE))
        entry = describe(admin, topic)[key]
        assert (key, entry.value, entry.source) == (
            key,
            kafka.default,
            ConfigSource.DEFAULT_CONFIG.value,
        )


def test_subtract_emptying_cleanup_policy_stores_the_empty_list(admin: AdminClient) -> None:
    topic = unique("subtract")
    create(admin, topic, **{"cleanup.policy": "compact"})
    alter(
        admin,
        topic,
        ConfigEntry("cleanup.policy", "compact", incremental_operation=AlterConfigOpType.SUBTRACT),
    )
    entry = describe(admin, topic)["cleanup.policy"]
    assert (entry.value, entry.source) == ("", ConfigSource.DYNAMIC_TOPIC_CONFIG.value)


def test_unknown_key_is_invalid_config(admin: AdminClient) -> None:
    topic = unique("unknown")
    with pytest.raises(KafkaException) as created:
        create(admin, topic, **{"no.such.config": "1"})
    assert created.value.args[0].code() == KafkaError.INVALID_CONFIG
    assert "Unknown topic config name: no.such.config" in created.value.args[0].str()
    create(admin, topic)
    with pytest.raises(KafkaException) as altered:
        alter(
            admin,
            topic,
            ConfigEntry("no.such.config", "1", incremental_operation=AlterConfigOpType.SET),
        )
    assert altered.value.args[0].code() == KafkaError.INVALID_CONFIG


def test_remote_storage_is_refused_as_by_a_broker_without_tiered_storage(
    admin: AdminClient,
) -> None:
    with pytest.raises(KafkaException) as created:
        create(admin, unique("remote"), **{"remote.storage.enable": "true"})
    assert created.value.args[0].code() == KafkaError.INVALID_CONFIG
    assert "Tiered Storage functionality is disabled" in created.value.args[0].str()


def consume_one(broker: BrokerProcess, topic: str) -> tuple[int, int, bytes]:
    """(timestamp type, timestamp, value) of the topic's first record."""
    consumer = Consumer(
        {
            "bootstrap.servers": broker.bootstrap,
            "group.id": unique("g"),
            "enable.auto.commit": False,
        }
    )
    try:
        consumer.assign([CTopicPartition(topic, 0, OFFSET_BEGINNING)])
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            msg = consumer.poll(1.0)
            if msg is not None and msg.error() is None:
                kind, timestamp = msg.timestamp()
                value = msg.value()
                assert value is not None
                return kind, timestamp, value
        raise AssertionError(f"no record consumed from {topic}")
    finally:
        consumer.close()


def test_log_append_time_is_the_brokers_time(admin: AdminClient, broker: BrokerProcess) -> None:
    topic = unique("append-time")
    create(admin, topic, **{"message.timestamp.type": "LogAppendTime"})
    old = int(time.time() * 1000) - DAY_MS
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap)
    try:
        before = int(time.time() * 1000)
        metadata = producer.send(topic, b"stamped", partition=0, timestamp_ms=old).get(timeout=30)
        after = int(time.time() * 1000)
    finally:
        producer.close(timeout=10)
    # kafka-python reports the Produce answer's log_append_time_ms when it is not -1.
    assert metadata.timestamp != old
    assert before <= metadata.timestamp <= after
    assert consume_one(broker, topic) == (TIMESTAMP_LOG_APPEND_TIME, metadata.timestamp, b"stamped")


def test_create_time_topic_keeps_the_producers_time(
    admin: AdminClient, broker: BrokerProcess
) -> None:
    topic = unique("create-time")
    create(admin, topic)
    old = int(time.time() * 1000) - DAY_MS
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap)
    try:
        metadata = producer.send(topic, b"kept", partition=0, timestamp_ms=old).get(timeout=30)
    finally:
        producer.close(timeout=10)
    assert metadata.timestamp == old
    assert consume_one(broker, topic) == (TIMESTAMP_CREATE_TIME, old, b"kept")


@pytest.mark.parametrize(
    "configs",
    [
        {"message.timestamp.before.max.ms": str(HOUR_MS)},
        {"message.timestamp.difference.max.ms": str(HOUR_MS)},  # KIP-937's deprecated alias
    ],
)
def test_kip_937_window_refuses_an_old_timestamp(
    admin: AdminClient, broker: BrokerProcess, configs: dict[str, str]
) -> None:
    topic = unique("window")
    create(admin, topic, **configs)
    now = int(time.time() * 1000)
    outcomes: list[KafkaError | None] = []
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0})
    for value, timestamp in ((b"old", now - DAY_MS), (b"recent", now)):
        producer.produce(
            topic,
            value=value,
            partition=0,
            timestamp=timestamp,
            on_delivery=lambda e, _m: outcomes.append(e),
        )
        producer.flush(30)
    assert len(outcomes) == 2
    error = outcomes[0]
    assert error is not None
    assert error.code() == KafkaError.INVALID_TIMESTAMP
    assert outcomes[1] is None
    assert consume_one(broker, topic)[2] == b"recent"


def test_kip_937_refusal_names_each_record_kip_467(
    admin: AdminClient, broker: BrokerProcess
) -> None:
    """Produce v8+: the partition answer carries Kafka's LogValidator message and one
    record error per record outside the window, by its index in the batch."""
    topic = unique("record-errors")
    create(admin, topic, **{"message.timestamp.before.max.ms": str(HOUR_MS)})
    now = int(time.time() * 1000)
    stamps = [now, now - DAY_MS, now, now - 2 * DAY_MS]
    records = build_batch([Record(value=b"v", timestamp_ms=ts) for ts in stamps])
    raw = Raw(broker)
    try:
        answer = produce(raw, topic, 0, records)
        assert answer.error_code == 32  # INVALID_TIMESTAMP
        assert answer.error_message == (
            "One or more records have been rejected due to invalid timestamp"
        )
        assert answer.base_offset == -1
        assert answer.log_start_offset == 0
        errors = [(e.batch_index, e.batch_index_error_message) for e in answer.record_errors]
        assert [i for i, _ in errors] == [1, 3]
        for (index, message), offset in zip(errors, (1, 3), strict=True):
            assert message.startswith(
                f"Timestamp {stamps[index]} of message with offset {offset} is out of range. "
                "The timestamp should be within ["
            ), message
        # Nothing of the batch was written: the next one starts at offset 0.
        accepted = produce(raw, topic, 0, build_batch([Record(value=b"ok", timestamp_ms=now)]))
        assert (accepted.error_code, accepted.base_offset, list(accepted.record_errors)) == (
            0,
            0,
            [],
        )
    finally:
        raw.close()
