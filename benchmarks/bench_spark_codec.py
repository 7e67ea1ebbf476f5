"""The Spark connector's executor codecs outside Spark: fetched record batches into Arrow,
and Arrow rows into records sections, each old way (record by record) beside the new one
(column-wise, ``tidelog.spark.arrow_decode`` / ``arrow_encode``).

Run: ``.venv/bin/python benchmarks/bench_spark_codec.py [records]`` (prints records per
CPU second, best of 5; CPU time so that other load on the machine counts less). Values
are 100 bytes, keys null, 2,000 records a batch as the sink writes them; aiokafka's
compiled ``DefaultRecordBatch`` (a decoder a PyPI package ships, no Arrow built) is shown
for scale when installed.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable

import pyarrow as pa
from pyspark.sql.pandas.types import to_arrow_schema

from tidelog.model import TopicPartition
from tidelog.protocol.batch_builder import encode_records, frame_batch
from tidelog.spark.arrow_decode import decode_fetch
from tidelog.spark.arrow_encode import encode_records_arrow, send_batch
from tidelog.spark.decode import Columns, decode_into, to_record_batch
from tidelog.spark.options import parse_write_options
from tidelog.spark.producer import Producer
from tidelog.spark.source import read_schema

TP = TopicPartition("t", 0)
PER_BATCH = 2000


def rate(name: str, records: int, fn: Callable[[], object]) -> float:
    best = float("inf")
    for _ in range(5):
        start = time.process_time()
        fn()
        best = min(best, time.process_time() - start)
    per_s = records / best if best else float("inf")
    print(f"{name:<58} {per_s / 1e3:9.0f}k records/CPU s")
    return per_s


def fetch_response(records: int) -> bytes:
    values = [(b"%010d" % i).ljust(100, b"x") for i in range(records)]
    out = []
    for start in range(0, records, PER_BATCH):
        chunk = values[start : start + PER_BATCH]
        section = encode_records([(None, v, ()) for v in chunk])
        ts = 1_700_000_000_000
        out.append(
            frame_batch(
                section,
                count=len(chunk),
                base_timestamp_ms=ts,
                max_timestamp_ms=ts,
                base_offset=start,
            )
        )
    return b"".join(out)


def main() -> None:
    records = int(sys.argv[1]) if len(sys.argv) > 1 else 200_000
    buf = fetch_response(records)
    schema = to_arrow_schema(read_schema(False), timezone="UTC")

    def old_read() -> pa.RecordBatch:
        columns = Columns()
        decode_into(buf, columns, from_offset=0, until_offset=records, include_headers=False)
        return to_record_batch(columns, TP, schema, include_headers=False)

    def new_read() -> object:
        return decode_fetch(
            buf, TP, schema, from_offset=0, until_offset=records, include_headers=False
        )

    print(f"{records} records of 100 bytes, {len(buf) / 1e6:.1f} MB")
    old = rate("read: record by record + Arrow from lists (before)", records, old_read)
    new = rate("read: column-wise straight into Arrow (arrow_decode)", records, new_read)
    print(f"{'':<58} {new / old:9.1f}x")
    try:
        from aiokafka.record.default_records import DefaultRecordBatch  # type: ignore[import-not-found]
    except ImportError:
        pass
    else:

        def aiokafka_read() -> None:
            pos = 0
            values, offsets = [], []
            while pos < len(buf):
                size = int.from_bytes(buf[pos + 8 : pos + 12], "big") + 12
                for r in DefaultRecordBatch(buf[pos : pos + size]):
                    values.append(r.value)
                    offsets.append(r.offset)
                pos += size

        rate("read: aiokafka's compiled decoder, values+offsets (no Arrow)", records, aiokafka_read)

    values = pa.array([(b"%010d" % i).ljust(100, b"x") for i in range(records)], pa.binary())
    pylist = values.to_pylist()

    def old_write() -> None:
        for start in range(0, records, PER_BATCH):
            encode_records([(None, v, ()) for v in pylist[start : start + PER_BATCH]])

    def new_write() -> None:
        for start in range(0, records, PER_BATCH):
            encode_records_arrow(None, values.slice(start, PER_BATCH))

    old = rate("write: encode_records from Python rows, encode only (before)", records, old_write)
    new = rate("write: column-wise from Arrow, encode only (arrow_encode)", records, new_write)
    print(f"{'':<58} {new / old:9.1f}x")

    # The whole task side: Arrow batch in, records sections queued on the producer.
    producer = _Unsent()
    options = parse_write_options({"kafka.bootstrap.servers": "127.0.0.1:1", "topic": "t"})
    batch = pa.RecordBatch.from_arrays([values], names=["value"])

    def old_task() -> None:
        for start in range(0, records, 10_000):
            for v in batch.column(0).slice(start, 10_000).to_pylist():
                producer.send("t", v)
        producer.drop()

    def new_task() -> None:
        for start in range(0, records, 10_000):
            send_batch(producer, options, batch.slice(start, 10_000))
        producer.drop()

    old = rate("write task: rows to Producer.send one by one (before)", records, old_task)
    new = rate("write task: send_batch, column-wise", records, new_task)
    print(f"{'':<58} {new / old:9.1f}x")

    keys = pa.array([b"customer-%08d" % (i % 5000) for i in range(records)], pa.binary())
    keyed = pa.RecordBatch.from_arrays([keys, values], names=["key", "value"])
    producer.partitions = 12

    def keyed_old() -> None:
        for start in range(0, records, 10_000):
            part = keyed.slice(start, 10_000)
            for k, v in zip(part.column(0).to_pylist(), part.column(1).to_pylist(), strict=True):
                producer.send("t", v, k)
        producer.drop()

    def keyed_new() -> None:
        for start in range(0, records, 10_000):
            send_batch(producer, options, keyed.slice(start, 10_000))
        producer.drop()

    old = rate("keyed write task (12 partitions): one by one (before)", records, keyed_old)
    new = rate("keyed write task (12 partitions): send_batch, column-wise", records, keyed_new)
    print(f"{'':<58} {new / old:9.1f}x")


class _Unsent(Producer):
    """A producer of a ``partitions``-partition topic that encodes but never sends."""

    def __init__(self) -> None:
        self.partitions = 1
        super().__init__(
            "127.0.0.1:1",
            client_id="bench",
            request_timeout_ms=1000,
            acks=-1,
            retry_timeout_ms=1000,
            batch_records=1 << 40,
            batch_bytes=512 * 1024,
        )

    def num_partitions(self, topic: str) -> int:
        return self.partitions

    def flush(self) -> None:
        pass  # never sent

    def drop(self) -> None:
        for tp in list(self._rows):
            self._seal(tp)
        self._sections.clear()
        self._pending_bytes = 0


if __name__ == "__main__":
    main()
