"""The workload: confluent-kafka producers (acks=all) and assign()-ed consumers, each in a
thread, recording everything they were told (the histories the checker judges).

A producer sends unique values ``p<producer>-<seq>`` round-robin over the partitions with
``max.in.flight.requests.per.connection=1`` (so its own retries cannot reorder a partition)
and records every acknowledgement (partition, offset, value, when) and every failed delivery
(an indeterminate write: it may or may not be in the log). A consumer is assigned every
partition from offset 0 (no group: ``assign()``) and records every record it reads.
``final_read`` reads every partition from 0 up to its high watermark once everything healed.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Producer
from confluent_kafka import TopicPartition as CTopicPartition


@dataclass(frozen=True, slots=True)
class Ack:
    producer: int
    partition: int
    offset: int
    value: bytes
    at: float  # time.monotonic() when the acknowledgement arrived


@dataclass(frozen=True, slots=True)
class Read:
    reader: str
    partition: int
    offset: int
    value: bytes
    at: float


@dataclass(slots=True)
class ProducerHistory:
    producer: int
    sent: int = 0
    acks: list[Ack] = field(default_factory=list)
    #: (value, error text, when): indeterminate writes.
    failed: list[tuple[bytes, str, float]] = field(default_factory=list)


class ProducerWorker:
    """One acks=all producer in a thread; see the module docstring."""

    def __init__(
        self,
        bootstrap: str,
        topic: str,
        partitions: int,
        producer_id: int,
        *,
        interval_s: float = 0.005,
        acks: str = "all",
        message_timeout_ms: int = 30000,
        idempotent: bool = False,
    ) -> None:
        self.topic = topic
        self.partitions = partitions
        self.interval_s = interval_s
        self.history = ProducerHistory(producer_id)
        self._lock = threading.Lock()
        self.producer = Producer(
            {
                "bootstrap.servers": bootstrap,
                "acks": acks,
                "linger.ms": 5,
                "max.in.flight.requests.per.connection": 1,
                "message.timeout.ms": message_timeout_ms,
                "request.timeout.ms": 5000,
                "retry.backoff.ms": 100,
                "topic.metadata.refresh.interval.ms": 1000,
                "socket.timeout.ms": 5000,
                "log_level": 0,
                # Issue 9: with idempotence a retried batch must not be stored twice.
                "enable.idempotence": idempotent,
            }
        )
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=self._run, daemon=True, name=f"producer-{producer_id}"
        )

    def _on_delivery(self, err: Any, msg: Any) -> None:
        now = time.monotonic()
        with self._lock:
            if err is not None:
                self.history.failed.append((bytes(msg.value()), str(err), now))
            else:
                self.history.acks.append(
                    Ack(
                        self.history.producer,
                        msg.partition(),
                        msg.offset(),
                        bytes(msg.value()),
                        now,
                    )
                )

    def _run(self) -> None:
        h = self.history
        while not self._stop.is_set():
            value = b"p%d-%d" % (h.producer, h.sent)
            try:
                self.producer.produce(
                    self.topic,
                    value,
                    partition=h.sent % self.partitions,
                    on_delivery=self._on_delivery,
                )
                h.sent += 1
            except BufferError:
                pass
            self.producer.poll(self.interval_s)

    def start(self) -> ProducerWorker:
        self._thread.start()
        return self

    def acked_count(self) -> int:
        with self._lock:
            return len(self.history.acks)

    def last_ack_at(self) -> float | None:
        with self._lock:
            return self.history.acks[-1].at if self.history.acks else None

    def stop(self, flush_timeout_s: float = 60.0) -> None:
        """Stop sending and wait for the outstanding deliveries (acked or failed)."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()
        self.producer.flush(flush_timeout_s)


def _fields(msg: Any) -> tuple[int, int, bytes]:
    """(partition, offset, value) of a record message (never None for one)."""
    partition, offset, value = msg.partition(), msg.offset(), msg.value()
    assert partition is not None
    assert offset is not None
    assert value is not None
    return int(partition), int(offset), bytes(value)


class ConsumerWorker:
    """One consumer reading every partition from offset 0 continuously (assign, no group)."""

    def __init__(self, bootstrap: str, topic: str, partitions: int, name: str) -> None:
        self.name = name
        self.topic = topic
        self.reads: list[Read] = []
        #: (partition, offset, what): offsets reset, errors reported by the client.
        self.errors: list[str] = []
        self.consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": f"tidelog-faults-{name}",
                "enable.auto.commit": False,
                "auto.offset.reset": "error",
                "topic.metadata.refresh.interval.ms": 1000,
                "socket.timeout.ms": 5000,
                "fetch.wait.max.ms": 100,
                "log_level": 0,
            }
        )
        self.consumer.assign(
            [CTopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)]
        )
        self.next_offset: dict[int, int] = dict.fromkeys(range(partitions), 0)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name=f"consumer-{name}")

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                for msg in self.consumer.consume(500, 0.2):
                    err = msg.error()
                    if err is None:
                        p, o, v = _fields(msg)
                        self.reads.append(Read(self.name, p, o, v, time.monotonic()))
                        self.next_offset[p] = o + 1
                    elif err.code() == KafkaError._AUTO_OFFSET_RESET:
                        # The position is outside the log: keep what we saw, retry from there.
                        p = int(msg.partition() or 0)
                        self.errors.append(
                            f"{self.topic}-{p} at {self.next_offset[p]} "
                            f"(t={time.monotonic():.1f}): {err.str()}"
                        )
                        time.sleep(0.2)
                        self.consumer.assign(
                            [CTopicPartition(self.topic, q, o) for q, o in self.next_offset.items()]
                        )
                    elif err.code() != KafkaError._PARTITION_EOF and err.fatal():
                        self.errors.append(f"fatal: {err.str()}")
                        return
        finally:
            self.consumer.close()

    def start(self) -> ConsumerWorker:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(30)


def final_read(
    bootstrap: str, topic: str, partitions: int, timeout_s: float = 60.0
) -> tuple[list[Read], dict[int, int]]:
    """Every record of every partition from 0 to its high watermark (read after the heal);
    returns the reads and the high watermarks."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "tidelog-faults-final",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "log_level": 0,
        }
    )
    reads: list[Read] = []
    try:
        hws: dict[int, int] = {}
        for p in range(partitions):
            _low, high = consumer.get_watermark_offsets(
                CTopicPartition(topic, p), timeout=10.0, cached=False
            )
            hws[p] = int(high)
        consumer.assign([CTopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
        position = dict.fromkeys(range(partitions), 0)
        deadline = time.monotonic() + timeout_s
        while any(position[p] < hws[p] for p in hws) and time.monotonic() < deadline:
            for msg in consumer.consume(1000, 0.5):
                if msg.error() is not None:
                    continue
                p, o, v = _fields(msg)
                if o < hws[p]:
                    reads.append(Read("final", p, o, v, time.monotonic()))
                    position[p] = o + 1
        return reads, hws
    finally:
        consumer.close()
