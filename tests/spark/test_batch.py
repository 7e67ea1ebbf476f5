"""Batch read and write through the ``tidelog`` format against a real broker process."""

from __future__ import annotations

from typing import Any

import pytest

from tests.harness import BrokerProcess
from tests.spark.conftest import create_topic, produce, read_all, unique
from tidelog.client import Record

PySparkException = pytest.importorskip("pyspark.errors").PySparkException

pytestmark = [pytest.mark.spark, pytest.mark.integration]


def test_batch_round_trip_all_columns(spark: Any, broker: BrokerProcess) -> None:
    from pyspark.sql import Row
    from pyspark.sql.types import (
        ArrayType,
        BinaryType,
        IntegerType,
        StringType,
        StructField,
        StructType,
    )

    topic = create_topic(broker.bootstrap, unique("roundtrip"), partitions=3)
    header_type = ArrayType(
        StructType([StructField("key", StringType()), StructField("value", BinaryType())])
    )
    schema = StructType(
        [
            StructField("key", BinaryType()),
            StructField("value", StringType()),
            StructField("partition", IntegerType()),
            StructField("headers", header_type),
        ]
    )
    rows = [
        (
            None if i % 7 == 0 else f"k{i}".encode(),
            f"value-{i}",
            i % 3,
            [Row(key="n", value=str(i).encode()), Row(key="null", value=None)] if i % 2 else [],
        )
        for i in range(300)
    ]
    df = spark.createDataFrame(rows, schema)
    (
        df.write.format("tidelog")
        .option("kafka.bootstrap.servers", broker.bootstrap)
        .option("topic", topic)
        .mode("append")
        .save()
    )

    read = (
        spark.read.format("tidelog")
        .option("kafka.bootstrap.servers", broker.bootstrap)
        .option("subscribe", topic)
        .option("includeHeaders", "true")
        .load()
    )
    assert read.columns == [
        "key",
        "value",
        "topic",
        "partition",
        "offset",
        "timestamp",
        "timestampType",
        "headers",
    ]
    got = read.collect()
    assert len(got) == 300
    by_value = {bytes(r.value).decode(): r for r in got}
    for key, value, partition, headers in rows:
        r = by_value[value]
        assert (None if r.key is None else bytes(r.key)) == key
        assert r.topic == topic
        assert r.partition == partition
        assert r.timestampType == 0
        assert [(h.key, None if h.value is None else bytes(h.value)) for h in r.headers] == [
            (h.key, h.value) for h in headers
        ]
    # Offsets and timestamps agree with a direct fetch of each partition.
    for p in range(3):
        direct = read_all(broker.bootstrap, topic, p)
        from_spark = sorted((r for r in got if r.partition == p), key=lambda r: r.offset)
        assert [r.offset for r in from_spark] == [d.offset for d in direct]
        assert [int(r.timestamp.timestamp() * 1000) for r in from_spark] == [
            d.timestamp_ms for d in direct
        ]
        assert [bytes(r.value) for r in from_spark] == [d.value for d in direct]


def test_batch_read_offset_ranges_and_min_partitions(spark: Any, broker: BrokerProcess) -> None:
    topic = create_topic(broker.bootstrap, unique("ranges"), partitions=2)
    for p in range(2):
        produce(
            broker.bootstrap,
            topic,
            p,
            [Record(value=f"{p}:{i}".encode(), key=b"k") for i in range(100)],
            timestamp_ms=1_700_000_000_000 + p,
        )

    def base() -> Any:  # a DataFrameReader is mutable: a fresh one per query
        return (
            spark.read.format("tidelog")
            .option("kafka.bootstrap.servers", broker.bootstrap)
            .option("subscribe", topic)
        )

    df = (
        base()
        .option("startingOffsets", f'{{"{topic}": {{"0": 10, "1": -2}}}}')
        .option("endingOffsets", f'{{"{topic}": {{"0": 20, "1": -1}}}}')
        .load()
    )
    got = sorted((r.partition, r.offset) for r in df.select("partition", "offset").collect())
    assert got == [(0, o) for o in range(10, 20)] + [(1, o) for o in range(100)]

    split = base().option("minPartitions", "8").load()
    assert split.rdd.getNumPartitions() >= 8
    assert split.count() == 200
    assert split.select("offset").distinct().count() == 100

    assign = (
        spark.read.format("tidelog")
        .option("kafka.bootstrap.servers", broker.bootstrap)
        .option("assign", f'{{"{topic}": [1]}}')
        .load()
    )
    assert {bytes(r.value).decode() for r in assign.collect()} == {f"1:{i}" for i in range(100)}

    # subscribePattern matches whole topic names; startingTimestamp starts each partition
    # at its first record at or after the time (records of partition 1 are 1 ms later);
    # partition 0 has none, so it starts at latest by startingOffsetsByTimestampStrategy.
    by_time = (
        spark.read.format("tidelog")
        .option("kafka.bootstrap.servers", broker.bootstrap)
        .option("subscribePattern", topic.replace("-", "."))
        .option("startingTimestamp", str(1_700_000_000_001))
        .option("startingOffsetsByTimestampStrategy", "latest")
        .load()
    )
    got = sorted((r.partition, r.offset) for r in by_time.select("partition", "offset").collect())
    assert got == [(1, o) for o in range(100)]


