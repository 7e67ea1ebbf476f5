"""The transaction rows (issue 19): what exactly-once production costs, and what a
read_committed consumer waits for.

- Throughput: 100 B records in transactions of 1,000 (``begin_transaction()``, 1,000
  ``produce()``, ``commit_transaction()``; acks=all is implied), RF=3,
  min.insync.replicas=2, beside an idempotent producer (``enable.idempotence=true``, no
  transactions) with the same records, partitions, settings and send loop, so the cost
  of transactions is a ratio from one run. Commit latency is the time
  ``commit_transaction()`` took: librdkafka sends what is still queued, waits for its
  acknowledgements, then EndTxn, answered once the coordinator wrote PrepareCommit.
- End-to-end: a transactional producer committing small transactions at a fixed rate
  (each transaction's records produced together, then committed), a ``read_committed``
  consumer; latency = consume time - the ``produce()`` call time stamped in the record,
  so it includes the commit and the commit markers' replication (the last stable offset
  passing the records).

Workers run in spawned processes (:func:`tidelog.bench.kafka.run_parallel`) and return
plain data; the summaries are pure functions.
"""

# Optional dependencies (the bench extra) load lazily; workers take positional arguments
# because they run through multiprocessing's starmap.
# ruff: noqa: PLC0415, PLR0917

from __future__ import annotations

import contextlib
import multiprocessing
import os
import struct
import time
from array import array
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from tidelog.bench.common import MB, Latency, Row, settle
from tidelog.bench.kafka import PRODUCER_BASE, e2e_consumer_worker, run_parallel
from tidelog.bench.tidelog_rows import create_topic

Say = Callable[[str], None]

#: Record size of the throughput rows, bytes.
RECORD_BYTES = 100
#: Records per transaction of the throughput row.
RECORDS_PER_TRANSACTION = 1000
#: (records/s, records per transaction) of the read_committed end-to-end rows: both 10
#: transactions/s, small ones (10 records), and the record rate of the first acks=all e2e
#: row (100 records each). One producer commits one transaction at a time, so transactions/s
#: above 1 / commit latency cannot be kept up (``schedule_lag_ms`` shows it).
E2E_RATES: tuple[tuple[int, int], ...] = ((100, 10), (1000, 100))
#: The producer of an e2e row gives up after this many times the row's seconds (+30 s).
E2E_DEADLINE_FACTOR = 4
PARTITIONS = 3
#: librdkafka wants message.timeout.ms <= transaction.timeout.ms; kept as PRODUCER_BASE's.
TRANSACTION_TIMEOUT_MS: int = PRODUCER_BASE["message.timeout.ms"]
#: Seconds init_transactions() and commit_transaction() may take before the row fails.
TXN_CALL_TIMEOUT_S = 120.0


@contextlib.contextmanager
def _plain_errors() -> Iterator[None]:
    """Raise librdkafka's exceptions as RuntimeError: a KafkaException does not pickle back
    from a pool's worker process (the section would fail with a PicklingError instead)."""
    from confluent_kafka import KafkaException

    try:
        yield
    except KafkaException as exc:
        raise RuntimeError(f"KafkaException: {exc}") from None


def _commit(producer: Any, commits: array[float]) -> str | None:
    """Commit the open transaction; appends the seconds ``commit_transaction()`` took to
    ``commits``. Returns None when committed, else the error: a transaction that needs
    aborting is aborted first; any other error (fatal, timed out) is returned with
    ``fatal: `` in front and the caller stops sending."""
    from confluent_kafka import KafkaException

    start = time.perf_counter()
    try:
        producer.commit_transaction(TXN_CALL_TIMEOUT_S)
    except KafkaException as exc:
        error = exc.args[0]
        if error.txn_requires_abort():
            producer.abort_transaction(TXN_CALL_TIMEOUT_S)
            return f"aborted: {error}"
        return f"fatal: {error}"
    commits.append(time.perf_counter() - start)
    return None


