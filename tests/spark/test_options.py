"""Options, offsets arithmetic and the record decoder of the connector (no Spark, no IO),
then every option of Spark's Kafka connector on a real SparkSession (issue 31 point 2)."""

from __future__ import annotations

import logging
import socket
import time
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

pytest.importorskip("pyarrow")  # the spark extra (scripts/bootstrap.sh spark)

from tidelog.client import Record, build_batch, decode_records
from tidelog.model import TopicPartition
from tidelog.protocol.partitioner import murmur2
from tidelog.protocol.partitioner import partition_for_key as default_partition
from tidelog.protocol.records import Compression
from tidelog.spark.decode import Columns, decode_into
from tidelog.spark.kafka_params import COMPRESSION_TYPES
from tidelog.spark.offsets import (
    OffsetRange,
    TriggerDelay,
    from_json,
    rate_limit,
    split_ranges,
    to_json,
)
from tidelog.spark.options import (
    Assign,
    EarliestSpec,
    LatestSpec,
    PartitionTimestampSpec,
    SparkOptionError,
    SpecificSpec,
    SubscribePattern,
    TimestampSpec,
    parse_read_options,
    parse_write_options,
)

BOOT = {"kafka.bootstrap.servers": "127.0.0.1:9092"}


@pytest.mark.parametrize(
    ("options", "streaming", "message"),
    [
        ({"subscribe": "t"}, True, "option 'kafka.bootstrap.servers' is required"),
        ({**BOOT}, True, "exactly one of the options 'subscribe', 'subscribePattern', 'assign'"),
        (
            {**BOOT, "subscribe": "t", "assign": '{"t": [0]}'},
            True,
            "exactly one of the options 'subscribe', 'subscribePattern', 'assign' must be "
            "given (got 'subscribe', 'assign')",
        ),
        ({**BOOT, "subscribe": "t", "nosuch": "1"}, True, "unknown option 'nosuch'"),
        (
            {**BOOT, "subscribe": "t", "kafka.auto.offset.reset": "earliest"},
            True,
            "option 'kafka.auto.offset.reset' (Kafka's 'auto.offset.reset') is not supported by "
            "Spark's Kafka connector nor tidelog: set the source option 'startingOffsets'",
        ),
        (
            {**BOOT, "subscribe": "t", "startingOffsetsByTimestamp": '{"t": {"0": -1}}'},
            False,
            "option 'startingOffsetsByTimestamp': timestamp (ms) of t-0 must be an integer >= 0, "
            "not -1",
        ),
        (
            {**BOOT, "subscribe": "t", "startingOffsetsByTimestamp": "5"},
            False,
            "option 'startingOffsetsByTimestamp' must be a JSON object of topics",
        ),
        (
            {**BOOT, "subscribe": "t", "endingOffsetsByTimestamp": '{"u": {"0": 5}}'},
            False,
            "option 'endingOffsetsByTimestamp' names topics that 'subscribe' does not: u",
        ),
        (
            {**BOOT, "subscribe": "t", "endingTimestamp": "5"},
            True,
            "option 'endingTimestamp' is for batch queries only",
        ),
        (
            {**BOOT, "subscribe": "t", "startingOffsetsByTimestampStrategy": "earliest"},
            True,
            "option 'startingOffsetsByTimestampStrategy' must be error or latest, not 'earliest'",
        ),
        (
            {**BOOT, "subscribe": "t", "minOffsetsPerTrigger": "10", "maxOffsetsPerTrigger": "5"},
            True,
            "option 'minOffsetsPerTrigger' (10) cannot be greater than 'maxOffsetsPerTrigger' (5)",
        ),
        (
            {**BOOT, "subscribe": "t", "minOffsetsPerTrigger": "1", "maxTriggerDelay": "soon"},
            True,
            "option 'maxTriggerDelay' must be a time like 15m, 30s, 500ms, 2h",
        ),
        (
            {**BOOT, "subscribe": "t", "maxRecordsPerPartition": "0"},
            False,
            "option 'maxRecordsPerPartition' must be at least 1, not 0",
        ),
        (
            {**BOOT, "subscribe": "t", "fetchOffset.numRetries": "-1"},
            True,
            "option 'fetchOffset.numRetries' must be at least 0, not -1",
        ),
        (
            {**BOOT, "subscribe": "t", "fetchOffset.retryIntervalMs": "x"},
            True,
            "option 'fetchOffset.retryIntervalMs' must be an integer, not 'x'",
        ),
        (
            {**BOOT, "subscribe": "t", "kafka.group.id": " "},
            True,
            "option 'kafka.group.id' is empty",
        ),
        ({**BOOT, "subscribe": "t", "groupIdPrefix": ""}, True, "option 'groupIdPrefix' is empty"),
        (
            {**BOOT, "subscribe": "t", "kafka.max.poll.records": "0"},
            True,
            "option 'kafka.max.poll.records' must be at least 1, not 0",
        ),
        (
            {**BOOT, "subscribe": "t", "kafka.fetch.max.bytes": "lots"},
            True,
            "option 'kafka.fetch.max.bytes' must be an integer, not 'lots'",
        ),
        (
            {**BOOT, "subscribe": "t", "kafka.session.timeout.ms": "-5"},
            True,
            "option 'kafka.session.timeout.ms' must be at least 1, not -5",
        ),
        (
            {**BOOT, "subscribe": "t", "kafka.check.crcs": "maybe"},
            True,
            "option 'kafka.check.crcs' must be true or false, not 'maybe'",
        ),
        (
            {**BOOT, "subscribe": "t", "endingOffsets": "latest"},
            True,
            "option 'endingOffsets' is for batch queries only",
        ),
        (
            {**BOOT, "subscribe": "t", "startingOffsets": "latest"},
            False,
            "option 'startingOffsets' cannot be 'latest' for a batch query",
        ),
        (
            {**BOOT, "subscribe": "t", "endingOffsets": "earliest"},
            False,
            "option 'endingOffsets' cannot be 'earliest' for a batch query",
        ),
        (
            {**BOOT, "subscribe": "t", "startingOffsets": '{"t": {"0": 5'},
            True,
            "option 'startingOffsets' is not valid JSON",
        ),
        (
            {**BOOT, "subscribe": "t", "startingOffsets": '{"u": {"0": 5}}'},
            True,
            "option 'startingOffsets' names topics that 'subscribe' does not: u",
        ),
        (
            {**BOOT, "assign": '{"t": [0]}', "startingOffsets": '{"t": {"1": 5}}'},
            True,
            "option 'startingOffsets' names partitions that 'assign' does not: t-1",
        ),
        ({**BOOT, "assign": "t"}, True, "option 'assign' must be JSON like"),
        ({**BOOT, "subscribePattern": "("}, True, "option 'subscribePattern': '(' is not a regex"),
        (
            {**BOOT, "subscribe": "t", "maxOffsetsPerTrigger": "0"},
            True,
            "option 'maxOffsetsPerTrigger' must be at least 1, not 0",
        ),
        (
            {**BOOT, "subscribe": "t", "minPartitions": "x"},
            True,
            "option 'minPartitions' must be an integer, not 'x'",
        ),
        (
            {**BOOT, "subscribe": "t", "failOnDataLoss": "yes"},
            True,
            "option 'failOnDataLoss' must be true or false, not 'yes'",
        ),
        (
            {"kafka.bootstrap.servers": "localhost", "subscribe": "t"},
            True,
            "option 'kafka.bootstrap.servers': 'localhost' is not host:port",
        ),
    ],
)
def test_bad_read_options_are_named(options: dict[str, str], streaming: bool, message: str) -> None:
    # Spark hands the options over with lower-cased keys.
    with pytest.raises(SparkOptionError) as info:
        parse_read_options({k.lower(): v for k, v in options.items()}, streaming=streaming)
    assert message in str(info.value)


