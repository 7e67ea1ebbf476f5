"""Offset expiry (KIP-211) against a real broker with a short retention (tidelog's test knob
``tidelog.offsets.retention.ms``, checked every 500 ms), seen by confluent-kafka's
AdminClient and kafka-python: a closed group's offsets and then the group vanish, no sooner
than the retention after it became Empty; a member still subscribed keeps its offsets long
past the retention; a standalone consumer's offsets expire by commit time."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.harness import BrokerProcess, wait_until
from tests.integration.groups.helpers import GROUP_OVERRIDES, create_topic, produce

pytestmark = pytest.mark.integration

RETENTION_MS = 4000
RETENTION_S = RETENTION_MS / 1000
#: librdkafka's OFFSET_INVALID: what list_consumer_group_offsets says of no offset.
OFFSET_INVALID = -1001


@pytest.fixture(scope="module")
def expiring_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    overrides = {
        **GROUP_OVERRIDES,
        "tidelog.offsets.retention.ms": str(RETENTION_MS),
        "offsets.retention.check.interval.ms": "500",
    }
    process = BrokerProcess(tmp_path_factory.mktemp("expiry"), overrides).start()
    try:
        yield process
    finally:
        process.stop()


def group_offsets(bootstrap: str, group: str, topic: str, partitions: int) -> dict[int, int]:
    """confluent-kafka's AdminClient view: committed offset per partition."""
    from confluent_kafka import ConsumerGroupTopicPartitions as Request
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})
    wanted = [TopicPartition(topic, p) for p in range(partitions)]
    futures = admin.list_consumer_group_offsets([Request(group, wanted)], request_timeout=30)
    answer = futures[group].result(30)
    return {tp.partition: tp.offset for tp in answer.topic_partitions}


def listed_groups(bootstrap: str) -> set[str]:
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})
    result = admin.list_consumer_groups(request_timeout=30).result(30)
    assert not result.errors
    return {g.group_id for g in result.valid}


def kafka_python_committed(bootstrap: str, group: str, topic: str, partition: int) -> Any:
    """kafka-python's view (OffsetFetch without joining): the offset, or None."""
    from kafka import KafkaConsumer
    from kafka import TopicPartition as KTopicPartition

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False)
    try:
        return consumer.committed(KTopicPartition(topic, partition))
    finally:
        consumer.close(autocommit=False)


def test_closed_group_expires_while_a_subscribed_member_keeps_its_offsets(
    expiring_broker: BrokerProcess,
) -> None:
    from confluent_kafka import Consumer

    bootstrap = expiring_broker.bootstrap
    create_topic(bootstrap, "expiring", 2)
    produce(bootstrap, "expiring", 2, 5)
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "closing",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "session.timeout.ms": 6000,
            "heartbeat.interval.ms": 500,
        }
    )
    closed = False
    try:
        consumer.subscribe(["expiring"])
        read = 0
        deadline = time.monotonic() + 60
        while read < 10 and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and not msg.error():
                read += 1
        assert read == 10
        consumer.commit(asynchronous=False)
        assert group_offsets(bootstrap, "closing", "expiring", 2) == {0: 5, 1: 5}
        # A Stable member subscribed to the topic: its offsets outlive the retention (the
        # commit is 3 retentions old when we look again).
        committed_at = time.monotonic()
        while time.monotonic() - committed_at < 3 * RETENTION_S:
            consumer.poll(0.5)
        assert group_offsets(bootstrap, "closing", "expiring", 2) == {0: 5, 1: 5}
        assert kafka_python_committed(bootstrap, "closing", "expiring", 0) == 5
        assert "closing" in listed_groups(bootstrap)
        # The member leaves: the group is Empty from now on, and the count starts.
        before_close = time.monotonic()
        consumer.close()
        closed = True
    finally:
        if not closed:
            consumer.close()
    gone = {0: OFFSET_INVALID, 1: OFFSET_INVALID}
    wait_until(
        lambda: group_offsets(bootstrap, "closing", "expiring", 2) == gone,
        60,
        "the closed group's offsets to expire",
        interval=0.2,
    )
    # Not before the retention had passed since the group became Empty (some slack for the
    # two clocks' granularity).
    assert time.monotonic() - before_close >= RETENTION_S - 0.2
    assert kafka_python_committed(bootstrap, "closing", "expiring", 0) is None
    # Empty without offsets: the group itself is removed (Dead) in the same round.
    wait_until(
        lambda: "closing" not in listed_groups(bootstrap), 30, "the group to leave ListGroups"
    )


