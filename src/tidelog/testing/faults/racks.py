"""Issue 32 point 4: is every partition writable while a whole rack is away?

``probe_writable`` is what the ``partition_rack`` fault asks while the rack is cut off: one
``acks=all`` record to each partition, through the clients' proxies (the cut rack's brokers
among them, as an application's bootstrap list would have them), by a confluent-kafka
producer of its own. A partition whose produce fails or times out is tried again with a new
value until its record is acknowledged or the deadline passes (the rack's leaderships move
only once its brokers' ZooKeeper sessions expire and the controller elects new leaders).
Each acknowledgement is an ``Ack`` the checker then holds to like the workload's: acks=all
with ``min.insync.replicas=2`` means two replicas outside the cut rack have the record.
"""

from __future__ import annotations

import time
from typing import Any, Final

from confluent_kafka import Producer

from tidelog.testing.faults.workload import Ack

#: The ``Ack.producer`` of a probe's records (the workload's producers count from 0).
PROBE_PRODUCER: Final = -1
#: How long one attempt at a partition may take (librdkafka retries inside it).
ATTEMPT_TIMEOUT_MS: Final = 5000


def probe_value(label: str, partition: int, attempt: int) -> bytes:
    """A probe's value: never ``p<producer>-<seq>``, so the producer-order check skips it."""
    return f"rack-probe-{label}-p{partition}-{attempt}".encode()


def probe_writable(
    bootstrap: str, topic: str, partitions: int, deadline: float, label: str
) -> list[Ack]:
    """Every ``acks=all`` acknowledgement the partitions gave before ``deadline``
    (time.monotonic()), in arrival order; a partition none of them names did not accept a
    record in time."""
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": "all",
            "enable.idempotence": False,
            "max.in.flight.requests.per.connection": 1,
            "message.timeout.ms": ATTEMPT_TIMEOUT_MS,
            "request.timeout.ms": 3000,
            "socket.timeout.ms": 3000,
            "retry.backoff.ms": 200,
            "topic.metadata.refresh.interval.ms": 1000,
            "log_level": 0,
        }
    )
    acks: list[Ack] = []

    def on_delivery(err: Any, msg: Any) -> None:
        if err is None:
            partition, offset = int(msg.partition()), int(msg.offset())
            value = bytes(msg.value())
            acks.append(Ack(PROBE_PRODUCER, partition, offset, value, time.monotonic()))

    def waiting() -> list[int]:
        done = {a.partition for a in acks}
        return [p for p in range(partitions) if p not in done]

    attempt = 0
    try:
        while waiting() and time.monotonic() < deadline:
            for partition in waiting():
                value = probe_value(label, partition, attempt)
                producer.produce(topic, value, partition=partition, on_delivery=on_delivery)
            # Every delivery report comes within message.timeout.ms (acked or timed out).
            producer.flush(ATTEMPT_TIMEOUT_MS / 1000 + 5.0)
            attempt += 1
            if waiting():
                time.sleep(0.5)
    finally:
        producer.purge()
        producer.flush(5.0)
    return acks
