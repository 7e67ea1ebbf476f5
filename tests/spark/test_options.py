"""Options, offsets arithmetic and the record decoder of the connector (no Spark, no IO)."""

from __future__ import annotations

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
from tidelog.spark.offsets import OffsetRange, from_json, rate_limit, split_ranges, to_json
from tidelog.spark.options import (
    Assign,
    EarliestSpec,
    LatestSpec,
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
            {**BOOT, "subscribe": "t", "groupIdPrefix": "g"},
            True,
            "of Spark's Kafka connector is not supported by tidelog: tidelog reads use no "
            "consumer group",
        ),
        (
            {**BOOT, "subscribe": "t", "startingOffsets": "earliest", "startingTimestamp": "5"},
            True,
            "options 'startingOffsets' and 'startingTimestamp' contradict each other",
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
