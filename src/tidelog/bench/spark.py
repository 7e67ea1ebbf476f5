"""``--only spark``: the Spark connector (``tidelog.spark``) beside the plain clients, on one
3-broker cluster (topics RF 3, min.insync.replicas 2, writes acks=all), 100-byte values.

Rows (issue 31 point 1), each with the plain client's figure and the ratio to it:

- batch read, rows/s per executor core: ``spark.read.format("tidelog")`` of a
  one-partition topic on ``local[1]`` into Spark's ``noop`` sink (every column of every
  row reaches the JVM), warm (the second of two runs); beside it the executor's read path
  alone (``read_range`` into Arrow, in this process) and a confluent-kafka ``Consumer``
  in one process (8 MiB partition fetches, as the connector's) building the same Arrow
  columns from its messages.
- batch write, rows/s: a cached ``spark.range`` of 100-byte values written by
  ``df.write.format("tidelog")`` on ``local[1]`` to a 3-partition topic; beside it a
  confluent-kafka ``Producer`` in one process (acks=all, linger.ms 5).
- streaming end-to-end latency, produce (the record's CreateTime) to ``foreachBatch``,
  p50/p99, at a fixed rate; beside it a confluent-kafka consumer in one process
  (produce to poll).

Needs the spark extra (pyspark, pyarrow) and the bench extra (confluent-kafka). The
Spark session is this interpreter's (``PYSPARK_PYTHON``); its JVM is stopped by its PID.
"""

# pyspark and confluent-kafka load when the section runs.
# ruff: noqa: PLC0415

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Final

from tidelog.bench import tidelog_rows
from tidelog.bench.common import Latency, Row, remove_data
from tidelog.bench.launch import ClusterFactory

VALUE_BYTES: Final = 100
#: Rows a read or write row moves (``quick``: a fifth).
ROWS: Final = 1_000_000
#: The streaming rows' produce rate (rows/s) and duration.
E2E_RATE: Final = 1000
E2E_SECONDS: Final = 20.0
_SECTION: Final = "spark"


def _ratio(ours: float, theirs: float) -> float | None:
    return round(ours / theirs, 3) if theirs else None


def spark_rows(
    launch: ClusterFactory, work: Path, say: Callable[[str], None], *, quick: bool
) -> list[Row]:
    rows_n = ROWS // 5 if quick else ROWS
    e2e_s = E2E_SECONDS / 4 if quick else E2E_SECONDS
    cluster = tidelog_rows.start_cluster(launch, work / "spark-cluster")
    try:
        bootstrap = cluster.bootstrap_servers
        for name, partitions in (("read", 1), ("plain-write", 3), ("spark-write", 3)):
            tidelog_rows.create_topic(bootstrap, name, partitions, 3, min_isr=2)
        for name in ("e2e-spark", "e2e-plain"):
            tidelog_rows.create_topic(bootstrap, name, 1, 3, min_isr=2)
        plain_write = plain_produce(bootstrap, "plain-write", rows_n)
        say(f"plain producer: {plain_write['rows_per_s']:.0f} rows/s")
        plain_produce(bootstrap, "read", rows_n)
        plain_read = plain_consume(bootstrap, "read", rows_n)
        say(f"plain consumer into Arrow: {plain_read['rows_per_s']:.0f} rows/s")
        executor = executor_read(bootstrap, "read", rows_n)
        say(f"executor read path into Arrow: {executor['rows_per_s']:.0f} rows/s")
        with spark_session(work / "spark-warehouse") as spark:
            spark_read = connector_read(spark, bootstrap, "read", rows_n, say)
            spark_write = connector_write(spark, bootstrap, "spark-write", rows_n, say)
            spark_e2e = connector_e2e(
                spark, bootstrap, "e2e-spark", seconds=e2e_s, work=work, say=say
            )
        plain_e2e = plain_end_to_end(bootstrap, "e2e-plain", e2e_s)
        say(f"plain e2e: {plain_e2e['latency_ms']}")
    finally:
        cluster.stop()
        remove_data(work / "spark-cluster")
    note = "local[1], 3 brokers RF 3 min.insync.replicas 2, 100-byte values"
    return [
        Row(
            _SECTION,
            "tidelog",
            "connector batch read rows/s per executor core",
            {
                **spark_read,
                "executor_path": executor,
                "plain_consumer": plain_read,
                "ratio_to_plain": _ratio(spark_read["rows_per_s"], plain_read["rows_per_s"]),
                "executor_ratio_to_plain": _ratio(executor["rows_per_s"], plain_read["rows_per_s"]),
            },
            note=note + "; read_committed; Spark's noop sink",
        ),
        Row(
            _SECTION,
            "tidelog",
            "connector batch write rows/s",
            {
                **spark_write,
                "plain_producer": plain_write,
                "ratio_to_plain": _ratio(spark_write["rows_per_s"], plain_write["rows_per_s"]),
            },
            note=note + "; acks=all, 3-partition topic",
        ),
        Row(
            _SECTION,
            "tidelog",
            f"streaming e2e latency at {E2E_RATE} rows/s (produce to foreachBatch)",
            {**spark_e2e, "plain_consumer": plain_e2e},
            note=note + "; processing-time trigger 0 s",
        ),
    ]


