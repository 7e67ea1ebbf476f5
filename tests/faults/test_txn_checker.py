"""Issue 19: the transactional checker on hand-made histories (each check fails on its own
anomaly and passes a clean history), the workload's error handling against a scripted
client (retriable, abortable, fatal, the zombie's fencing), the report and the command
line. Unit tests: no processes."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException

from tidelog.testing.faults import __main__ as faults_main
from tidelog.testing.faults import txn_workload
from tidelog.testing.faults.nemesis import (
    EVERY_KIND,
    KILL_TXN_COORDINATOR,
    RESTART_KINDS,
    TXN_KINDS,
    Nemesis,
)
from tidelog.testing.faults.txn_checker import check_transactions
from tidelog.testing.faults.txn_run import (
    TxnProducerStats,
    TxnRunConfig,
    TxnRunResult,
    render_txn_report,
)
from tidelog.testing.faults.txn_workload import (
    ABORTABLE,
    ABORTED,
    COMMITTED,
    FATAL,
    FENCED,
    INDETERMINATE,
    RETRIABLE,
    Txn,
    TxnProducerWorker,
    classify_txn_error,
    delivery_error_is_visible,
    is_zombie_turn,
)
from tidelog.testing.faults.workload import ClientError, Read

# --- hand-made histories ---------------------------------------------------------------------


def _txn(
    number: int,
    outcome: str,
    n: int = 3,
    *,
    commit_at: float | None = 10.0,
    zombie: bool = False,
    producer: int = 0,
) -> Txn:
    t = Txn(producer, f"id-{producer}", number, "commit", zombie, 0.0, outcome=outcome)
    t.values = [b"t%d-%d-%d" % (producer, number, i) for i in range(n)]
    t.partitions = [i % 3 for i in range(n)]
    t.commit_called_at = commit_at if outcome != ABORTED else None
    return t


class Log:
    """A final read built value by value: offsets per partition as a broker assigns them."""

    def __init__(self) -> None:
        self.next = {0: 0, 1: 0, 2: 0}
        self.reads: list[Read] = []

    def add(self, t: Txn, *, skip: int = 0, reader: str = "final", at: float = 20.0) -> None:
        for v, p in list(zip(t.values, t.partitions, strict=True))[skip:]:
            self.reads.append(Read(reader, p, self.next[p], v, at))
            self.next[p] += 1


def _clean() -> tuple[list[Txn], Log]:
    committed, aborted, fenced = _txn(0, COMMITTED), _txn(1, ABORTED), _txn(2, FENCED, zombie=True)
    log = Log()
    log.add(committed)
    return [committed, aborted, fenced], log


def test_a_clean_history_passes_every_check() -> None:
    txns, log = _clean()
    reads = [Read("rc0", r.partition, r.offset, r.value, 15.0) for r in log.reads]
    f = check_transactions(txns, reads, log.reads, ends={0: 1, 1: 1, 2: 1}, reached=log.next)
    assert f.failures == {}, f.summary()
    assert f.ok
    assert (f.outcomes[COMMITTED], f.outcomes[ABORTED], f.outcomes[FENCED]) == (1, 1, 1)
    assert (f.zombies, f.zombies_fenced) == (1, 1)
    assert f.reads == 3
    assert f.final_reads == 3


def test_a_committed_value_missing_is_lost_and_the_transaction_partial() -> None:
    committed = _txn(0, COMMITTED)
    log = Log()
    log.add(committed, skip=1)
    f = check_transactions([committed], [], log.reads)
    assert f.committed_values_lost == 1
    assert "1 of 3 values not in the final read_committed read: t0-0-0" in f.lost[0]
    assert len(f.partial) == 1
    assert not f.ok


def test_a_value_twice_or_elsewhere_than_delivered() -> None:
    committed = _txn(0, COMMITTED, n=2)
    committed.delivered = {b"t0-0-0": (0, 0), b"t0-0-1": (1, 5)}
    log = Log()
    log.add(committed)
    log.add(committed, skip=1)  # t0-0-1 stored a second time
    f = check_transactions([committed], [], log.reads)
    assert len(f.duplicated) == 1
    assert "t0-0-1" in f.duplicated[0]
    assert len(f.moved) == 1
    assert "delivered at (1, 5)" in f.moved[0]


def test_an_aborted_or_fenced_value_read_at_any_time_fails() -> None:
    aborted, fenced = _txn(1, ABORTED), _txn(2, FENCED, zombie=True)
    log = Log()
    log.add(aborted)
    during = [Read("rc1", 0, 7, fenced.values[0], 3.0)]
    f = check_transactions([aborted, fenced], during, log.reads)
    assert f.aborted_values_visible == 4
    assert len(f.aborted_visible) == 2
    assert (
        "id-0 txn 1 (aborted): 3 of 3 values in the final read_committed read"
        in (f.aborted_visible[0])
    )
    assert "read 1 times by read_committed consumers during the run" in f.aborted_visible[1]


def test_indeterminate_transactions_are_all_or_nothing() -> None:
    whole, none, half = (_txn(n, INDETERMINATE) for n in range(3))
    log = Log()
    log.add(whole)
    log.add(half, skip=2)
    f = check_transactions([whole, none, half], [], log.reads)
    assert (f.indeterminate_visible, f.indeterminate_invisible) == (1, 1)
    assert len(f.partial) == 1
    assert "id-0 txn 2 (indeterminate): 1 of 3 values" in f.partial[0]
    assert f.lost == []


def test_a_read_before_the_commit_was_called_or_without_any_commit() -> None:
    committed = _txn(0, COMMITTED, commit_at=10.0)
    never = _txn(1, INDETERMINATE, commit_at=None)
    log = Log()
    log.add(committed)
    log.add(never)
    early = [Read("rc0", 0, 0, committed.values[0], 9.5)]
    f = check_transactions([committed, never], early, log.reads)
    assert len(f.early) == 1 + 3
    assert "0.500s before id-0 txn 0 (committed) called commit_transaction()" in f.early[0]
    assert "never called commit_transaction()" in f.early[1]


def test_a_zombie_whose_commit_returned_was_not_fenced() -> None:
    zombie = _txn(0, COMMITTED, zombie=True)
    log = Log()
    log.add(zombie)
    f = check_transactions([zombie], [], log.reads)
    assert len(f.not_fenced) == 1
    assert (f.zombies, f.zombies_fenced) == (1, 0)


def test_reads_against_the_final_log() -> None:
    committed = _txn(0, COMMITTED, n=3)
    log = Log()
    log.add(committed)
    reads = [
        Read("rc0", 0, 0, b"nobody", 11.0),  # unknown, and not what the final read has
        Read("rc0", 1, 0, committed.values[1], 11.0),
        Read("rc0", 1, 0, committed.values[1], 12.0),  # read again: backwards
        Read("rc1", 2, 4, committed.values[2], 11.0),  # not there at the end
    ]
    f = check_transactions([committed], reads, log.reads)
    assert len(f.unknown) == 1
    assert f.inconsistent == ["0/0: rc0 read b'nobody', final read b't0-0-0'"]
    assert any("2/4" in v for v in f.vanished)
    assert any("rc0 read 1/0 after 0" in r for r in f.reordered)


def test_one_transactions_values_stored_out_of_produce_order() -> None:
    t = _txn(0, COMMITTED, n=2)
    t.partitions = [0, 0]
    log = [Read("final", 0, 0, t.values[1], 20.0), Read("final", 0, 1, t.values[0], 20.0)]
    f = check_transactions([t], [], log)
    assert len(f.reordered) == 1
    assert (
        "t0-0-1 stored at 0/0, before t0-0-0 at 0/1 although produced after it" in (f.reordered[0])
    )


def test_a_hanging_transaction_or_a_short_final_read_is_incomplete() -> None:
    f = check_transactions(
        [], [], [], ends={0: 5, 1: 7}, reached={0: 5, 1: 6}, high_watermarks={0: 9, 1: 7}
    )
    assert f.incomplete == [
        "partition 0: last stable offset 5 below the high watermark 9 after every producer "
        "stopped (a transaction left open)",
        "partition 1: the final read reached 6 of 7",
    ]


def test_aborted_values_in_the_log_are_counted() -> None:
    txns, log = _clean()
    raw = Log()
    for t in txns:
        raw.add(t, reader="final-uncommitted")
    f = check_transactions(txns, [], log.reads, uncommitted=raw.reads)
    assert f.aborted_values_in_log == 6
    assert f.ok


# --- the client's errors ---------------------------------------------------------------------


def _err(code: int, **flags: bool) -> KafkaError:
    return KafkaError(code, "scripted", **flags)


def test_transactional_errors_are_classified_as_librdkafka_documents() -> None:
    assert classify_txn_error(_err(KafkaError._FENCED, fatal=True)) == FATAL
    assert classify_txn_error(_err(KafkaError._TIMED_OUT, retriable=True)) == RETRIABLE
    assert classify_txn_error(_err(KafkaError._STATE, txn_requires_abort=True)) == ABORTABLE
    # None of the flags: "treat any other error as a fatal error".
    assert classify_txn_error(_err(KafkaError.INVALID_TXN_STATE)) == FATAL


def test_delivery_errors_expected_in_a_transaction_are_not_client_visible() -> None:
    purged = _err(KafkaError._PURGE_QUEUE)
    fenced = _err(KafkaError.INVALID_PRODUCER_EPOCH)
    assert not delivery_error_is_visible(purged, zombie=False)
    assert not delivery_error_is_visible(fenced, zombie=True)
    assert delivery_error_is_visible(fenced, zombie=False)
    assert not delivery_error_is_visible(_err(KafkaError._MSG_TIMED_OUT), zombie=False)
    assert delivery_error_is_visible(_err(KafkaError.UNKNOWN_TOPIC_OR_PART), zombie=False)


def test_zombie_turns_are_spread_over_the_producers() -> None:
    turns = {p: [n for n in range(50) if is_zombie_turn(n, p, 25)] for p in range(3)}
    assert turns == {0: [24, 49], 1: [17, 42], 2: [10, 35]}
    assert not any(is_zombie_turn(n, 0, 0) for n in range(50))


class FakeProducer:
    """A scripted stand-in for confluent_kafka.Producer: each method raises the errors
    ``script`` lists for it, in order, then succeeds; deliveries succeed at increasing
    offsets."""

    script: dict[str, list[KafkaError]] = {}  # noqa: RUF012 - reset by the fixture
    made: list[FakeProducer] = []  # noqa: RUF012

    def __init__(self, config: dict[str, Any]) -> None:
        self.config = config
        self.pending: list[tuple[bytes, int, Callable[[Any, Any], None]]] = []
        self.calls: list[str] = []
        self.offset = 0
        FakeProducer.made.append(self)

    def _call(self, name: str) -> None:
        self.calls.append(name)
        errors = FakeProducer.script.get(name)
        if errors:
            raise KafkaException(errors.pop(0))

    def init_transactions(self, timeout: float) -> None:
        self._call("init_transactions")

    def begin_transaction(self) -> None:
        self._call("begin_transaction")

    def produce(
        self, topic: str, value: bytes, partition: int, on_delivery: Callable[[Any, Any], None]
    ) -> None:
        self._call("produce")
        self.pending.append((value, partition, on_delivery))

    def poll(self, timeout: float) -> int:
        return self.flush(timeout)

    def flush(self, timeout: float) -> int:
        for value, partition, callback in self.pending:
            msg = SimpleNamespace(
                value=lambda v=value: v,
                partition=lambda p=partition: p,
                offset=lambda o=self.offset: o,
            )
            self.offset += 1
            callback(None, msg)
        self.pending.clear()
        return 0

    def commit_transaction(self, timeout: float) -> None:
        self.flush(timeout)
        self._call("commit_transaction")

    def abort_transaction(self, timeout: float) -> None:
        self._call("abort_transaction")

    def close(self) -> bool:
        self.calls.append("close")
        return True


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> type[FakeProducer]:
    FakeProducer.script = {}
    FakeProducer.made = []
    monkeypatch.setattr(txn_workload, "Producer", FakeProducer)
    return FakeProducer


def _worker(commit_ratio: float = 1.0, zombie_every: int = 0) -> TxnProducerWorker:
    w = TxnProducerWorker(
        "127.0.0.1:1",
        "t",
        3,
        0,
        seed=1,
        commit_ratio=commit_ratio,
        zombie_every=zombie_every,
        stuck_after_s=5.0,
    )
    w._producer = w._new_producer()
    return w


def _one(w: TxnProducerWorker) -> Txn:
    assert w._producer is not None
    w._transaction(w._producer)
    return w.history()[-1]


def test_a_retriable_commit_error_is_retried_and_commits(fake: type[FakeProducer]) -> None:
    fake.script = {"commit_transaction": [_err(KafkaError._TIMED_OUT, retriable=True)]}
    w = _worker()
    t = _one(w)
    assert t.outcome == COMMITTED
    assert t.commit_called_at is not None
    assert t.errors == ["commit_transaction(): _TIMED_OUT: scripted (retriable)"]
    assert len(t.delivered) == len(t.values) > 0
    assert w.visible == []
    assert fake.made[0].calls.count("commit_transaction") == 2


def test_an_abortable_commit_error_ends_in_an_abort(fake: type[FakeProducer]) -> None:
    fake.script = {"commit_transaction": [_err(KafkaError._STATE, txn_requires_abort=True)]}
    w = _worker()
    t = _one(w)
    assert t.outcome == ABORTED
    assert t.abort_reason == "commit_transaction(): _STATE"
    assert w.visible == []


def test_an_intended_abort_flushes_first(fake: type[FakeProducer]) -> None:
    w = _worker(commit_ratio=0.0)
    t = _one(w)
    assert t.outcome == ABORTED
    assert t.abort_reason == "intended"
    assert len(t.delivered) == len(t.values)  # in the log before the abort
    assert t.commit_called_at is None


def test_a_fatal_error_is_client_visible_and_the_producer_replaced(
    fake: type[FakeProducer],
) -> None:
    fake.script = {"commit_transaction": [_err(KafkaError._FENCED, fatal=True)]}
    w = _worker()
    t = _one(w)
    assert t.outcome == INDETERMINATE
    assert len(w.visible) == 1
    assert isinstance(w.visible[0], ClientError)
    assert w.visible[0].where == "commit_transaction()"
    assert len(fake.made) == 2
    assert fake.made[0].calls[-1] == "close"
    assert w._producer is fake.made[1]


def test_an_abortable_produce_error_aborts(fake: type[FakeProducer]) -> None:
    fake.script = {"produce": [_err(KafkaError._STATE, txn_requires_abort=True)]}
    w = _worker()
    t = _one(w)
    assert t.outcome == ABORTED
    assert t.values == []  # the client did not take it
    assert t.abort_reason == "produce(): _STATE"


def test_the_zombie_is_fenced_and_its_successor_carries_on(fake: type[FakeProducer]) -> None:
    fake.script = {"commit_transaction": [_err(KafkaError._FENCED, fatal=True)]}
    w = _worker(zombie_every=1)
    t = _one(w)
    assert t.zombie
    assert t.outcome == FENCED
    assert w.visible == []  # the expected fencing
    zombie, successor = fake.made
    assert zombie.calls[-2:] == ["commit_transaction", "close"]
    assert successor.calls == ["init_transactions"]
    assert w._producer is successor


def test_a_zombie_failing_otherwise_than_fenced_is_client_visible(
    fake: type[FakeProducer],
) -> None:
    fake.script = {"commit_transaction": [_err(KafkaError.INVALID_TXN_STATE, fatal=True)]}
    w = _worker(zombie_every=1)
    t = _one(w)
    assert t.outcome == FENCED
    assert [e.where for e in w.visible] == ["zombie commit_transaction()"]


def test_a_zombie_whose_commit_returns_is_recorded_committed(fake: type[FakeProducer]) -> None:
    w = _worker(zombie_every=1)
    t = _one(w)
    assert (t.zombie, t.outcome) == (True, COMMITTED)
    f = check_transactions([t], [], [])
    assert len(f.not_fenced) == 1


def test_a_fatal_init_is_client_visible_and_retried_with_a_new_producer(
    fake: type[FakeProducer],
) -> None:
    fake.script = {"init_transactions": [_err(KafkaError._FATAL, fatal=True)]}
    w = TxnProducerWorker("127.0.0.1:1", "t", 3, 0, seed=1)
    w._stop.set()  # no pause between the attempts
    assert w._new_producer() is fake.made[1]
    assert [e.where for e in w.visible] == ["init_transactions()"]


# --- nemesis, report, command line -----------------------------------------------------------


def test_the_transactional_kinds_exist_and_need_transactional_ids() -> None:
    assert set(RESTART_KINDS) < set(TXN_KINDS) <= set(EVERY_KIND)
    assert KILL_TXN_COORDINATOR in TXN_KINDS
    for kind in EVERY_KIND:
        assert callable(getattr(Nemesis, f"_{kind}", None)), kind
    cluster: Any = SimpleNamespace(tmpfs_mount=None, racks=())
    plain = Nemesis(cluster, "t", None, None)  # type: ignore[arg-type]
    assert KILL_TXN_COORDINATOR not in plain.kinds()
    with_ids = Nemesis(cluster, "t", None, None, transactional_ids=["x"])  # type: ignore[arg-type]
    assert KILL_TXN_COORDINATOR in with_ids.kinds()


def _result(findings_txns: list[Txn], final: list[Read]) -> TxnRunResult:
    return TxnRunResult(
        config=TxnRunConfig(faults=0),
        findings=check_transactions(findings_txns, [], final),
        faults=[],
        unavailable=[],
        producers=[TxnProducerStats("id-0", 1, 1, 0, 1, 9, 2, 0)],
    )


def test_the_report_gives_a_verdict_per_check() -> None:
    txns, log = _clean()
    report = render_txn_report(_result(txns, log.reads), "cmd", code="abc")
    assert "| (a) no committed record lost: 0 committed values missing | **pass** |" in report
    assert "| (e) zombies fenced: 1 of 1 zombie commits failed | **pass** |" in report
    assert "## Findings" not in report
    assert "| id-0 | 1 | 1 | 0 | 1 | 9 | 2 | 0 |" in report
    aborted = _txn(1, ABORTED)
    bad = Log()
    bad.add(aborted)
    report = render_txn_report(_result([aborted], bad.reads), "cmd", code="abc")
    assert "3 aborted or fenced values read | **FAIL** (1) |" in report
    assert "## Findings" in report


def test_the_command_line_runs_the_transactional_workload(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    seen: list[TxnRunConfig] = []
    aborted = _txn(1, ABORTED)
    bad = Log()
    bad.add(aborted)

    def fake_run(config: TxnRunConfig, log: object = None) -> TxnRunResult:
        seen.append(config)
        return _result([aborted], bad.reads)

    monkeypatch.setattr(faults_main, "run_transactions", fake_run)
    report = tmp_path / "r.md"
    argv = ["--workload", "transactions", "--faults", "3", "--report", str(report)]
    assert faults_main.main(argv) == 1
    assert seen[0].kinds == TXN_KINDS
    assert seen[0].faults == 3
    assert "python -m tidelog.testing.faults --workload transactions" in report.read_text()
    with pytest.raises(SystemExit):
        faults_main.main(["--workload", "transactions", "--idempotent"])
    with pytest.raises(SystemExit):
        faults_main.main(["--kinds", KILL_TXN_COORDINATOR])  # records workload: unknown kind
