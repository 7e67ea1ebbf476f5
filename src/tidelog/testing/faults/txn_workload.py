"""The transactional workload (issue 19): confluent-kafka transactional producers, each in a
thread, recording every transaction and what the client said of it; the final reads.

A ``TxnProducerWorker`` owns one ``transactional.id`` (``tidelog-faults-txn-<n>``;
idempotence and ``acks=all`` are implied) and loops: ``begin_transaction()``, produce K
unique values ``t<producer>-<txn>-<i>`` over the partitions (round robin from a random
one), then commit or abort (``commit_ratio`` of them commit, drawn from a seeded RNG). Each
transaction is a ``Txn``: its values, the outcome the client reported, when
``commit_transaction()`` was first called, and every error on the way. The outcome is what
an application would conclude:

- ``committed``: ``commit_transaction()`` returned;
- ``aborted``: ``abort_transaction()`` returned: an intended abort (the records are flushed
  first, so they are in the log: librdkafka's abort purges what it has not sent), or an
  abort after an abortable error (``txn_requires_abort()``) from ``produce()`` or
  ``commit_transaction()``;
- ``indeterminate``: a fatal error (``fatal()``, or an error with none of the flags, which
  librdkafka's documentation says to treat as fatal) or a retriable one that did not clear
  within ``stuck_after_s``: the producer is closed and a new one made (``init_transactions``
  fences the old one and aborts whatever transaction it left open). Such an error is
  client-visible: an application would stop on it;
- ``fenced``: the zombie scenario. Every ``zombie_every``-th transaction
  (``is_zombie_turn``), once its records are flushed, a second producer with the same
  ``transactional.id`` is made (``init_transactions`` bumps the epoch and aborts the open
  transaction), then the first one's ``commit_transaction()`` must fail: it is fenced (the
  expected error, not client-visible; an abortable error is documented too, any other fatal
  one is client-visible), the successor carries on. A zombie whose commit returned is
  recorded ``committed`` with ``zombie=True`` (the checker fails it).

Retriable errors (``retriable()``: a timeout, a coordinator moving) are retried in place, as
librdkafka's documentation says, for up to ``stuck_after_s`` each call. Delivery reports are
recorded per transaction: a purge after an abort (``_PURGE_QUEUE``, ``_PURGE_INFLIGHT``) and,
for a zombie, the fencing errors are expected; the others go through the record workload's
librdkafka table (``classify_librdkafka``): client-visible ones (the existing topic reported
unknown, ...) fail the run as they do there, indeterminate ones only make the transaction
abortable (counted).

``read_to_end`` reads every partition from offset 0 up to given end offsets (the last stable
offsets for read_committed, the high watermarks otherwise), after the final heal.
"""

from __future__ import annotations

import contextlib
import logging
import random
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Final, Literal, Self

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, Producer
from confluent_kafka import TopicPartition as CTopicPartition

from tidelog.testing.faults.workload import CLIENT_VISIBLE, CONFLUENT, ClientError, Read
from tidelog.testing.faults.workload import classify_librdkafka as classify_delivery

COMMITTED: Final = "committed"
ABORTED: Final = "aborted"
INDETERMINATE: Final = "indeterminate"
FENCED: Final = "fenced"
#: Not ended yet (a transaction still open when the run ended counts as indeterminate).
OPEN: Final = "open"
OUTCOMES: Final = (COMMITTED, ABORTED, INDETERMINATE, FENCED)

ErrorKind = Literal["retriable", "abortable", "fatal"]
RETRIABLE: Final = "retriable"
ABORTABLE: Final = "abortable"
FATAL: Final = "fatal"

#: librdkafka error names a fenced producer reports (the zombie scenario expects them).
FENCING_ERRORS: Final = frozenset({"_FENCED", "PRODUCER_FENCED", "INVALID_PRODUCER_EPOCH"})
#: Delivery reports of records purged by ``abort_transaction()`` (or a producer's close).
PURGED: Final = frozenset({"_PURGE_QUEUE", "_PURGE_INFLIGHT"})

TXN_ID_PREFIX: Final = "tidelog-faults-txn-"

