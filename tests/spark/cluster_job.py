"""Jobs against a standalone Spark cluster or a Spark Connect server (run by
test_cluster.py, each as its own driver process).

``cluster_job.py roundtrip BOOTSTRAP TOPIC SINK OUT_DIR [sc://HOST:PORT]`` — under ``spark-submit``,
or as a Spark Connect client when a ``sc://`` URL is given (``SparkSession.builder.remote``):
writes 1000 rows to TOPIC through the ``tidelog`` format, reads them back (batch), streams
them (AvailableNow, at most 400 per micro-batch) into SINK with ``exactlyOnce``, reads SINK
back read_committed, and prints one ``RESULT`` JSON line.

``cluster_job.py exactly-once BOOTSTRAP SOURCE SINK CHECKPOINT MAX_OFFSETS STALL_MARKER``
— under ``spark-submit``: a streaming copy SOURCE -> SINK with ``exactlyOnce``
(AvailableNow, micro-batches of at most MAX_OFFSETS records). The first attempt of write
task 0 of micro-batch 1 writes its records (acknowledged, in its open transaction), then
writes ``{"pid": <its Python worker>}`` to STALL_MARKER and sleeps: the test then kills
the Spark worker that runs it. Prints ``PROGRESS`` per micro-batch and ``RESULT`` at the end.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
from pyspark import TaskContext
from pyspark.sql import SparkSession
from pyspark.sql.datasource import DataSourceStreamArrowWriter, WriterCommitMessage
from pyspark.sql.types import StructType

import tidelog.spark
from tidelog.spark.source import TidelogDataSource, TidelogStreamWriter
from tidelog.spark.transactions import TransactionalProducer

STALL_BATCH, STALL_PARTITION = 1, 0


def _session(remote: str | None) -> Any:
    builder = SparkSession.builder.appName("tidelog-cluster-test")
    if remote is not None:
        return builder.remote(remote).getOrCreate()
    return builder.getOrCreate()


def _master(spark: Any, remote: str | None) -> str:
    if remote is not None:
        return str(spark.conf.get("spark.master"))
    return str(spark.sparkContext.master)


def roundtrip(bootstrap: str, topic: str, sink: str, out_dir: str, remote: str | None) -> None:
    spark = _session(remote)
    tidelog.spark.register(spark)
    rows = [(f"k{i % 10}", f"v{i}") for i in range(1000)]
    (
        spark.createDataFrame(rows, "key string, value string")
        .repartition(2)
        .write.format("tidelog")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("topic", topic)
        .mode("append")
        .save()
    )

    def read(name: str) -> list[str]:
        df = (
            spark.read.format("tidelog")
            .option("kafka.bootstrap.servers", bootstrap)
            .option("subscribe", name)
            .option("kafka.isolation.level", "read_committed")
            .load()
            .selectExpr("CAST(value AS STRING) AS value")
        )
        return sorted(r.value for r in df.collect())

    values = read(topic)
    query = (
        spark.readStream.format("tidelog")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", "400")
        .load()
        .select("key", "value")
        .writeStream.format("tidelog")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("topic", sink)
        .option("exactlyOnce", "true")
        .option("checkpointLocation", f"{out_dir}/checkpoint")
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    error = query.exception()
    report = {
        "master": _master(spark, remote),
        "remote": remote is not None,
        "session": type(spark).__module__,
        "error": str(error) if error is not None else None,
        "batch": values,
        "streamed": read(sink),
        # Per source: over Connect, a progress has no top-level numInputRows (PySpark 4.3
        # fills it from the JSON, which holds it only per source).
        "batches": [sum(s.numInputRows for s in p.sources) for p in query.recentProgress],
    }
    print("RESULT " + json.dumps(report), flush=True)
    spark.stop()


class StallingWriter(TidelogStreamWriter):
    """The ``tidelog`` stream writer, but the first attempt of task STALL_PARTITION of
    micro-batch STALL_BATCH stalls once its records are written and acknowledged, in its
    open transaction (before it returns), after telling the test its Python worker's PID."""

    marker = ""

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriterCommitMessage:
        ctx = TaskContext.get()
        if ctx is not None and ctx.attemptNumber() == 0:
            batch = int(ctx.getLocalProperty("streaming.sql.batchId"))
            if (batch, ctx.partitionId()) == (STALL_BATCH, STALL_PARTITION):
                flush = TransactionalProducer.flush
                marker = Path(self.marker)

                def flush_then_stall(producer: TransactionalProducer) -> None:
                    flush(producer)
                    marker.write_text(json.dumps({"pid": os.getpid()}))
                    time.sleep(3600)  # the test kills this process's Spark worker

                TransactionalProducer.flush = flush_then_stall  # type: ignore[method-assign]
        return super().write(iterator)


class StallingDataSource(TidelogDataSource):
    marker = ""

    @classmethod
    def name(cls) -> str:
        return "tidelog_stalling"

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamArrowWriter:  # noqa: N802
        writer = super().streamWriter(schema, overwrite)
        assert isinstance(writer, TidelogStreamWriter)
        stalling = StallingWriter(writer.options)
        stalling.marker = self.marker
        return stalling


def failed_task_attempts(spark: Any) -> int:
    """Failed task attempts of the stages Spark still remembers (ids 0..499)."""
    tracker = spark.sparkContext.statusTracker()
    infos = (tracker.getStageInfo(stage) for stage in range(500))
    return sum(info.numFailedTasks for info in infos if info is not None)


def exactly_once(args: list[str]) -> None:
    bootstrap, source, sink, checkpoint, max_offsets, marker = args
    spark = SparkSession.builder.appName("tidelog-cluster-exactly-once").getOrCreate()
    tidelog.spark.register(spark)
    StallingDataSource.marker = marker
    spark.dataSource.register(StallingDataSource)
    query = (
        spark.readStream.format("tidelog")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", source)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", max_offsets)
        .load()
        .select("key", "value")
        .writeStream.format("tidelog_stalling")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("topic", sink)
        .option("exactlyOnce", "true")
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
        .start()
    )
    seen: set[int] = set()

    def report() -> None:
        for progress in query.recentProgress:
            batch = int(progress["batchId"])
            if batch not in seen:
                seen.add(batch)
                rows = int(progress["numInputRows"])
                print("PROGRESS " + json.dumps({"batch": batch, "rows": rows}), flush=True)

    while query.isActive:
        report()
        time.sleep(0.3)
    report()
    error = query.exception()
    executors = spark.sparkContext._jsc.sc().getExecutorMemoryStatus().size() - 1
    result = {
        "error": str(error) if error is not None else None,
        "batches": sorted(seen),
        "rows": sum(int(p["numInputRows"]) for p in query.recentProgress),
        "failed_task_attempts": failed_task_attempts(spark),
        "executors_at_end": executors,
    }
    print("RESULT " + json.dumps(result), flush=True)
    spark.stop()


def main() -> None:
    mode, *args = sys.argv[1:]
    if mode == "roundtrip":
        bootstrap, topic, sink, out_dir, *remote = args
        roundtrip(bootstrap, topic, sink, out_dir, remote[0] if remote else None)
    elif mode == "exactly-once":
        exactly_once(args)
    else:
        raise SystemExit(f"unknown mode {mode!r}")


if __name__ == "__main__":
    main()
