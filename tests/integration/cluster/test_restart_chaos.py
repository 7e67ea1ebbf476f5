"""A librdkafka producer writes through 9 broker restarts and long pauses (issue 18).

The scenario of the report: confluent-kafka 2.x, ``acks=all``, not idempotent, writing
without pause to an existing topic (6 partitions, RF=3, ``min.insync.replicas=2``) on three
brokers, while brokers are SIGKILLed and started again at once (the new process waits for
its stale registration) or SIGSTOPped for longer than the ZooKeeper session (8 faults),
or stopped cleanly and started (1). What an application sees is the test: no exception
from ``produce()``, no failed delivery (librdkafka retries retriable errors until
``message.timeout.ms``, far longer than any fault here), no fatal error, librdkafka never
saying that the topic lost its partitions; and every acknowledged record is read back at
its offset.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaException, Producer
from confluent_kafka import TopicPartition as CTopicPartition

from tests.harness import BrokerCluster, wait_until
from tests.integration.cluster.helpers import create_topic

pytestmark = pytest.mark.integration

TOPIC = "chaos"
PARTITIONS = 6
#: Kill + immediate restart and long pause, twice each per round, then a clean restart.
KINDS = ("kill_restart", "pause_long", "kill_restart", "pause_long", "restart_clean")
#: 4 kills, 4 pauses, 1 clean restart (25 until session 11: 157 s of `make test` alone; 15
#: until session 12: 86 s; the long restart mixes run in `make chaos`).
FAULTS = 9
#: Longer than zookeeper.session.timeout.ms (6 s, which ZooKeeper caps at 20 ticks = 5 s).
PAUSE_S = 8.0


class LogCapture(logging.Handler):
    """librdkafka's own log lines (confluent-kafka's ``logger`` setting)."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


class AppProducer:
    """An application's producer loop: what would make it stop is recorded."""

    def __init__(self, bootstrap: str) -> None:
        self.librdkafka_log = LogCapture()
        logger = logging.getLogger(f"librdkafka.{id(self)}")
        logger.propagate = False
        logger.addHandler(self.librdkafka_log)
        self.errors: list[str] = []  # produce() exceptions, failed deliveries, fatal errors
        self.acked: dict[tuple[int, int], bytes] = {}
        self.sent = 0
        self.producer = Producer(
            {
                "bootstrap.servers": bootstrap,
                "acks": "all",
                "enable.idempotence": False,
                "linger.ms": 5,
                "message.timeout.ms": 180000,
                "logger": logger,
                "error_cb": self._on_error,
            }
        )
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="app-producer")

    def _on_error(self, err: Any) -> None:
        # Connection failures (_TRANSPORT, _ALL_BROKERS_DOWN) are informational in
        # librdkafka; only a fatal error stops a producer.
        if err.fatal():
            self.errors.append(f"fatal: {err}")

    def _on_delivery(self, err: Any, msg: Any) -> None:
        if err is not None:
            self.errors.append(f"delivery failed: {err}")
        else:
            self.acked[(int(msg.partition()), int(msg.offset()))] = bytes(msg.value())

    def _run(self) -> None:
        while not self._stop.is_set():
            value = b"v%09d" % self.sent
            try:
                self.producer.produce(TOPIC, value, on_delivery=self._on_delivery)
                self.sent += 1
            except BufferError:
                pass  # local queue full: back-pressure, not an error
            except KafkaException as exc:
                self.errors.append(f"produce() raised {exc!r}")
            self.producer.poll(0.005)

    def start(self) -> AppProducer:
        self._thread.start()
        return self

    def stop(self) -> int:
        self._stop.set()
        self._thread.join()
        return self.producer.flush(200)


def read_back(bootstrap: str, acked: dict[tuple[int, int], bytes]) -> dict[tuple[int, int], bytes]:
    """Every record up to the highest acknowledged offset of each partition."""
    ends: dict[int, int] = {}
    for p, o in acked:
        ends[p] = max(ends.get(p, 0), o + 1)
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "unused", "enable.auto.commit": False}
    )
    consumer.assign([CTopicPartition(TOPIC, p, 0) for p in ends])
    got: dict[tuple[int, int], bytes] = {}
    position = dict.fromkeys(ends, 0)
    try:

        def done() -> bool:
            for msg in consumer.consume(1000, 0.5):
                partition, offset, value = msg.partition(), msg.offset(), msg.value()
                if msg.error() is None and None not in (partition, offset, value):
                    p, o = int(partition or 0), int(offset or 0)
                    got[(p, o)] = bytes(value or b"")
                    position[p] = max(position[p], o + 1)
            return all(position[p] >= end for p, end in ends.items())

        wait_until(done, 120.0, "every acknowledged offset read back")
    finally:
        consumer.close()
    return got


def all_isrs_full(cluster: BrokerCluster) -> bool:
    topic = cluster.metadata([TOPIC]).topics[TOPIC]
    return len(topic.partitions) == PARTITIONS and all(
        len(p.isr) == 3 and p.leader_id >= 0 for p in topic.partitions.values()
    )


@pytest.mark.slow  # ~60 s; `make test` stays under 20 min, `make test-slow` runs it
def test_a_producer_writes_through_restarts_and_long_pauses_without_an_error(
    new_cluster: Callable[..., BrokerCluster],
) -> None:
    cluster = new_cluster(overrides={"replica.lag.time.max.ms": "2000"})
    create_topic(cluster, TOPIC, partitions=PARTITIONS)
    wait_until(lambda: all_isrs_full(cluster), 60.0, "every ISR full")
    rng = random.Random(18)
    app = AppProducer(cluster.bootstrap).start()
    done: list[str] = []
    try:
        wait_until(lambda: len(app.acked) >= 200, 60.0, "the first acknowledgements")
        for i in range(FAULTS):
            victim = cluster.broker(rng.randrange(3))
            kind = KINDS[i % len(KINDS)]
            if kind == "kill_restart":
                victim.kill()
                victim.start()  # at once: the stale registration is still there
            elif kind == "pause_long":
                victim.pause()
                time.sleep(PAUSE_S)
                victim.resume()
            else:
                victim.stop()
                victim.start()
            done.append(f"{kind} of broker {victim.broker_id}")
            wait_until(lambda: all_isrs_full(cluster), 120.0, f"every ISR full after {done[-1]}")
            wanted = len(app.acked) + 50

            def acked_more(n: int = wanted) -> bool:
                return len(app.acked) >= n

            wait_until(acked_more, 60.0, "acks after the heal")
    finally:
        remaining = app.stop()
    assert remaining == 0, f"{remaining} records not delivered"
    assert app.errors == [], (done, app.errors[:5])
    suspicious = [
        line
        for line in app.librdkafka_log.lines
        if "partition count changed" in line or "Unknown topic" in line
    ]
    assert suspicious == [], suspicious[:5]
    got = read_back(cluster.bootstrap, app.acked)
    lost = {k: v for k, v in app.acked.items() if got.get(k) != v}
    assert lost == {}, f"{len(lost)} of {len(app.acked)} acknowledged records lost"
    print(f"{len(done)} faults, {app.sent} sent, {len(app.acked)} acknowledged, none lost")
