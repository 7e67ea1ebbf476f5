"""Issue 18: the workload's classification of every error a client reports, per client
(confluent-kafka/librdkafka, kafka-python, aiokafka): indeterminate (a timeout, an error
Kafka marks retriable) or client-visible (an application would stop). Unit tests: no
broker, no client connection."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import TypeVar

import aiokafka.errors as aioerrors
import kafka.errors as kperrors
import pytest
from confluent_kafka import KafkaError, KafkaException

from tidelog.testing.faults.clients import (
    AIOKAFKA_CLIENT_VISIBLE,
    AIOKAFKA_INDETERMINATE,
    KAFKA_PYTHON_CLIENT_VISIBLE,
    KAFKA_PYTHON_INDETERMINATE,
    AiokafkaProducerWorker,
    KafkaPythonProducerWorker,
    aiokafka_raise_is_backpressure,
    classify_aiokafka,
    classify_kafka_python,
    kafka_python_raise_is_backpressure,
)
from tidelog.testing.faults.workload import (
    AIOKAFKA,
    CLIENT_VISIBLE,
    INDETERMINATE,
    KAFKA_PYTHON,
    LIBRDKAFKA_CLIENT_VISIBLE,
    LIBRDKAFKA_INDETERMINATE,
    ProducerWorkerBase,
    classify_librdkafka,
    confluent_raise_is_backpressure,
    consumer_error_is_visible,
)


def _rd(name: str, **flags: bool) -> KafkaError:
    return KafkaError(getattr(KafkaError, name), **flags)


# --- confluent-kafka (librdkafka) ----------------------------------------------------------


@pytest.mark.parametrize("name", ["_UNKNOWN_TOPIC", "_UNKNOWN_PARTITION", "UNKNOWN_TOPIC_OR_PART"])
def test_librdkafka_unknown_topic_or_partition_is_client_visible(name: str) -> None:
    assert classify_librdkafka(_rd(name)) == CLIENT_VISIBLE
    # Whatever librdkafka's flag says: the topic exists.
    assert classify_librdkafka(_rd(name, retriable=True)) == CLIENT_VISIBLE


@pytest.mark.parametrize(
    "name",
    [
        "_MSG_TIMED_OUT",
        "_TIMED_OUT",
        "REQUEST_TIMED_OUT",
        "_TRANSPORT",
        "_ALL_BROKERS_DOWN",
        "NOT_LEADER_FOR_PARTITION",
        "LEADER_NOT_AVAILABLE",
        "NOT_ENOUGH_REPLICAS",
        "NOT_ENOUGH_REPLICAS_AFTER_APPEND",
        "NETWORK_EXCEPTION",
    ],
)
def test_librdkafka_timeouts_and_retriable_codes_are_indeterminate(name: str) -> None:
    # Delivery reports carry retriable()=False for these: the table decides.
    err = _rd(name)
    assert not err.retriable()
    assert classify_librdkafka(err) == INDETERMINATE


def test_librdkafka_flags_decide_what_the_tables_do_not_name() -> None:
    assert classify_librdkafka(_rd("MSG_SIZE_TOO_LARGE")) == CLIENT_VISIBLE
    assert classify_librdkafka(_rd("INVALID_RECORD")) == CLIENT_VISIBLE
    assert classify_librdkafka(_rd("INVALID_RECORD", retriable=True)) == INDETERMINATE
    # A fatal error is client-visible, even one of the table's timeouts.
    assert classify_librdkafka(_rd("_MSG_TIMED_OUT", fatal=True)) == CLIENT_VISIBLE


def test_librdkafka_tables_name_real_error_codes() -> None:
    assert not LIBRDKAFKA_INDETERMINATE & LIBRDKAFKA_CLIENT_VISIBLE
    for name in LIBRDKAFKA_INDETERMINATE | LIBRDKAFKA_CLIENT_VISIBLE:
        assert _rd(name).name() == name


def test_confluent_produce_raise_is_client_visible_unless_the_queue_is_full() -> None:
    assert confluent_raise_is_backpressure(BufferError("Local: Queue full"))
    unknown_topic = KafkaException(_rd("_UNKNOWN_TOPIC"))
    assert not confluent_raise_is_backpressure(unknown_topic)
    assert not confluent_raise_is_backpressure(KafkaException(_rd("_UNKNOWN_PARTITION")))


def test_consumer_errors_visible_only_when_fatal_or_the_topic_reported_unknown() -> None:
    assert consumer_error_is_visible(_rd("_UNKNOWN_PARTITION"))
    assert consumer_error_is_visible(_rd("_UNKNOWN_TOPIC"))
    assert consumer_error_is_visible(_rd("UNKNOWN_TOPIC_OR_PART"))
    assert consumer_error_is_visible(_rd("_FATAL", fatal=True))
    assert consumer_error_is_visible(_rd("TOPIC_AUTHORIZATION_FAILED"))
    # librdkafka's own events it recovers from: informational.
    for name in ("_TRANSPORT", "_ALL_BROKERS_DOWN", "_AUTO_OFFSET_RESET", "_PARTITION_EOF"):
        assert not consumer_error_is_visible(_rd(name)), name
    assert not consumer_error_is_visible(_rd("NOT_LEADER_FOR_PARTITION"))


# --- kafka-python -------------------------------------------------------------------------


def test_kafka_python_unknown_topic_is_client_visible_and_timeouts_are_not() -> None:
    assert classify_kafka_python(kperrors.UnknownTopicOrPartitionError()) == CLIENT_VISIBLE
    assert kperrors.UnknownTopicOrPartitionError.retriable  # kafka-python says retriable
    expired = kperrors.KafkaTimeoutError("Expiring 3 record(s) for faults-1: 30000 ms has passed")
    assert classify_kafka_python(expired) == INDETERMINATE
    for exc in (
        kperrors.RequestTimedOutError(),
        kperrors.NotLeaderForPartitionError(),
        kperrors.LeaderNotAvailableError(),
        kperrors.NotEnoughReplicasError(),
        kperrors.NotEnoughReplicasAfterAppendError(),
        kperrors.KafkaConnectionError("disconnected"),
        kperrors.KafkaStorageError(),  # not in the table: its own retriable=True
    ):
        assert classify_kafka_python(exc) == INDETERMINATE, exc
    for exc in (
        kperrors.UnknownError(),
        kperrors.MessageSizeTooLargeError(),
        kperrors.IllegalStateError("closed"),
        ValueError("Unrecognized partition 1 for topic faults"),
    ):
        assert classify_kafka_python(exc) == CLIENT_VISIBLE, exc
    # send() raising is never back-pressure (kafka-python 3 has no bounded buffer).
    assert not kafka_python_raise_is_backpressure(kperrors.KafkaTimeoutError("metadata"))
    assert not set(KAFKA_PYTHON_CLIENT_VISIBLE) & set(KAFKA_PYTHON_INDETERMINATE)


# --- aiokafka ------------------------------------------------------------------------------


def test_aiokafka_unknown_topic_is_client_visible_and_timeouts_are_not() -> None:
    assert classify_aiokafka(aioerrors.UnknownTopicOrPartitionError()) == CLIENT_VISIBLE
    # aiokafka's KafkaTimeoutError (a batch expired) says retriable=False: the table decides.
    assert not aioerrors.KafkaTimeoutError.retriable
    assert classify_aiokafka(aioerrors.KafkaTimeoutError()) == INDETERMINATE
    for exc in (
        aioerrors.RequestTimedOutError(),
        aioerrors.NotLeaderForPartitionError(),
        aioerrors.LeaderNotAvailableError(),
        aioerrors.NotEnoughReplicasError(),
        aioerrors.NotEnoughReplicasAfterAppendError(),
        aioerrors.KafkaConnectionError(),
        aioerrors.NodeNotReadyError(),
    ):
        assert classify_aiokafka(exc) == INDETERMINATE, exc
    for exc in (
        aioerrors.UnknownError(),
        aioerrors.ProducerClosed(),
        AssertionError("Unrecognized partition"),
    ):
        assert classify_aiokafka(exc) == CLIENT_VISIBLE, exc
    # send(): a full queue is back-pressure, the topic or partition unknown is not.
    assert aiokafka_raise_is_backpressure(aioerrors.KafkaTimeoutError())
    assert not aiokafka_raise_is_backpressure(aioerrors.UnknownTopicOrPartitionError())
    assert not aiokafka_raise_is_backpressure(AssertionError("Unrecognized partition"))
    assert not set(AIOKAFKA_CLIENT_VISIBLE) & set(AIOKAFKA_INDETERMINATE)


# --- where each outcome lands in the history --------------------------------------------


W = TypeVar("W", bound=ProducerWorkerBase)


def _bare(cls: type[W]) -> W:
    """A worker of ``cls`` with its history and no client (nothing connects)."""
    worker = cls.__new__(cls)
    ProducerWorkerBase.__init__(worker, "faults", 3, 7, 0.01)
    return worker


def test_kafka_python_callbacks_record_acks_indeterminate_and_visible() -> None:
    w = _bare(KafkaPythonProducerWorker)
    w._on_ack(b"p7-0", SimpleNamespace(partition=0, offset=4))
    w._on_error(b"p7-1", kperrors.KafkaTimeoutError("Expiring 1 record(s)"))
    w._on_error(b"p7-2", kperrors.UnknownTopicOrPartitionError())
    h = w.history
    assert h.client == KAFKA_PYTHON
    assert [(a.producer, a.partition, a.offset, a.value) for a in h.acks] == [(7, 0, 4, b"p7-0")]
    assert [(v, e) for v, e, _ in h.failed] == [
        (b"p7-1", "KafkaTimeoutError: Expiring 1 record(s)")
    ]
    [visible] = h.visible
    assert (visible.client, visible.worker, visible.where, visible.value) == (
        KAFKA_PYTHON,
        "producer 7",
        "delivery report",
        b"p7-2",
    )
    assert "UnknownTopicOrPartitionError" in visible.error


def test_aiokafka_done_callback_records_acks_indeterminate_and_visible() -> None:
    w = _bare(AiokafkaProducerWorker)
    loop = asyncio.new_event_loop()
    try:
        futures = [loop.create_future() for _ in range(3)]
        futures[0].set_result(SimpleNamespace(partition=1, offset=9))
        futures[1].set_exception(aioerrors.KafkaTimeoutError())
        futures[2].set_exception(aioerrors.UnknownTopicOrPartitionError())
        for i, f in enumerate(futures):
            w._on_done(b"p7-%d" % i, f)
    finally:
        loop.close()
    h = w.history
    assert h.client == AIOKAFKA
    assert [(a.partition, a.offset) for a in h.acks] == [(1, 9)]
    assert [v for v, _e, _t in h.failed] == [b"p7-1"]
    assert [(e.value, e.where) for e in h.visible] == [(b"p7-2", "delivery report")]


def test_a_raise_is_client_visible_and_not_a_sent_record() -> None:
    w = _bare(KafkaPythonProducerWorker)
    w._raised("ValueError: Unrecognized partition 1 for topic faults", "send()")
    assert w.history.sent == 0
    [visible] = w.history.visible
    assert (visible.where, visible.value) == ("send()", None)
    assert w._outstanding() == -1  # settled without being sent: the bound stays honest