def test_standalone_consumer_offsets_expire_by_commit_time(
    expiring_broker: BrokerProcess,
) -> None:
    """kafka-python with ``assign()`` (no group protocol): each offset is kept the
    retention after its own commit; the group, known only from its offsets, then goes."""
    from kafka import KafkaConsumer
    from kafka import TopicPartition as KTopicPartition
    from kafka.structs import OffsetAndMetadata

    bootstrap = expiring_broker.bootstrap
    create_topic(bootstrap, "assigned", 1)
    tp = KTopicPartition("assigned", 0)
    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap, group_id="standalone", enable_auto_commit=False
    )
    try:
        consumer.assign([tp])
        before_commit = time.monotonic()
        consumer.commit({tp: OffsetAndMetadata(3, "", -1)})
        assert consumer.committed(tp) == 3
        assert group_offsets(bootstrap, "standalone", "assigned", 1) == {0: 3}
        assert "standalone" in listed_groups(bootstrap)
        wait_until(lambda: consumer.committed(tp) is None, 60, "the standalone offset to expire")
        assert time.monotonic() - before_commit >= RETENTION_S - 0.2
    finally:
        consumer.close(autocommit=False)
    assert group_offsets(bootstrap, "standalone", "assigned", 1) == {0: OFFSET_INVALID}
    wait_until(
        lambda: "standalone" not in listed_groups(bootstrap), 30, "the group to leave ListGroups"
    )


def test_expiry_tombstones_are_replayed_after_a_crash(tmp_path: Path) -> None:
    """The tombstones an expiry round wrote are what a reload sees: after a SIGKILL and a
    restart the expired group stays gone and its offsets unknown, while a group committed
    after the round comes back with its offset."""
    from confluent_kafka import Consumer

    # Longer than the others: the control group's offset must outlive a restart.
    overrides = {
        **GROUP_OVERRIDES,
        "tidelog.offsets.retention.ms": "10000",
        "offsets.retention.check.interval.ms": "500",
    }
    broker = BrokerProcess(tmp_path, overrides).start()
    try:
        bootstrap = broker.bootstrap
        create_topic(bootstrap, "replayed", 1)
        produce(bootstrap, "replayed", 1, 3)
        consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": "short-lived",
                "auto.offset.reset": "earliest",
                "enable.auto.commit": False,
            }
        )
        try:
            consumer.subscribe(["replayed"])
            deadline = time.monotonic() + 60
            read = 0
            while read < 3 and time.monotonic() < deadline:
                msg = consumer.poll(0.5)
                if msg is not None and not msg.error():
                    read += 1
            assert read == 3
            consumer.commit(asynchronous=False)
        finally:
            consumer.close()
        wait_until(lambda: "short-lived" not in listed_groups(bootstrap), 60, "the group to expire")
        assert group_offsets(bootstrap, "short-lived", "replayed", 1) == {0: OFFSET_INVALID}
        # A group committing after the round: its offset must survive the reload (its
        # retention, 10 s from the commit, outlasts the restart).
        assert kafka_python_commit(bootstrap, "later", "replayed", 2) == 2
        committed_at = time.monotonic()
        broker.restart(crash=True)
        assert group_offsets(bootstrap, "short-lived", "replayed", 1) == {0: OFFSET_INVALID}
        assert "short-lived" not in listed_groups(bootstrap)
        later = group_offsets(bootstrap, "later", "replayed", 1)
        since = time.monotonic() - committed_at
        assert later == {0: 2}, f"the control offset, {since:.1f} s after its commit"
    finally:
        broker.stop()


def kafka_python_commit(bootstrap: str, group: str, topic: str, offset: int) -> Any:
    """A standalone kafka-python commit of partition 0; what it then reads back."""
    from kafka import KafkaConsumer
    from kafka import TopicPartition as KTopicPartition
    from kafka.structs import OffsetAndMetadata

    tp = KTopicPartition(topic, 0)
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False)
    try:
        consumer.assign([tp])
        consumer.commit({tp: OffsetAndMetadata(offset, "", -1)})
        return consumer.committed(tp)
    finally:
        consumer.close(autocommit=False)


def test_consumer_offsets_topic_is_compacted(expiring_broker: BrokerProcess) -> None:
    """Kafka's offsetsTopicConfigs: ``cleanup.policy=compact``, ``segment.bytes`` =
    ``offsets.topic.segment.bytes`` (created by the first FindCoordinator, above or here)."""
    from confluent_kafka.admin import AdminClient, ConfigResource

    bootstrap = expiring_broker.bootstrap
    kafka_python_committed(bootstrap, "any", "assigned", 0)  # a FindCoordinator at least
    admin = AdminClient({"bootstrap.servers": bootstrap})
    resource = ConfigResource(ConfigResource.Type.TOPIC, "__consumer_offsets")
    configs = admin.describe_configs([resource], request_timeout=30)[resource].result(30)
    assert configs["cleanup.policy"].value == "compact"
    assert configs["segment.bytes"].value == "104857600"