_LIBRDKAFKA_LOG = logging.getLogger("tidelog.testing.faults.librdkafka")
_LIBRDKAFKA_LOG.addHandler(logging.NullHandler())
_LIBRDKAFKA_LOG.propagate = False


def transactional_id(producer: int) -> str:
    return f"{TXN_ID_PREFIX}{producer}"


def classify_txn_error(err: KafkaError) -> ErrorKind:
    """An error raised by a transactional call (``init_transactions``, ``produce``,
    ``commit_transaction``, ``abort_transaction``), as librdkafka's documentation says to
    handle it: ``fatal()`` first, then ``txn_requires_abort()`` (abort, start a new one), then
    ``retriable()`` (call again); any other error is to be treated as fatal."""
    if err.fatal():
        return FATAL
    if err.txn_requires_abort():
        return ABORTABLE
    if err.retriable():
        return RETRIABLE
    return FATAL


def is_zombie_turn(number: int, producer: int, every: int) -> bool:
    """Whether transaction ``number`` (from 0) of ``producer`` is a zombie scenario: every
    ``every``-th one, shifted per producer so that the producers' zombies do not coincide."""
    return every > 0 and (number + 1 + 7 * producer) % every == 0


def is_fencing(err: KafkaError) -> bool:
    return err.name() in FENCING_ERRORS


def delivery_error_is_visible(err: KafkaError, *, zombie: bool) -> bool:
    """A transactional record's failed delivery: a purge (after an abort) is expected, and so
    is a fencing error for a zombie; a fatal error is reported by the transactional call that
    raises it (counted there); anything else is judged by the record workload's table."""
    name = err.name()
    if name in PURGED or err.fatal() or (zombie and name in FENCING_ERRORS):
        return False
    return classify_delivery(err) == CLIENT_VISIBLE


def describe(err: KafkaError) -> str:
    flags = [
        flag
        for flag, on in (
            ("fatal", err.fatal()),
            ("abortable", err.txn_requires_abort()),
            ("retriable", err.retriable()),
        )
        if on
    ]
    return f"{err.name()}: {err.str()}" + (f" ({', '.join(flags)})" if flags else "")


def _kafka_error(exc: KafkaException) -> KafkaError:
    err = exc.args[0] if exc.args else None
    if isinstance(err, KafkaError):
        return err
    return KafkaError(KafkaError._FATAL, str(exc), fatal=True)


@dataclass(slots=True)
class Txn:
    """One transaction of one producer, as its client reported it."""

    producer: int
    transactional_id: str
    number: int
    #: What the workload meant to do: "commit" or "abort".
    intent: str
    zombie: bool
    begun_at: float  # time.monotonic()
    #: Every value handed to ``produce()`` (taken by the client), with its partition.
    values: list[bytes] = field(default_factory=list)
    partitions: list[int] = field(default_factory=list)
    outcome: str = OPEN
    #: When ``commit_transaction()`` was first called (None: never called).
    commit_called_at: float | None = None
    ended_at: float | None = None
    #: What the client raised on the way ("commit_transaction(): _TIMED_OUT: ... (retriable)").
    errors: list[str] = field(default_factory=list)
    #: value -> (partition, offset) of its delivery report (the offset it was written at).
    delivered: dict[bytes, tuple[int, int]] = field(default_factory=dict)
    #: Failed delivery reports ("value: error").
    delivery_errors: list[str] = field(default_factory=list)
    #: Why an abort happened ("intended", or the abortable error).
    abort_reason: str | None = None


