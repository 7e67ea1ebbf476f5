"""tidelog's PySpark data source: format ``tidelog``, Spark's Kafka connector options.

::

    import tidelog.spark
    tidelog.spark.register(spark)            # once per SparkSession
    df = (spark.readStream.format("tidelog")
          .option("kafka.bootstrap.servers", "127.0.0.1:9092")
          .option("subscribe", "orders").load())

See docs/spark.md. Modules: ``options`` (parsing, pure) over ``option_values`` (one
option's value, and the security options), ``offsets`` (offset JSON, admission control,
splitting; pure), and the connector's IO, no Spark in it: ``errors`` (its exceptions),
``session`` (connections and retries), ``offset_reader`` (the driver's
look-ups), ``decode`` (fetched batches into Arrow columns), ``read_loop`` (an executor's
offset range), ``producer`` (writes), ``transactions`` (the ``exactlyOnce`` sink's
transactions, docs/exactly-once.md); ``source`` (the Spark classes). ``progress``: offsets
behind latest from a query's progress (and a listener), and ``commitOffsetsToGroup``'s
commits (docs/spark.md, "Progress").
"""

from __future__ import annotations

from typing import Any


def register(spark: Any) -> None:
    """Register the ``tidelog`` format with a SparkSession (PySpark >= 4.2)."""
    from tidelog.spark.source import TidelogDataSource  # noqa: PLC0415 - imports pyspark

    spark.dataSource.register(TidelogDataSource)


__all__ = ["register"]
