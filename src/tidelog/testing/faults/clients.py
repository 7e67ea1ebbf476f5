"""The workload's other two producers (issue 18): kafka-python (a thread) and aiokafka (its
own asyncio loop in a thread), beside confluent-kafka's ``workload.ProducerWorker``.

Both are set up like it: ``acks=all``, not idempotent (unless the run asks for it), one
request in flight per connection (kafka-python's ``max_in_flight_requests_per_connection=1``;
aiokafka sends one batch per partition at a time by design), unique values ``p<id>-<seq>``
round-robin over the partitions, explicit partitions. Each records acknowledgements and its
client's errors in a ``ProducerHistory`` through its own table:

- kafka-python: ``send()`` takes records into an unbounded accumulator (kafka-python 3 has
  no buffer memory to block on) and only raises when it cannot: the topic missing from its
  metadata for ``max_block_ms`` (``KafkaTimeoutError``), a partition the metadata does not
  list (``ValueError``), ...: each is client-visible (the topic exists). A failed future:
  ``KAFKA_PYTHON_CLIENT_VISIBLE`` first, then ``KAFKA_PYTHON_INDETERMINATE``, then the
  exception's own ``retriable``. Back-pressure is ours: at most ``max_outstanding`` records
  taken and not yet settled.
- aiokafka: ``send()`` raising ``KafkaTimeoutError`` is its back-pressure (no room in the
  partition's queue within ``request_timeout_ms``); anything else it raises
  (``UnknownTopicOrPartitionError`` from its metadata wait, an unknown partition, ...) is
  client-visible. A failed future: the tables, then ``retriable`` (aiokafka's
  ``KafkaTimeoutError``, a batch expired in the accumulator, says ``retriable=False``).

Both clients' loggers are raised to CRITICAL (like confluent-kafka's ``log_level=0``): what
they would say is recorded as errors.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from typing import Any, Final

import aiokafka
import aiokafka.errors as aioerrors
import kafka
import kafka.errors as kperrors

from tidelog.testing.faults.workload import (
    AIOKAFKA,
    CLIENT_VISIBLE,
    INDETERMINATE,
    KAFKA_PYTHON,
    RAISE_PAUSE_S,
    ProducerWorkerBase,
    Verdict,
)

#: The existing topic or partition reported unknown, given up on (after retries until the
#: delivery timeout): client-visible, although Kafka calls it retriable.
KAFKA_PYTHON_CLIENT_VISIBLE: Final[tuple[type[BaseException], ...]] = (
    kperrors.UnknownTopicOrPartitionError,
)
#: Timeouts and what Kafka marks retriable (all ``retriable=True`` in kafka-python too;
#: listed so the table says what an indeterminate write is).
KAFKA_PYTHON_INDETERMINATE: Final[tuple[type[BaseException], ...]] = (
    kperrors.KafkaTimeoutError,
    kperrors.RequestTimedOutError,
    kperrors.KafkaConnectionError,
    kperrors.NodeNotReadyError,
    kperrors.NotLeaderForPartitionError,
    kperrors.LeaderNotAvailableError,
    kperrors.NotEnoughReplicasError,
    kperrors.NotEnoughReplicasAfterAppendError,
)
AIOKAFKA_CLIENT_VISIBLE: Final[tuple[type[BaseException], ...]] = (
    aioerrors.UnknownTopicOrPartitionError,
)
#: aiokafka's ``KafkaTimeoutError`` (a batch expired) has ``retriable=False``: named here.
AIOKAFKA_INDETERMINATE: Final[tuple[type[BaseException], ...]] = (
    aioerrors.KafkaTimeoutError,
    aioerrors.RequestTimedOutError,
    aioerrors.KafkaConnectionError,
    aioerrors.NodeNotReadyError,
    aioerrors.NotLeaderForPartitionError,
    aioerrors.LeaderNotAvailableError,
    aioerrors.NotEnoughReplicasError,
    aioerrors.NotEnoughReplicasAfterAppendError,
)


def _classify(
    exc: BaseException,
    visible: tuple[type[BaseException], ...],
    indeterminate: tuple[type[BaseException], ...],
) -> Verdict:
    if isinstance(exc, visible):
        return CLIENT_VISIBLE
    if isinstance(exc, indeterminate) or getattr(exc, "retriable", False):
        return INDETERMINATE
    return CLIENT_VISIBLE


def classify_kafka_python(exc: BaseException) -> Verdict:
    """A kafka-python send future that failed with ``exc``."""
    return _classify(exc, KAFKA_PYTHON_CLIENT_VISIBLE, KAFKA_PYTHON_INDETERMINATE)


def classify_aiokafka(exc: BaseException) -> Verdict:
    """An aiokafka send future that failed with ``exc``."""
    return _classify(exc, AIOKAFKA_CLIENT_VISIBLE, AIOKAFKA_INDETERMINATE)


def kafka_python_raise_is_backpressure(exc: BaseException) -> bool:
    """kafka-python's ``send()`` raised: never back-pressure (it has no bounded buffer)."""
    del exc
    return False