def test_read_options_defaults_and_specs() -> None:
    stream = parse_read_options({**BOOT, "subscribepattern": "orders-.*"}, streaming=True)
    assert stream.subscription == SubscribePattern("orders-.*")
    assert stream.starting == LatestSpec()
    assert stream.fail_on_data_loss is True
    assert stream.include_headers is False
    batch = parse_read_options({**BOOT, "assign": '{"t": [1, 0]}'}, streaming=False)
    assert batch.subscription == Assign((TopicPartition("t", 1), TopicPartition("t", 0)))
    assert batch.starting == EarliestSpec()
    assert batch.ending == LatestSpec()
    ts = parse_read_options({**BOOT, "subscribe": "t", "startingtimestamp": "1000"}, streaming=True)
    assert ts.starting == TimestampSpec(1000)
    spec = parse_read_options(
        {**BOOT, "subscribe": "t", "startingoffsets": '{"t": {"0": 5, "1": -2}}'}, streaming=True
    )
    assert spec.starting == SpecificSpec({"t": {0: 5, 1: -2}})


def test_bad_write_options_are_named() -> None:
    with pytest.raises(SparkOptionError, match="unknown option 'subscribe' for a tidelog write"):
        parse_write_options({**BOOT, "subscribe": "t"})
    with pytest.raises(SparkOptionError, match=r"option 'kafka\.acks' must be all, -1, 1 or 0"):
        parse_write_options({**BOOT, "kafka.acks": "some"})
    assert parse_write_options({**BOOT, "topic": "t"}).acks == -1


