"""Fixtures of the Spark tests: ONE SparkSession (local[2]) and one broker per session.

Spark's Python workers must run this interpreter (``PYSPARK_PYTHON``), which has pyarrow
and tidelog (editable install) — see docs/spark.md. The session's JVM is stopped by its
PID at the end. The cluster tests (test_failover.py) reuse the integration tests' real
ZooKeeper fixtures (``zookeeper`` per session, ``zk_connect`` with a chroot per test).
"""

from __future__ import annotations

import os
import sys
import time
import uuid
from collections.abc import Iterator, Sequence
from typing import Any

import pytest

from tests.harness import BrokerProcess
from tests.integration.conftest import zk_connect, zookeeper  # noqa: F401 - fixtures
from tidelog.client import BlockingClient, NewTopic, Record, build_batch
from tidelog.client.client import FetchRequestPartition
from tidelog.client.fetched_records import decode_fetched
from tidelog.errors import ErrorCode
from tidelog.model import TopicPartition


@pytest.fixture(scope="session")
def spark(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    from pyspark import SparkContext
    from pyspark.sql import SparkSession

    import tidelog.spark

    warehouse = tmp_path_factory.mktemp("spark-warehouse")
    session = (
        SparkSession.builder.master("local[2]")
        .appName("tidelog-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.warehouse.dir", str(warehouse))
        .config("spark.sql.streaming.stopTimeout", "30s")
        .config("spark.log.level", "WARN")
        .getOrCreate()
    )
    tidelog.spark.register(session)
    gateway = SparkContext._gateway
    proc = getattr(gateway, "proc", None)
    try:
        yield session
    finally:
        session.stop()
        if proc is not None and proc.poll() is None:
            proc.terminate()  # by PID: the JVM this fixture started
            try:
                proc.wait(30)
            except Exception:
                proc.kill()
                proc.wait(10)


@pytest.fixture(scope="session")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    process = BrokerProcess(tmp_path_factory.mktemp("spark-broker")).start()
    try:
        yield process
    finally:
        process.stop()


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def create_topic(bootstrap: str, name: str, partitions: int = 1) -> str:
    with BlockingClient(bootstrap) as client:
        result = client.create_topics([NewTopic(name, partitions, 1)])
        assert result[name].error_code == ErrorCode.NONE, result
    return name


def produce(
    bootstrap: str,
    topic: str,
    partition: int,
    records: Sequence[Record],
    *,
    timestamp_ms: int | None = None,
) -> None:
    """Write ``records`` acks=all, stamped ``timestamp_ms`` or their own timestamps, else now
    (a record stamped 0 is past the default retention and deleted at the broker's first
    retention check, 5 min after start, which a slow query may outlive)."""
    if timestamp_ms is None and all(r.timestamp_ms is None for r in records):
        timestamp_ms = int(time.time() * 1000)
    with BlockingClient(bootstrap) as client:
        for start in range(0, len(records), 1000):
            batch = build_batch(records[start : start + 1000], base_timestamp_ms=timestamp_ms)
            result = client.produce(TopicPartition(topic, partition), batch, acks=-1)
            assert result is not None
            assert result.error_code == ErrorCode.NONE, result


def read_all(bootstrap: str, topic: str, partition: int, *, deadline_s: float = 60.0) -> list[Any]:
    """Every data record of one partition up to its high watermark (a direct fetch loop).

    Each fetch moves on past its last whole batch, so a partition that ends with batches of
    no data records (transaction markers) is read to its end. Fails when the high watermark
    is not reached within ``deadline_s`` seconds.
    """
    out: list[Any] = []
    offset = 0
    tp = TopicPartition(topic, partition)
    deadline = time.monotonic() + deadline_s
    with BlockingClient(bootstrap) as client:
        while True:
            result = client.fetch({tp: FetchRequestPartition(offset)}, max_wait_ms=0)[tp]
            assert result.error_code == ErrorCode.NONE, result
            if offset >= result.high_watermark:
                return out
            assert time.monotonic() < deadline, (
                f"read_all({topic}-{partition}): at offset {offset}, high watermark "
                f"{result.high_watermark}, after {deadline_s:g} s; {len(out)} records read"
            )
            fetched = decode_fetched(result.records)
            out.extend(r for r in fetched.records if r.offset >= offset)
            if fetched.next_offset is not None:
                offset = max(offset, fetched.next_offset)


def create_partitions(bootstrap: str, topic: str, count: int) -> None:
    """CreatePartitions (API 37) v1: grow ``topic`` to ``count`` partitions."""
    import datetime

    from kio.schema.create_partitions.v1 import request as m

    with BlockingClient(bootstrap) as client:
        response = client.send(
            m.CreatePartitionsRequest(
                topics=(m.CreatePartitionsTopic(name=topic, count=count, assignments=None),),
                timeout=datetime.timedelta(seconds=30),
                validate_only=False,
            )
        )
    assert all(r.error_code == 0 for r in response.results), response


def delete_records(bootstrap: str, topic: str, partition: int, before: int) -> None:
    """DeleteRecords (API 21) v1: move the log start offset of one partition to ``before``."""
    import datetime

    from kio.schema.delete_records.v1 import request as m

    with BlockingClient(bootstrap) as client:
        response = client.send(
            m.DeleteRecordsRequest(
                topics=(
                    m.DeleteRecordsTopic(
                        name=topic,
                        partitions=(
                            m.DeleteRecordsPartition(partition_index=partition, offset=before),
                        ),
                    ),
                ),
                timeout=datetime.timedelta(seconds=30),
            )
        )
    codes = [p.error_code for t in response.topics for p in t.partitions]
    assert codes == [0], response