def _error_text(excinfo: pytest.ExceptionInfo[BaseException]) -> str:
    return str(excinfo.value)


def test_bad_options_fail_with_a_message_naming_them(spark: Any, broker: BrokerProcess) -> None:
    topic = create_topic(broker.bootstrap, unique("badopts"))
    with pytest.raises(PySparkException) as info:
        (
            spark.read.format("tidelog")
            .option("kafka.bootstrap.servers", broker.bootstrap)
            .option("subscribe", topic)
            .option("assign", f'{{"{topic}": [0]}}')
            .load()
            .collect()
        )
    assert (
        "exactly one of the options 'subscribe', 'subscribePattern', 'assign' must be given "
        "(got 'subscribe', 'assign')"
    ) in _error_text(info)

    with pytest.raises(PySparkException) as info:
        (
            spark.read.format("tidelog")
            .option("kafka.bootstrap.servers", broker.bootstrap)
            .option("subscribe", topic)
            .option("startingOffset", "earliest")  # typo of startingOffsets
            .load()
            .collect()
        )
    assert "unknown option 'startingoffset' for a tidelog batch read" in _error_text(info)

    df = spark.createDataFrame([("k", 1)], "key string, amount int")
    with pytest.raises(PySparkException) as info:
        (
            df.write.format("tidelog")
            .option("kafka.bootstrap.servers", broker.bootstrap)
            .option("topic", topic)
            .mode("append")
            .save()
        )
    assert "the data to write has no 'value' column" in _error_text(info)

    # A failing write task fails the job with the task's reason (abort gets None for it).
    rows = spark.createDataFrame([("v", 5)], "value string, partition int")
    with pytest.raises(PySparkException) as info:
        (
            rows.write.format("tidelog")
            .option("kafka.bootstrap.servers", broker.bootstrap)
            .option("topic", topic)
            .mode("append")
            .save()
        )
    assert f"a row asks for partition 5 of topic '{topic}', which has partitions 0..0" in (
        _error_text(info)
    )

    with pytest.raises(PySparkException) as info:
        (
            spark.readStream.format("tidelog")
            .option("kafka.bootstrap.servers", broker.bootstrap)
            .option("subscribe", topic)
            .option("endingOffsets", "latest")
            .load()
            .writeStream.format("console")
            .start()
            .processAllAvailable()
        )
    assert "option 'endingOffsets' is for batch queries only" in _error_text(info)


def test_deleted_offsets_follow_fail_on_data_loss(spark: Any, broker: BrokerProcess) -> None:
    from tests.spark.conftest import delete_records

    topic = create_topic(broker.bootstrap, unique("loss"))
    produce(broker.bootstrap, topic, 0, [Record(str(i).encode()) for i in range(100)])
    delete_records(broker.bootstrap, topic, 0, 50)

    def read(fail_on_data_loss: str) -> Any:
        return (
            spark.read.format("tidelog")
            .option("kafka.bootstrap.servers", broker.bootstrap)
            .option("subscribe", topic)
            .option("startingOffsets", f'{{"{topic}": {{"0": 10}}}}')
            .option("failOnDataLoss", fail_on_data_loss)
            .load()
        )

    with pytest.raises(PySparkException) as info:
        read("true").collect()
    assert f"{topic}-0: offsets [10, 50) were deleted (log start offset is now 50)" in (
        _error_text(info)
    )
    assert "set the option 'failOnDataLoss' to false" in _error_text(info)
    assert sorted(r.offset for r in read("false").collect()) == list(range(50, 100))