def aiokafka_raise_is_backpressure(exc: BaseException) -> bool:
    """aiokafka's ``send()`` raised: ``KafkaTimeoutError`` is its full queue."""
    return isinstance(exc, aioerrors.KafkaTimeoutError)


def _describe(exc: BaseException) -> str:
    """``Class: message`` (kafka-python's and aiokafka's errors name their class already)."""
    name, text = type(exc).__name__, str(exc)
    if text.startswith(name):
        return text
    return f"{name}: {text}" if text else name


def _quiet(*loggers: str) -> None:
    for name in loggers:
        logging.getLogger(name).setLevel(logging.CRITICAL)


class KafkaPythonProducerWorker(ProducerWorkerBase):
    """One kafka-python acks=all producer in a thread; see the module docstring."""

    client = KAFKA_PYTHON

    def __init__(
        self,
        bootstrap: str,
        topic: str,
        partitions: int,
        producer_id: int,
        *,
        interval_s: float = 0.005,
        delivery_timeout_ms: int = 30000,
        idempotent: bool = False,
    ) -> None:
        super().__init__(topic, partitions, producer_id, interval_s)
        _quiet("kafka")
        self.producer = kafka.KafkaProducer(
            bootstrap_servers=bootstrap,
            acks="all",
            # kafka-python 3 turns idempotence on by default with acks=all.
            enable_idempotence=idempotent,
            max_in_flight_requests_per_connection=1,
            linger_ms=5,
            request_timeout_ms=5000,
            delivery_timeout_ms=delivery_timeout_ms,
            retry_backoff_ms=100,
            reconnect_backoff_max_ms=1000,
            metadata_max_age_ms=1000,
            max_block_ms=10000,
        )

    def _on_ack(self, value: bytes, metadata: Any) -> None:
        self._acked(int(metadata.partition), int(metadata.offset), value)

    def _on_error(self, value: bytes, exc: BaseException) -> None:
        self._failed(value, _describe(exc), classify_kafka_python(exc), "delivery report")

    def _run(self) -> None:
        h = self.history
        while not self._stop.is_set():
            if self._outstanding() >= self.max_outstanding:
                self._stop.wait(self.interval_s)
                continue
            value, partition = self._next()
            try:
                future = self.producer.send(self.topic, value=value, partition=partition)
            except Exception as exc:  # every raise is classified and counted
                if kafka_python_raise_is_backpressure(exc):
                    h.backpressure += 1
                else:
                    self._raised(_describe(exc), "send()")
                    self._stop.wait(RAISE_PAUSE_S)
                continue
            with self._lock:
                h.sent += 1
            future.add_callback(self._on_ack, value)
            future.add_errback(self._on_error, value)
            self._stop.wait(self.interval_s)

    def stop(self, flush_timeout_s: float = 60.0) -> None:
        self._stop_sending()
        # What is still outstanding after the timeout is neither acknowledged nor failed.
        with contextlib.suppress(kperrors.KafkaTimeoutError):
            self.producer.flush(timeout=flush_timeout_s)
        self._close(5.0)

    def _close(self, timeout_s: float) -> None:
        # close() flushes first and raises KafkaTimeoutError when that times out (its sender
        # thread, a daemon, is then left to the process's end).
        with contextlib.suppress(kperrors.KafkaTimeoutError):
            self.producer.close(timeout=timeout_s)

    def abort(self) -> None:
        super().abort()
        if self._thread.is_alive():
            self._thread.join(30)
        self._close(1.0)


