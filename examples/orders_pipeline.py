"""The flagship pipeline's core: orders in a tidelog topic -> revenue per category per minute.

1. An event generator writes e-commerce orders to ``orders_topic`` (key = customer id,
   JSON value with order id, category, amount in cents and event time), keeping its own
   record of what the broker acknowledged.
2. A Structured Streaming job reads the topic through the ``tidelog`` format, computes
   revenue per category per 1-minute event-time window with a watermark, and writes the
   finished windows to a second tidelog topic and to Parquet (two queries, each with its
   own checkpoint).
3. A verifier recomputes the windows directly from the generator's record and compares.

Run against any bootstrap servers (the topics are created if missing)::

    .venv/bin/python examples/orders_pipeline.py --bootstrap 127.0.0.1:9092 --orders 20000

or call ``run_pipeline(...)`` (the demo does) and read the report dict it returns.

Event times advance steadily with a bounded jitter (< the watermark delay), and a final
heartbeat event far enough ahead closes every window (its own window never closes, so it
never reaches the output; it is not filtered out, because Spark pushes such a filter
below the watermark, which would then never advance); so no order is late, and the
Parquet output must equal the direct computation exactly. The topic output is
at-least-once (a retried write may duplicate a window): the report counts duplicates.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import random
import sys
import tempfile
import threading
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pyspark.sql import SparkSession
from pyspark.sql import functions as F  # noqa: N812 - Spark's convention

import tidelog.spark
from tidelog.client import BlockingClient, NewTopic
from tidelog.errors import ErrorCode
from tidelog.spark.producer import Producer

CATEGORIES = ("books", "electronics", "fashion", "garden", "grocery", "toys")
HEARTBEAT = "__heartbeat__"
WINDOW_MS = 60_000
WATERMARK = "2 minutes"
WATERMARK_MS = 120_000
#: Event time of the first order (2026-01-01T00:00:00Z).
BASE_MS = 1_767_225_600_000


def ensure_topics(bootstrap: str, topics: dict[str, int]) -> None:
    with BlockingClient(bootstrap) as client:
        results = client.create_topics([NewTopic(name, n, -1) for name, n in topics.items()])
    for name, error in results.items():
        if error.error_code not in (ErrorCode.NONE, ErrorCode.TOPIC_ALREADY_EXISTS):
            raise RuntimeError(f"cannot create topic {name}: {error}")


def generate_orders(
    bootstrap: str,
    topic: str,
    *,
    count: int,
    minutes: int,
    customers: int = 500,
    seed: int = 1,
    flush_every: int = 200,
    record_path: Path | None = None,
    rate: float | None = None,
    ack_log: list[tuple[float, int]] | None = None,
) -> list[dict[str, Any]]:
    """Write ``count`` orders spread over ``minutes`` of event time, then a heartbeat
    that moves the watermark past the last window. Returns the orders written (all of
    them acknowledged with acks=all).

    ``rate`` (orders per second) paces the writes; ``ack_log`` receives
    ``(time.monotonic(), orders acknowledged so far)`` after every flush."""
    rng = random.Random(seed)
    started = time.monotonic()
    step = minutes * WINDOW_MS / count
    jitter = min(WATERMARK_MS // 4, int(step * 50))
    producer = Producer(
        bootstrap,
        client_id="orders-generator",
        request_timeout_ms=30_000,
        acks=-1,
        retry_timeout_ms=120_000,
    )
    orders = []
    try:
        for i in range(count):
            customer = f"customer-{rng.randrange(customers):05d}"
            order = {
                "order_id": f"o-{seed}-{i:08d}",
                "customer": customer,
                "category": rng.choice(CATEGORIES),
                "amount_cents": rng.randrange(100, 50_000),
                "event_time_ms": BASE_MS + int(i * step) - rng.randrange(jitter + 1),
            }
            orders.append(order)
            if rate is not None:
                due = started + i / rate
                if (wait := due - time.monotonic()) > 0:
                    time.sleep(wait)
            producer.send(topic, json.dumps(order).encode(), customer.encode())
            if (i + 1) % flush_every == 0:
                producer.flush()
                if ack_log is not None:
                    ack_log.append((time.monotonic(), i + 1))
        heartbeat = {
            "order_id": "heartbeat",
            "customer": HEARTBEAT,
            "category": HEARTBEAT,
            "amount_cents": 0,
            "event_time_ms": heartbeat_time_ms(minutes),
        }
        # The heartbeat goes to every partition so each one's reader sees it.
        for p in range(producer.num_partitions(topic)):
            producer.send(topic, json.dumps(heartbeat).encode(), None, partition=p)
        producer.flush()
    finally:
        producer.close()
    if record_path is not None:
        record_path.write_text("".join(json.dumps(o) + "\n" for o in orders), encoding="utf-8")
    return orders


def heartbeat_time_ms(minutes: int) -> int:
    """Event time of the heartbeat: its watermark lies past every order's window."""
    return BASE_MS + (minutes + 1) * WINDOW_MS + WATERMARK_MS + 1


