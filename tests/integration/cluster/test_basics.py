"""Brokers form a cluster through a real ZooKeeper and replicate with the pure core."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, NewTopic

from tests.harness import BrokerCluster
from tests.integration.cluster.helpers import (
    consume_all,
    create_topic,
    describe_quorum,
    log_bytes,
    produce,
    wait_for_replicas_in_sync,
)
from tidelog.errors import ErrorCode

pytestmark = pytest.mark.integration


def test_metadata_lists_every_broker_and_one_controller(cluster: BrokerCluster) -> None:
    views = [cluster.metadata(via=b) for b in cluster.brokers]
    assert all(sorted(v.brokers) == [0, 1, 2] for v in views)
    controllers = {v.controller_id for v in views}
    assert len(controllers) == 1
    assert controllers.pop() in (0, 1, 2)


def test_rf3_topic_replicates_to_every_broker(cluster: BrokerCluster) -> None:
    create_topic(cluster, "rep")
    p = cluster.partition("rep")
    assert sorted(p.replicas) == [0, 1, 2]
    assert sorted(p.isr) == [0, 1, 2]
    values = [f"v{i}".encode() for i in range(200)]
    offsets = produce(cluster.bootstrap, "rep", values)
    assert sorted(offsets) == list(range(200))
    assert consume_all(cluster.bootstrap, "rep", 200) == values
    leo = wait_for_replicas_in_sync(cluster, "rep")
    assert leo == 200
    q = describe_quorum(cluster, "rep")
    assert int(q.high_watermark) == 200
    assert sorted(int(r.replica_id) for r in q.current_voters) == [0, 1, 2]
    # Followers append the leader's batches unchanged: the replicas' files are identical.
    copies = {log_bytes(b.log_dir, "rep") for b in cluster.brokers}
    assert len(copies) == 1


def test_replication_factor_above_live_brokers_is_refused(cluster: BrokerCluster) -> None:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    futures = admin.create_topics([NewTopic("too-many", num_partitions=1, replication_factor=4)])
    with pytest.raises(KafkaException) as info:
        futures["too-many"].result(timeout=30)
    error = info.value.args[0]
    assert error.code() == ErrorCode.INVALID_REPLICATION_FACTOR.value
    assert "larger than available brokers: 3" in error.str()
