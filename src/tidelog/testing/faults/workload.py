"""The workload: producers of three clients (confluent-kafka here, kafka-python and aiokafka
in ``clients``; all ``acks=all``) and confluent-kafka ``assign()``-ed consumers, each in a
thread, recording everything they were told (the histories the checker judges).

A producer sends unique values ``p<producer>-<seq>`` round-robin over the partitions with
one request in flight per connection (so its own retries cannot reorder a partition) and
records every acknowledgement (partition, offset, value, when) and every error its client
reported, classified (issue 18):

- *indeterminate* (``ProducerHistory.failed``): a delivery that timed out or ended on an
  error Kafka marks retriable (leader moved, not enough replicas, disconnected, ...): the
  write may or may not be in the log, and an application would retry it;
- *client-visible* (``ProducerHistory.visible``, ``ClientError``): an error an application
  would stop on: a non-retriable or fatal error in a delivery report (the topic or
  partition unknown although it exists, ...), or any exception ``produce()``/``send()``
  itself raised other than local back-pressure. The worker counts it and goes on; the run
  fails.

Each client has its own table (``classify_librdkafka`` here, ``classify_kafka_python`` and
``classify_aiokafka`` in ``clients``): librdkafka's delivery reports carry
``retriable()=False`` even for timeouts, and aiokafka's ``KafkaTimeoutError`` is not
retriable either, so the tables name them. A consumer is assigned every partition from
offset 0 (no group: ``assign()``) and records every record it reads; a fatal error or the
existing topic reported unknown is a client-visible error too. ``final_read`` reads every
partition from 0 up to its high watermark once everything healed.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any, ClassVar, Final, Literal, Self

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Producer
from confluent_kafka import TopicPartition as CTopicPartition

CONFLUENT: Final = "confluent-kafka"
KAFKA_PYTHON: Final = "kafka-python"
AIOKAFKA: Final = "aiokafka"
CLIENTS: Final = (CONFLUENT, KAFKA_PYTHON, AIOKAFKA)

Verdict = Literal["indeterminate", "client-visible"]
INDETERMINATE: Final = "indeterminate"
CLIENT_VISIBLE: Final = "client-visible"

#: librdkafka error names (``KafkaError.name()``) that leave a write indeterminate: timeouts,
#: transport failures and the codes Kafka marks retriable. librdkafka retries these itself
#: until ``message.timeout.ms``; a delivery report carrying one says "gave up", and often
#: with ``retriable()=False``, hence this table. Kafka's NOT_LEADER_OR_FOLLOWER is
#: librdkafka's NOT_LEADER_FOR_PARTITION.
LIBRDKAFKA_INDETERMINATE: Final = frozenset(
    {
        "_MSG_TIMED_OUT",
        "_TIMED_OUT",
        "_TIMED_OUT_QUEUE",
        "REQUEST_TIMED_OUT",
        "_TRANSPORT",
        "_ALL_BROKERS_DOWN",
        "_RESOLVE",
        "NETWORK_EXCEPTION",
        "NOT_LEADER_FOR_PARTITION",
        "LEADER_NOT_AVAILABLE",
        "NOT_ENOUGH_REPLICAS",
        "NOT_ENOUGH_REPLICAS_AFTER_APPEND",
        "REPLICA_NOT_AVAILABLE",
        "KAFKA_STORAGE_ERROR",
        "FENCED_LEADER_EPOCH",
        "UNKNOWN_LEADER_EPOCH",
        "OFFSET_NOT_AVAILABLE",
        "NOT_CONTROLLER",
        "_RETRY",
    }
)
#: librdkafka error names that are client-visible whatever their flags say: the existing
#: topic or one of its partitions reported unknown (``produce()`` raises these, and queued
#: messages fail with them; UNKNOWN_TOPIC_OR_PART in a delivery report means librdkafka gave
#: up on it), and a fatal error.
LIBRDKAFKA_CLIENT_VISIBLE: Final = frozenset(
    {"_UNKNOWN_TOPIC", "_UNKNOWN_PARTITION", "UNKNOWN_TOPIC_OR_PART", "_FATAL"}
)


def classify_librdkafka(err: KafkaError) -> Verdict:
    """A librdkafka error in a delivery report: the tables first, then the flags (fatal:
    client-visible; retriable: indeterminate; anything else: client-visible)."""
    name = err.name()
    if err.fatal() or name in LIBRDKAFKA_CLIENT_VISIBLE:
        return CLIENT_VISIBLE
    if name in LIBRDKAFKA_INDETERMINATE or err.retriable():
        return INDETERMINATE
    return CLIENT_VISIBLE


def consumer_error_is_visible(err: KafkaError) -> bool:
    """A consumer's error event: client-visible when fatal, when it reports the existing
    topic or partition unknown, or when it is a broker error that ``classify_librdkafka``
    calls client-visible. Other local events (transport, all brokers down, an offset reset)
    are informational: librdkafka recovers from them by itself."""
    name = err.name()
    if err.fatal() or name in LIBRDKAFKA_CLIENT_VISIBLE:
        return True
    return int(err.code()) > 0 and classify_librdkafka(err) == CLIENT_VISIBLE


def confluent_raise_is_backpressure(exc: BaseException) -> bool:
    """``produce()`` raised: only BufferError (the local queue is full) is back-pressure;
    anything else (KafkaException(_UNKNOWN_TOPIC), ...) is client-visible."""
    return isinstance(exc, BufferError)


#: After a client-visible raise, a producer waits this long before its next send.
RAISE_PAUSE_S: Final = 0.1


@dataclass(frozen=True, slots=True)
class ClientError:
    """One client-visible error: an error an application would stop on."""

    client: str  # CONFLUENT, KAFKA_PYTHON or AIOKAFKA
    worker: str  # "producer 2", "consumer c0"
    where: str  # "delivery report", "produce()", "send()", "consume()"
    error: str
    at: float  # time.monotonic()
    #: The value a failed delivery carried (None for a raise or a consumer's error).
    value: bytes | None = None


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
    client: str = CONFLUENT
    #: Client-visible errors (delivery reports and raises).
    visible: list[ClientError] = field(default_factory=list)
    #: Sends refused by local back-pressure (the record was not taken; tried again).
    backpressure: int = 0


class ProducerWorkerBase:
    """What every client's producer worker shares: the history (under a lock: the client's
    callbacks run in its own thread), the thread, start/stop."""

    client: ClassVar[str] = CONFLUENT
    #: Records taken by the client and not yet acknowledged or failed, at most (clients
    #: without a bounded queue of their own wait here).
    max_outstanding: ClassVar[int] = 5000

    def __init__(self, topic: str, partitions: int, producer_id: int, interval_s: float) -> None:
        self.topic = topic
        self.partitions = partitions
        self.interval_s = interval_s
        self.history = ProducerHistory(producer_id, client=self.client)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=self._run, daemon=True, name=f"producer-{producer_id}"
        )

    def _run(self) -> None:
        raise NotImplementedError

    def _next(self) -> tuple[bytes, int]:
        """The next value to send and its partition."""
        h = self.history
        return b"p%d-%d" % (h.producer, h.sent), h.sent % self.partitions

    def _outstanding(self) -> int:
        with self._lock:
            h = self.history
            return h.sent - len(h.acks) - len(h.failed) - len(h.visible)

    def _acked(self, partition: int, offset: int, value: bytes) -> None:
        now = time.monotonic()
        with self._lock:
            self.history.acks.append(Ack(self.history.producer, partition, offset, value, now))

    def _failed(self, value: bytes, error: str, verdict: Verdict, where: str) -> None:
        now = time.monotonic()
        with self._lock:
            if verdict == INDETERMINATE:
                self.history.failed.append((value, error, now))
            else:
                self.history.visible.append(self._error(where, error, now, value))

    def _raised(self, error: str, where: str) -> None:
        """``produce()``/``send()`` raised (not back-pressure): client-visible; the record was
        not taken, so ``sent`` is not advanced (the caller waits ``RAISE_PAUSE_S`` so an error
        repeated on every call is counted, not spun on)."""
        with self._lock:
            self.history.visible.append(self._error(where, error, time.monotonic()))

    def _error(self, where: str, error: str, at: float, value: bytes | None = None) -> ClientError:
        worker = f"producer {self.history.producer}"
        return ClientError(self.client, worker, where, error, at, value)

    def start(self) -> Self:
        self._thread.start()
        return self

    def _stop_sending(self) -> None:
        """The sending thread ends (deliveries still outstanding are the caller's)."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()

    def acked_count(self) -> int:
        with self._lock:
            return len(self.history.acks)

    def last_ack_at(self) -> float | None:
        with self._lock:
            return self.history.acks[-1].at if self.history.acks else None

    def stop(self, flush_timeout_s: float = 60.0) -> None:
        """Stop sending and wait for the outstanding deliveries (acked or failed)."""
        raise NotImplementedError

    def abort(self) -> None:
        """Stop sending without waiting (the run failed; idempotent)."""
        self._stop.set()


class ProducerWorker(ProducerWorkerBase):
    """One confluent-kafka (librdkafka) acks=all producer in a thread; see the module
    docstring."""

    client = CONFLUENT

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
        super().__init__(topic, partitions, producer_id, interval_s)
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

    def _on_delivery(self, err: Any, msg: Any) -> None:
        value = bytes(msg.value())
        if err is None:
            self._acked(int(msg.partition()), int(msg.offset()), value)
        else:
            self._failed(
                value, f"{err.name()}: {err.str()}", classify_librdkafka(err), "delivery report"
            )

    def _run(self) -> None:
        h = self.history
        while not self._stop.is_set():
            value, partition = self._next()
            try:
                self.producer.produce(
                    self.topic, value, partition=partition, on_delivery=self._on_delivery
                )
                with self._lock:
                    h.sent += 1
            except Exception as exc:  # every raise is classified and counted
                if confluent_raise_is_backpressure(exc):
                    h.backpressure += 1
                else:
                    self._raised(f"{type(exc).__name__}: {exc}", "produce()")
                    self._stop.wait(RAISE_PAUSE_S)
            self.producer.poll(self.interval_s)

    def stop(self, flush_timeout_s: float = 60.0) -> None:
        """Stop sending and wait for the outstanding deliveries (acked or failed)."""
        self._stop_sending()
        self.producer.flush(flush_timeout_s)


def _fields(msg: Any) -> tuple[int, int, bytes]:
    """(partition, offset, value) of a record message (never None for one)."""
    partition, offset, value = msg.partition(), msg.offset(), msg.value()
    assert partition is not None
    assert offset is not None
    assert value is not None
    return int(partition), int(offset), bytes(value)


class ConsumerWorker:
    """One consumer reading every partition from offset 0 continuously (assign, no group);
    ``read_committed`` (issue 19) sets ``isolation.level=read_committed``: it reads up to the
    last stable offset and never an aborted transaction's records."""

    def __init__(
        self,
        bootstrap: str,
        topic: str,
        partitions: int,
        name: str,
        *,
        read_committed: bool = False,
    ) -> None:
        self.name = name
        self.topic = topic
        self.reads: list[Read] = []
        #: (partition, offset, what): offsets reset, errors reported by the client.
        self.errors: list[str] = []
        #: Client-visible errors (``consumer_error_is_visible``).
        self.visible: list[ClientError] = []
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
                "isolation.level": "read_committed" if read_committed else "read_uncommitted",
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
                    elif err.code() != KafkaError._PARTITION_EOF and consumer_error_is_visible(err):
                        self.visible.append(
                            ClientError(
                                CONFLUENT,
                                f"consumer {self.name}",
                                "consume()",
                                f"{err.name()}: {err.str()}",
                                time.monotonic(),
                            )
                        )
                        if err.fatal():
                            self.errors.append(f"fatal: {err.str()}")
                            return  # the consumer is unusable after a fatal error
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
