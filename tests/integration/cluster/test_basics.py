"""Brokers form a cluster through a real ZooKeeper and replicate with the pure core."""

from __future__ import annotations

from pathlib import Path

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, NewTopic
from kio.schema.describe_quorum.v2 import request as dq

from tests.harness import BrokerCluster, BrokerProcess, free_port
from tests.integration.cluster.helpers import (
    consume_all,
    create_topic,
    describe_quorum,
    log_bytes,
    produce,
    wait_for_replicas_in_sync,
)
from tidelog.client import BlockingClient
from tidelog.errors import ErrorCode
from tidelog.protocol import control

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


def test_stale_controller_epoch_is_refused_and_ignored(cluster: BrokerCluster) -> None:
    create_topic(cluster, "fence")
    wait_for_replicas_in_sync(cluster, "fence")
    p = cluster.partition("fence")
    follower = next(r for r in p.replicas if r != p.leader_id)
    stale = control.LeaderAndIsrRequest(
        controller_id=99,
        controller_epoch=0,  # the elected controller's epoch is at least 1
        partition_states=(
            control.LeaderAndIsrPartitionState(
                topic_name="fence",
                partition_index=0,
                controller_epoch=0,
                leader=follower,
                leader_epoch=p.leader_epoch + 5,
                isr=(follower,),
                partition_epoch=99,
                replicas=tuple(p.replicas),
            ),
        ),
        live_leaders=(),
    )
    with BlockingClient(cluster.broker(follower).bootstrap) as client:
        response = client.send(stale)
    assert response.error_code == ErrorCode.STALE_CONTROLLER_EPOCH
    # Ignored: the follower did not make itself leader.
    with BlockingClient(cluster.broker(follower).bootstrap) as client:
        answer = client.send(
            dq.DescribeQuorumRequest(
                topics=(
                    dq.TopicData(
                        topic_name="fence", partitions=(dq.PartitionData(partition_index=0),)
                    ),
                )
            )
        )
    assert answer.topics[0].partitions[0].error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER
    assert cluster.partition("fence").leader_id == p.leader_id


def test_unreachable_zookeeper_is_a_clear_start_error(tmp_path: Path) -> None:
    broker = BrokerProcess(
        tmp_path / "b",
        {
            "zookeeper.connect": f"127.0.0.1:{free_port()}",
            "zookeeper.connection.timeout.ms": "2000",
        },
    )
    try:
        with pytest.raises(RuntimeError) as info:
            broker.start()
    finally:
        broker.kill()
    assert "broker exited with 1" in str(info.value)
    assert "tidelog broker: cannot start: cannot connect to ZooKeeper" in broker.output()
