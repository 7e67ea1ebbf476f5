"""Transactions with real clients on three broker processes (issue 19, KIP-98 / KIP-447).

librdkafka's transactional producer, read_committed and read_uncommitted consumers, and
consume-transform-produce with ``send_offsets_to_transaction``: what a committed
transaction wrote is read once, what an aborted or still open one wrote never reaches a
read_committed consumer, and a second producer with the same transactional id fences the
first.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import threading
import time
from typing import Any

import pytest
from aiokafka import AIOKafkaProducer
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from confluent_kafka import TopicPartition as CTopicPartition
from kafka import KafkaProducer
from kio.schema.find_coordinator.v4 import request as fc
from kio.static.primitive import i8

from tests.harness import BrokerCluster, wait_until
from tests.integration.cluster.helpers import create_topic
from tidelog.client import BlockingClient
from tidelog.errors import ErrorCode

pytestmark = pytest.mark.integration


def _producer(cluster: BrokerCluster, txn_id: str, **extra: Any) -> Producer:
    producer = Producer(
        {
            "bootstrap.servers": cluster.bootstrap,
            "transactional.id": txn_id,
            "linger.ms": 5,
            "transaction.timeout.ms": 60000,
            **extra,
        }
    )
    producer.init_transactions(60)
    return producer


def _read(
    cluster: BrokerCluster,
    topic: str,
    partitions: int,
    isolation: str,
    *,
    settle_s: float = 2.0,
    timeout: float = 60.0,
) -> list[bytes]:
    """Every record a consumer with ``isolation`` gets from the start to the end of each
    partition (the end being what that isolation level may read: the LSO or the HW)."""
    consumer = Consumer(
        {
            "bootstrap.servers": cluster.bootstrap,
            "group.id": f"reader-{time.monotonic_ns()}",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "isolation.level": isolation,
            "enable.partition.eof": True,
        }
    )
    consumer.assign([CTopicPartition(topic, p, 0) for p in range(partitions)])
    got: list[bytes] = []
    at_end: set[int] = set()
    try:

        def done() -> bool:
            for msg in consumer.consume(1000, 0.5):
                err = msg.error()
                if err is None:
                    got.append(msg.value())
                    at_end.discard(msg.partition())
                elif err.code() == KafkaError._PARTITION_EOF:
                    at_end.add(msg.partition())
                else:
                    raise AssertionError(f"consumer error: {err}")
            return len(at_end) == partitions

        wait_until(done, timeout, f"the end of {topic} ({isolation})")
        # Nothing more arrives after the end was reported once for every partition.
        deadline = time.monotonic() + settle_s
        while time.monotonic() < deadline:
            for msg in consumer.consume(1000, 0.2):
                if msg.error() is None:
                    got.append(msg.value())
    finally:
        consumer.close()
    return got


def test_committed_records_are_read_once_and_aborted_ones_never(
    shared_cluster: BrokerCluster,
) -> None:
    topic = "txn-commit-abort"
    create_topic(shared_cluster, topic, partitions=3)
    producer = _producer(shared_cluster, "txn-commit-abort")
    expected: list[bytes] = []
    for round_no, commit in enumerate((True, False, True, False, True)):
        producer.begin_transaction()
        values = [b"r%d-%03d" % (round_no, i) for i in range(30)]
        for v in values:
            producer.produce(topic, v, partition=int(v[-1:]) % 3)
        if commit:
            producer.commit_transaction(60)
            expected += values
        else:
            # Written and replicated first: librdkafka's abort purges what it has not sent.
            assert producer.flush(30) == 0
            producer.abort_transaction(60)
    committed = _read(shared_cluster, topic, 3, "read_committed")
    assert sorted(committed) == sorted(expected)
    everything = _read(shared_cluster, topic, 3, "read_uncommitted")
    # read_uncommitted sees the aborted records too (librdkafka skips control records).
    assert len(everything) == 150
    assert set(committed) <= set(everything)


def test_records_of_an_open_transaction_appear_only_at_its_commit(
    shared_cluster: BrokerCluster,
) -> None:
    topic = "txn-open"
    create_topic(shared_cluster, topic, partitions=1)
    open_txn = _producer(shared_cluster, "txn-open")
    open_txn.begin_transaction()
    for i in range(10):
        open_txn.produce(topic, b"open-%d" % i)
    assert open_txn.flush(30) == 0  # written and replicated, but not committed
    assert _read(shared_cluster, topic, 1, "read_committed") == []
    assert len(_read(shared_cluster, topic, 1, "read_uncommitted")) == 10
    open_txn.commit_transaction(60)
    assert sorted(_read(shared_cluster, topic, 1, "read_committed")) == sorted(
        b"open-%d" % i for i in range(10)
    )


def test_a_second_producer_with_the_same_id_fences_the_first(
    shared_cluster: BrokerCluster,
) -> None:
    topic = "txn-zombie"
    create_topic(shared_cluster, topic, partitions=2)
    zombie = _producer(shared_cluster, "txn-zombie")
    zombie.begin_transaction()
    for i in range(5):
        zombie.produce(topic, b"zombie-%d" % i, partition=i % 2)
    assert zombie.flush(30) == 0
    successor = _producer(shared_cluster, "txn-zombie")  # aborts the zombie's transaction
    successor.begin_transaction()
    successor.produce(topic, b"successor", partition=0)
    successor.commit_transaction(60)
    with pytest.raises(KafkaException) as raised:
        zombie.commit_transaction(30)
    error = raised.value.args[0]
    assert error.fatal(), error
    assert error.code() in (KafkaError._FENCED, KafkaError.PRODUCER_FENCED), error
    assert _read(shared_cluster, topic, 2, "read_committed") == [b"successor"]


def test_offsets_sent_to_a_transaction_commit_with_it(shared_cluster: BrokerCluster) -> None:
    source, sink, group = "txn-ctp-in", "txn-ctp-out", "txn-ctp-group"
    create_topic(shared_cluster, source, partitions=1)
    create_topic(shared_cluster, sink, partitions=1)
    plain = Producer({"bootstrap.servers": shared_cluster.bootstrap, "acks": "all"})
    for i in range(40):
        plain.produce(source, b"in-%02d" % i)
    assert plain.flush(30) == 0

    consumer = Consumer(
        {
            "bootstrap.servers": shared_cluster.bootstrap,
            "group.id": group,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "isolation.level": "read_committed",
        }
    )
    consumer.assign([CTopicPartition(source, 0, 0)])
    producer = _producer(shared_cluster, "txn-ctp")

    def transform(n: int, commit: bool) -> None:
        got: list[Any] = []
        wait_until(
            lambda: (
                got.extend(m for m in consumer.consume(n - len(got), 0.5) if not m.error())
                or len(got) >= n
            ),
            60.0,
            f"{n} source records",
        )
        producer.begin_transaction()
        for msg in got:
            producer.produce(sink, b"out-" + msg.value())
        position = [CTopicPartition(source, 0, got[-1].offset() + 1)]
        producer.send_offsets_to_transaction(position, consumer.consumer_group_metadata(), 30)
        if commit:
            producer.commit_transaction(60)
        else:
            producer.abort_transaction(60)
            consumer.seek(CTopicPartition(source, 0, got[0].offset()))

    transform(20, commit=True)
    transform(10, commit=False)  # these 10 are processed again below
    transform(20, commit=True)
    committed = consumer.committed([CTopicPartition(source, 0)], 30)
    assert committed[0].offset == 40
    out = _read(shared_cluster, sink, 1, "read_committed")
    assert sorted(out) == [b"out-in-%02d" % i for i in range(40)]
    consumer.close()


def test_kafka_python_and_aiokafka_transactions_commit_and_abort(
    shared_cluster: BrokerCluster,
) -> None:
    topic = "txn-python-clients"
    create_topic(shared_cluster, topic, partitions=2)
    kp = KafkaProducer(
        bootstrap_servers=shared_cluster.bootstrap, transactional_id="txn-kafka-python"
    )
    kp.init_transactions()
    kp.begin_transaction()
    for i in range(10):
        kp.send(topic, b"kp-commit-%d" % i, partition=i % 2)
    kp.commit_transaction()
    kp.begin_transaction()
    for i in range(10):
        kp.send(topic, b"kp-abort-%d" % i, partition=i % 2)
    kp.flush()
    kp.abort_transaction()
    kp.close()

    async def aio() -> None:
        producer = AIOKafkaProducer(
            bootstrap_servers=shared_cluster.bootstrap, transactional_id="txn-aiokafka"
        )
        await producer.start()
        try:
            async with producer.transaction():
                for i in range(10):
                    await producer.send_and_wait(topic, b"aio-commit-%d" % i, partition=i % 2)
            await producer.begin_transaction()
            for i in range(10):
                await producer.send_and_wait(topic, b"aio-abort-%d" % i, partition=i % 2)
            await producer.abort_transaction()
        finally:
            await producer.stop()

    asyncio.run(aio())
    committed = sorted(
        [b"kp-commit-%d" % i for i in range(10)] + [b"aio-commit-%d" % i for i in range(10)]
    )
    assert sorted(_read(shared_cluster, topic, 2, "read_committed")) == committed
    assert len(_read(shared_cluster, topic, 2, "read_uncommitted")) == 40

    # kcat (librdkafka) with -X isolation.level=read_committed reads the same.
    out = subprocess.run(
        [
            "kcat",
            "-b",
            shared_cluster.bootstrap,
            "-C",
            "-t",
            topic,
            "-e",
            "-o",
            "beginning",
            "-X",
            "isolation.level=read_committed",
            "-f",
            "%s\n",
        ],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout
    assert sorted(line.encode() for line in out.splitlines() if line) == committed


def test_a_transaction_left_open_past_its_timeout_is_aborted_and_its_producer_fenced(
    shared_cluster: BrokerCluster,
) -> None:
    """KIP-98's proactive abort: the coordinator aborts it (the broker checks every
    ``transaction.abort.timed.out.transaction.cleanup.interval.ms``, 10 s by default)."""
    topic = "txn-timeout"
    create_topic(shared_cluster, topic, partitions=1)
    producer = _producer(shared_cluster, "txn-timeout", **{"transaction.timeout.ms": 2000})
    producer.begin_transaction()
    for i in range(5):
        producer.produce(topic, b"left-open-%d" % i)
    assert producer.flush(30) == 0
    coordinator = _coordinator_of(shared_cluster, "txn-timeout")
    wait_until(
        lambda: "CompleteAbort" in _describe(shared_cluster, "txn-timeout", coordinator),
        90.0,
        "the coordinator to abort the timed-out transaction",
    )
    assert _read(shared_cluster, topic, 1, "read_committed") == []
    assert len(_read(shared_cluster, topic, 1, "read_uncommitted")) == 5
    with pytest.raises(KafkaException) as raised:
        producer.commit_transaction(30)
    assert raised.value.args[0].code() in (
        KafkaError._FENCED,
        KafkaError.PRODUCER_FENCED,
        KafkaError.INVALID_PRODUCER_EPOCH,
        KafkaError.INVALID_TXN_STATE,
    ), raised.value


def test_a_commit_survives_the_loss_of_its_coordinator(cluster: BrokerCluster) -> None:
    """The coordinator is SIGKILLed while a transaction's markers cannot be written (the
    only replica of its data partition is paused, so no other broker can take it over): the
    new coordinator loads PrepareCommit from ``__transaction_state`` and completes it once
    the partition is back, and the commit is read exactly once."""
    topic = "txn-failover"
    create_topic(cluster, topic, partitions=1, rf=1, config={"min.insync.replicas": "1"})
    leader = cluster.wait_for_leader(topic, 0)
    # A transactional id whose coordinator is not the data partition's leader.
    txn_id, coordinator = next(
        (t, c)
        for t, c in (
            (f"txn-failover-{n}", _coordinator_of(cluster, f"txn-failover-{n}")) for n in range(200)
        )
        if c != leader
    )
    producer = _producer(cluster, txn_id, **{"transaction.timeout.ms": 120000})
    producer.begin_transaction()
    values = [b"survivor-%d" % i for i in range(20)]
    for v in values:
        producer.produce(topic, v)
    assert producer.flush(30) == 0
    cluster.broker(leader).pause()  # markers to the data partition cannot be written now
    try:
        committing = threading.Thread(target=lambda: _commit_quietly(producer), daemon=True)
        committing.start()
        wait_until(
            lambda: "PrepareCommit" in _describe(cluster, txn_id, coordinator),
            60.0,
            "PrepareCommit on the coordinator",
        )
        cluster.broker(coordinator).kill()
    finally:
        cluster.broker(leader).resume()
    cluster.broker(coordinator).start()
    # Until the new coordinator has written the markers the partition is unstable below
    # the transaction: read_committed readers reach its end (the LSO) without it.
    wait_until(
        lambda: sorted(_read(cluster, topic, 1, "read_committed", settle_s=0.5)) == sorted(values),
        120.0,
        "the commit to be completed by the new coordinator",
    )
    assert sorted(_read(cluster, topic, 1, "read_uncommitted")) == sorted(values)
    committing.join(120)


def _commit_quietly(producer: Producer) -> None:
    """Commit as librdkafka tells applications to: again after a retriable error."""
    deadline = time.monotonic() + 150
    while time.monotonic() < deadline:
        try:
            producer.commit_transaction(120)
            return
        except KafkaException as exc:
            if not exc.args[0].retriable():
                return


def _coordinator_of(cluster: BrokerCluster, txn_id: str) -> int:
    def ask() -> int | None:
        with BlockingClient(cluster.bootstrap, request_timeout_s=30.0) as client:
            response = client.send(
                fc.FindCoordinatorRequest(key_type=i8(1), coordinator_keys=(txn_id,))
            )
        (answer,) = response.coordinators
        # COORDINATOR_NOT_AVAILABLE while __transaction_state is being created.
        return int(answer.node_id) if answer.error_code == ErrorCode.NONE else None

    found = wait_until(ask, 60.0, f"the coordinator of {txn_id}")
    assert isinstance(found, int)
    return found


def _describe(cluster: BrokerCluster, txn_id: str, coordinator: int) -> str:
    """The transaction's state name as ``tidelog transactions describe`` prints it."""
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "tidelog",
            "transactions",
            "--bootstrap-server",
            cluster.broker(coordinator).bootstrap,
            "describe",
            "--transactional-id",
            txn_id,
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    return done.stdout
