"""Brokers form a cluster through a real ZooKeeper and replicate with the pure core."""

from __future__ import annotations

from pathlib import Path

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic
from kio.schema.describe_quorum.v2 import request as dq

from tests.harness import BrokerCluster, BrokerProcess, free_port, wait_until
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


def test_metadata_lists_every_broker_and_one_controller(shared_cluster: BrokerCluster) -> None:
    views = [shared_cluster.metadata(via=b) for b in shared_cluster.brokers]
    assert all(sorted(v.brokers) == [0, 1, 2] for v in views)
    controllers = {v.controller_id for v in views}
    assert len(controllers) == 1
    assert controllers.pop() in (0, 1, 2)


def test_rf3_topic_replicates_to_every_broker(shared_cluster: BrokerCluster) -> None:
    create_topic(shared_cluster, "rep")
    p = shared_cluster.partition("rep")
    assert sorted(p.replicas) == [0, 1, 2]
    assert sorted(p.isr) == [0, 1, 2]
    values = [f"v{i}".encode() for i in range(200)]
    offsets = produce(shared_cluster.bootstrap, "rep", values)
    assert sorted(offsets) == list(range(200))
    assert consume_all(shared_cluster.bootstrap, "rep", 200) == values
    leo = wait_for_replicas_in_sync(shared_cluster, "rep")
    assert leo == 200
    q = describe_quorum(shared_cluster, "rep")
    assert int(q.high_watermark) == 200
    assert sorted(int(r.replica_id) for r in q.current_voters) == [0, 1, 2]
    # Followers append the leader's batches unchanged: the replicas' files are identical.
    copies = {log_bytes(b.log_dir, "rep") for b in shared_cluster.brokers}
    assert len(copies) == 1


def test_replication_factor_above_live_brokers_is_refused(shared_cluster: BrokerCluster) -> None:
    admin = AdminClient({"bootstrap.servers": shared_cluster.bootstrap})
    futures = admin.create_topics([NewTopic("too-many", num_partitions=1, replication_factor=4)])
    with pytest.raises(KafkaException) as info:
        futures["too-many"].result(timeout=30)
    error = info.value.args[0]
    assert error.code() == ErrorCode.INVALID_REPLICATION_FACTOR.value
    assert "larger than available brokers: 3" in error.str()


def test_stale_controller_epoch_is_refused_and_ignored(shared_cluster: BrokerCluster) -> None:
    create_topic(shared_cluster, "fence")
    wait_for_replicas_in_sync(shared_cluster, "fence")
    p = shared_cluster.partition("fence")
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
    with BlockingClient(shared_cluster.broker(follower).bootstrap) as client:
        response = client.send(stale)
    assert response.error_code == ErrorCode.STALE_CONTROLLER_EPOCH
    # Ignored: the follower did not make itself leader.
    with BlockingClient(shared_cluster.broker(follower).bootstrap) as client:
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
    assert shared_cluster.partition("fence").leader_id == p.leader_id


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


def test_topic_admin_goes_through_zookeeper(shared_cluster: BrokerCluster) -> None:
    admin = AdminClient({"bootstrap.servers": shared_cluster.bootstrap})
    create_topic(shared_cluster, "grow", partitions=2)
    admin.create_partitions([NewPartitions("grow", 4)])["grow"].result(timeout=30)
    for p in range(4):
        shared_cluster.wait_for_leader("grow", p)
    assert sorted(shared_cluster.partition("grow", 3).replicas) == [0, 1, 2]
    admin.delete_topics(["grow"])["grow"].result(timeout=30)

    def gone_everywhere() -> bool:
        return all(
            "grow" not in shared_cluster.metadata(via=b).topics
            and not list(b.log_dir.glob("grow-*"))
            for b in shared_cluster.brokers
        )

    wait_until(gone_everywhere, 60, "topic grow deleted on every broker")


def test_auto_creation_uses_default_replication_factor(shared_cluster: BrokerCluster) -> None:
    # confluent-kafka's producer asks Metadata with allow_auto_topic_creation.
    produce(shared_cluster.bootstrap, "auto-made", [b"a"], acks="all")
    p = shared_cluster.partition("auto-made")
    assert sorted(p.replicas) == [0, 1, 2]  # default.replication.factor=3 in these tests


def test_30_partitions_spread_evenly(shared_cluster: BrokerCluster) -> None:
    create_topic(shared_cluster, "wide", partitions=30)
    meta = shared_cluster.metadata(["wide"])
    partitions = meta.topics["wide"].partitions.values()
    leaders = [p.leader_id for p in partitions]
    assert {b: leaders.count(b) for b in (0, 1, 2)} == {0: 10, 1: 10, 2: 10}
    replicas = [r for p in partitions for r in p.replicas]
    assert {b: replicas.count(b) for b in (0, 1, 2)} == {0: 30, 1: 30, 2: 30}

    def hosted_everywhere() -> bool:
        return all(len(list(b.log_dir.glob("wide-*"))) == 30 for b in shared_cluster.brokers)

    wait_until(hosted_everywhere, 60, "30 replica logs on every broker")
