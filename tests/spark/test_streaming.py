"""Streaming reads and writes through ``tidelog``: checkpoints, admission control,
AvailableNow, new partitions, data loss, a broker killed mid-query."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest

from tests.harness import BrokerProcess
from tests.spark.conftest import (
    create_partitions,
    create_topic,
    produce,
    read_all,
    unique,
)
from tidelog.client import BlockingClient, Record, build_batch
from tidelog.errors import ErrorCode
from tidelog.model import TopicPartition

pytestmark = [pytest.mark.spark, pytest.mark.integration]


def stream(spark: Any, bootstrap: str, topic: str, **options: str) -> Any:
    reader = (
        spark.readStream.format("tidelog")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
    )
    for k, v in options.items():
        reader = reader.option(k, v)
    return reader.load()


def values(records: list[Any]) -> list[bytes]:
    return [r.value for r in records]


def run_available_now(df: Any, out: Path, checkpoint: Path) -> Any:
    query = (
        df.selectExpr("CAST(value AS STRING) AS value", "partition", "offset")
        .writeStream.format("parquet")
        .option("path", str(out))
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(300)
    assert query.exception() is None
    return query


def test_restart_from_checkpoint_no_loss_no_duplicates(
    spark: Any, broker: BrokerProcess, tmp_path: Path
) -> None:
    """A query stopped mid-stream and restarted from its checkpoint (twice, with new data
    and a new partition in between) writes each record exactly once, even with batches
    limited by maxOffsetsPerTrigger."""
    topic = create_topic(broker.bootstrap, unique("restart"), partitions=2)
    for p in range(2):
        produce(broker.bootstrap, topic, p, [Record(f"a{p}-{i}".encode()) for i in range(150)])
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"
    df = stream(
        spark, broker.bootstrap, topic, startingOffsets="earliest", maxOffsetsPerTrigger="70"
    )

    # Run 1: a processing-time query, stopped while there is still backlog.
    query = (
        df.selectExpr("CAST(value AS STRING) AS value", "partition", "offset")
        .writeStream.format("parquet")
        .option("path", str(out))
        .option("checkpointLocation", str(checkpoint))
        .trigger(processingTime="200 milliseconds")
        .start()
    )
    deadline = time.monotonic() + 120
    while not query.recentProgress or sum(p["numInputRows"] for p in query.recentProgress) == 0:
        assert time.monotonic() < deadline, "no batch ran"
        assert query.exception() is None
        time.sleep(0.2)
    query.stop()
    first_run = sum(p["numInputRows"] for p in query.recentProgress)
    assert first_run > 0

    # More data and a new partition while the query is down.
    create_partitions(broker.bootstrap, topic, 3)
    for p in range(3):
        produce(broker.bootstrap, topic, p, [Record(f"b{p}-{i}".encode()) for i in range(40)])

    # Run 2 (and run 3 with nothing new): AvailableNow from the same checkpoint.
    q2 = run_available_now(df, out, checkpoint)
    assert all(p["numInputRows"] <= 70 for p in q2.recentProgress)
    run_available_now(df, out, checkpoint)

    got = spark.read.parquet(str(out)).collect()
    expected = {
        (p, r.offset, r.value.decode())
        for p in range(3)
        for r in read_all(broker.bootstrap, topic, p)
    }
    assert len(expected) == 2 * 150 + 3 * 40
    assert sorted((r.partition, r.offset, r.value) for r in got) == sorted(expected)


def test_admission_control_limits_batch_sizes(
    spark: Any, broker: BrokerProcess, tmp_path: Path
) -> None:
    topic = create_topic(broker.bootstrap, unique("admission"), partitions=3)
    sizes = {0: 200, 1: 50, 2: 10}
    for p, n in sizes.items():
        produce(broker.bootstrap, topic, p, [Record(f"{p}-{i}".encode()) for i in range(n)])
    df = stream(
        spark, broker.bootstrap, topic, startingOffsets="earliest", maxOffsetsPerTrigger="45"
    )
    query = run_available_now(df, tmp_path / "out", tmp_path / "checkpoint")
    batches = [p["numInputRows"] for p in query.recentProgress if p["numInputRows"] > 0]
    assert all(n <= 45 for n in batches), batches
    assert sum(batches) == 260
    assert len(batches) == 6  # ceil(260 / 45): every batch but the last is full
    got = spark.read.parquet(str(tmp_path / "out")).collect()
    assert sorted(r.value for r in got) == sorted(
        f"{p}-{i}" for p, n in sizes.items() for i in range(n)
    )


def _producer(
    bootstrap: str, topic: str, acked: list[bytes], stop: threading.Event, errors: list[str]
) -> None:
    """Writes one record at a time (acks=all), retrying through a broker outage; keeps
    the values the broker acknowledged."""
    i = 0
    client = BlockingClient(bootstrap, request_timeout_s=5.0, connect_timeout_s=2.0)
    try:
        while not stop.is_set():
            value = f"v{i}".encode()
            try:
                result = client.produce(
                    TopicPartition(topic, i % 2),
                    build_batch([Record(value)], base_timestamp_ms=int(time.time() * 1000)),
                    acks=-1,
                    timeout_ms=5000,
                )
            except Exception as exc:  # broker down: retry the same record
                errors.append(repr(exc))
                time.sleep(0.2)
                continue
            if result is not None and result.error_code == ErrorCode.NONE:
                acked.append(value)
                i += 1
            else:
                errors.append(str(result))
                time.sleep(0.2)
            time.sleep(0.005)
    finally:
        client.close()


def test_stream_survives_broker_kill_and_restart(spark: Any, tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path / "broker").start()
    acked: list[bytes] = []
    errors: list[str] = []
    stop = threading.Event()
    try:
        topic = create_topic(broker.bootstrap, unique("crash"), partitions=2)
        df = stream(
            spark,
            broker.bootstrap,
            topic,
            startingOffsets="earliest",
            **{"kafkaConsumer.pollTimeoutMs": "60000"},
        )
        out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"
        query = (
            df.selectExpr("CAST(value AS STRING) AS value", "partition", "offset")
            .writeStream.format("parquet")
            .option("path", str(out))
            .option("checkpointLocation", str(checkpoint))
            .trigger(processingTime="300 milliseconds")
            .start()
        )
        producer = threading.Thread(
            target=_producer, args=(broker.bootstrap, topic, acked, stop, errors), daemon=True
        )
        producer.start()
        deadline = time.monotonic() + 120
        while sum(p["numInputRows"] for p in query.recentProgress) < 50:
            assert time.monotonic() < deadline, "the query read nothing"
            assert query.exception() is None, query.exception()
            time.sleep(0.2)
        broker.kill()  # SIGKILL mid-query
        time.sleep(1.0)
        broker.start()  # same port and log dirs
        deadline = time.monotonic() + 120
        before = len(acked)
        while len(acked) < before + 100:
            assert time.monotonic() < deadline, f"the producer is stuck: {errors[-3:]}"
            time.sleep(0.2)
        stop.set()
        producer.join(30)
        query.processAllAvailable()
        assert query.exception() is None
        query.stop()

        in_log = {
            (p, r.offset): r.value.decode()
            for p in range(2)
            for r in read_all(broker.bootstrap, topic, p)
        }
        got = [(r.partition, r.offset, r.value) for r in spark.read.parquet(str(out)).collect()]
        assert len(got) == len({(p, o) for p, o, _ in got}), "duplicates"
        assert {(p, o): v for p, o, v in got} == in_log
        assert {v.decode() for v in acked} <= set(in_log.values())
    finally:
        stop.set()
        broker.stop()