def markdown(rows: list[dict[str, Any]]) -> list[str]:
    """The section's table for the report: the connector, the plain client, the ratio."""
    out = [
        "## Spark connector beside the plain clients (local[1], 100-byte values)",
        "",
        "| row | connector | plain client | ratio | load |",
        "|---|---:|---:|---:|---|",
    ]
    for r in rows:
        v = r["values"]
        load = " ".join(f"{x:.2f}" for x in r.get("load_average", []))
        if "latency_ms" in v:
            ours, theirs = v["latency_ms"], v["plain_consumer"]["latency_ms"]
            out.append(
                f"| {r['workload']} | p50 {ours['p50']} ms, p99 {ours['p99']} ms "
                f"| p50 {theirs['p50']} ms, p99 {theirs['p99']} ms | | {load} |"
            )
            continue
        plain = v.get("plain_consumer") or v.get("plain_producer") or {}
        out.append(
            f"| {r['workload']} | {v['rows_per_s']:,} | {plain.get('rows_per_s', 0):,} "
            f"| {v.get('ratio_to_plain')} | {load} |"
        )
        if "executor_path" in v:
            out.append(
                f"| executor read path alone, into Arrow | {v['executor_path']['rows_per_s']:,} "
                f"| {plain.get('rows_per_s', 0):,} | {v.get('executor_ratio_to_plain')} "
                f"| {load} |"
            )
    out.append("")
    return out


# --- the plain clients ----------------------------------------------------------------------


def _value(i: int) -> bytes:
    return (b"%010d" % i).ljust(VALUE_BYTES, b"x")


def plain_produce(bootstrap: str, topic: str, rows: int) -> dict[str, Any]:
    """A confluent-kafka Producer in one process: ``rows`` values, acks=all."""
    from confluent_kafka import Producer

    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": "all",
            "linger.ms": 5,
            "queue.buffering.max.messages": 1_000_000,
        }
    )
    values = [_value(i) for i in range(1000)]
    start = time.perf_counter()
    cpu = time.process_time()
    for i in range(rows):
        while True:
            try:
                producer.produce(topic, values[i % 1000])
                break
            except BufferError:
                producer.poll(0.005)
    left = producer.flush(120)
    elapsed = time.perf_counter() - start
    if left:
        raise RuntimeError(f"{left} records not acknowledged")
    return {
        "rows": rows,
        "seconds": round(elapsed, 3),
        "rows_per_s": round(rows / elapsed),
        "cpu_s": round(time.process_time() - cpu, 3),
    }