@dataclass(slots=True)
class TxnTally:
    """What a send loop did: records produced and committed, each commit's seconds, each
    transaction's late start (seconds, :func:`send_at_fixed_rate` only), the failed
    transactions' errors."""

    sent: int = 0
    committed: int = 0
    commits: array[float] = field(default_factory=lambda: array("d"))
    lags: array[float] = field(default_factory=lambda: array("d"))
    txn_errors: list[str] = field(default_factory=list)


def transactional_produce_worker(
    bootstrap: str,
    topic: str,
    size: int,
    seconds: float,
    partitions: Sequence[int],
    per_transaction: int,
    transactional_id: str,
) -> dict[str, Any]:
    """acks=all idempotent producer sending ``size``-byte records round-robin over
    ``partitions`` as fast as it can for ``seconds``, ``per_transaction`` records at a
    time; with a ``transactional_id`` each group of records is one transaction (begin,
    produce, commit), without one ("") the producer just polls between groups.

    Returns the records committed (transactional) or acknowledged (idempotent), the time
    from the first send to the last commit or delivery report, every delivery latency and
    every commit latency (seconds)."""
    from confluent_kafka import Producer

    latencies = array("d")
    delivery_errors: list[str] = []

    def on_delivery(err: Any, msg: Any) -> None:
        if err is None:
            latencies.append(msg.latency())
        else:
            delivery_errors.append(str(err))

    with _plain_errors():
        config: dict[str, Any] = {
            **PRODUCER_BASE,
            "bootstrap.servers": bootstrap,
            "acks": "all",
            "enable.idempotence": True,
            "on_delivery": on_delivery,
        }
        if transactional_id:
            config["transactional.id"] = transactional_id
            config["transaction.timeout.ms"] = TRANSACTION_TIMEOUT_MS
        producer = Producer(config)
        if transactional_id:
            producer.init_transactions(TXN_CALL_TIMEOUT_S)
        value = os.urandom(size)
        tally = TxnTally()
        start = time.perf_counter()
        send_as_fast_as_possible(
            producer,
            topic,
            list(partitions),
            value,
            tally,
            transactional=bool(transactional_id),
            per_transaction=per_transaction,
            stop=start + seconds,
        )
        remaining = producer.flush(180)
        elapsed = time.perf_counter() - start
        return {
            "transactional": bool(transactional_id),
            "records": tally.committed if transactional_id else len(latencies),
            "sent": tally.sent,
            "transactions": len(tally.commits),
            "failed_transactions": len(tally.txn_errors),
            "errors": len(delivery_errors) + len(tally.txn_errors),
            "first_errors": (tally.txn_errors + delivery_errors)[:3],
            "unflushed": remaining,
            "elapsed": elapsed,
            "latencies": latencies.tobytes(),
            "commit_latencies": tally.commits.tobytes(),
        }


def send_as_fast_as_possible(
    producer: Any,
    topic: str,
    parts: Sequence[int],
    value: bytes,
    tally: TxnTally,
    *,
    transactional: bool,
    per_transaction: int,
    stop: float,
) -> None:
    """The send loop of :func:`transactional_produce_worker`: until ``stop`` (or a fatal
    commit error), groups of ``per_transaction`` copies of ``value`` round-robin over
    ``parts``, each group one transaction when ``transactional``."""
    n = len(parts)
    while time.perf_counter() < stop:
        if transactional:
            producer.begin_transaction()
        for i in range(per_transaction):
            while True:
                try:
                    producer.produce(topic, value, partition=parts[tally.sent % n])
                    break
                except BufferError:
                    producer.poll(0.005)
            tally.sent += 1
            if i % 500 == 499:
                producer.poll(0)
        producer.poll(0)
        if transactional:
            error = _commit(producer, tally.commits)
            if error is None:
                tally.committed += per_transaction
                continue
            tally.txn_errors.append(error)
            if error.startswith("fatal"):
                break


