"""The orders job as declarative pipeline definitions (spark-pipelines imports this file
with ``spark`` — a Spark Connect session — in its globals).

Reads the ``tidelog`` stream named by ``TIDELOG_BOOTSTRAP`` / ``TIDELOG_ORDERS_TOPIC``
(environment: the CLI imports this file in its own Python process), parses the JSON
orders, and computes revenue per category per 1-minute event-time window (watermark 2
minutes) into

- the streaming table ``revenue_per_minute`` (Parquet in the warehouse), and
- with ``TIDELOG_REVENUE_TOPIC`` set, a sink writing the table's new rows as JSON to that
  tidelog topic (a second flow, streaming from the table, with its own checkpoint;
  at-least-once). It reads the table rather than the orders topic again: each stream
  from a Python data source needs its own Python planner process, and two of them
  starting at once timed out here ("Python worker failed to connect back").
"""

from __future__ import annotations

import os
from typing import Any

from pyspark import pipelines as dp
from pyspark.sql import DataFrame
from pyspark.sql import functions as F  # noqa: N812 - Spark's convention

import tidelog.spark

spark: Any = globals()["spark"]  # injected by spark-pipelines
tidelog.spark.register(spark)

BOOTSTRAP = os.environ["TIDELOG_BOOTSTRAP"]
ORDERS_TOPIC = os.environ.get("TIDELOG_ORDERS_TOPIC", "orders")
REVENUE_TOPIC = os.environ.get("TIDELOG_REVENUE_TOPIC")
SCHEMA = "order_id STRING, customer STRING, category STRING, amount_cents LONG, event_time_ms LONG"


def revenue() -> DataFrame:
    """Finished 1-minute windows of revenue per category, from the orders stream."""
    return (
        spark.readStream.format("tidelog")
        .option("kafka.bootstrap.servers", BOOTSTRAP)
        .option("subscribe", ORDERS_TOPIC)
        .option("startingOffsets", "earliest")
        .load()
        .select(F.from_json(F.col("value").cast("string"), SCHEMA).alias("o"))
        .select("o.*")
        .withColumn("event_time", F.timestamp_millis("event_time_ms"))
        .withWatermark("event_time", "2 minutes")
        .groupBy(F.window("event_time", "1 minute"), "category")
        .agg(F.sum("amount_cents").alias("revenue_cents"), F.count("*").alias("orders"))
        .select(
            F.unix_millis(F.col("window.start")).alias("window_start_ms"),
            "category",
            "revenue_cents",
            "orders",
        )
    )


@dp.table(comment="Revenue per category per minute of event time (finished windows only).")
def revenue_per_minute() -> DataFrame:
    return revenue()


if REVENUE_TOPIC:
    dp.create_sink(
        "revenue_topic",
        format="tidelog",
        options={"kafka.bootstrap.servers": BOOTSTRAP, "topic": REVENUE_TOPIC},
    )

    @dp.append_flow(target="revenue_topic")
    def revenue_to_topic() -> DataFrame:
        return spark.readStream.table("revenue_per_minute").select(
            F.concat_ws("|", F.col("window_start_ms").cast("string"), "category").alias("key"),
            F.to_json(F.struct("window_start_ms", "category", "revenue_cents", "orders")).alias(
                "value"
            ),
        )
