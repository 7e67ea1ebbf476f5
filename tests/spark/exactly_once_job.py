"""A streaming copy topic -> topic with ``exactlyOnce``, run as its own Spark driver process
by test_exactly_once_sink.py (which SIGKILLs it, its Python workers or a broker by PID).

Usage: exactly_once_job.py BOOTSTRAP SOURCE SINK CHECKPOINT MAX_OFFSETS_PER_TRIGGER

``local[2,4]``: two cores, and up to four attempts per task (plain ``local[2]`` never
retries a task). ``Trigger.AvailableNow``: the query reads what the source held when it
started, in micro-batches of at most MAX_OFFSETS_PER_TRIGGER records, and stops.

Prints ``QUERY {"id": ...}`` once started, ``PROGRESS {"batch": b, "rows": n}`` for each
completed micro-batch, and ``RESULT {...}`` at the end (micro-batches, failed task
attempts).

With ``TIDELOG_TEST_KILL_TASK=<batch id>:<partition>`` the first attempt of that write
task SIGKILLs its own Python worker once its records are written (acknowledged, in its
open transaction), before it returns: a task that dies part way, at a known point.

With ``TIDELOG_TEST_CRASH=<before|after>:<batch id>:<file>`` the sink is a subclass whose
``commit`` (on the driver), for that micro-batch, writes ``<file>`` and then sleeps instead
of returning: ``before`` ending no transaction, ``after`` once every transaction of the
batch is committed. The test SIGKILLs the driver meanwhile: a crash between the tasks'
writes and the commit, or between the commit and Spark's record of the batch.
"""

from __future__ import annotations

import json
import os
import signal
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
from tidelog.spark.source import TidelogCommitMessage, TidelogDataSource, TidelogStreamWriter
from tidelog.spark.transactions import TransactionalProducer

CRASH_ENV = "TIDELOG_TEST_CRASH"
KILL_TASK_ENV = "TIDELOG_TEST_KILL_TASK"


class CrashingWriter(TidelogStreamWriter):
    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriterCommitMessage:
        spec = os.environ.get(KILL_TASK_ENV, "")
        ctx = TaskContext.get()
        if spec and ctx is not None and ctx.attemptNumber() == 0:
            batch, partition = (int(x) for x in spec.split(":"))
            if (int(ctx.getLocalProperty("streaming.sql.batchId")), ctx.partitionId()) == (
                batch,
                partition,
            ):
                # This attempt dies right after its records are written and acknowledged,
                # before it returns: SIGKILL of its own Python worker, by PID. The patch
                # dies with the process.
                flush = TransactionalProducer.flush

                def flush_then_die(producer: TransactionalProducer) -> None:
                    flush(producer)
                    os.kill(os.getpid(), signal.SIGKILL)

                TransactionalProducer.flush = flush_then_die  # type: ignore[method-assign]
        return super().write(iterator)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:  # noqa: N803
        spec = os.environ.get(CRASH_ENV, "")
        if spec:
            when, batch, marker = spec.split(":", 2)
            if int(batch) == batchId:
                if when == "after":
                    super().commit(messages, batchId)
                transactions = [
                    m.transaction.transactional_id
                    for m in messages
                    if isinstance(m, TidelogCommitMessage) and m.transaction is not None
                ]
                Path(marker).write_text(
                    json.dumps({"batch": batchId, "when": when, "transactions": transactions})
                )
                time.sleep(3600)  # killed meanwhile
        super().commit(messages, batchId)


class CrashingDataSource(TidelogDataSource):
    @classmethod
    def name(cls) -> str:
        return "tidelog_crashing"

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamArrowWriter:  # noqa: N802
        writer = super().streamWriter(schema, overwrite)
        assert isinstance(writer, TidelogStreamWriter)
        return CrashingWriter(writer.options)


def failed_task_attempts(spark: Any) -> int:
    """Failed task attempts of the stages Spark still remembers (ids 0..499)."""
    tracker = spark.sparkContext.statusTracker()
    infos = (tracker.getStageInfo(stage) for stage in range(500))
    return sum(info.numFailedTasks for info in infos if info is not None)


def main() -> None:
    bootstrap, source, sink, checkpoint, max_offsets = sys.argv[1:6]
    spark = (
        SparkSession.builder.master("local[2,4]")
        .appName("tidelog-exactly-once")
        .config("spark.ui.enabled", "false")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.log.level", "WARN")
        .getOrCreate()
    )
    tidelog.spark.register(spark)
    spark.dataSource.register(CrashingDataSource)
    query = (
        spark.readStream.format("tidelog")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", source)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", max_offsets)
        .option("kafkaConsumer.pollTimeoutMs", "180000")
        .option("kafka.request.timeout.ms", "5000")
        .load()
        .select("key", "value")
        .writeStream.format("tidelog_crashing")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("topic", sink)
        .option("exactlyOnce", "true")
        .option("kafka.request.timeout.ms", "5000")
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
        .start()
    )
    print("QUERY " + json.dumps({"id": query.id, "run_id": query.runId}), flush=True)
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
    print(
        "RESULT "
        + json.dumps(
            {
                "error": str(error) if error is not None else None,
                "batches": sorted(seen),
                "rows": sum(int(p["numInputRows"]) for p in query.recentProgress),
                "failed_task_attempts": failed_task_attempts(spark),
            }
        ),
        flush=True,
    )
    spark.stop()


if __name__ == "__main__":
    main()