def transactional_fixed_rate_producer(
    bootstrap: str,
    topic: str,
    partitions: Sequence[int],
    rate: int,
    seconds: float,
    size: int,
    per_transaction: int,
    transactional_id: str,
) -> dict[str, Any]:
    """Transactional producer sending ``rate`` records/s for ``seconds`` in transactions
    of ``per_transaction``, one transaction every ``per_transaction / rate`` s: begin, its
    records each starting with ``time.time_ns()`` at the ``produce()`` call, commit. A
    transaction starts late when the commits before took longer than the interval
    (``schedule_lags``); the producer gives up after ``E2E_DEADLINE_FACTOR * seconds + 30``
    s."""
    from confluent_kafka import Producer

    delivery_errors: list[str] = []
    acks = array("d")

    def on_delivery(err: Any, msg: Any) -> None:
        if err is None:
            acks.append(msg.latency())
        else:
            delivery_errors.append(str(err))

    with _plain_errors():
        producer = Producer(
            {
                **PRODUCER_BASE,
                "linger.ms": 1,
                "bootstrap.servers": bootstrap,
                "acks": "all",
                "enable.idempotence": True,
                "transactional.id": transactional_id,
                "transaction.timeout.ms": TRANSACTION_TIMEOUT_MS,
                "on_delivery": on_delivery,
            }
        )
        producer.init_transactions(TXN_CALL_TIMEOUT_S)
        tally = TxnTally()
        start = time.perf_counter()
        send_at_fixed_rate(
            producer,
            topic,
            list(partitions),
            b"\0" * max(0, size - 8),
            tally,
            rate=rate,
            total=int(rate * seconds),
            per_transaction=per_transaction,
            start=start,
            deadline=start + E2E_DEADLINE_FACTOR * seconds + 30,
        )
        elapsed = time.perf_counter() - start
        remaining = producer.flush(60)
        return {
            "sent": tally.sent,
            "committed": tally.committed,
            "transactions": len(tally.commits),
            "failed_transactions": len(tally.txn_errors),
            "errors": len(delivery_errors) + len(tally.txn_errors),
            "first_errors": (tally.txn_errors + delivery_errors)[:3],
            "unflushed": remaining,
            "elapsed": elapsed,
            "ack_latencies": acks.tobytes(),
            "commit_latencies": tally.commits.tobytes(),
            "schedule_lags": tally.lags.tobytes(),
        }


def send_at_fixed_rate(
    producer: Any,
    topic: str,
    parts: Sequence[int],
    pad: bytes,
    tally: TxnTally,
    *,
    rate: int,
    total: int,
    per_transaction: int,
    start: float,
    deadline: float,
) -> None:
    """The send loop of :func:`transactional_fixed_rate_producer`: until ``total`` records
    are sent (or ``deadline``, or a fatal commit error), one transaction of
    ``per_transaction`` records when the schedule (``rate`` records/s from ``start``) says,
    each record ``time.time_ns()`` + ``pad``, round-robin over ``parts``."""
    n = len(parts)
    while tally.sent < total and time.perf_counter() < deadline:
        due = start + tally.sent / rate
        now = time.perf_counter()
        if now < due:
            time.sleep(due - now)
        tally.lags.append(max(0.0, now - due))
        producer.begin_transaction()
        last = min(total, tally.sent + per_transaction)
        first = tally.sent
        while tally.sent < last:
            producer.produce(
                topic, struct.pack(">q", time.time_ns()) + pad, partition=parts[tally.sent % n]
            )
            tally.sent += 1
            producer.poll(0)
        error = _commit(producer, tally.commits)
        if error is None:
            tally.committed += tally.sent - first
            continue
        tally.txn_errors.append(error)
        if error.startswith("fatal"):
            break


# --- pure summaries -------------------------------------------------------------------------


def _seconds(raw: bytes) -> array[float]:
    values: array[float] = array("d")
    values.frombytes(raw)
    return values