def test_offset_json_round_trip() -> None:
    offsets = {TopicPartition("b", 1): 7, TopicPartition("a", 0): 3, TopicPartition("b", 0): 5}
    assert to_json(offsets) == {"a": {"0": 3}, "b": {"0": 5, "1": 7}}
    assert from_json(to_json(offsets)) == offsets


def test_rate_limit_splits_in_proportion_to_backlog() -> None:
    a, b, c = (TopicPartition("t", p) for p in range(3))
    start = {a: 0, b: 100, c: 0}
    latest = {a: 200, b: 150, c: 10}
    end = rate_limit(start, latest, 45)
    assert sum(end[tp] - start[tp] for tp in start) == 45
    # Shares of 45 over backlogs 200/50/10: 34.6, 8.65, 1.73 -> floors 34, 8, 1; the two
    # units left go to the largest remainders (c: .73, b: .65).
    assert (end[a] - start[a], end[b] - start[b], end[c] - start[c]) == (34, 9, 2)
    assert rate_limit(start, latest, 1000) == latest


@given(
    st.lists(st.tuples(st.integers(0, 1000), st.integers(0, 1000)), min_size=1, max_size=8),
    st.integers(1, 3000),
)
def test_rate_limit_never_exceeds_the_limit_and_always_progresses(
    pairs: list[tuple[int, int]], limit: int
) -> None:
    start = {TopicPartition("t", i): s for i, (s, _) in enumerate(pairs)}
    latest = {TopicPartition("t", i): s + n for i, (s, n) in enumerate(pairs)}
    end = rate_limit(start, latest, limit)
    admitted = [end[tp] - start[tp] for tp in start]
    assert all(0 <= x <= latest[tp] - start[tp] for x, tp in zip(admitted, start, strict=True))
    assert sum(admitted) == min(limit, sum(n for _, n in pairs))


def test_split_ranges_follows_min_partitions() -> None:
    a, b = TopicPartition("t", 0), TopicPartition("t", 1)
    ranges = [OffsetRange(a, 0, 90), OffsetRange(b, 5, 15), OffsetRange(b, 3, 3)]
    assert split_ranges(ranges, None) == ranges[:2]
    pieces = split_ranges(ranges, 10)
    assert [(r.tp, r.size) for r in pieces if r.tp == b] == [(b, 10)]
    assert len([r for r in pieces if r.tp == a]) == 9
    # The pieces tile each range exactly.
    assert sorted(o for r in pieces if r.tp == a for o in range(r.from_offset, r.until_offset)) == (
        list(range(90))
    )


def test_murmur2_matches_kafka_python() -> None:
    from kafka.partitioner.default import murmur2 as reference

    for key in (b"", b"a", b"ab", b"abc", b"21", b"foobar", b"customer-42", bytes(range(37))):
        assert murmur2(key) & 0x7FFFFFFF == reference(key) & 0x7FFFFFFF
        assert default_partition(key, 7) == (reference(key) & 0x7FFFFFFF) % 7


@pytest.mark.parametrize("compression", list(Compression))
def test_column_decoder_agrees_with_the_client_decoder(compression: Compression) -> None:
    records = [
        Record(
            value=None if i == 3 else bytes([i]) * (i * 40),
            key=None if i % 2 else f"k{i}".encode(),
            headers=[("h", b"x" * i), ("n", None)] if i % 3 == 0 else (),
            timestamp_ms=1_700_000_000_000 + i * 1000,
        )
        for i in range(20)
    ]
    buf = build_batch(records[:10], base_offset=100, compression=compression) + build_batch(
        records[10:], base_offset=110, compression=compression
    )
    expected = [r for r in decode_records(buf) if 105 <= r.offset < 117]
    columns = Columns()
    next_offset = decode_into(
        buf[:-5] + buf[-5:], columns, from_offset=105, until_offset=117, include_headers=True
    )
    assert next_offset == 120
    assert columns.offsets == [r.offset for r in expected]
    assert columns.keys == [r.key for r in expected]
    assert columns.values == [r.value for r in expected]
    assert columns.timestamps_us == [r.timestamp_ms * 1000 for r in expected]
    assert columns.headers == [list(r.headers) for r in expected]
    # A batch cut short at the end (a fetch's max_bytes) is left for the next fetch.
    cut = Columns()
    assert decode_into(buf[:-5], cut, from_offset=105, until_offset=117, include_headers=False) == (
        110
    )
    assert cut.offsets == list(range(105, 110))