class AiokafkaProducerWorker(ProducerWorkerBase):
    """One aiokafka acks=all producer on its own event loop in a thread; see the module
    docstring. The producer is made and started in that loop; if it cannot start, that is a
    client-visible error and the worker sends nothing."""

    client = AIOKAFKA

    def __init__(
        self,
        bootstrap: str,
        topic: str,
        partitions: int,
        producer_id: int,
        *,
        interval_s: float = 0.005,
        request_timeout_ms: int = 15000,
        idempotent: bool = False,
    ) -> None:
        super().__init__(topic, partitions, producer_id, interval_s)
        _quiet("aiokafka")
        self.bootstrap = bootstrap
        self.request_timeout_ms = request_timeout_ms
        self.idempotent = idempotent
        self.flush_timeout_s = 60.0
        self._started = False

    def _on_done(self, value: bytes, future: asyncio.Future[Any]) -> None:
        if future.cancelled():
            self._failed(value, "cancelled", INDETERMINATE, "delivery report")
            return
        exc = future.exception()
        if exc is None:
            metadata = future.result()
            self._acked(int(metadata.partition), int(metadata.offset), value)
        else:
            self._failed(value, _describe(exc), classify_aiokafka(exc), "delivery report")

    def _run(self) -> None:
        asyncio.run(self._main())

    async def _main(self) -> None:
        producer = aiokafka.AIOKafkaProducer(
            bootstrap_servers=self.bootstrap,
            acks="all",
            enable_idempotence=self.idempotent,
            linger_ms=5,
            # Also each batch's time to live (its delivery timeout).
            request_timeout_ms=self.request_timeout_ms,
            retry_backoff_ms=100,
            metadata_max_age_ms=1000,
        )
        try:
            await producer.start()
        except Exception as exc:  # an application could not even start
            self._raised(_describe(exc), "start()")
            await producer.stop()
            return
        pending: set[asyncio.Future[Any]] = set()
        try:
            await self._send_until_stopped(producer, pending)
            if pending:
                await asyncio.wait(pending, timeout=self.flush_timeout_s)
        finally:
            await producer.stop()

    async def _send_until_stopped(
        self, producer: aiokafka.AIOKafkaProducer, pending: set[asyncio.Future[Any]]
    ) -> None:
        h = self.history
        while not self._stop.is_set():
            if self._outstanding() >= self.max_outstanding:
                await asyncio.sleep(self.interval_s)
                continue
            value, partition = self._next()
            try:
                future = await producer.send(self.topic, value=value, partition=partition)
            except Exception as exc:  # every raise is classified and counted
                if aiokafka_raise_is_backpressure(exc):
                    h.backpressure += 1
                else:
                    self._raised(_describe(exc), "send()")
                    await asyncio.sleep(RAISE_PAUSE_S)
                continue
            with self._lock:
                h.sent += 1
            pending.add(future)
            future.add_done_callback(pending.discard)
            future.add_done_callback(functools.partial(self._on_done, value))
            await asyncio.sleep(self.interval_s)

    def stop(self, flush_timeout_s: float = 60.0) -> None:
        self.flush_timeout_s = flush_timeout_s
        self._stop.set()
        self._thread.join(flush_timeout_s + 30)

    def abort(self) -> None:
        self.flush_timeout_s = 0.0
        super().abort()
        if self._thread.is_alive():
            self._thread.join(30)