def summarise_transactions(results: list[dict[str, Any]], size: int) -> dict[str, Any]:
    """Merge :func:`transactional_produce_worker` results: records/s, MB/s and
    transactions/s over the longest producer's time, delivery latency, and commit latency
    (None when no transaction committed, as for the idempotent producer)."""
    records = sum(r["records"] for r in results)
    transactions = sum(r["transactions"] for r in results)
    elapsed = max(r["elapsed"] for r in results)
    delivery: array[float] = array("d")
    commits: array[float] = array("d")
    for r in results:
        delivery.extend(_seconds(r["latencies"]))
        commits.extend(_seconds(r["commit_latencies"]))
    return {
        "records": records,
        "sent": sum(r["sent"] for r in results),
        "transactions": transactions,
        "failed_transactions": sum(r["failed_transactions"] for r in results),
        "errors": sum(r["errors"] for r in results),
        "first_errors": [e for r in results for e in r["first_errors"]][:3],
        "seconds": elapsed,
        "records_per_s": records / elapsed,
        "mb_per_s": records * size / elapsed / MB,
        "transactions_per_s": transactions / elapsed,
        "latency_ms": Latency.of_seconds(delivery).all_ms(),
        "commit_latency_ms": Latency.of_seconds(commits).all_ms() if commits else None,
    }


def summarise_read_committed(
    sent: dict[str, Any], got: dict[str, Any], rate: int
) -> dict[str, Any]:
    """Values of one read_committed end-to-end row from the producer's and the consumer's
    results; the first ``rate`` records received (the first second) are warm-up."""
    lat = _seconds(got["latencies"])
    summary = Latency.of_seconds(lat[min(len(lat), rate) :])
    commits = Latency.of_seconds(_seconds(sent["commit_latencies"]))
    lags = Latency.of_seconds(_seconds(sent["schedule_lags"]))
    return {
        "rate": rate,
        "achieved_rate": sent["sent"] / sent["elapsed"] if sent["elapsed"] > 0 else 0.0,
        "sent": sent["sent"],
        "committed": sent["committed"],
        "transactions": sent["transactions"],
        "failed_transactions": sent["failed_transactions"],
        "errors": sent["errors"],
        "first_errors": sent["first_errors"],
        "received": got["received"],
        "measured": summary.count,
        "latency_ms": summary.tail_ms(),
        "commit_latency_ms": {"p50": commits.p50_ms, "p99": commits.p99_ms, "max": commits.max_ms},
        "schedule_lag_ms": {"p50": lags.p50_ms, "p99": lags.p99_ms, "max": lags.max_ms},
    }


# --- the rows ---------------------------------------------------------------------------------


def throughput_rows(bootstrap: str, seconds: float, producers: int, say: Say) -> list[Row]:
    """The idempotent row, then the transactional one (RF=3, 100 B, 3 partitions)."""
    rows: list[Row] = []
    for transactional in (False, True):
        kind = "transactional" if transactional else "idempotent"
        topic = f"txn-{kind}-{RECORD_BYTES}"
        create_topic(bootstrap, topic, PARTITIONS, 3, min_isr=2)
        args = [
            (
                bootstrap,
                topic,
                RECORD_BYTES,
                seconds,
                list(range(PARTITIONS)),
                RECORDS_PER_TRANSACTION,
                f"bench-txn-{i}" if transactional else "",
            )
            for i in range(producers)
        ]
        settled = settle()
        values = summarise_transactions(
            run_parallel(transactional_produce_worker, args), RECORD_BYTES
        )
        values.update(
            mode=kind,
            record_bytes=RECORD_BYTES,
            records_per_transaction=RECORDS_PER_TRANSACTION if transactional else None,
            partitions=PARTITIONS,
            producers=producers,
            settled=settled,
        )
        if transactional:
            workload = f"RF=3 transactions of {RECORDS_PER_TRANSACTION:,} × {RECORD_BYTES} B"
            note = (
                "begin, 1,000 produce(), commit_transaction() in a loop; records/s counts "
                "committed records; commit latency is the time commit_transaction() took "
                "(flushing what is queued, then EndTxn)"
            )
        else:
            workload = f"RF=3 idempotent {RECORD_BYTES} B"
            note = (
                "enable.idempotence=true, no transactions: the same records, settings and "
                "send loop as the transactional row (the baseline of its ratio)"
            )
        rows.append(Row("transactions", "tidelog", workload, values, note=note))
        commit = values["commit_latency_ms"]
        say(
            f"tidelog {workload}: {values['records']} records, "
            f"{values['records_per_s']:.0f} records/s ({values['mb_per_s']:.2f} MB/s), "
            f"{values['transactions_per_s']:.1f} transactions/s, errors {values['errors']}"
            + (
                f", commit p50 {commit['p50']:.1f} ms p99 {commit['p99']:.1f} ms "
                f"max {commit['max']:.1f} ms"
                if commit
                else ""
            )
        )
    return rows