def test_write_encoder_matches_the_client_batch_builder() -> None:
    from tidelog.protocol.batch_builder import encode_batch

    records = [
        (None if i % 3 == 0 else f"key-{i}".encode(), None if i == 5 else b"v" * (i * 300), h)
        for i, h in enumerate([(), [("a", b"1"), ("b", None)], ()] * 30)
    ]
    expected = build_batch(
        [Record(value=v, key=k, headers=h) for k, v, h in records], base_timestamp_ms=1234
    )
    assert encode_batch(records, 1234) == expected


# --- issue 31 point 2: every option of Spark's Kafka connector (pure parts) ----------------


def test_starting_and_ending_specs_follow_sparks_precedence(
    caplog: pytest.LogCaptureFixture,
) -> None:
    both = {
        **BOOT,
        "subscribe": "t",
        "startingOffsets": "earliest",
        "startingOffsetsByTimestamp": '{"t": {"0": 7}}',
        "endingOffsets": "latest",
        "endingOffsetsByTimestamp": '{"t": {"0": 9}}',
    }
    with caplog.at_level(logging.WARNING, logger="tidelog.spark.options"):
        parsed = parse_read_options({k.lower(): v for k, v in both.items()}, streaming=False)
    assert parsed.starting == PartitionTimestampSpec({"t": {0: 7}})
    assert parsed.ending == PartitionTimestampSpec({"t": {0: 9}})
    assert "option 'startingOffsets' is ignored: 'startingOffsetsByTimestamp' takes precedence" in (
        caplog.text
    )
    top = parse_read_options(
        {**both, "startingTimestamp": "5", "endingTimestamp": "6"}, streaming=False
    )
    assert (top.starting, top.ending) == (TimestampSpec(5), TimestampSpec(6))
    assert top.starting_timestamp_strategy == "error"  # Spark's default
    latest = parse_read_options(
        {**BOOT, "subscribe": "t", "startingOffsetsByTimestampStrategy": "LATEST"}, streaming=True
    )
    assert latest.starting_timestamp_strategy == "latest"


def test_trigger_group_and_retry_options_are_parsed() -> None:
    parsed = parse_read_options(
        {
            **BOOT,
            "subscribe": "t",
            "minoffsetspertrigger": "50",
            "maxtriggerdelay": "30s",
            "maxrecordsperpartition": "1000",
            "kafka.group.id": "billing",
            "fetchoffset.numretries": "4",
            "fetchoffset.retryintervalms": "25",
        },
        streaming=True,
    )
    assert parsed.min_offsets_per_trigger == 50
    assert parsed.max_trigger_delay_ms == 30_000
    assert parsed.max_records_per_partition == 1000
    assert (parsed.group_id, parsed.group_id_prefix) == ("billing", "spark-kafka-source")
    assert (parsed.fetch_offset_retries, parsed.fetch_offset_retry_interval_ms) == (4, 25)
    default = parse_read_options({**BOOT, "subscribe": "t"}, streaming=False)
    assert default.max_trigger_delay_ms == 15 * 60_000
    assert (default.group_id, default.group_id_prefix) == (None, "spark-kafka-relation")
    assert default.fetch_offset_retries is None
    prefixed = parse_read_options(
        {**BOOT, "subscribe": "t", "groupidprefix": "etl"}, streaming=True
    )
    assert prefixed.group_id_prefix == "etl"
    for raw, ms in (
        ("100", 100),
        ("250ms", 250),
        ("2m", 120_000),
        ("1h", 3_600_000),
        ("1d", 86_400_000),
    ):
        options = {**BOOT, "subscribe": "t", "minOffsetsPerTrigger": "1", "maxTriggerDelay": raw}
        assert parse_read_options(options, streaming=True).max_trigger_delay_ms == ms