class TxnProducerWorker:
    """One confluent-kafka transactional producer in a thread; see the module docstring."""

    def __init__(
        self,
        bootstrap: str,
        topic: str,
        partitions: int,
        producer_id: int,
        *,
        seed: int,
        commit_ratio: float = 0.7,
        values_per_txn: tuple[int, int] = (2, 8),
        zombie_every: int = 25,
        interval_s: float = 0.02,
        transaction_timeout_ms: int = 60000,
        call_timeout_s: float = 30.0,
        stuck_after_s: float = 120.0,
    ) -> None:
        self.bootstrap = bootstrap
        self.topic = topic
        self.partitions = partitions
        self.producer_id = producer_id
        self.transactional_id = transactional_id(producer_id)
        self.rng = random.Random(f"{seed}/{producer_id}")
        self.commit_ratio = commit_ratio
        self.values_per_txn = values_per_txn
        self.zombie_every = zombie_every
        self.interval_s = interval_s
        self.transaction_timeout_ms = transaction_timeout_ms
        self.call_timeout_s = call_timeout_s
        self.stuck_after_s = stuck_after_s
        self.txns: list[Txn] = []
        #: Client-visible errors: an application would stop on these.
        self.visible: list[ClientError] = []
        #: Liveness: a call that kept failing with retriable errors for ``stuck_after_s``.
        self.stuck: list[str] = []
        #: Every error raised or reported, by (where, error name): the report's figures.
        self.error_counts: Counter[tuple[str, str]] = Counter()
        #: Producers made (the first, successors of zombies, replacements after fatal errors).
        self.producers_made = 0
        self.backpressure = 0
        self._producer: Producer | None = None
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=self._run, daemon=True, name=f"txn-producer-{producer_id}"
        )

    # -- the client --------------------------------------------------------------------------

    def _config(self) -> dict[str, Any]:
        return {
            "bootstrap.servers": self.bootstrap,
            "transactional.id": self.transactional_id,
            "transaction.timeout.ms": self.transaction_timeout_ms,
            "message.timeout.ms": min(30000, self.transaction_timeout_ms),
            "linger.ms": 5,
            "request.timeout.ms": 5000,
            "socket.timeout.ms": 5000,
            "retry.backoff.ms": 100,
            "topic.metadata.refresh.interval.ms": 1000,
            # Every error reaches us through an exception or a delivery report; librdkafka's
            # own log (a FATAL line per fenced zombie) goes to a silent logger.
            "logger": _LIBRDKAFKA_LOG,
        }

    def _visible(self, where: str, error: str, value: bytes | None = None) -> None:
        worker = f"txn producer {self.producer_id}"
        with self._lock:
            self.visible.append(
                ClientError(CONFLUENT, worker, where, error, time.monotonic(), value)
            )

    def _count(self, where: str, err: KafkaError) -> None:
        with self._lock:
            self.error_counts[(where, err.name())] += 1

    def _new_producer(self) -> Producer | None:
        """A producer whose ``init_transactions()`` returned (it fenced any older instance of
        the transactional id and aborted what that one left open); None when stopping first.
        A fatal error is client-visible and the producer is made again."""
        started = time.monotonic()
        reported_stuck = False
        while True:
            producer = Producer(self._config())
            with self._lock:
                self.producers_made += 1
            while True:
                try:
                    producer.init_transactions(self.call_timeout_s)
                    return producer
                except KafkaException as exc:
                    err = _kafka_error(exc)
                    self._count("init_transactions()", err)
                    kind = classify_txn_error(err)
                    waited = time.monotonic() - started
                    if kind == RETRIABLE and waited > self.stuck_after_s and not reported_stuck:
                        reported_stuck = True
                        self._stuck(
                            f"init_transactions() still failing after {waited:.0f}s: "
                            f"{describe(err)}"
                        )
                    if self._stop.is_set() and waited > self.stuck_after_s:
                        _close(producer)
                        return None
                    if kind != RETRIABLE:
                        self._visible("init_transactions()", describe(err))
                        _close(producer)
                        self._stop.wait(1.0)
                        break

    def _stuck(self, what: str) -> None:
        with self._lock:
            self.stuck.append(f"txn producer {self.producer_id} ({self.transactional_id}): {what}")

    def _on_delivery(self, txn: Txn, err: KafkaError | None, msg: Any) -> None:
        value = bytes(msg.value())
        with self._lock:
            if err is None:
                txn.delivered[value] = (int(msg.partition()), int(msg.offset()))
                return
            txn.delivery_errors.append(f"{value.decode()}: {err.name()}")
            self.error_counts[("delivery report", err.name())] += 1
        if delivery_error_is_visible(err, zombie=txn.zombie):
            self._visible("delivery report", describe(err), value)

    # -- the loop ----------------------------------------------------------------------------

    def _run(self) -> None:
        self._producer = self._new_producer()
        while self._producer is not None and not self._stop.is_set():
            self._transaction(self._producer)
            self._stop.wait(self.interval_s)
        if self._producer is not None:
            _close(self._producer)
            self._producer = None

    def _transaction(self, producer: Producer) -> None:
        number = len(self.txns)
        count = self.rng.randint(*self.values_per_txn)
        first = self.rng.randrange(self.partitions)
        intent = "commit" if self.rng.random() < self.commit_ratio else "abort"
        zombie = is_zombie_turn(number, self.producer_id, self.zombie_every)
        try:
            producer.begin_transaction()
        except KafkaException as exc:
            # Nothing was produced: no transaction to record; a new producer carries on.
            err = _kafka_error(exc)
            self._count("begin_transaction()", err)
            self._visible("begin_transaction()", describe(err))
            self._replace(producer)
            return
        txn = Txn(self.producer_id, self.transactional_id, number, intent, zombie, time.monotonic())
        with self._lock:
            self.txns.append(txn)
        for i in range(count):
            value = b"t%d-%d-%d" % (self.producer_id, number, i)
            partition = (first + i) % self.partitions
            raised = self._produce(producer, txn, value, partition)
            if raised is not None:
                self._after_error(producer, txn, "produce()", raised)
                return
        if zombie:
            self._zombie(producer, txn)
        elif intent == "commit":
            self._commit(producer, txn)
        else:
            producer.flush(self.call_timeout_s)  # the aborted records reach the log first
            self._abort(producer, txn, "intended")

    def _produce(
        self, producer: Producer, txn: Txn, value: bytes, partition: int
    ) -> KafkaError | None:
        """Hands one value to the client (waiting out a full queue); the error it raised
        otherwise."""
        while True:
            try:
                producer.produce(
                    self.topic,
                    value,
                    partition=partition,
                    on_delivery=lambda err, msg: self._on_delivery(txn, err, msg),
                )
            except BufferError:
                self.backpressure += 1
                producer.poll(0.1)
                continue
            except KafkaException as exc:
                return _kafka_error(exc)
            with self._lock:
                txn.values.append(value)
                txn.partitions.append(partition)
            producer.poll(0)
            return None

    def _end(self, txn: Txn, outcome: str) -> None:
        with self._lock:
            txn.outcome = outcome
            txn.ended_at = time.monotonic()

    def _note(self, txn: Txn, where: str, err: KafkaError) -> None:
        self._count(where, err)
        with self._lock:
            txn.errors.append(f"{where}: {describe(err)}")

    def _call(self, call: Any, txn: Txn, where: str) -> KafkaError | None:
        """``call(timeout)`` retried while it raises retriable errors (up to
        ``stuck_after_s``); the first other error, or the retriable one at the deadline."""
        started = time.monotonic()
        while True:
            try:
                call(self.call_timeout_s)
                return None
            except KafkaException as exc:
                err = _kafka_error(exc)
                self._note(txn, where, err)
                if classify_txn_error(err) != RETRIABLE:
                    return err
                if time.monotonic() - started > self.stuck_after_s:
                    self._stuck(
                        f"transaction {txn.number}: {where} still retriable after "
                        f"{self.stuck_after_s:.0f}s: {describe(err)}"
                    )
                    return err

    def _commit(self, producer: Producer, txn: Txn) -> None:
        with self._lock:
            txn.commit_called_at = time.monotonic()
        err = self._call(producer.commit_transaction, txn, "commit_transaction()")
        if err is None:
            self._end(txn, COMMITTED)
        else:
            self._after_error(producer, txn, "commit_transaction()", err, noted=True)

    def _abort(self, producer: Producer, txn: Txn, reason: str) -> None:
        with self._lock:
            txn.abort_reason = reason
        err = self._call(producer.abort_transaction, txn, "abort_transaction()")
        if err is None:
            self._end(txn, ABORTED)
        else:
            self._fatal(producer, txn, "abort_transaction()", err)

    def _after_error(
        self, producer: Producer, txn: Txn, where: str, err: KafkaError, *, noted: bool = False
    ) -> None:
        if not noted:
            self._note(txn, where, err)
        if classify_txn_error(err) == ABORTABLE:
            self._abort(producer, txn, f"{where}: {err.name()}")
        else:
            self._fatal(producer, txn, where, err)

    def _fatal(self, producer: Producer, txn: Txn, where: str, err: KafkaError) -> None:
        """A fatal error (or a retriable one past the deadline): the outcome is unknown, the
        application would stop (client-visible); the producer is replaced."""
        self._end(txn, INDETERMINATE)
        self._visible(where, f"transaction {txn.number}: {describe(err)}")
        self._replace(producer)

    def _replace(self, producer: Producer) -> None:
        _close(producer)
        self._producer = self._new_producer()

    def _zombie(self, producer: Producer, txn: Txn) -> None:
        """The zombie scenario: the records are flushed (in the log), a successor with the same
        transactional id is made (it fences this producer and aborts the open transaction),
        then this producer's commit must fail."""
        producer.flush(self.call_timeout_s)
        successor = self._new_producer()
        with self._lock:
            txn.commit_called_at = time.monotonic()
        err = self._call(producer.commit_transaction, txn, "zombie commit_transaction()")
        if err is None:
            self._end(txn, COMMITTED)  # not fenced: the checker reports it
        else:
            self._end(txn, FENCED)
            if not is_fencing(err) and classify_txn_error(err) == FATAL:
                # A fatal error other than fencing: an application would stop on it. (An
                # abortable one, e.g. a delivery that failed during a fault, is documented.)
                self._visible("zombie commit_transaction()", describe(err))
        _close(producer)
        self._producer = successor

    # -- control -----------------------------------------------------------------------------

    def start(self) -> Self:
        self._thread.start()
        return self

    def stop(self, timeout_s: float = 300.0) -> None:
        """Finish the transaction in progress, then stop (the producer is closed)."""
        self._stop.set()
        self._thread.join(timeout_s)
        if self._thread.is_alive():
            self._stuck(f"the producer thread did not end within {timeout_s:.0f}s of stop")

    def abort(self) -> None:
        """Stop without waiting (the run failed; idempotent)."""
        self._stop.set()

    def committed_count(self) -> int:
        with self._lock:
            return sum(1 for t in self.txns if t.outcome == COMMITTED)

    def commit_times(self) -> list[float]:
        with self._lock:
            return [
                t.ended_at for t in self.txns if t.outcome == COMMITTED and t.ended_at is not None
            ]

    def history(self) -> list[Txn]:
        """The transactions (call after ``stop``); one still open counts as indeterminate."""
        with self._lock:
            for t in self.txns:
                if t.outcome == OPEN:
                    t.outcome = INDETERMINATE
            return list(self.txns)


