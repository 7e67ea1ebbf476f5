"""``exactlyOnce`` without Spark: the options, the transactional producer (what its batches
carry, when partitions join the transaction, retries that must not duplicate, fencing),
the driver's commit and abort, and the write path of the Spark classes, against a fake
broker whose coordinator is tidelog's transaction state machine."""

from __future__ import annotations

import asyncio
import dataclasses
import threading
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("pyarrow")  # the spark extra (scripts/bootstrap.sh spark)
pytest.importorskip("pyspark")

import pyarrow as pa

from tests.unit.client.fake_txn_broker import FakeTxnBroker
from tidelog.client import build_batch
from tidelog.client.records import Record
from tidelog.errors import ErrorCode
from tidelog.model import TopicPartition
from tidelog.protocol.apis import ApiKey
from tidelog.protocol.batch_builder import encode_batch
from tidelog.spark import transactions
from tidelog.spark.errors import ConnectorError
from tidelog.spark.options import (
    DEFAULT_TRANSACTION_TIMEOUT_MS,
    SparkOptionError,
    WriteOptions,
    parse_write_options,
)
from tidelog.spark.transactions import (
    TransactionalProducer,
    TxnHandle,
    end_transactions,
    fence_open_transactions,
    stream_scope,
    transactional_id,
)

BOOT = {"kafka.bootstrap.servers": "127.0.0.1:9092", "topic": "t"}


# --- options -------------------------------------------------------------------------------


def test_exactly_once_is_off_by_default() -> None:
    options = parse_write_options(BOOT)
    assert options.exactly_once is False
    assert options.transactional_id_prefix == "tidelog-spark"
    assert options.transaction_timeout_ms == DEFAULT_TRANSACTION_TIMEOUT_MS == 900_000


def test_exactly_once_options_lower_cased_as_spark_hands_them() -> None:
    given = {
        **BOOT,
        "exactlyOnce": "TRUE",
        "transactionalIdPrefix": " orders-copy ",
        "kafka.transaction.timeout.ms": "120000",
    }
    for options in (given, {k.lower(): v for k, v in given.items()}):
        parsed = parse_write_options(options)
        assert parsed.exactly_once is True
        assert parsed.transactional_id_prefix == "orders-copy"
        assert parsed.transaction_timeout_ms == 120000


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ({"exactlyOnce": "yes"}, "option 'exactlyOnce' must be true or false, not 'yes'"),
        (
            {"transactionalIdPrefix": "p"},
            "option 'transactionalIdPrefix' applies only with exactlyOnce=true",
        ),
        (
            {"kafka.transaction.timeout.ms": "1000"},
            "option 'kafka.transaction.timeout.ms' applies only with exactlyOnce=true",
        ),
        (
            {"exactlyOnce": "true", "transactionalIdPrefix": " "},
            "option 'transactionalIdPrefix' is empty",
        ),
        (
            {"exactlyOnce": "true", "kafka.transaction.timeout.ms": "0"},
            "option 'kafka.transaction.timeout.ms' must be at least 1, not 0",
        ),
        (
            {"exactlyOnce": "true", "kafka.acks": "1"},
            "option 'kafka.acks' must be all with exactlyOnce=true (transactional writes "
            "are idempotent, which needs acks=all), not '1'",
        ),
    ],
)
def test_bad_exactly_once_options_are_named(extra: dict[str, str], message: str) -> None:
    with pytest.raises(SparkOptionError) as info:
        parse_write_options({**BOOT, **extra})
    assert str(info.value) == message


def test_transactional_ids_name_query_batch_and_task() -> None:
    scope = stream_scope("p", "6a1f0f13-efcc-4656-9865-bc98c423d471", 12)
    assert transactional_id(scope, 3) == "p-6a1f0f13-efcc-4656-9865-bc98c423d471-12-3"


def test_encoded_transactional_batches_match_the_client_builder() -> None:
    records = [(b"k", b"v", [("h", b"x")]), (None, b"w", [])]
    ours = encode_batch(
        records,
        1234,
        producer_id=77,
        producer_epoch=3,
        base_sequence=10,
        transactional=True,
    )
    theirs = build_batch(
        [Record(value=v, key=k, headers=tuple(h)) for k, v, h in records],
        base_timestamp_ms=1234,
        producer_id=77,
        producer_epoch=3,
        base_sequence=10,
        is_transactional=True,
    )
    assert ours == theirs


# --- against the fake broker ---------------------------------------------------------------


