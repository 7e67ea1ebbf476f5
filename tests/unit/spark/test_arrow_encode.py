"""``tidelog.spark.arrow_encode`` without Spark or a broker: the column-wise encoder writes
the one encoder's bytes (``batch_builder.encode_records``), and ``send_batch`` picks the
partitions Kafka's producer would, on a producer whose network is stubbed."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import pytest

pytest.importorskip("pyarrow")  # the spark extra (scripts/bootstrap.sh spark)

import pyarrow as pa

from tidelog.client import decode_records
from tidelog.model import TopicPartition
from tidelog.protocol.batch_builder import encode_records, frame_batch
from tidelog.protocol.partitioner import partition_for_key
from tidelog.spark.arrow_encode import encode_records_arrow, key_partitions, send_batch
from tidelog.spark.errors import ConnectorError
from tidelog.spark.options import SparkOptionError, parse_write_options
from tidelog.spark.producer import Producer

SIZES = [None, 0, 1, 12, 13, 63, 64, 100, 8191, 8192, 70_000]


def blob(size: int | None, seed: int) -> bytes | None:
    return None if size is None else bytes((seed + i) % 251 for i in range(size))


@pytest.mark.parametrize("rows", [1, 2, 65, 300, 9000])
def test_the_bytes_are_the_one_encoders(rows: int) -> None:
    values = [blob(SIZES[i % len(SIZES)], i) for i in range(rows)]
    keys = [blob(SIZES[(i * 7) % 4], i + 1) for i in range(rows)]
    expected = encode_records([(k, v, ()) for k, v in zip(keys, values, strict=True)])
    got = encode_records_arrow(pa.array(keys, pa.binary()), pa.array(values, pa.binary()))
    assert got == expected


def test_no_key_column_and_a_sliced_value_column() -> None:
    values = pa.array([blob(100, i) for i in range(50)], pa.binary()).slice(10, 30)
    expected = encode_records([(None, v, ()) for v in values.to_pylist()])
    assert encode_records_arrow(None, values) == expected


class StubProducer(Producer):
    """A producer whose topics have ``partitions`` partitions and whose flushes keep the
    framed batches instead of sending them."""

    def __init__(self, partitions: int, batch_bytes: int = 512 * 1024) -> None:
        super().__init__(
            "127.0.0.1:1",
            client_id="t",
            request_timeout_ms=1000,
            acks=-1,
            retry_timeout_ms=1000,
            batch_bytes=batch_bytes,
        )
        self.partitions = partitions
        self.sent: dict[TopicPartition, list[bytes]] = {}

    def num_partitions(self, topic: str) -> int:
        return self.partitions

    async def _produce_all(
        self, batches: Mapping[TopicPartition, list[bytes]]
    ) -> dict[TopicPartition, str | None]:
        for tp, chunks in batches.items():
            self.sent.setdefault(tp, []).extend(chunks)
        return {}

    def records(self) -> dict[int, list[tuple[bytes | None, bytes | None]]]:
        return {
            tp.partition: [(r.key, r.value) for c in chunks for r in decode_records(c)]
            for tp, chunks in self.sent.items()
        }


OPTIONS = parse_write_options({"kafka.bootstrap.servers": "127.0.0.1:1", "topic": "t"})


def send(producer: StubProducer, columns: dict[str, Sequence[object]]) -> bool:
    types = {
        "key": pa.binary(),
        "value": pa.binary(),
        "topic": pa.string(),
        "partition": pa.int32(),
    }
    batch = pa.RecordBatch.from_arrays(
        [pa.array(v, types.get(k)) for k, v in columns.items()], names=list(columns)
    )
    done = send_batch(producer, OPTIONS, batch)
    producer.flush()
    return done


def test_keyed_rows_go_where_murmur2_says_in_order() -> None:
    producer = StubProducer(5)
    keys = [b"k%d" % (i % 17) for i in range(200)]
    values = [b"v%d" % i for i in range(200)]
    assert send(producer, {"key": keys, "value": values})
    expected: dict[int, list[tuple[bytes | None, bytes | None]]] = {}
    for k, v in zip(keys, values, strict=True):
        expected.setdefault(partition_for_key(k, 5), []).append((k, v))
    assert producer.records() == expected
    assert sum(producer.written.values()) == 200


def test_the_partition_column_wins_and_a_bad_one_is_named() -> None:
    producer = StubProducer(3)
    assert send(
        producer,
        {"value": [b"a", b"b", b"c"], "key": [b"x", None, b"y"], "partition": [2, None, 2]},
    )
    records = producer.records()
    assert records[2] == [(b"x", b"a"), (b"y", b"c")]
    assert sum(len(r) for r in records.values()) == 3
    with pytest.raises(
        ConnectorError, match=r"partition 3 of topic 't', which has partitions 0..2"
    ):
        send(StubProducer(3), {"value": [b"a"], "partition": [3]})


def test_rows_without_key_fill_a_batch_per_partition_in_turn() -> None:
    producer = StubProducer(3, batch_bytes=1000)
    values = [b"%03d" % i + b"." * 97 for i in range(40)]  # 116 bytes a row as counted
    assert send(producer, {"value": values})
    records = producer.records()
    assert sorted(v for r in records.values() for _k, v in r) == values
    assert all(len(r) >= 8 for r in records.values())  # sticky: whole batches, not rows
    assert all(len(c) > 1 for chunks in producer.sent.values() for c in chunks)


def test_headers_or_many_topics_go_row_by_row() -> None:
    producer = StubProducer(1)
    headers_type = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))
    batch = pa.RecordBatch.from_arrays(
        [pa.array([b"v"]), pa.array([[{"key": "h", "value": b"x"}]], headers_type)],
        names=["value", "headers"],
    )
    assert not send_batch(producer, OPTIONS, batch)
    assert not send(producer, {"value": [b"a", b"b"], "topic": ["t1", "t2"]})
    assert send(producer, {"value": [b"a", b"b"], "topic": ["t", None]})


def test_a_null_topic_without_the_option_is_named() -> None:
    options = parse_write_options({"kafka.bootstrap.servers": "127.0.0.1:1"})
    batch = pa.RecordBatch.from_arrays(
        [pa.array([b"a"]), pa.array([None], pa.string())], names=["value", "topic"]
    )
    with pytest.raises(SparkOptionError, match="null 'topic'"):
        send_batch(StubProducer(1), options, batch)


def test_sections_and_rows_keep_their_order_in_a_partition() -> None:
    producer = StubProducer(1)
    producer.send("t", b"first")
    send(producer, {"value": [b"second", b"third"]})
    producer.send("t", b"fourth")
    producer.flush()
    assert [v for _k, v in producer.records()[0]] == [b"first", b"second", b"third", b"fourth"]


def test_framed_sections_are_what_the_builder_frames() -> None:
    section = encode_records_arrow(None, pa.array([b"a", b"bb"]))
    batch = frame_batch(section, count=2, base_timestamp_ms=5, max_timestamp_ms=5)
    assert [(r.offset, r.value) for r in decode_records(batch)] == [(0, b"a"), (1, b"bb")]


def test_row_by_row_and_column_wise_rows_stick_alike() -> None:
    values = [b"%03d" % i + b"." * (i % 50) for i in range(100)]
    by_row = StubProducer(3, batch_bytes=500)
    for v in values:
        by_row.send("t", v)
    by_row.flush()
    by_column = StubProducer(3, batch_bytes=500)
    send(by_column, {"value": values[:30]})
    send(by_column, {"value": values[30:]})
    assert by_row.records() == by_column.records()
    assert len(by_row.records()) == 3


@pytest.mark.parametrize("partitions", [1, 7, 100])
def test_keys_hash_column_wise_as_kafka_does(partitions: int) -> None:
    keys = [b"", b"a", b"ab", b"abc", b"abcd", b"customer-00000017", bytes(range(256)) * 1]
    keys += [bytes([(i * 37 + j) % 256 for j in range(i % 41)]) for i in range(500)]
    array = pa.array(keys, pa.binary()).slice(1)
    expected = [partition_for_key(k, partitions) for k in keys[1:]]
    assert key_partitions(array, partitions).tolist() == expected


def test_long_keys_hash_one_by_one() -> None:
    keys = [b"x" * 300, b"short", None]
    got = key_partitions(pa.array(keys, pa.binary()), 9).tolist()
    assert got[:2] == [partition_for_key(b"x" * 300, 9), partition_for_key(b"short", 9)]