def plain_consume(bootstrap: str, topic: str, rows: int) -> dict[str, Any]:
    """A confluent-kafka Consumer in one process: partition 0 from offset 0, read_committed,
    each ``consume`` call's messages built into the connector's Arrow columns."""
    import pyarrow as pa
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"bench-{os.getpid()}",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
            # The connector's fetch size (its fetch.max.bytes, 8 MiB a partition).
            "max.partition.fetch.bytes": 8 << 20,
        }
    )
    consumer.assign([TopicPartition(topic, 0, 0)])
    got = 0
    start = time.perf_counter()
    cpu = time.process_time()
    try:
        while got < rows:
            messages = [m for m in consumer.consume(10_000, 5.0) if m.error() is None]
            if not messages:
                continue
            pa.RecordBatch.from_arrays(
                [
                    pa.array([m.key() for m in messages], pa.binary()),
                    pa.array([m.value() for m in messages], pa.binary()),
                    pa.array([m.offset() for m in messages], pa.int64()),
                    pa.array([m.timestamp()[1] * 1000 for m in messages], pa.int64()),
                ],
                names=["key", "value", "offset", "timestamp"],
            )
            got += len(messages)
        elapsed = time.perf_counter() - start
    finally:
        consumer.close()
    return {
        "rows": got,
        "seconds": round(elapsed, 3),
        "rows_per_s": round(got / elapsed),
        "cpu_s": round(time.process_time() - cpu, 3),
    }


def plain_end_to_end(bootstrap: str, topic: str, seconds: float) -> dict[str, Any]:
    """Produce at ``E2E_RATE`` for ``seconds`` while a consumer in the same process polls:
    latency = poll time - CreateTime."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"bench-e2e-{os.getpid()}",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
            "fetch.wait.max.ms": 100,
        }
    )
    consumer.assign([TopicPartition(topic, 0, 0)])
    latencies: list[float] = []
    done = threading.Event()
    sender = threading.Thread(target=_send_at_rate, args=(bootstrap, topic, seconds, done))
    sender.start()
    try:
        while not done.is_set() or consumer.position([TopicPartition(topic, 0)]):
            message = consumer.poll(0.5)
            if message is None:
                if done.is_set():
                    break
                continue
            if message.error() is None:
                latencies.append(time.time() - message.timestamp()[1] / 1000)
    finally:
        sender.join()
        consumer.close()
    return _latency(latencies)


def _latency(latencies: list[float]) -> dict[str, Any]:
    summary = Latency.of_seconds(latencies)
    return {
        "rows": summary.count,
        "latency_ms": {k: round(v, 1) for k, v in summary.tail_ms().items()},
    }


def _send_at_rate(bootstrap: str, topic: str, seconds: float, done: threading.Event) -> None:
    """``E2E_RATE`` rows/s for ``seconds`` (acks=all, linger.ms 0), then ``done``."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 0})
    start = time.perf_counter()
    sent = 0
    try:
        while (now := time.perf_counter() - start) < seconds:
            due = int(now * E2E_RATE)
            while sent < due:
                producer.produce(topic, _value(sent))
                sent += 1
            producer.poll(0)
            time.sleep(0.001)
        producer.flush(30)
    finally:
        done.set()


# --- the connector ---------------------------------------------------------------------------


def executor_read(bootstrap: str, topic: str, rows: int) -> dict[str, Any]:
    """The executors' read path alone: ``read_range`` of the whole partition into Arrow."""
    from pyspark.sql.pandas.types import to_arrow_schema

    from tidelog.model import TopicPartition
    from tidelog.spark.options import parse_read_options
    from tidelog.spark.read_loop import read_range
    from tidelog.spark.source import read_schema

    options = parse_read_options(
        {"kafka.bootstrap.servers": bootstrap, "subscribe": topic}, streaming=False
    )
    schema = to_arrow_schema(read_schema(False), timezone="UTC")
    got = 0
    start = time.perf_counter()
    cpu = time.process_time()
    for batch in read_range(options, TopicPartition(topic, 0), 0, rows, schema):
        got += batch.num_rows
    elapsed = time.perf_counter() - start
    return {
        "rows": got,
        "seconds": round(elapsed, 3),
        "rows_per_s": round(got / elapsed),
        "cpu_s": round(time.process_time() - cpu, 3),
    }


@contextmanager
def spark_session(warehouse: Path) -> Iterator[Any]:
    """A ``local[1]`` SparkSession with the tidelog format registered; its JVM is stopped
    by its PID at the end."""
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    from pyspark import SparkContext
    from pyspark.sql import SparkSession

    import tidelog.spark

    session = (
        SparkSession.builder.master("local[1]")
        .appName("tidelog-bench")
        .config("spark.ui.enabled", "false")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.sql.shuffle.partitions", "1")
        .config("spark.sql.warehouse.dir", str(warehouse))
        .config("spark.log.level", "WARN")
        .getOrCreate()
    )
    tidelog.spark.register(session)
    proc = getattr(SparkContext._gateway, "proc", None)
    try:
        yield session
    finally:
        session.stop()
        if proc is not None and proc.poll() is None:
            proc.terminate()  # by PID: the JVM this session started
            try:
                proc.wait(30)
            except Exception:
                proc.kill()
                proc.wait(10)


