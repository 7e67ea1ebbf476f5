"""``exactlyOnce`` end to end: a streaming copy tidelog -> tidelog on a real three-broker
cluster (ZooKeeper, RF 3, min.insync.replicas 2), with real failures, checked with a
read_committed confluent-kafka consumer: every source record is in the sink exactly once.

The query runs in a driver process of its own (``exactly_once_job.py``, ``local[2,4]`` so
Spark retries failed tasks), so that the test can SIGKILL it, its Python workers, or a
broker, each by PID:

1. The first attempt of one write task SIGKILLs its own Python worker right after its
   records are written (in its open transaction). Mid-run, the leader of a sink partition
   is SIGKILLed. Once a live sink partition holds records of an open transaction, every
   Python worker of the driver is SIGKILLed too: the tasks running then die, wherever they
   were. Spark retries the tasks, and the retries fence and abort the transactions of the
   failed attempts (the records they hold never become visible).
2. The driver is SIGKILLed inside the sink's ``commit`` of a micro-batch, before any of
   its transactions is committed (``before``) or after all are (``after``), and the query
   is restarted from its checkpoint: Spark replays that micro-batch; its tasks rewrite
   (``before``) or find their transactions committed and write nothing (``after``).

Run with ``-s`` to see the figures. Those two are marked ``slow`` (a cluster and one or two
Spark drivers each: 40-90 s apiece on this 2-core machine). Two quick ones use the shared
SparkSession and single broker: a stream with no failure (every transaction committed,
nothing aborted) and batch writes, which ``exactlyOnce`` makes all or nothing.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.harness import BrokerCluster, BrokerProcess, wait_until
from tests.integration.cluster.helpers import create_topic
from tests.spark.conftest import unique
from tidelog.client import READ_COMMITTED, READ_UNCOMMITTED, BlockingClient
from tidelog.errors import ErrorCode
from tidelog.model import TopicPartition
from tidelog.protocol.list_offsets import LATEST_TIMESTAMP

confluent_kafka = pytest.importorskip("confluent_kafka")
pytest.importorskip("pyspark")

pytestmark = [pytest.mark.spark, pytest.mark.integration]

JOB = Path(__file__).with_name("exactly_once_job.py")
REPO = Path(__file__).resolve().parents[2]
PARTITIONS = 3
RECORDS = 3000
MAX_OFFSETS_PER_TRIGGER = 300
JOB_TIMEOUT_S = 900.0


# --- processes -------------------------------------------------------------------------------


def _children() -> dict[int, list[int]]:
    """ppid -> pids, from /proc."""
    out: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # "pid (comm) state ppid ...": comm may hold spaces and parentheses.
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        out.setdefault(ppid, []).append(int(entry.name))
    return out


def _descendants(pid: int) -> list[int]:
    tree = _children()
    found, todo = [], [pid]
    while todo:
        for child in tree.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def _cmdline(pid: int) -> str:
    try:
        return (Path("/proc") / str(pid) / "cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


class Job:
    """``exactly_once_job.py`` as a subprocess; its stdout lines are collected."""

    def __init__(
        self, bootstrap: str, source: str, sink: str, checkpoint: Path, log: Path, **env: str
    ) -> None:
        self.log = log
        self.lines: list[str] = []
        environment = {
            **os.environ,
            "PYSPARK_PYTHON": sys.executable,
            "PYSPARK_DRIVER_PYTHON": sys.executable,
            **env,
        }
        self.stderr = log.open("ab")
        self.process = subprocess.Popen(
            [
                sys.executable,
                str(JOB),
                bootstrap,
                source,
                sink,
                str(checkpoint),
                str(MAX_OFFSETS_PER_TRIGGER),
            ],
            cwd=REPO,
            env=environment,
            stdout=subprocess.PIPE,
            stderr=self.stderr,
        )
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for raw in self.process.stdout:
            self.lines.append(raw.decode(errors="replace").rstrip("\n"))

    def tagged(self, tag: str) -> list[dict[str, Any]]:
        return [json.loads(line[len(tag) + 1 :]) for line in self.lines if line.startswith(tag)]

    def batches_with_input(self) -> int:
        return sum(1 for p in self.tagged("PROGRESS") if p["rows"] > 0)

    def query_id(self) -> str:
        wait_until(lambda: self.tagged("QUERY") or self.failed(), 300, "the query to start")
        self.check_alive()
        return str(self.tagged("QUERY")[0]["id"])

    def failed(self) -> bool:
        return self.process.poll() not in (None, 0)

    def check_alive(self) -> None:
        if self.failed():
            raise AssertionError(f"the job exited with {self.process.returncode}; see {self.log}")

    def python_workers(self) -> list[int]:
        """The Python workers Spark forked from its pyspark.daemon process (forks keep
        the daemon's command line: workers are those whose parent has it too)."""
        daemon = {p for p in _descendants(self.process.pid) if "pyspark.daemon" in _cmdline(p)}
        tree = _children()
        return sorted(c for d in daemon for c in tree.get(d, []) if c in daemon)

    def kill(self) -> None:
        """SIGKILL the driver and everything it started, each by PID."""
        for pid in [self.process.pid, *_descendants(self.process.pid)]:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        self.process.wait(30)
        self._close()

    def _close(self) -> None:
        self._reader.join(10)
        if self.process.stdout is not None:
            self.process.stdout.close()
        self.stderr.close()

    def wait(self) -> dict[str, Any]:
        """Until the job ends by itself; its RESULT."""
        try:
            self.process.wait(JOB_TIMEOUT_S)
        finally:
            self._close()
        results = self.tagged("RESULT")
        assert self.process.returncode == 0, (
            f"the job exited with {self.process.returncode}; see {self.log}"
        )
        assert results, f"the job printed no RESULT; see {self.log}"
        assert results[0]["error"] is None, results[0]["error"]
        return results[0]


# --- topics ----------------------------------------------------------------------------------


@pytest.fixture
def cluster(tmp_path: Path, zk_connect: str) -> Iterator[BrokerCluster]:
    overrides = {"transaction.state.log.num.partitions": "5"}
    started = BrokerCluster(tmp_path / "cluster", zk_connect, overrides=overrides).start()
    try:
        yield started
    finally:
        started.stop()


def _topic(cluster: BrokerCluster, prefix: str) -> str:
    name = unique(prefix)
    create_topic(cluster, name, PARTITIONS, config={"min.insync.replicas": "2"})
    for p in range(PARTITIONS):
        wait_until(lambda p=p: len(cluster.partition(name, p).isr) == 3, 60, f"{name}-{p} ISR")
    return name


def _fill(bootstrap: str, topic: str) -> list[bytes]:
    """RECORDS records, key = value (unique), acks=all."""
    producer = confluent_kafka.Producer(
        {"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5}
    )
    values = [b"v%05d" % i for i in range(RECORDS)]
    errors: list[Any] = []
    for value in values:
        producer.produce(topic, value, key=value, on_delivery=lambda e, _m: e and errors.append(e))
    assert producer.flush(120) == 0
    assert not errors, errors[:3]
    return values


def _ends(bootstrap: str, topic: str) -> dict[int, tuple[int, int]]:
    """partition -> (last stable offset, high watermark), from the partitions' leaders
    (those whose leader answers)."""
    tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]
    out: dict[int, tuple[int, int]] = {}
    with BlockingClient(bootstrap, request_timeout_s=5.0) as client:
        client.metadata([topic])
        for tp in tps:
            try:
                lso = client.list_offsets({tp: LATEST_TIMESTAMP}, isolation_level=READ_COMMITTED)
                hw = client.list_offsets({tp: LATEST_TIMESTAMP}, isolation_level=READ_UNCOMMITTED)
            except Exception:  # a dead leader: skip the partition
                continue
            if lso[tp].error_code == ErrorCode.NONE and hw[tp].error_code == ErrorCode.NONE:
                out[tp.partition] = (lso[tp].offset, hw[tp].offset)
    return out


def _open_transaction(bootstrap: str, topic: str) -> bool:
    """Some partition holds records of a transaction still open (LSO < HW)."""
    return any(lso < hw for lso, hw in _ends(bootstrap, topic).values())


def _read(bootstrap: str, topic: str, isolation: str, timeout: float = 120.0) -> list[bytes]:
    """Every record a confluent-kafka consumer with ``isolation`` reads, from the start to
    the end of each partition (the LSO for read_committed)."""
    consumer = confluent_kafka.Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": unique("eo-reader"),
            "enable.auto.commit": False,
            "isolation.level": isolation,
            "enable.partition.eof": True,
        }
    )
    consumer.assign([confluent_kafka.TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    got: list[bytes] = []
    at_end: set[int] = set()
    try:

        def done() -> bool:
            for msg in consumer.consume(1000, 0.5):
                err = msg.error()
                if err is None:
                    got.append(msg.value())
                    at_end.discard(msg.partition())
                elif err.code() == confluent_kafka.KafkaError._PARTITION_EOF:
                    at_end.add(msg.partition())
                else:
                    raise AssertionError(f"consumer error: {err}")
            return len(at_end) == PARTITIONS

        wait_until(done, timeout, f"the end of {topic} ({isolation})")
    finally:
        consumer.close()
    return got


def _check_exactly_once(bootstrap: str, sink: str, source_values: list[bytes]) -> int:
    """The sink, read_committed, holds each source value once; returns the number of data
    records in its log (read_uncommitted: aborted ones included)."""
    # Every transaction ended: the LSO of each partition reached its high watermark.
    wait_until(
        lambda: (ends := _ends(bootstrap, sink)) and all(lso == hw for lso, hw in ends.values()),
        120,
        f"no open transaction in {sink}",
    )
    committed = Counter(_read(bootstrap, sink, "read_committed"))
    duplicated = sorted(v for v, n in committed.items() if n > 1)
    missing = sorted(set(source_values) - set(committed))
    unexpected = sorted(set(committed) - set(source_values))
    assert not duplicated, f"{len(duplicated)} values twice or more, e.g. {duplicated[:5]}"
    assert not missing, f"{len(missing)} values missing, e.g. {missing[:5]}"
    assert not unexpected, unexpected[:5]
    return len(_read(bootstrap, sink, "read_uncommitted"))


# --- tests -----------------------------------------------------------------------------------


@pytest.mark.slow
def test_leader_sigkill_and_python_worker_kills_mid_batch(
    cluster: BrokerCluster, tmp_path: Path
) -> None:
    bootstrap = cluster.bootstrap
    source, sink = _topic(cluster, "eo-source"), _topic(cluster, "eo-sink")
    values = _fill(bootstrap, source)
    started = time.monotonic()
    # Task 0 of micro-batch 1 dies (SIGKILL of its Python worker, by itself) right after
    # writing its records: a partial micro-batch at a known point.
    job = Job(
        bootstrap,
        source,
        sink,
        tmp_path / "checkpoint",
        tmp_path / "job.log",
        TIDELOG_TEST_KILL_TASK="1:0",
    )
    try:
        job.query_id()
        wait_until(
            lambda: job.check_alive() or job.batches_with_input() >= 2, 300, "two micro-batches"
        )
        victim_partition = 0
        victim = cluster.partition(sink, victim_partition).leader_id
        cluster.broker(victim).kill()
        killed_broker_at = time.monotonic()
        # Tasks writing to the dead leader's partition now retry; once a live partition
        # holds records of an open transaction (a task wrote part of its rows), kill
        # every Python worker: the tasks running in them die part way.
        with contextlib.suppress(AssertionError):
            wait_until(lambda: _open_transaction(bootstrap, sink), 30, "an open transaction")
        open_at_kill = _open_transaction(bootstrap, sink)
        workers = job.python_workers()
        for pid in workers:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        killed_workers_at = time.monotonic()
        result = job.wait()
    finally:
        if job.process.poll() is None:
            job.kill()
    elapsed = time.monotonic() - started
    assert result["rows"] == RECORDS
    in_log = _check_exactly_once(bootstrap, sink, values)
    print(
        f"\nexactly-once with failures: {RECORDS} records in {len(result['batches'])} "
        f"micro-batches in {elapsed:.0f}s; broker {victim} (leader of {sink}-"
        f"{victim_partition}) SIGKILLed {killed_broker_at - started:.0f}s in, "
        f"{len(workers)} Python workers SIGKILLed {killed_workers_at - killed_broker_at:.1f}s "
        f"later (an open transaction was {'' if open_at_kill else 'not '}seen then); "
        f"{result['failed_task_attempts']} failed task attempts; the sink log holds "
        f"{in_log} data records, {in_log - RECORDS} of them in aborted transactions; "
        f"read_committed: each source record once"
    )
    assert workers, "no Python worker was found to kill"
    # At least the self-killed attempt failed, and its records were written, then aborted.
    assert result["failed_task_attempts"] >= 1
    assert in_log > RECORDS


@pytest.mark.slow
@pytest.mark.parametrize("when", ["before", "after"])
def test_driver_killed_around_the_commit_then_restarted(
    cluster: BrokerCluster, tmp_path: Path, when: str
) -> None:
    bootstrap = cluster.bootstrap
    source, sink = _topic(cluster, "eo-source"), _topic(cluster, "eo-sink")
    values = _fill(bootstrap, source)
    checkpoint = tmp_path / "checkpoint"
    marker = tmp_path / "in-commit.json"
    crash_batch = 2
    first = Job(
        bootstrap,
        source,
        sink,
        checkpoint,
        tmp_path / "job1.log",
        TIDELOG_TEST_CRASH=f"{when}:{crash_batch}:{marker}",
    )
    try:
        query_id = first.query_id()
        wait_until(
            lambda: first.check_alive() or marker.exists(), 600, "the commit of micro-batch 2"
        )
        in_commit = json.loads(marker.read_text())
        assert in_commit["batch"] == crash_batch
        assert in_commit["transactions"], "micro-batch 2 wrote nothing"
        if when == "before":
            # The batch's records are in the log, invisible to read_committed.
            assert _open_transaction(bootstrap, sink)
        else:
            wait_until(lambda: not _open_transaction(bootstrap, sink), 60, "the markers")
    finally:
        first.kill()
    ends = _ends(bootstrap, sink)
    written_before = sum(hw for _lso, hw in ends.values())
    second = Job(bootstrap, source, sink, checkpoint, tmp_path / "job2.log")
    try:
        assert second.query_id() == query_id  # the checkpoint's query: the same ids
        result = second.wait()
    finally:
        if second.process.poll() is None:
            second.kill()
    # Spark recorded micro-batches 0 and 1, not 2 (its commit never returned): the
    # restart replays 2 and goes on from there.
    assert result["rows"] == RECORDS - crash_batch * MAX_OFFSETS_PER_TRIGGER
    in_log = _check_exactly_once(bootstrap, sink, values)
    # "before": micro-batch 2 was written twice, the first copy aborted by the replay's
    # tasks; "after": it was written once, the replay's tasks found their transactions
    # committed and wrote nothing.
    rewritten = MAX_OFFSETS_PER_TRIGGER if when == "before" else 0
    assert in_log == RECORDS + rewritten
    print(
        f"\ndriver SIGKILLed {when} committing micro-batch {crash_batch} "
        f"({len(in_commit['transactions'])} transactions; {written_before} log offsets "
        f"then, markers included); the restart (same query id) read {result['rows']} "
        f"records; the sink log holds {in_log} data records; read_committed: each source "
        "record once"
    )


# --- quick: the shared SparkSession (local[2]) and single broker ------------------------------


def _produce_keyed(bootstrap: str, topic: str, n: int) -> list[bytes]:
    from tests.spark.conftest import produce
    from tidelog.client import Record

    values = [b"q%05d" % i for i in range(n)]
    for p in range(2):
        produce(bootstrap, topic, p, [Record(value=v, key=v) for v in values[p::2]])
    return values


def _read_spark(spark: Any, bootstrap: str, topic: str, isolation: str) -> list[bytes]:
    return [
        bytes(r.value)
        for r in spark.read.format("tidelog")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("kafka.isolation.level", isolation)
        .load()
        .select("value")
        .collect()
    ]


def test_exactly_once_stream_without_failures(
    spark: Any, broker: BrokerProcess, tmp_path: Path
) -> None:
    from tests.spark.conftest import create_topic as create_local_topic

    bootstrap = broker.bootstrap
    source = create_local_topic(bootstrap, unique("eo-q-source"), 2)
    sink = create_local_topic(bootstrap, unique("eo-q-sink"), 2)
    values = _produce_keyed(bootstrap, source, 600)
    query = (
        spark.readStream.format("tidelog")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", source)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", "200")
        .load()
        .select("key", "value")
        .writeStream.format("tidelog")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("topic", sink)
        .option("exactlyOnce", "true")
        .option("transactionalIdPrefix", "eo-quick")
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(300)
    assert query.exception() is None, query.exception()
    assert [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]] == [200] * 3
    committed = _read_spark(spark, bootstrap, sink, "read_committed")
    assert sorted(committed) == values
    # Nothing was aborted or written twice: the log holds exactly these records.
    assert len(_read_spark(spark, bootstrap, sink, "read_uncommitted")) == len(values)
    # One transactional id per micro-batch and write task, named after the query.
    txn_id = f"eo-quick-{query.id}-2-1"
    with BlockingClient(bootstrap) as client:
        coordinator = client.find_coordinator(txn_id)
        (described,) = client.describe_transactions([txn_id], node_id=coordinator.node_id)
    assert described.state == "CompleteCommit"


def test_exactly_once_batch_writes_are_all_or_nothing(spark: Any, broker: BrokerProcess) -> None:
    from tests.spark.conftest import create_topic as create_local_topic

    bootstrap = broker.bootstrap
    topic = create_local_topic(bootstrap, unique("eo-batch"), 2)

    def write(rows: list[tuple[str, int | None]]) -> None:
        (
            spark.createDataFrame(rows, "value string, partition int")
            .repartition(2)
            .write.format("tidelog")
            .option("kafka.bootstrap.servers", bootstrap)
            .option("topic", topic)
            .option("exactlyOnce", "true")
            .mode("append")
            .save()
        )

    # One row names a partition the topic lacks: its task fails, so the job does; the
    # rows of the other task never become visible.
    bad = [(f"bad-{i:03d}", None) for i in range(200)] + [("boom", 7)]
    with pytest.raises(Exception, match="partition 7"):
        write(bad)
    good = [(f"good-{i:03d}", None) for i in range(200)]
    write(good)
    wait_until(lambda: not _open_transaction_local(bootstrap, topic), 60, "no open transaction")
    committed = sorted(_read_spark(spark, bootstrap, topic, "read_committed"))
    assert committed == sorted(v.encode() for v, _ in good)


def _open_transaction_local(bootstrap: str, topic: str) -> bool:
    latest = dict.fromkeys([TopicPartition(topic, p) for p in range(2)], LATEST_TIMESTAMP)
    with BlockingClient(bootstrap) as client:
        lso = client.list_offsets(latest, isolation_level=READ_COMMITTED)
        hw = client.list_offsets(latest, isolation_level=READ_UNCOMMITTED)
    return any(lso[tp].offset < hw[tp].offset for tp in latest)
