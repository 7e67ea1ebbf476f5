"""``tidelog transactions`` against three broker processes and librdkafka's transactional
producer: an open transaction is listed and described (Ongoing, its partition), the
partition's producers show where it starts, find-hanging does not report it (its
coordinator will end it), and ``abort --start-offset`` ends it with an ABORT marker, after
which a read_committed consumer reaches the end of the partition without its records."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, Producer
from confluent_kafka import TopicPartition as CTopicPartition

from tests.harness import BrokerCluster, wait_until
from tests.integration.cli.conftest import Result, Tidelog
from tests.integration.cluster.helpers import create_topic
from tidelog.testing.zookeeper import ZooKeeperProcess

pytestmark = pytest.mark.integration

TOPIC = "txn-cli"
RECORDS = 5


@pytest.fixture(scope="module")
def txn_cluster(
    tmp_path_factory: pytest.TempPathFactory, zookeeper: ZooKeeperProcess
) -> Iterator[BrokerCluster]:
    directory = tmp_path_factory.mktemp("txn-cli-cluster")
    chroot = f"{zookeeper.connect_string}/txn-cli-{directory.name}"
    cluster = BrokerCluster(
        directory, chroot, overrides={"transaction.state.log.num.partitions": "5"}
    ).start()
    try:
        yield cluster
    finally:
        cluster.stop()


def _ok(result: Result) -> str:
    assert result.returncode == 0, result.stderr
    return result.stdout


def _json(tidelog: Tidelog, cluster: BrokerCluster, *args: str) -> Any:
    return json.loads(
        _ok(tidelog("transactions", "--bootstrap-server", cluster.bootstrap, *args, "--json"))
    )


def _producer(cluster: BrokerCluster, txn_id: str) -> Producer:
    producer = Producer(
        {
            "bootstrap.servers": cluster.bootstrap,
            "transactional.id": txn_id,
            "linger.ms": 5,
            # Far longer than the test: the coordinator must not abort it on its own.
            "transaction.timeout.ms": 600_000,
        }
    )
    producer.init_transactions(60)
    return producer


def _read_to_end(cluster: BrokerCluster, isolation: str) -> list[bytes]:
    """The records of partition 0 a consumer with ``isolation`` reads up to where it is told
    the partition ends (for read_committed: the last stable offset)."""
    consumer = Consumer(
        {
            "bootstrap.servers": cluster.bootstrap,
            "group.id": f"txn-cli-{time.monotonic_ns()}",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "isolation.level": isolation,
            "enable.partition.eof": True,
        }
    )
    consumer.assign([CTopicPartition(TOPIC, 0, 0)])
    got: list[bytes] = []
    try:

        def at_end() -> bool:
            for msg in consumer.consume(100, 0.5):
                err = msg.error()
                if err is None:
                    got.append(msg.value() or b"")
                elif err.code() == KafkaError._PARTITION_EOF:
                    return True
                else:
                    raise AssertionError(f"consumer error: {err}")
            return False

        wait_until(at_end, 60, f"the end of {TOPIC} ({isolation})")
    finally:
        consumer.close()
    return got


def test_list_describe_and_abort_an_open_transaction(
    txn_cluster: BrokerCluster, tidelog: Tidelog
) -> None:
    cluster = txn_cluster
    create_topic(cluster, TOPIC, partitions=1)
    idle = _producer(cluster, "t-idle")
    producer = _producer(cluster, "t1")
    producer.begin_transaction()
    for i in range(RECORDS):
        producer.produce(TOPIC, b"uncommitted-%d" % i, partition=0)
    assert producer.flush(30) == 0

    # list: both ids, each once, at its coordinator.
    def listed() -> dict[str, Any] | None:
        rows = _json(tidelog, cluster, "list")
        by_id = {r["transactional_id"]: r for r in rows}
        return by_id if {"t1", "t-idle"} <= set(by_id) else None

    rows = wait_until(listed, 30, "list to show both transactional ids")
    assert isinstance(rows, dict)
    assert rows["t1"]["state"] == "Ongoing"
    assert rows["t-idle"]["state"] == "Empty"
    pid = rows["t1"]["producer_id"]
    table = _ok(tidelog("transactions", "--bootstrap-server", cluster.bootstrap, "list"))
    assert table.splitlines()[0].split() == [
        "TransactionalId",
        "Coordinator",
        "ProducerId",
        "TransactionState",
    ]
    assert ["t1", str(rows["t1"]["coordinator"]), str(pid), "Ongoing"] in [
        line.split() for line in table.splitlines()
    ]

    # Filters.
    def ids(*filters: str) -> list[str]:
        return [r["transactional_id"] for r in _json(tidelog, cluster, "list", *filters)]

    assert "t1" in ids("--state", "Ongoing")
    assert "t1" not in ids("--state", "Empty", "--state", "CompleteCommit")
    assert ids("--producer-id", str(pid)) == ["t1"]
    assert "t1" in ids("--duration-filter", "0")
    assert ids("--duration-filter", str(3_600_000)) == []
    # KIP-1152: the whole id must match the pattern; a bad one is the brokers' error 128.
    assert sorted(ids("--transactional-id-pattern", "t.*")) == ["t-idle", "t1"]
    assert ids("--transactional-id-pattern", "t[0-9]") == ["t1"]
    assert ids("--transactional-id-pattern", "t") == []
    bad = tidelog(
        "transactions", "--bootstrap-server", cluster.bootstrap,
        "list", "--transactional-id-pattern", "t[",
    )  # fmt: skip
    assert bad.returncode == 1
    assert "INVALID_REGULAR_EXPRESSION" in bad.stderr

    # describe: Ongoing, with its partition; the idle one has no start time.
    described = _json(tidelog, cluster, "describe", "--transactional-id", "t1")
    assert described["state"] == "Ongoing"
    assert described["producer_id"] == pid
    assert described["coordinator"] == rows["t1"]["coordinator"]
    assert described["partitions"] == [{"topic": TOPIC, "partition": 0}]
    assert described["timeout_ms"] == 600_000
    assert described["start_time_ms"] > 0
    assert described["duration_ms"] >= 0
    epoch = described["producer_epoch"]
    text = _ok(
        tidelog(
            "transactions", "--bootstrap-server", cluster.bootstrap,
            "describe", "--transactional-id", "t1",
        )
    )  # fmt: skip
    assert text.splitlines()[1].split()[1:5] == ["t1", str(pid), str(epoch), "Ongoing"]
    assert text.splitlines()[1].split()[-1] == f"{TOPIC}-0"
    idle_described = _json(tidelog, cluster, "describe", "--transactional-id", "t-idle")
    assert (idle_described["state"], idle_described["start_time_ms"]) == ("Empty", None)
    missing = tidelog(
        "transactions", "--bootstrap-server", cluster.bootstrap,
        "describe", "--transactional-id", "never-used",
    )  # fmt: skip
    assert missing.returncode == 1
    assert missing.stderr.startswith(
        "tidelog transactions: error: TRANSACTIONAL_ID_NOT_FOUND: transactional id 'never-used'"
    )

    # describe-producers: the transaction starts at offset 0 (a new topic).
    producers = _json(tidelog, cluster, "describe-producers", "--topic", TOPIC, "--partition", "0")
    (state,) = [p for p in producers if p["producer_id"] == pid]
    assert state["current_txn_start_offset"] == 0
    assert state["producer_epoch"] == epoch
    assert state["last_sequence"] == RECORDS - 1

    # find-hanging: the coordinator knows this transaction includes the partition.
    hanging = _json(
        tidelog, cluster, "find-hanging", "--topic", TOPIC, "--max-transaction-timeout", "0"
    )
    assert hanging == []
    leader = cluster.wait_for_leader(TOPIC, 0)
    by_broker = _json(
        tidelog, cluster, "find-hanging", "--broker-id", str(leader),
        "--max-transaction-timeout", "0",
    )  # fmt: skip
    assert by_broker == []

    # Until it ends, a read_committed consumer is held before it.
    assert _read_to_end(cluster, "read_uncommitted") == [
        b"uncommitted-%d" % i for i in range(RECORDS)
    ]

    # abort: the ABORT marker goes to the partition's leader.
    aborted = tidelog(
        "transactions", "--bootstrap-server", cluster.bootstrap,
        "abort", "--topic", TOPIC, "--partition", "0", "--start-offset", "0",
    )  # fmt: skip
    assert aborted.returncode == 0, aborted.stderr
    assert aborted.stdout == (
        f"Aborted the transaction of producer {pid} (epoch {epoch}) in {TOPIC}-0 "
        "(started at offset 0).\n"
    )
    after = _json(tidelog, cluster, "describe-producers", "--topic", TOPIC, "--partition", "0")
    (state,) = [p for p in after if p["producer_id"] == pid]
    assert state["current_txn_start_offset"] is None
    assert _read_to_end(cluster, "read_committed") == []

    again = tidelog(
        "transactions", "--bootstrap-server", cluster.bootstrap,
        "abort", "--topic", TOPIC, "--partition", "0", "--start-offset", "0",
    )  # fmt: skip
    assert again.returncode == 1
    assert again.stderr.startswith(
        f"tidelog transactions: error: no open transaction starts at offset 0 in {TOPIC}-0"
    )
    del producer, idle