def test_kafka_client_properties_are_mapped_ignored_or_refused(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.WARNING, logger="tidelog.spark.kafka_params"):
        read = parse_read_options(
            {
                **BOOT,
                "subscribe": "t",
                "kafka.max.poll.records": "7",
                "kafka.fetch.max.bytes": "2000000",
                "kafka.max.partition.fetch.bytes": "1048576",
                "kafka.session.timeout.ms": "6000",
                "kafka.no.such.thing": "x",
            },
            streaming=True,
        )
    assert read.max_poll_records == 7
    assert read.fetch_max_bytes == 1048576  # a task fetches one partition: the smaller
    assert (
        "option 'kafka.session.timeout.ms' has no effect on a tidelog streaming read and is "
        "ignored: tidelog reads assign partitions and join no consumer group"
    ) in caplog.text
    assert (
        "option 'kafka.no.such.thing' is not a Kafka client property tidelog uses for a "
        "streaming read; ignored"
    ) in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="tidelog.spark.kafka_params"):
        write = parse_write_options(
            {
                **BOOT,
                "topic": "t",
                "kafka.compression.type": "ZSTD",
                "kafka.compression.zstd.level": "9",
                "kafka.batch.size": "65536",
                "kafka.linger.ms": "5",
                "kafka.delivery.timeout.ms": "200000",
            }
        )
    assert write.compression == Compression.ZSTD
    assert write.compression_levels.zstd == 9
    assert write.batch_bytes == 65536
    assert write.retry_timeout_ms == 200000
    assert "option 'kafka.linger.ms' has no effect on a tidelog write" in caplog.text
    assert parse_write_options({**BOOT, "topic": "t"}).compression == Compression.NONE
    bad_writes = [
        (
            {"kafka.compression.type": "brotli"},
            "option 'kafka.compression.type' must be one of "
            "none, gzip, snappy, lz4, zstd, not 'brotli'",
        ),
        (
            {"kafka.compression.gzip.level": "12"},
            "option 'kafka.compression.gzip.level' must be between -1 and 9, not 12",
        ),
        ({"kafka.linger.ms": "-1"}, "option 'kafka.linger.ms' must be at least 0, not -1"),
        ({"kafka.batch.size": "big"}, "option 'kafka.batch.size' must be an integer, not 'big'"),
        (
            {"kafka.delivery.timeout.ms": "1000"},
            "option 'kafka.delivery.timeout.ms' (1000) must "
            "be at least 'kafka.request.timeout.ms' (30000)",
        ),
        (
            {"kafka.value.serializer": "x"},
            "option 'kafka.value.serializer' (Kafka's "
            "'value.serializer') is not supported by Spark's Kafka connector nor tidelog",
        ),
    ]
    for extra, message in bad_writes:
        with pytest.raises(SparkOptionError) as info:
            parse_write_options({**BOOT, "topic": "t", **extra})
        assert message in str(info.value)


def test_split_ranges_follows_max_records_per_partition() -> None:
    a, b = TopicPartition("t", 0), TopicPartition("t", 1)
    ranges = [OffsetRange(a, 0, 100), OffsetRange(b, 10, 35)]
    pieces = split_ranges(ranges, None, 30)
    # ceil(100 / 30) = 4 even pieces of a, ceil(25 / 30) = 1 of b.
    assert [(r.tp.partition, r.from_offset, r.until_offset) for r in pieces] == [
        (0, 0, 25),
        (0, 25, 50),
        (0, 50, 75),
        (0, 75, 100),
        (1, 10, 35),
    ]
    # minPartitions above the pieces cuts them again (Spark's order: max records first).
    assert len(split_ranges(ranges, 10, 30)) >= 9
    assert all(r.size <= 30 for r in split_ranges(ranges, 2, 30))


def test_trigger_delay_waits_for_min_offsets_or_max_delay() -> None:
    clock = [0.0]
    delay = TriggerDelay(50, 1000, lambda: clock[0])
    tp = TopicPartition("t", 0)
    assert delay.admits({tp: 0}, {tp: 10})  # the first trigger of a run admits
    clock[0] = 10
    assert not delay.admits({tp: 10}, {tp: 30})  # 20 < 50 and 10 ms < 1 s
    assert delay.admits({tp: 10}, {tp: 60})  # 50 available
    clock[0] = 500
    assert not delay.admits({tp: 60}, {tp: 61})
    clock[0] = 1010
    assert delay.admits({tp: 60}, {tp: 61})  # 1 s since the last admitting trigger
    # A partition missing from the start (new) counts from its latest: nothing.
    assert not delay.admits({}, {tp: 1000})


def test_limit_rows_slices_arrow_batches() -> None:
    import pyarrow as pa

    from tidelog.spark.admission import limit_rows

    batches = [pa.record_batch({"x": list(range(10))}), pa.record_batch({"x": [10, 11]})]
    sliced = list(limit_rows(iter(batches), 4))
    assert [b.num_rows for b in sliced] == [4, 4, 2, 2]
    assert [v for b in sliced for v in b.column(0).to_pylist()] == list(range(12))
    assert list(limit_rows(iter(batches), None)) == batches


@pytest.mark.parametrize("codec", list(Compression))
def test_sink_batches_compress_as_the_client_reads_them(codec: Compression) -> None:
    from tidelog.spark.compressed import encode_sink_batch
    from tidelog.storage.compression import DEFAULT_LEVELS

    records = [(f"k{i}".encode(), b"value-%d" % i * 20, [("h", b"1")]) for i in range(50)]
    batch = encode_sink_batch(records, 1234, codec, DEFAULT_LEVELS, transactional=True)
    attributes = int.from_bytes(batch[21:23], "big")
    assert attributes & 0x07 == codec
    assert attributes & 0x10  # transactional
    decoded = decode_records(batch)
    assert [(r.key, r.value, list(r.headers)) for r in decoded] == [
        (k, v, list(h)) for k, v, h in records
    ]
    if codec != Compression.NONE:
        assert len(batch) < len(encode_sink_batch(records, 1234, Compression.NONE, DEFAULT_LEVELS))


