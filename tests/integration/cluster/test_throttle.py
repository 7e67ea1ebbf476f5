"""Replication throttles (KIP-73, issue 21) on three real brokers with confluent-kafka: a
follower that comes back far behind catches up at about the throttled rate, not at full
speed, while an acks=1 producer keeps writing to the same partition without an error and
the in-sync follower is never held back; without the throttle the same catch-up is fast.

The partition-reassignment path (AlterPartitionReassignments) grows a replica the same way;
here the out-of-sync follower is a broker stopped while 20 MB were written."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource

from tests.harness import BrokerCluster, wait_until
from tests.integration.cluster.helpers import create_topic, produce, wait_for_isr

pytestmark = pytest.mark.integration

BROKER, TOPIC = ConfigResource.Type.BROKER, ConfigResource.Type.TOPIC
RATE = 2_000_000  # bytes a second, leader and follower side
RECORD = 10_000
RECORDS = 2_000  # 20 MB
#: Short rate windows (Kafka's 11 x 1 s allows a burst of 10 s worth before throttling).
WINDOWS = {"replication.quota.window.num": "3", "replication.quota.window.size.seconds": "1"}


def alter(admin: AdminClient, rtype: Any, name: str, *entries: ConfigEntry) -> None:
    resource = ConfigResource(rtype, name, incremental_configs=list(entries))
    admin.incremental_alter_configs([resource])[resource].result(timeout=20)


def put(key: str, value: str) -> ConfigEntry:
    return ConfigEntry(key, value, incremental_operation=AlterConfigOpType.SET)


def drop(key: str) -> ConfigEntry:
    return ConfigEntry(key, None, incremental_operation=AlterConfigOpType.DELETE)


class SmallProducer:
    """acks=1, a small record every 20 ms; delivery errors and the slowest delivery."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.topic = topic
        config = {"bootstrap.servers": bootstrap, "acks": "1", "message.timeout.ms": 60000}
        self.producer = Producer(config)
        self.sent = 0
        self.acked = 0
        self.errors: list[str] = []
        self.slowest_s = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            started = time.monotonic()

            def delivered(err: Any, _msg: Any, started: float = started) -> None:
                self.slowest_s = max(self.slowest_s, time.monotonic() - started)
                if err is not None:
                    self.errors.append(str(err))
                else:
                    self.acked += 1

            self.producer.produce(self.topic, b"p%06d" % self.sent, on_delivery=delivered)
            self.sent += 1
            self.producer.poll(0.02)

    def __enter__(self) -> SmallProducer:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stop.set()
        self._thread.join()
        assert self.producer.flush(90) == 0


def catch_up(cluster: BrokerCluster, topic: str, leader: int, lagging: int, other: int) -> float:
    """Stop ``lagging``, write 20 MB, start it again: the seconds from its restart until it
    is back in the ISR, while a producer writes to the partition (no errors, and the
    in-sync ``other`` follower never drops out of the ISR)."""
    cluster.broker(lagging).stop()
    wait_for_isr(cluster, topic, {leader, other})
    produce(cluster.bootstrap, topic, [bytes([i % 251]) * RECORD for i in range(RECORDS)], "1")
    wait_until(  # the in-sync follower took the 20 MB (a throttle never holds it back)
        lambda: set(cluster.partition(topic).isr) == {leader, other}, 30, "the ISR to stay"
    )
    with SmallProducer(cluster.bootstrap, topic) as writer:
        cluster.broker(lagging).start()
        started = time.monotonic()
        seen: list[set[int]] = []

        def back() -> bool:
            isr = set(cluster.partition(topic).isr)
            seen.append(isr)
            return lagging in isr

        wait_until(back, 180, f"broker {lagging} back in the ISR of {topic}")
        took = time.monotonic() - started
    assert writer.errors == []
    assert writer.acked == writer.sent > 0
    assert writer.slowest_s < 10, writer.slowest_s
    assert all({leader, other} <= isr for isr in seen), seen
    print(  # the measurement, for the report (-s shows it)
        f"catch-up of {RECORDS * RECORD} bytes: {took:.1f} s; producer: {writer.acked} "
        f"records, slowest {writer.slowest_s:.2f} s"
    )
    return took


def test_throttled_catch_up_runs_at_the_rate_and_producers_keep_going(
    new_cluster: Any,
) -> None:
    cluster: BrokerCluster = new_cluster(overrides=WINDOWS)
    topic = "throttled"
    create_topic(cluster, topic, rf=3, config={"min.insync.replicas": "1"})
    leader = cluster.wait_for_leader(topic)
    lagging, other = [b for b in range(3) if b != leader]
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})

    # The rates on every broker (live, KIP-226), the lists on the topic: the leader's
    # replica as a pair (kafka-reassign-partitions writes the sources so), every follower.
    for b in range(3):
        alter(admin, BROKER, str(b), put("leader.replication.throttled.rate", str(RATE)),
              put("follower.replication.throttled.rate", str(RATE)))  # fmt: skip
    alter(admin, TOPIC, topic, put("leader.replication.throttled.replicas", f"0:{leader}"),
          put("follower.replication.throttled.replicas", "*"))  # fmt: skip
    resource = ConfigResource(TOPIC, topic)

    def described() -> tuple[str, str]:
        # Whichever broker answers has the change once its notification arrived.
        entries = admin.describe_configs([resource])[resource].result(timeout=20)
        return (
            entries["leader.replication.throttled.replicas"].value,
            entries["follower.replication.throttled.replicas"].value,
        )

    wait_until(lambda: described() == (f"0:{leader}", "*"), 20, "the lists described")

    throttled = catch_up(cluster, topic, leader, lagging, other)
    floor = RECORDS * RECORD / RATE
    # At about the rate: a throttle that does nothing catches up in a second or two.
    assert throttled >= 0.5 * floor, (throttled, floor)
    assert throttled <= 4 * floor + 60, (throttled, floor)

    # The lists removed (a topic config change, no restart): the same catch-up is fast.
    alter(admin, TOPIC, topic, drop("leader.replication.throttled.replicas"),
          drop("follower.replication.throttled.replicas"))  # fmt: skip
    time.sleep(2)  # the config change notification reaches the other brokers
    unthrottled = catch_up(cluster, topic, leader, lagging, other)
    print(f"throttled {throttled:.1f} s, unthrottled {unthrottled:.1f} s, floor {floor:.1f} s")
    assert unthrottled < throttled, (unthrottled, throttled)


def test_bad_throttled_replicas_list_is_invalid_config(shared_cluster: BrokerCluster) -> None:
    create_topic(shared_cluster, "badlist", rf=1)
    admin = AdminClient({"bootstrap.servers": shared_cluster.bootstrap})
    with pytest.raises(Exception) as caught:  # noqa: PT011 - KafkaException, checked below
        alter(admin, TOPIC, "badlist", put("leader.replication.throttled.replicas", "0-1"))
    error = caught.value.args[0]
    assert error.name() == "INVALID_CONFIG"
    assert (
        "leader.replication.throttled.replicas must be the literal '*' or a list of replicas "
        "in the following format: [partitionId]:[brokerId],[partitionId]:[brokerId],..."
    ) in error.str()
    with pytest.raises(Exception) as caught:  # noqa: PT011
        alter(admin, BROKER, "0", put("leader.replication.throttled.rate", "-5"))
    error = caught.value.args[0]
    assert error.name() == "INVALID_CONFIG"
    assert "leader.replication.throttled.rate" in error.str()
