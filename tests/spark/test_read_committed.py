"""``kafka.isolation.level`` end to end: a real SparkSession reading a topic of a real
three-broker cluster that librdkafka's transactional producer wrote committed, aborted and
still open transactions to (KIP-98).

Batch reads with the default (read_committed) return exactly the committed records (and a
plain producer's); ``read_uncommitted`` returns every data record. A stream
(``Trigger.AvailableNow``) stops at the last stable offset, and picks up the open
transaction's records once it commits.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.harness import BrokerCluster
from tests.integration.cluster.helpers import create_topic, produce
from tests.spark.conftest import unique
from tidelog.testing.zookeeper import ZooKeeperProcess

confluent_kafka = pytest.importorskip("confluent_kafka")

pytestmark = [pytest.mark.spark, pytest.mark.integration]

PARTITIONS = 2


@pytest.fixture(scope="module")
def txn_cluster(
    tmp_path_factory: pytest.TempPathFactory, zookeeper: ZooKeeperProcess
) -> Iterator[BrokerCluster]:
    directory = tmp_path_factory.mktemp("read-committed-cluster")
    cluster = BrokerCluster(directory, f"{zookeeper.connect_string}/{directory.name}").start()
    try:
        yield cluster
    finally:
        cluster.stop()


def _transactional_producer(bootstrap: str, txn_id: str) -> Any:
    producer = confluent_kafka.Producer(
        {
            "bootstrap.servers": bootstrap,
            "transactional.id": txn_id,
            "linger.ms": 5,
            "transaction.timeout.ms": 300000,  # the open transaction outlives the test
        }
    )
    producer.init_transactions(60)
    return producer


def _send(producer: Any, topic: str, prefix: str, n: int) -> list[bytes]:
    values = [f"{prefix}-{i:03d}".encode() for i in range(n)]
    for i, value in enumerate(values):
        producer.produce(topic, value, partition=i % PARTITIONS)
    return values


def _batch(spark: Any, bootstrap: str, topic: str, **options: str) -> list[bytes]:
    reader = (
        spark.read.format("tidelog")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
    )
    for key, value in options.items():
        reader = reader.option(key, value)
    return sorted(bytes(r.value) for r in reader.load().select("value").collect())


def _stream_available_now(
    spark: Any, bootstrap: str, topic: str, out: Path, checkpoint: Path
) -> int:
    """One AvailableNow run into Parquet; returns the rows it read."""
    query = (
        spark.readStream.format("tidelog")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .load()
        .selectExpr("value", "partition", "offset")
        .writeStream.format("parquet")
        .option("path", str(out))
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(300)
    assert query.exception() is None, query.exception()
    return sum(p["numInputRows"] for p in query.recentProgress)


def test_read_committed_batch_and_stream(
    spark: Any, txn_cluster: BrokerCluster, tmp_path: Path
) -> None:
    bootstrap = txn_cluster.bootstrap
    topic = unique("read-committed")
    create_topic(txn_cluster, topic, partitions=PARTITIONS)

    producer = _transactional_producer(bootstrap, unique("txn"))
    producer.begin_transaction()
    committed = _send(producer, topic, "committed", 20)
    producer.commit_transaction(60)

    producer.begin_transaction()
    aborted = _send(producer, topic, "aborted", 20)
    # Written and replicated first: librdkafka's abort purges what it has not sent yet.
    assert producer.flush(60) == 0
    producer.abort_transaction(60)

    plain = [f"plain-{i:03d}".encode() for i in range(6)]
    produce(bootstrap, topic, plain)  # a non-transactional producer in between

    producer.begin_transaction()
    committed += _send(producer, topic, "committed-after-abort", 10)
    producer.commit_transaction(60)

    producer.begin_transaction()
    still_open = _send(producer, topic, "open", 10)
    assert producer.flush(60) == 0  # written and replicated, neither committed nor aborted
    open_txn = producer

    try:
        # Batch reads: read_committed by default, and explicitly.
        assert _batch(spark, bootstrap, topic) == sorted(committed + plain)
        assert _batch(
            spark, bootstrap, topic, **{"kafka.isolation.level": "read_committed"}
        ) == sorted(committed + plain)
        # read_uncommitted: every data record (markers are never rows).
        assert _batch(
            spark, bootstrap, topic, **{"kafka.isolation.level": "read_uncommitted"}
        ) == sorted(committed + aborted + plain + still_open)

        # A stream stops at the last stable offset: the committed records only.
        out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"
        assert _stream_available_now(spark, bootstrap, topic, out, checkpoint) == len(
            committed + plain
        )
        rows = spark.read.parquet(str(out)).collect()
        assert sorted(bytes(r.value) for r in rows) == sorted(committed + plain)

        # The open transaction commits: the next run of the same query reads its records.
        open_txn.commit_transaction(60)
        open_txn = None
        assert _stream_available_now(spark, bootstrap, topic, out, checkpoint) == len(still_open)
        rows = spark.read.parquet(str(out)).collect()
        assert sorted(bytes(r.value) for r in rows) == sorted(committed + plain + still_open)
        assert len({(r.partition, r.offset) for r in rows}) == len(rows)
        assert _batch(spark, bootstrap, topic) == sorted(committed + plain + still_open)
    finally:
        if open_txn is not None:
            open_txn.abort_transaction(60)