def test_retry_limit_bounds_offset_lookups() -> None:
    from tidelog.spark.errors import ConnectorError
    from tidelog.spark.session import Backoff, RetryLimit

    backoff = Backoff(1e12, "offsets of t", RetryLimit(retries=2, interval_s=0.01))
    assert backoff.next_delay(0.0, "down") == 0.01
    assert backoff.next_delay(0.0, "down") == 0.01
    with pytest.raises(ConnectorError, match="offsets of t: gave up after 3 attempts"):
        backoff.next_delay(0.0, "down")
    unbounded = Backoff(1e12, "x")
    assert [unbounded.next_delay(0.0, "down") for _ in range(3)] == [0.1, 0.2, 0.4]


# --- issue 31 point 2 on a real SparkSession ------------------------------------------------

T0 = 1_700_000_000_000


def _timed_topic(bootstrap: str, name: str, partitions: int = 2, count: int = 100) -> str:
    """``count`` records per partition, record ``i`` stamped ``T0 + i`` ms."""
    from tests.spark.conftest import create_topic, produce, unique

    topic = create_topic(bootstrap, unique(name), partitions)
    for p in range(partitions):
        records = [Record(f"{p}:{i}".encode(), timestamp_ms=T0 + i) for i in range(count)]
        produce(bootstrap, topic, p, records)
    return topic


def _batch(spark: Any, bootstrap: str, topic: str, **options: str) -> Any:
    reader = (
        spark.read.format("tidelog")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
    )
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load()


def _offsets(df: Any) -> list[tuple[int, int]]:
    return sorted((r.partition, r.offset) for r in df.select("partition", "offset").collect())


def _error(spark_call: Callable[[], object]) -> str:
    from pyspark.errors import PySparkException

    with pytest.raises(PySparkException) as info:
        spark_call()
    return str(info.value)


@pytest.mark.spark
@pytest.mark.integration
def test_timestamp_options_on_batch_reads(spark: Any, broker: Any) -> None:
    boot = broker.bootstrap
    topic = _timed_topic(boot, "bytime")
    by_partition = _batch(
        spark,
        boot,
        topic,
        startingOffsetsByTimestamp=f'{{"{topic}": {{"0": {T0 + 10}, "1": {T0 + 50}}}}}',
        endingOffsetsByTimestamp=f'{{"{topic}": {{"0": {T0 + 20}, "1": {T0 + 60}}}}}',
    )
    assert _offsets(by_partition) == [(0, o) for o in range(10, 20)] + [
        (1, o) for o in range(50, 60)
    ]
    # endingTimestamp over endingOffsets (Spark's precedence); before: startingOffsets.
    ending = _batch(spark, boot, topic, endingTimestamp=str(T0 + 30), endingOffsets="latest")
    assert _offsets(ending) == [(p, o) for p in range(2) for o in range(30)]
    # An ending timestamp past every record ends at latest.
    assert len(_batch(spark, boot, topic, endingTimestamp=str(T0 + 10_000)).collect()) == 200

    # A starting timestamp past every record: error by default, latest with the strategy.
    late = {"startingTimestamp": str(T0 + 10_000)}
    message = _error(lambda: _batch(spark, boot, topic, **late).collect())
    assert f"option 'startingTimestamp': no record of {topic}-0 at or after {T0 + 10_000}" in (
        message
    )
    assert "set it to 'latest'" in message
    strategy = {**late, "startingOffsetsByTimestampStrategy": "latest"}
    assert _batch(spark, boot, topic, **strategy).collect() == []

    # Every partition must have a timestamp (Spark's rule).
    missing = f'{{"{topic}": {{"0": {T0}}}}}'
    message = _error(
        lambda: _batch(spark, boot, topic, startingOffsetsByTimestamp=missing).collect()
    )
    assert (
        "option 'startingOffsetsByTimestamp' must give a timestamp for every partition the "
        f"query reads, and only those (as Spark's Kafka connector): missing {topic}-1"
    ) in message


