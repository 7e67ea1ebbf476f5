"""The transaction rows' send loops (``tidelog.bench.transactions``) against a fake
producer that records its calls (no cluster): what they produce, commit and tally."""

from __future__ import annotations

import struct
import time

import pytest
from confluent_kafka import KafkaError, KafkaException

from tidelog.bench.transactions import TxnTally, send_as_fast_as_possible, send_at_fixed_rate


class FakeProducer:
    """Records begin/produce/commit/abort; commit number ``fail_commit`` (1-based) raises
    a KafkaException that requires an abort (``abortable``) or not (fatal)."""

    def __init__(self, fail_commit: int = 0, *, abortable: bool = True) -> None:
        self.calls: list[str] = []
        self.records: list[tuple[str, bytes, int]] = []
        self.commits = 0
        self.fail_commit = fail_commit
        self.abortable = abortable

    def begin_transaction(self) -> None:
        self.calls.append("begin")

    def produce(self, topic: str, value: bytes, partition: int) -> None:
        self.records.append((topic, value, partition))
        self.calls.append("produce")

    def poll(self, _timeout: float) -> int:
        return 0

    def commit_transaction(self, _timeout: float) -> None:
        self.commits += 1
        self.calls.append("commit")
        if self.commits == self.fail_commit:
            if self.abortable:
                raise KafkaException(
                    KafkaError(KafkaError._STATE, "abort me", txn_requires_abort=True)
                )
            raise KafkaException(KafkaError(KafkaError._FENCED, "fenced", fatal=True))

    def abort_transaction(self, _timeout: float) -> None:
        self.calls.append("abort")


def test_fixed_rate_sends_total_records_in_transactions_round_robin() -> None:
    producer = FakeProducer()
    tally = TxnTally()
    start = time.perf_counter()
    send_at_fixed_rate(
        producer,
        "t",
        [0, 1, 2],
        b"\0" * 2,
        tally,
        rate=100_000,
        total=7,
        per_transaction=3,
        start=start,
        deadline=start + 30,
    )
    assert (tally.sent, tally.committed) == (7, 7)
    assert producer.calls == [
        *("begin", "produce", "produce", "produce", "commit"),
        *("begin", "produce", "produce", "produce", "commit"),
        *("begin", "produce", "commit"),
    ]
    assert [p for _t, _v, p in producer.records] == [0, 1, 2, 0, 1, 2, 0]
    stamped = [struct.unpack(">q", v[:8])[0] for _t, v, _p in producer.records]
    assert stamped == sorted(stamped)
    assert all(len(v) == 10 and v[8:] == b"\0\0" for _t, v, _p in producer.records)
    assert len(tally.commits) == 3
    assert len(tally.lags) == 3
    assert tally.txn_errors == []


def test_fixed_rate_counts_an_aborted_transaction_and_goes_on() -> None:
    producer = FakeProducer(fail_commit=1)
    tally = TxnTally()
    start = time.perf_counter()
    send_at_fixed_rate(
        producer,
        "t",
        [0],
        b"",
        tally,
        rate=100_000,
        total=4,
        per_transaction=2,
        start=start,
        deadline=start + 30,
    )
    assert (tally.sent, tally.committed) == (4, 2)
    assert producer.calls.count("abort") == 1
    assert len(tally.commits) == 1
    assert [e.split(":")[0] for e in tally.txn_errors] == ["aborted"]


def test_fixed_rate_stops_at_a_fatal_commit_error() -> None:
    producer = FakeProducer(fail_commit=1, abortable=False)
    tally = TxnTally()
    start = time.perf_counter()
    send_at_fixed_rate(
        producer,
        "t",
        [0],
        b"",
        tally,
        rate=100_000,
        total=10,
        per_transaction=2,
        start=start,
        deadline=start + 30,
    )
    assert (tally.sent, tally.committed) == (2, 0)
    assert [e.split(":")[0] for e in tally.txn_errors] == ["fatal"]


def test_fixed_rate_stops_at_the_deadline() -> None:
    producer = FakeProducer()
    tally = TxnTally()
    start = time.perf_counter()
    send_at_fixed_rate(
        producer,
        "t",
        [0],
        b"",
        tally,
        rate=1,
        total=10,
        per_transaction=1,
        start=start,
        deadline=start - 1,
    )
    assert tally.sent == 0
    assert producer.calls == []


@pytest.mark.parametrize("transactional", [True, False])
def test_as_fast_as_possible_sends_groups_until_stop(transactional: bool) -> None:
    producer = FakeProducer()
    tally = TxnTally()
    stop = time.perf_counter() + 0.05
    send_as_fast_as_possible(
        producer,
        "t",
        [3, 4],
        b"v",
        tally,
        transactional=transactional,
        per_transaction=5,
        stop=stop,
    )
    groups = tally.sent // 5
    assert groups >= 1
    assert tally.sent == groups * 5
    assert [p for _t, _v, p in producer.records[:4]] == [3, 4, 3, 4]
    assert all(v == b"v" for _t, v, _p in producer.records)
    if transactional:
        assert producer.calls.count("begin") == producer.calls.count("commit") == groups
        assert tally.committed == tally.sent
        assert len(tally.commits) == groups
    else:
        assert "begin" not in producer.calls
        assert "commit" not in producer.calls
        assert tally.committed == 0


def test_as_fast_as_possible_stops_at_a_fatal_commit_error() -> None:
    producer = FakeProducer(fail_commit=2, abortable=False)
    tally = TxnTally()
    send_as_fast_as_possible(
        producer,
        "t",
        [0],
        b"v",
        tally,
        transactional=True,
        per_transaction=3,
        stop=time.perf_counter() + 30,
    )
    assert (tally.sent, tally.committed) == (6, 3)
    assert [e.split(":")[0] for e in tally.txn_errors] == ["fatal"]
