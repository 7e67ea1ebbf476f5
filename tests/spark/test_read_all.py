"""The Spark tests' direct fetch loop (``tests.spark.conftest.read_all``) on the session's
single broker, no SparkSession: a partition that ends with a transaction marker is read to
its end, and a read that does not reach the high watermark in time fails saying where it
stopped.
"""

from __future__ import annotations

import pytest

from tests.harness import BrokerProcess
from tests.spark.conftest import create_topic, read_all, unique

confluent_kafka = pytest.importorskip("confluent_kafka")

pytestmark = [pytest.mark.spark, pytest.mark.integration]


def _committed_transaction(bootstrap: str, topic: str, values: list[bytes]) -> None:
    """``values`` to partition 0 in one committed transaction: the log ends with its
    COMMIT marker (a control batch with no data records)."""
    producer = confluent_kafka.Producer(
        {"bootstrap.servers": bootstrap, "transactional.id": unique("read-all-txn")}
    )
    producer.init_transactions(60)
    producer.begin_transaction()
    for value in values:
        producer.produce(topic, value, partition=0)
    producer.commit_transaction(60)


def test_read_all_reads_past_a_trailing_transaction_marker(broker: BrokerProcess) -> None:
    topic = create_topic(broker.bootstrap, unique("read-all-marker"))
    values = [f"v{i}".encode() for i in range(3)]
    _committed_transaction(broker.bootstrap, topic, values)

    records = read_all(broker.bootstrap, topic, 0, deadline_s=30)

    assert [r.value for r in records] == values
    assert [r.offset for r in records] == [0, 1, 2]  # offset 3 is the marker


def test_read_all_past_its_deadline_says_where_it_stopped(broker: BrokerProcess) -> None:
    topic = create_topic(broker.bootstrap, unique("read-all-deadline"))
    _committed_transaction(broker.bootstrap, topic, [b"a", b"b"])

    with pytest.raises(AssertionError) as caught:
        read_all(broker.bootstrap, topic, 0, deadline_s=0)

    assert str(caught.value).startswith(
        f"read_all({topic}-0): at offset 0, high watermark 3, after 0 s; 0 records read"
    )