@pytest.mark.spark
@pytest.mark.integration
def test_partition_and_client_options_on_batch_reads(spark: Any, broker: Any) -> None:
    boot = broker.bootstrap
    topic = _timed_topic(boot, "splits")
    # maxRecordsPerPartition: ceil(100 / 30) = 4 tasks per partition.
    split = _batch(spark, boot, topic, maxRecordsPerPartition="30")
    assert split.rdd.getNumPartitions() == 8
    assert _offsets(split) == [(p, o) for p in range(2) for o in range(100)]
    # With minPartitions above that, pieces are cut again.
    assert (
        _batch(
            spark, boot, topic, maxRecordsPerPartition="30", minPartitions="12"
        ).rdd.getNumPartitions()
        >= 12
    )
    # Client properties that apply, have no effect, or are unknown: the read is the same.
    client = _batch(
        spark,
        boot,
        topic,
        **{
            "kafka.max.poll.records": "7",
            "kafka.max.partition.fetch.bytes": "2048",
            "kafka.fetch.max.bytes": "4096",
            "kafka.session.timeout.ms": "6000",
            "kafka.no.such.property": "x",
            "kafka.group.id": "billing-readers",
            "groupIdPrefix": "ignored-with-group-id",
        },
    )
    assert _offsets(client) == [(p, o) for p in range(2) for o in range(100)]
    # A property Spark's connector refuses, and a bad value, fail the query by name.
    message = _error(
        lambda: _batch(spark, boot, topic, **{"kafka.enable.auto.commit": "true"}).collect()
    )
    assert "option 'kafka.enable.auto.commit' (Kafka's 'enable.auto.commit') is not supported" in (
        message
    )
    message = _error(
        lambda: _batch(spark, boot, topic, **{"kafka.max.poll.records": "none"}).collect()
    )
    assert "option 'kafka.max.poll.records' must be an integer, not 'none'" in message


@pytest.mark.spark
@pytest.mark.integration
def test_fetch_offset_retries_bound_the_drivers_lookups(spark: Any) -> None:
    with socket.socket() as s:  # a port nothing listens on once closed
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    options = {
        "fetchOffset.numRetries": "2",
        "fetchOffset.retryIntervalMs": "10",
        "kafka.request.timeout.ms": "2000",
    }
    message = _error(lambda: _batch(spark, f"127.0.0.1:{port}", "t", **options).collect())
    assert "partition discovery: gave up after 3 attempts" in message


def _memory_stream(spark: Any, bootstrap: str, topic: str, name: str, **options: str) -> Any:
    reader = (
        spark.readStream.format("tidelog")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
    )
    for key, value in options.items():
        reader = reader.option(key, value)
    return (
        reader.load()
        .selectExpr("CAST(value AS STRING) AS value")
        .writeStream.format("memory")
        .queryName(name)
        .start()
    )


def _rows(spark: Any, name: str) -> int:
    return int(spark.sql(f"SELECT count(*) AS n FROM {name}").collect()[0].n)


@pytest.mark.spark
@pytest.mark.integration
def test_min_offsets_per_trigger_waits_for_enough_records(spark: Any, broker: Any) -> None:
    from tests.spark.conftest import produce

    boot = broker.bootstrap
    topic = _timed_topic(boot, "minoffsets", partitions=1, count=100)
    name = f"minoffsets_{uuid.uuid4().hex[:8]}"
    query = _memory_stream(
        spark, boot, topic, name, minOffsetsPerTrigger="50", maxTriggerDelay="1h"
    )
    try:
        query.processAllAvailable()  # the first trigger of a run admits
        assert _rows(spark, name) == 100
        produce(boot, topic, 0, [Record(b"a") for _ in range(20)])
        query.processAllAvailable()  # 20 < 50 and the delay (1h) has not passed: no batch
        assert _rows(spark, name) == 100
        produce(boot, topic, 0, [Record(b"b") for _ in range(40)])
        query.processAllAvailable()
        assert _rows(spark, name) == 160
        sizes = [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]]
        assert sizes == [100, 60]
        assert query.exception() is None
    finally:
        query.stop()


@pytest.mark.spark
@pytest.mark.integration
def test_max_trigger_delay_admits_fewer_than_the_minimum(spark: Any, broker: Any) -> None:
    from tests.spark.conftest import produce

    boot = broker.bootstrap
    topic = _timed_topic(boot, "triggerdelay", partitions=1, count=10)
    name = f"triggerdelay_{uuid.uuid4().hex[:8]}"
    query = _memory_stream(
        spark, boot, topic, name, minOffsetsPerTrigger="1000", maxTriggerDelay="1s"
    )
    try:
        query.processAllAvailable()
        assert _rows(spark, name) == 10
        produce(boot, topic, 0, [Record(b"late") for _ in range(5)])
        # Never 1000 records: the batch comes once maxTriggerDelay has passed.
        deadline = time.monotonic() + 300
        while _rows(spark, name) < 15:
            assert query.exception() is None
            assert time.monotonic() < deadline, "maxTriggerDelay never fired a micro-batch"
            time.sleep(0.5)
        assert _rows(spark, name) == 15
    finally:
        query.stop()