def watermark_ms(progress: dict[str, Any]) -> int:
    """The watermark a micro-batch ran with (from its progress report), -1 if none."""
    raw = progress.get("eventTime", {}).get("watermark")
    if not raw:
        return -1
    moment = datetime.datetime.fromisoformat(raw.replace("Z", "+00:00"))
    return int(moment.timestamp() * 1000)


def expected_windows(orders: list[dict[str, Any]]) -> dict[tuple[int, str], tuple[int, int]]:
    """(window start ms, category) -> (revenue cents, order count), computed directly."""
    result: dict[tuple[int, str], list[int]] = defaultdict(lambda: [0, 0])
    for o in orders:
        start = o["event_time_ms"] // WINDOW_MS * WINDOW_MS
        cell = result[(start, o["category"])]
        cell[0] += o["amount_cents"]
        cell[1] += 1
    return {k: (v[0], v[1]) for k, v in result.items()}


def start_job(
    spark: Any, bootstrap: str, orders_topic: str, revenue_topic: str, work_dir: Path
) -> list[Any]:
    """The Structured Streaming job: two queries (Parquet, tidelog topic) on one plan."""
    schema = (
        "order_id STRING, customer STRING, category STRING, amount_cents LONG, event_time_ms LONG"
    )
    orders = (
        spark.readStream.format("tidelog")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", orders_topic)
        .option("startingOffsets", "earliest")
        .load()
        .select(F.from_json(F.col("value").cast("string"), schema).alias("o"))
        .select("o.*")
        .withColumn("event_time", F.timestamp_millis("event_time_ms"))
        .withWatermark("event_time", WATERMARK)
    )
    revenue = (
        orders.groupBy(F.window("event_time", "1 minute"), "category")
        .agg(F.sum("amount_cents").alias("revenue_cents"), F.count("*").alias("orders"))
        .select(
            F.unix_millis(F.col("window.start")).alias("window_start_ms"),
            "category",
            "revenue_cents",
            "orders",
        )
    )
    parquet = (
        revenue.writeStream.format("parquet")
        .outputMode("append")
        .option("path", str(work_dir / "revenue.parquet"))
        .option("checkpointLocation", str(work_dir / "checkpoints" / "parquet"))
        .trigger(processingTime="1 second")
        .start()
    )
    wait_sources_initialized(parquet)
    topic = (
        revenue.select(
            F.concat_ws("|", F.col("window_start_ms").cast("string"), "category").alias("key"),
            F.to_json(F.struct("window_start_ms", "category", "revenue_cents", "orders")).alias(
                "value"
            ),
        )
        .writeStream.format("tidelog")
        .outputMode("append")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("topic", revenue_topic)
        .option("checkpointLocation", str(work_dir / "checkpoints" / "topic"))
        .trigger(processingTime="1 second")
        .start()
    )
    return [parquet, topic]


def wait_sources_initialized(query: Any, timeout_s: float = 120.0) -> None:
    """Until ``query`` has set up its source (its Python planner process is running).

    Each streaming query from a Python data source starts a planner process that must
    connect back to the JVM within Spark's fixed 10 s; two starting at once on a loaded
    2-core machine missed that ("Python worker failed to connect back"), so the second
    query starts only after the first one's planner is up."""
    deadline = time.monotonic() + timeout_s
    while query.status["message"] == "Initializing sources" and time.monotonic() < deadline:
        if query.exception() is not None:
            raise RuntimeError(f"query {query.name or query.id} failed: {query.exception()}")
        time.sleep(0.2)


def read_topic_windows(spark: Any, bootstrap: str, topic: str) -> list[dict[str, Any]]:
    rows = (
        spark.read.format("tidelog")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .load()
        .selectExpr("CAST(value AS STRING) AS value")
        .collect()
    )
    return [json.loads(r.value) for r in rows]


