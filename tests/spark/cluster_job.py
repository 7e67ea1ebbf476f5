"""A job for ``spark-submit`` against a standalone cluster (run by test_cluster.py).

Usage: cluster_job.py BOOTSTRAP TOPIC OUT_DIR — writes 1000 rows to TOPIC through the
``tidelog`` format, reads them back (batch), streams them (AvailableNow) into Parquet
under OUT_DIR, and prints one JSON line with what it saw and where tasks ran.
"""

from __future__ import annotations

import json
import socket
import sys

from pyspark.sql import SparkSession

import tidelog.spark


def main() -> None:
    bootstrap, topic, out_dir = sys.argv[1:4]
    spark = SparkSession.builder.appName("tidelog-cluster-test").getOrCreate()
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
    batch = (
        spark.read.format("tidelog")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .load()
        .selectExpr("CAST(value AS STRING) AS value", "partition", "offset")
    )
    values = sorted(r.value for r in batch.collect())
    query = (
        spark.readStream.format("tidelog")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", "400")
        .load()
        .selectExpr("CAST(value AS STRING) AS value", "partition", "offset")
        .writeStream.format("parquet")
        .option("path", f"{out_dir}/parquet")
        .option("checkpointLocation", f"{out_dir}/checkpoint")
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    streamed = sorted(r.value for r in spark.read.parquet(f"{out_dir}/parquet").collect())
    executors = spark.sparkContext.parallelize(range(2), 2).map(lambda _: socket.gethostname())
    print(
        "RESULT "
        + json.dumps(
            {
                "master": spark.sparkContext.master,
                "batch": values,
                "streamed": streamed,
                "batches": [p["numInputRows"] for p in query.recentProgress],
                "executor_hosts": sorted(set(executors.collect())),
            }
        ),
        flush=True,
    )
    spark.stop()


if __name__ == "__main__":
    main()