def _close(producer: Producer) -> None:
    """Close a producer (after a fatal error it aborts nothing and returns at once)."""
    with contextlib.suppress(KafkaException, RuntimeError):
        producer.close()


def read_to_end(
    bootstrap: str,
    topic: str,
    ends: dict[int, int],
    *,
    read_committed: bool,
    reader: str = "final",
    timeout_s: float = 120.0,
) -> tuple[list[Read], dict[int, int]]:
    """Every record a consumer (read_committed or not) gets from offset 0 of each partition
    up to ``ends`` (the last stable offsets, or the high watermarks); returns the reads and
    the position reached in each partition (below its end: the read timed out)."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"tidelog-faults-{reader}",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "enable.partition.eof": True,
            "isolation.level": "read_committed" if read_committed else "read_uncommitted",
            "log_level": 0,
        }
    )
    reads: list[Read] = []
    position = dict.fromkeys(ends, 0)
    try:
        consumer.assign([CTopicPartition(topic, p, OFFSET_BEGINNING) for p in ends])
        deadline = time.monotonic() + timeout_s
        while any(position[p] < ends[p] for p in ends) and time.monotonic() < deadline:
            for msg in consumer.consume(1000, 0.5):
                err = msg.error()
                p = int(msg.partition() or 0)
                if err is None:
                    offset, value = msg.offset(), msg.value()
                    assert offset is not None
                    assert value is not None
                    reads.append(Read(reader, p, int(offset), bytes(value), time.monotonic()))
                    position[p] = max(position[p], int(offset) + 1)
                elif err.code() == KafkaError._PARTITION_EOF:
                    position[p] = max(position[p], int(msg.offset() or 0))
        return reads, position
    finally:
        consumer.close()