def read_committed_e2e_rows(
    bootstrap: str,
    seconds: float,
    say: Say,
    rates: Sequence[tuple[int, int]] = E2E_RATES,
) -> list[Row]:
    """For each (records/s, records per transaction): a transactional producer at that
    rate and a read_committed consumer in another process (RF=3, 3 partitions, 100 B)."""
    rows: list[Row] = []
    for rate, per_txn in rates:
        topic = f"e2e-txn-{rate}-{per_txn}"
        create_topic(bootstrap, topic, PARTITIONS, 3, min_isr=2)
        total = int(rate * seconds)
        settled = settle()
        ctx = multiprocessing.get_context("spawn")
        with ctx.Pool(2) as pool:
            consumer = pool.apply_async(
                e2e_consumer_worker,
                (
                    bootstrap,
                    topic,
                    list(range(PARTITIONS)),
                    total,
                    E2E_DEADLINE_FACTOR * seconds + 90,
                    "read_committed",
                ),
            )
            time.sleep(3.0)  # the consumer process imports and joins before the first send
            producer = pool.apply_async(
                transactional_fixed_rate_producer,
                (
                    bootstrap,
                    topic,
                    list(range(PARTITIONS)),
                    rate,
                    seconds,
                    RECORD_BYTES,
                    per_txn,
                    f"bench-e2e-txn-{rate}-{per_txn}",
                ),
            )
            sent = producer.get(E2E_DEADLINE_FACTOR * seconds + 200)
            got = consumer.get(E2E_DEADLINE_FACTOR * seconds + 200)
        values = summarise_read_committed(sent, got, rate)
        values.update(records_per_transaction=per_txn, settled=settled)
        workload = f"RF=3 read_committed, transactions of {per_txn}, {rate} rec/s"
        rows.append(
            Row(
                "e2e",
                "tidelog",
                workload,
                values,
                note=(
                    f"a transactional producer begins a transaction of {per_txn} records "
                    f"every {1000 * per_txn / rate:.0f} ms, produces them, commits; "
                    "read_committed consumer; latency counts from each produce() call, so it "
                    "includes the commit and its markers; first second dropped as warm-up"
                ),
            )
        )
        lat = values["latency_ms"]
        commit = values["commit_latency_ms"]
        say(
            f"tidelog e2e {workload}: received {got['received']}/{sent['sent']} "
            f"(committed {sent['committed']}, {values['achieved_rate']:.0f} rec/s achieved), "
            f"p50 {lat['p50']:.1f} ms p99 {lat['p99']:.1f} ms max {lat['max']:.1f} ms "
            f"(commit p50 {commit['p50']:.1f} ms p99 {commit['p99']:.1f} ms; transactions "
            f"started late by up to {values['schedule_lag_ms']['max']:.0f} ms)"
        )
    return rows