def connector_read(
    spark: Any, bootstrap: str, topic: str, rows: int, say: Callable[[str], None]
) -> dict[str, Any]:
    """Two batch reads of the topic into the noop sink; the second (warm) is the figure."""
    runs = []
    for _ in range(2):
        frame = (
            spark.read.format("tidelog")
            .option("kafka.bootstrap.servers", bootstrap)
            .option("subscribe", topic)
            .load()
        )
        start = time.perf_counter()
        frame.write.format("noop").mode("overwrite").save()
        runs.append(time.perf_counter() - start)
        say(f"connector batch read of {rows} rows: {runs[-1]:.2f} s")
    return {
        "rows": rows,
        "seconds": [round(s, 3) for s in runs],
        "rows_per_s": round(rows / runs[-1]),
    }


def connector_write(
    spark: Any, bootstrap: str, topic: str, rows: int, say: Callable[[str], None]
) -> dict[str, Any]:
    """A cached frame of 100-byte values written to ``topic`` (acks=all) twice; the second
    (warm: the first of a session starts Spark's Python workers) is the figure."""
    frame = spark.range(rows).selectExpr(
        f"cast(rpad(lpad(cast(id as string), 10, '0'), {VALUE_BYTES}, 'x') as binary) as value"
    )
    frame = frame.cache()
    frame.count()
    runs = []
    for _ in range(2):
        start = time.perf_counter()
        (
            frame.write.format("tidelog")
            .mode("append")
            .option("kafka.bootstrap.servers", bootstrap)
            .option("topic", topic)
            .save()
        )
        runs.append(time.perf_counter() - start)
        say(f"connector batch write of {rows} rows: {runs[-1]:.2f} s")
    frame.unpersist()
    return {
        "rows": rows,
        "seconds": [round(s, 3) for s in runs],
        "rows_per_s": round(rows / runs[-1]),
    }


def connector_e2e(
    spark: Any,
    bootstrap: str,
    topic: str,
    *,
    seconds: float,
    work: Path,
    say: Callable[[str], None],
) -> dict[str, Any]:
    """A streaming query from the latest offsets while rows are produced at ``E2E_RATE``:
    latency = the time ``foreachBatch`` sees a row - its CreateTime."""
    latencies: list[float] = []

    def each(frame: Any, _batch_id: int) -> None:
        stamps = frame.select("timestamp").toArrow().column(0)
        now = time.time()
        latencies.extend(now - t.timestamp() for t in stamps.to_pylist())

    query = (
        spark.readStream.format("tidelog")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", "latest")
        .load()
        .writeStream.foreachBatch(each)
        .option("checkpointLocation", str(work / "spark-e2e-checkpoint"))
        .trigger(processingTime="0 seconds")
        .start()
    )
    try:
        while query.lastProgress is None:  # the first (empty) micro-batch pins "latest"
            time.sleep(0.2)
        done = threading.Event()
        _send_at_rate(bootstrap, topic, seconds, done)
        deadline = time.monotonic() + 60
        while len(latencies) < int(seconds * E2E_RATE) and time.monotonic() < deadline:
            time.sleep(0.2)
        progress = query.recentProgress
    finally:
        query.stop()
    result = _latency(latencies)
    # Where a micro-batch's time goes (Spark's progress: latestOffset, queryPlanning,
    # addBatch, walCommit, ...), averaged over the batches that read rows.
    busy = [dict(p["durationMs"]) for p in progress if p["numInputRows"]]
    if busy:
        result["micro_batches"] = len(busy)
        result["duration_ms_avg"] = {
            k: round(sum(d.get(k, 0) for d in busy) / len(busy), 1)
            for k in sorted({k for d in busy for k in d})
        }
    say(f"connector streaming e2e: {result['latency_ms']} over {result['rows']} rows")
    return result