class ThreadedBroker:
    """A ``FakeTxnBroker`` on an event loop of its own thread (the connector blocks)."""

    def __init__(self, fake: FakeTxnBroker) -> None:
        self.fake = fake
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        asyncio.run_coroutine_threadsafe(fake.start(), self.loop).result(10)

    def call(self, fn: Any, *args: Any) -> Any:
        """Run ``fn`` on the broker's loop (its state is not thread-safe)."""

        async def run() -> Any:
            return fn(*args)

        return asyncio.run_coroutine_threadsafe(run(), self.loop).result(10)

    def stop(self) -> None:
        asyncio.run_coroutine_threadsafe(self.fake.stop(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()


@pytest.fixture
def broker() -> Iterator[ThreadedBroker]:
    fake = FakeTxnBroker()
    for topic in ("a", "b"):
        fake.topics[topic] = (uuid.uuid4(), bytearray(), [0])
    threaded = ThreadedBroker(fake)
    try:
        yield threaded
    finally:
        threaded.stop()


def _options(broker: ThreadedBroker, **changes: Any) -> WriteOptions:
    base = parse_write_options(
        {"kafka.bootstrap.servers": broker.fake.bootstrap, "topic": "a", "exactlyOnce": "true"}
    )
    return dataclasses.replace(base, **{"retry_timeout_ms": 5000, **changes})


def _write(options: WriteOptions, txn_id: str, rows: list[tuple[str, bytes]]) -> TxnHandle | None:
    producer = TransactionalProducer(options, txn_id, batch_records=2)
    try:
        if not producer.begin():
            return None
        for topic, value in rows:
            producer.send(topic, value)
        producer.flush()
        return producer.handle
    finally:
        producer.close()


def test_a_task_writes_in_a_transaction_the_driver_commits(broker: ThreadedBroker) -> None:
    options = _options(broker)
    handle = _write(options, "q-0-0", [("a", b"1"), ("b", b"2"), ("a", b"3"), ("a", b"4")])
    assert handle == TxnHandle("q-0-0", 1000, 0)
    fake = broker.fake
    # Batches of two (batch_records=2): producer id and epoch, per-partition sequences,
    # the transactional bit and the transactional id on every one.
    got = [(a.topic, a.base_sequence, a.count) for a in fake.appended]
    assert sorted(got) == [("a", 0, 2), ("a", 2, 1), ("b", 0, 1)]
    assert {(a.producer_id, a.producer_epoch, a.transactional) for a in fake.appended} == {
        (1000, 0, True)
    }
    assert {a.transactional_id for a in fake.appended} == {"q-0-0"}
    # Partitions joined the transaction before their first batch, once each.
    keys = [h.api_key for h in fake.requests]
    assert keys.index(ApiKey.ADD_PARTITIONS_TO_TXN) < keys.index(ApiKey.PRODUCE)
    assert keys.count(ApiKey.ADD_PARTITIONS_TO_TXN) == 1
    assert broker.call(fake.state, "q-0-0") == "Ongoing"

    assert end_transactions(options, [handle], commit=True) == {"q-0-0": None}
    assert broker.call(fake.state, "q-0-0") == "CompleteCommit"
    (marker,) = fake.markers
    assert marker.commit
    assert marker.partitions == {TopicPartition("a", 0), TopicPartition("b", 0)}
    # A retried commit (a lost answer, a restarted driver): NONE again, nothing new.
    assert end_transactions(options, [handle], commit=True) == {"q-0-0": None}
    assert len(fake.markers) == 1


def test_a_replayed_task_whose_transaction_committed_writes_nothing(
    broker: ThreadedBroker,
) -> None:
    options = _options(broker)
    handle = _write(options, "q-5-1", [("a", b"1")])
    assert handle is not None
    end_transactions(options, [handle], commit=True)
    appended = len(broker.fake.appended)
    # The driver crashed after committing, before Spark recorded the batch: the replay's
    # task finds its transaction committed and neither opens another nor writes.
    producer = TransactionalProducer(options, "q-5-1")
    try:
        assert producer.begin() is False
        assert producer.previous_state == "CompleteCommit"
    finally:
        producer.close()
    assert len(broker.fake.appended) == appended
    assert broker.fake.requests[-1].api_key == ApiKey.DESCRIBE_TRANSACTIONS


def test_prepare_commit_counts_as_committed(broker: ThreadedBroker) -> None:
    broker.fake.hold_markers = True
    options = _options(broker)
    handle = _write(options, "q-1-0", [("a", b"1")])
    assert handle is not None
    assert end_transactions(options, [handle], commit=True) == {"q-1-0": None}
    assert broker.call(broker.fake.state, "q-1-0") == "PrepareCommit"
    assert _write(options, "q-1-0", [("a", b"1")]) is None


def test_a_retried_task_fences_the_earlier_attempt(broker: ThreadedBroker) -> None:
    options = _options(broker)
    zombie = TransactionalProducer(options, "q-2-0")
    retry = TransactionalProducer(options, "q-2-0")
    try:
        assert zombie.begin()
        zombie.send("a", b"zombie-1")
        zombie.flush()
        # The retry of the task: InitProducerId aborts the attempt's open transaction.
        assert retry.begin()
        assert retry.previous_state == "Ongoing"
        assert retry.handle.producer_epoch == 2  # 1: the abort's bump, 2: the retry's
        assert [(m.commit, m.producer_epoch) for m in broker.fake.markers] == [(False, 1)]
        retry.send("a", b"retry-1")
        retry.flush()
        # The zombie goes on writing: its epoch is refused by the partition.
        zombie.send("a", b"zombie-2")
        with pytest.raises(ConnectorError, match="INVALID_PRODUCER_EPOCH"):
            zombie.flush()
        # ... and a commit of its transaction by the coordinator.
        outcome = end_transactions(options, [zombie.handle], commit=True)
        assert outcome == {"q-2-0": "PRODUCER_FENCED"}
        assert end_transactions(options, [retry.handle], commit=True) == {"q-2-0": None}
    finally:
        zombie.close()
        retry.close()


def test_a_produce_retried_after_a_lost_answer_is_not_written_twice(
    broker: ThreadedBroker,
) -> None:
    broker.fake.drop_after_append = {1}  # the first batch is appended, its answer lost
    options = _options(broker)
    handle = _write(options, "q-3-0", [("a", b"1"), ("a", b"2"), ("a", b"3")])
    assert handle is not None
    produced = [(a.base_sequence, a.count) for a in broker.fake.appended]
    assert produced == [(0, 2), (2, 1)]
    assert sum(1 for h in broker.fake.requests if h.api_key == ApiKey.PRODUCE) == 3


def test_coordinator_answers_are_retried_until_the_deadline(broker: ThreadedBroker) -> None:
    fake = broker.fake
    options = _options(broker, retry_timeout_ms=20_000)
    fake.inject[ApiKey.FIND_COORDINATOR] = [ErrorCode.COORDINATOR_NOT_AVAILABLE]
    fake.inject[ApiKey.INIT_PRODUCER_ID] = [ErrorCode.COORDINATOR_LOAD_IN_PROGRESS]
    fake.inject[ApiKey.ADD_PARTITIONS_TO_TXN] = [ErrorCode.CONCURRENT_TRANSACTIONS]
    handle = _write(options, "q-4-0", [("a", b"1")])
    assert handle is not None
    fake.inject[ApiKey.END_TXN] = [ErrorCode.NOT_COORDINATOR, ErrorCode.CONCURRENT_TRANSACTIONS]
    assert end_transactions(options, [handle], commit=True) == {"q-4-0": None}
    assert all(not queue for queue in fake.inject.values())

    # Past the deadline the reason is reported, not raised (the writer raises for all).
    quick = _options(broker, retry_timeout_ms=300)
    fake.inject[ApiKey.END_TXN] = [ErrorCode.CONCURRENT_TRANSACTIONS] * 50
    (why,) = end_transactions(quick, [handle], commit=True).values()
    assert why is not None
    assert "gave up after" in why
    assert "CONCURRENT_TRANSACTIONS" in why


def test_final_errors_fail_the_task(broker: ThreadedBroker) -> None:
    options = _options(broker, transaction_timeout_ms=900_001)
    with pytest.raises(ConnectorError, match=r"lower the option 'kafka\.transaction\.timeout\.ms'"):
        _write(options, "q-6-0", [("a", b"1")])
    broker.fake.inject[ApiKey.ADD_PARTITIONS_TO_TXN] = [
        ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    ]
    with pytest.raises(ConnectorError, match="TRANSACTIONAL_ID_AUTHORIZATION_FAILED"):
        _write(_options(broker), "q-6-0", [("a", b"1")])


def test_fencing_aborts_open_transactions_and_stops_begun_attempts(
    broker: ThreadedBroker,
) -> None:
    options = _options(broker)
    open_handle = _write(options, "q-7-0", [("a", b"1")])
    done = _write(options, "q-7-1", [("a", b"2")])
    assert open_handle is not None
    assert done is not None
    end_transactions(options, [done], commit=True)
    begun = TransactionalProducer(options, "q-7-3")  # began, has not written yet
    try:
        assert begun.begin()
        aborted = fence_open_transactions(options, ["q-7-0", "q-7-1", "q-7-2", "q-7-3"])
        assert aborted == ["q-7-0"]
        assert [(m.transactional_id, m.commit) for m in broker.fake.markers] == [
            ("q-7-1", True),
            ("q-7-0", False),
        ]
        assert broker.call(broker.fake.state, "q-7-1") == "CompleteCommit"  # left alone
        assert broker.call(broker.fake.state, "q-7-2") is None  # not created by the look
        # The begun attempt can no longer add a partition, so it writes nothing.
        begun.send("a", b"late")
        with pytest.raises(ConnectorError, match="PRODUCER_FENCED"):
            begun.flush()
    finally:
        begun.close()


# --- the Spark classes' write path ---------------------------------------------------------


def _arrow(values: list[str]) -> pa.RecordBatch:
    return pa.record_batch([pa.array(values, pa.string())], names=["value"])


def test_writer_commit_and_replay(broker: ThreadedBroker) -> None:
    from tidelog.spark.source import (
        TidelogCommitMessage,
        TidelogStreamWriter,
        _write_in_transaction,
    )

    options = _options(broker)
    scope = stream_scope("tidelog-spark", "qid", 7)
    batches = [_arrow([]), _arrow(["x", "y"]), _arrow(["z"])]
    message = _write_in_transaction(options, scope, 0, iter(batches))
    assert message.written == {"a-0": 3}
    assert message.transaction is not None
    assert message.transaction.transactional_id == f"{scope}-0"
    empty = _write_in_transaction(options, scope, 1, iter([_arrow([])]))
    assert empty == TidelogCommitMessage(scope=scope)  # no rows, no transaction

    writer = TidelogStreamWriter(options)
    with pytest.raises(ConnectorError, match="commit messages of other micro-batches"):
        writer.commit([message, empty], 8)
    writer.commit([message, empty], 7)
    assert broker.call(broker.fake.state, f"{scope}-0") == "CompleteCommit"

    appended = len(broker.fake.appended)
    replayed = _write_in_transaction(options, scope, 0, iter(batches))
    assert replayed.already_committed
    assert replayed.transaction is None
    assert len(broker.fake.appended) == appended
    writer.commit([replayed, empty], 7)  # nothing to end


def test_writer_commit_raises_when_a_transaction_did_not_commit(
    broker: ThreadedBroker, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tidelog.spark.source import TidelogStreamWriter, _write_in_transaction

    monkeypatch.setattr(transactions, "ZOMBIE_GRACE_S", 0.0)
    options = _options(broker)
    scope = stream_scope("tidelog-spark", "qid", 3)
    first = _write_in_transaction(options, scope, 0, iter([_arrow(["x"])]))
    second = _write_in_transaction(options, scope, 1, iter([_arrow(["y"])]))
    # Task 1's transaction is aborted behind the driver's back (its timeout, say).
    fence_open_transactions(options, [f"{scope}-1"])
    writer = TidelogStreamWriter(options)
    with pytest.raises(ConnectorError) as info:
        writer.commit([first, second], 3)
    text = str(info.value)
    assert f"1 of 2 transactions did not commit ({scope}-1: PRODUCER_FENCED)" in text
    assert "restart the query from its checkpoint" in text
    assert broker.call(broker.fake.state, f"{scope}-0") == "CompleteCommit"
    # Spark then calls abort with the same messages: the committed one stays committed.
    writer.abort([first, second], 3)
    assert broker.call(broker.fake.state, f"{scope}-0") == "CompleteCommit"


def test_writer_abort_ends_finished_tasks_and_fences_failed_ones(
    broker: ThreadedBroker, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tidelog.spark.source import TidelogStreamWriter, _write_in_transaction

    monkeypatch.setattr(transactions, "ZOMBIE_GRACE_S", 0.0)
    options = _options(broker)
    scope = stream_scope("tidelog-spark", "qid", 4)
    finished = _write_in_transaction(options, scope, 0, iter([_arrow(["x"])]))
    # Task 1 wrote, then its Python worker died: no message, its transaction open.
    _write_in_transaction(options, scope, 1, iter([_arrow(["y"])]))
    TidelogStreamWriter(options).abort([finished, None], 4)
    ended = {(m.transactional_id, m.commit) for m in broker.fake.markers}
    assert ended == {(f"{scope}-0", False), (f"{scope}-1", False)}


def test_batch_writer_draws_one_scope_per_write() -> None:
    from tidelog.spark.source import TidelogBatchWriter

    options = parse_write_options({**BOOT, "exactlyOnce": "true", "transactionalIdPrefix": "x"})
    one, two = TidelogBatchWriter(options), TidelogBatchWriter(options)
    assert one.scope is not None
    assert two.scope is not None
    assert one.scope.startswith("x-batch-")
    assert one.scope != two.scope
    assert TidelogBatchWriter(parse_write_options(BOOT)).scope is None