def run_pipeline(
    spark: Any,
    bootstrap: str,
    *,
    orders_topic: str = "orders",
    revenue_topic: str = "revenue",
    work_dir: Path | str | None = None,
    orders: int = 10_000,
    minutes: int = 10,
    partitions: int = 3,
    seed: int = 1,
    timeout_s: float = 600.0,
    rate: float | None = None,
    ack_log: list[tuple[float, int]] | None = None,
    during: Callable[[list[Any], threading.Thread], None] | None = None,
) -> dict[str, Any]:
    """Generate, process and verify; returns a report (``report["ok"]`` is the verdict).

    ``spark`` must have the ``tidelog`` format registered (``tidelog.spark.register``).
    ``rate`` and ``ack_log`` go to ``generate_orders``; ``during(queries, generator)``,
    if given, runs in the calling thread once the queries and the generator thread have
    started (the demo kills and restarts a broker there).
    """
    work = Path(work_dir or tempfile.mkdtemp(prefix="orders-pipeline-"))
    work.mkdir(parents=True, exist_ok=True)
    ensure_topics(bootstrap, {orders_topic: partitions, revenue_topic: 1})
    started = time.monotonic()
    queries = start_job(spark, bootstrap, orders_topic, revenue_topic, work)
    generated: list[dict[str, Any]] = []
    failure: list[BaseException] = []

    def generate() -> None:
        try:
            generated.extend(
                generate_orders(
                    bootstrap,
                    orders_topic,
                    count=orders,
                    minutes=minutes,
                    seed=seed,
                    record_path=work / "generated.jsonl",
                    rate=rate,
                    ack_log=ack_log,
                )
            )
        except BaseException as exc:
            failure.append(exc)

    generator = threading.Thread(target=generate, name="orders-generator", daemon=True)
    generator.start()
    if during is not None:
        try:
            during(queries, generator)
        except BaseException:
            for q in queries:
                q.stop()
            raise
    generator.join(max(0.0, timeout_s - (time.monotonic() - started)))
    generated_s = time.monotonic() - started
    if failure:
        for q in queries:
            q.stop()
        raise RuntimeError("the generator failed") from failure[0]
    # Windows are emitted by the batch *after* the one that moved the watermark (often a
    # no-data batch), so wait for a batch that ran with the heartbeat's watermark.
    final_watermark_ms = heartbeat_time_ms(minutes) - WATERMARK_MS
    for q in queries:
        q.processAllAvailable()
        while not any(watermark_ms(p) >= final_watermark_ms for p in q.recentProgress):
            if q.exception() is not None:
                raise RuntimeError(f"query {q.name or q.id} failed: {q.exception()}")
            if time.monotonic() - started > timeout_s:
                raise TimeoutError(f"query {q.name or q.id}: the final watermark never came")
            time.sleep(0.5)
    pipeline_s = time.monotonic() - started
    for q in queries:
        q.stop()

    expected = expected_windows(generated)
    parquet_rows = spark.read.parquet(str(work / "revenue.parquet")).collect()
    parquet = {(r.window_start_ms, r.category): (r.revenue_cents, r.orders) for r in parquet_rows}
    topic_rows = read_topic_windows(spark, bootstrap, revenue_topic)
    topic = {
        (w["window_start_ms"], w["category"]): (w["revenue_cents"], w["orders"]) for w in topic_rows
    }
    mismatches = [
        {"window": list(k), "expected": expected.get(k), "parquet": parquet.get(k)}
        for k in sorted(set(expected) | set(parquet))
        if expected.get(k) != parquet.get(k)
    ]
    return {
        "ok": not mismatches and len(parquet_rows) == len(parquet) and topic == expected,
        "orders_generated": len(generated),
        "revenue_sum_cents": sum(o["amount_cents"] for o in generated),
        "windows_expected": len(expected),
        "windows_parquet": len(parquet_rows),
        "windows_topic_distinct": len(topic),
        "windows_topic_duplicates": len(topic_rows) - len(topic),
        "topic_matches": topic == expected,
        "mismatches": mismatches[:10],
        "generator_seconds": round(generated_s, 2),
        "pipeline_seconds": round(pipeline_s, 2),
        "work_dir": str(work),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bootstrap", required=True, help="host:port[,host:port...]")
    parser.add_argument("--orders-topic", default="orders")
    parser.add_argument("--revenue-topic", default="revenue")
    parser.add_argument("--work-dir", default=None)
    parser.add_argument("--orders", type=int, default=10_000)
    parser.add_argument("--minutes", type=int, default=10)
    parser.add_argument("--partitions", type=int, default=3)
    parser.add_argument("--master", default="local[2]")
    args = parser.parse_args(argv)

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    spark = (
        SparkSession.builder.master(args.master)
        .appName("tidelog-orders-pipeline")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.ui.enabled", "false")
        .getOrCreate()
    )
    tidelog.spark.register(spark)
    try:
        report = run_pipeline(
            spark,
            args.bootstrap,
            orders_topic=args.orders_topic,
            revenue_topic=args.revenue_topic,
            work_dir=args.work_dir,
            orders=args.orders,
            minutes=args.minutes,
            partitions=args.partitions,
        )
    finally:
        spark.stop()
    print(json.dumps(report, indent=2))
    return 0 if report["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