@pytest.mark.spark
@pytest.mark.integration
def test_timestamp_and_split_options_on_a_stream(spark: Any, broker: Any) -> None:
    boot = broker.bootstrap
    topic = _timed_topic(boot, "streambytime")
    name = f"streambytime_{uuid.uuid4().hex[:8]}"
    query = (
        spark.readStream.format("tidelog")
        .option("kafka.bootstrap.servers", boot)
        .option("subscribe", topic)
        .option("startingOffsetsByTimestamp", f'{{"{topic}": {{"0": {T0 + 40}, "1": {T0 + 90}}}}}')
        .option("maxRecordsPerPartition", "25")
        .option("kafka.max.poll.records", "10")
        .load()
        .selectExpr("partition", "offset")
        .writeStream.format("memory")
        .queryName(name)
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(600)
    assert query.exception() is None
    got = sorted((r.partition, r.offset) for r in spark.sql(f"SELECT * FROM {name}").collect())
    assert got == [(0, o) for o in range(40, 100)] + [(1, o) for o in range(90, 100)]


@pytest.mark.spark
@pytest.mark.integration
def test_a_bad_streaming_option_fails_with_the_connectors_message(spark: Any, broker: Any) -> None:
    boot = broker.bootstrap
    for options, expected in (
        (
            {"maxTriggerDelay": "soon", "minOffsetsPerTrigger": "5"},
            "option 'maxTriggerDelay' must be a time",
        ),
        ({"endingTimestamp": "5"}, "option 'endingTimestamp' is for batch queries only"),
        ({"kafka.auto.offset.reset": "earliest"}, "option 'kafka.auto.offset.reset'"),
    ):
        name = f"bad_{uuid.uuid4().hex[:8]}"

        def run(options: dict[str, str] = options, name: str = name) -> None:
            query = _memory_stream(spark, boot, "t", name, **options)
            try:
                query.processAllAvailable()
            finally:
                query.stop()

        message = _error(run)
        assert expected in message
        assert "UnboundLocalError" not in message


def _raw_batches(bootstrap: str, topic: str) -> list[tuple[int, bytes]]:
    """(attributes, batch bytes) of every batch of partition 0, fetched raw."""
    from tidelog.client import BlockingClient
    from tidelog.client.client import FetchRequestPartition

    tp = TopicPartition(topic, 0)
    with BlockingClient(bootstrap) as client:
        data = bytes(client.fetch({tp: FetchRequestPartition(0)}, max_wait_ms=0)[tp].records)
    out = []
    while len(data) >= 61:
        size = 12 + int.from_bytes(data[8:12], "big")
        out.append((int.from_bytes(data[21:23], "big"), data[:size]))
        data = data[size:]
    return out


@pytest.mark.parametrize(
    ("codec", "exactly_once"),
    [("gzip", "false"), ("snappy", "false"), ("lz4", "false"), ("zstd", "true")],
)
@pytest.mark.spark
@pytest.mark.integration
def test_compression_type_compresses_what_the_sink_writes(
    spark: Any, broker: Any, codec: str, exactly_once: str
) -> None:
    from tests.spark.conftest import create_topic, unique

    boot = broker.bootstrap
    values = [f"order-{i:04d}-" + "x" * 200 for i in range(300)]
    topic = create_topic(boot, unique(f"compressed-{codec}"))
    (
        spark.createDataFrame([(v,) for v in values], "value string")
        .coalesce(1)
        .write.format("tidelog")
        .option("kafka.bootstrap.servers", boot)
        .option("topic", topic)
        .option("kafka.compression.type", codec)
        .option("kafka.batch.size", "16384")
        .option("exactlyOnce", exactly_once)
        .mode("append")
        .save()
    )
    batches = [(a, b) for a, b in _raw_batches(boot, topic) if not a & 0x20]  # no markers
    assert len(batches) > 1  # kafka.batch.size cut the 300 rows (~66 KB) into batches
    assert {a & 0x07 for a, _ in batches} == {int(COMPRESSION_TYPES[codec])}
    assert {bool(a & 0x10) for a, _ in batches} == {exactly_once == "true"}
    assert sum(len(b) for _, b in batches) < 300 * 200 / 4  # the repeated x's compress
    decoded = decode_records(b"".join(b for _, b in batches))
    assert [bytes(r.value or b"").decode() for r in decoded] == values
    message = _error(
        lambda: (
            spark.createDataFrame([("v",)], "value string")
            .write.format("tidelog")
            .option("kafka.bootstrap.servers", boot)
            .option("topic", topic)
            .option("kafka.compression.type", "brotli")
            .mode("append")
            .save()
        )
    )
    assert "option 'kafka.compression.type' must be one of none, gzip, snappy, lz4, zstd" in message
