"""The cluster side of a broker without a network: LeaderAndIsr / UpdateMetadata /
StopReplica applied to real storage and the real replication core, controller-epoch
fencing, and the leader -> follower move answering parked acks=all produces."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

import pytest

from tidelog.client.records import Record, build_batch
from tidelog.errors import ErrorCode
from tidelog.model import BrokerId, TopicPartition
from tidelog.protocol import control
from tidelog.server.cluster import controller_connection as cluster_module
from tidelog.server.cluster.metadata_cache import CachedBroker
from tidelog.server.cluster.node import ClusterNode
from tidelog.server.config.topic_config import effective_topic_config
from tidelog.server.replica.reads import ProduceResult

from .nodes import cluster_node

TP = TopicPartition("t", 0)
TOPIC_ID = uuid.UUID(int=7)


def node(tmp_path: Path) -> ClusterNode:
    return cluster_node(tmp_path)


def leader_and_isr(
    *, controller_epoch: int, leader: int, leader_epoch: int, isr: tuple[int, ...]
) -> control.LeaderAndIsrRequest:
    return control.LeaderAndIsrRequest(
        controller_id=0,
        controller_epoch=controller_epoch,
        partition_states=(
            control.LeaderAndIsrPartitionState(
                topic_name=TP.topic,
                partition_index=TP.partition,
                controller_epoch=controller_epoch,
                leader=leader,
                leader_epoch=leader_epoch,
                isr=isr,
                partition_epoch=leader_epoch,
                replicas=(1, 2, 3),
            ),
        ),
        topic_ids=(control.TopicIdEntry(topic_name=TP.topic, topic_id=TOPIC_ID),),
        live_leaders=(control.LeaderAndIsrLiveLeader(broker_id=2, host_name="127.0.0.1", port=1),),
    )


def update_metadata(
    *, epoch: int, leader: int, replicas: tuple[int, ...] = (1, 2)
) -> control.UpdateMetadataRequest:
    """UpdateMetadata from controller 2 (controller epoch ``epoch``) for t-0 with ``replicas``
    (all in sync); brokers 1 and 2 live."""
    return control.UpdateMetadataRequest(
        controller_id=2,
        controller_epoch=epoch,
        partition_states=(
            control.UpdateMetadataPartitionState(
                topic_name="t",
                partition_index=0,
                controller_epoch=epoch,
                leader=leader,
                leader_epoch=0,
                isr=replicas,
                partition_epoch=0,
                replicas=replicas,
            ),
        ),
        live_brokers=(
            control.UpdateMetadataBroker(id=1, host="127.0.0.1", port=1),
            control.UpdateMetadataBroker(id=2, host="127.0.0.1", port=2),
        ),
        topic_ids=(control.TopicIdEntry(topic_name="t", topic_id=TOPIC_ID),),
    )


def test_leader_then_follower_answers_parked_acks_all_and_fences_old_controller(
    tmp_path: Path,
) -> None:
    async def body() -> None:
        n = node(tmp_path)
        rm = n.replica_manager
        answer = await n.handle_leader_and_isr(
            leader_and_isr(controller_epoch=3, leader=1, leader_epoch=0, isr=(1, 2, 3))
        )
        assert [e.error_code for e in answer.partition_errors] == [0]
        hosted = rm.partitions[TP]
        assert hosted.partition.is_leader
        assert n.metadata.topics["t"].topic_id == TOPIC_ID
        appended = rm.append_records({TP: build_batch([Record(b"v")])}, acks=-1)
        answers: list[dict[TopicPartition, ProduceResult]] = []
        rm.wait_for_acks(appended, 30_000, answers.append)
        assert answers == []  # parked: the followers have not fetched
        # An older controller is refused and ignored (rule 8).
        stale = await n.handle_leader_and_isr(
            leader_and_isr(controller_epoch=2, leader=2, leader_epoch=1, isr=(2, 3))
        )
        assert stale.error_code == ErrorCode.STALE_CONTROLLER_EPOCH
        assert rm.partitions[TP].partition.is_leader
        # The current controller moves leadership: the parked produce answers at once.
        await n.handle_leader_and_isr(
            leader_and_isr(controller_epoch=3, leader=2, leader_epoch=1, isr=(2, 3))
        )
        assert not rm.partitions[TP].partition.is_leader
        assert [r[TP].error for r in answers] == [ErrorCode.NOT_LEADER_OR_FOLLOWER]
        assert n._is_fetching(TP)
        # StopReplica with delete removes the log and the topic.
        stop = n.handle_stop_replica(
            control.StopReplicaRequest(
                controller_id=0,
                controller_epoch=3,
                partitions=(
                    control.StopReplicaPartition(
                        topic_name="t", partition_index=0, delete_partition=True
                    ),
                ),
            )
        )
        assert stop.error_code == 0
        assert TP not in rm.partitions
        # Only the replica goes (a reassignment may have moved it); a deleted topic leaves
        # the cache with its UpdateMetadata (leader -2), see the next test.
        assert "t" in n.metadata.topics
        assert not n._is_fetching(TP)
        await n.fetchers.stop()
        await n.client.close()

    asyncio.run(body())


def test_update_metadata_fills_the_cache_and_a_deleted_topic_leaves_it(tmp_path: Path) -> None:
    async def body() -> None:
        n = node(tmp_path)

        await n.handle_update_metadata(update_metadata(epoch=4, leader=2))
        assert n.metadata.controller_id == 2
        assert sorted(n.metadata.brokers) == [1, 2]
        assert n.metadata.partitions[TP].leader == 2
        assert n.metadata.topics["t"].num_partitions == 1
        old = await n.handle_update_metadata(update_metadata(epoch=3, leader=1))
        assert old.error_code == ErrorCode.STALE_CONTROLLER_EPOCH
        assert n.metadata.partitions[TP].leader == 2
        await n.handle_update_metadata(update_metadata(epoch=4, leader=-2))  # LeaderDuringDelete
        assert "t" not in n.metadata.topics
        assert TP not in n.metadata.partitions
        await n.client.close()

    asyncio.run(body())


def test_update_metadata_without_this_broker_deletes_its_hosted_replica(tmp_path: Path) -> None:
    """``tidelog.server.replica.stray_replicas`` rule 1: a replica removed by a reassignment whose
    StopReplica(delete) was lost (its controller died after writing the new assignment)
    goes when an UpdateMetadata lists the partition without this broker; an older
    controller's UpdateMetadata changes nothing."""

    async def body() -> None:
        n = node(tmp_path)
        rm = n.replica_manager
        await n.handle_leader_and_isr(
            leader_and_isr(controller_epoch=3, leader=2, leader_epoch=1, isr=(1, 2, 3))
        )
        assert TP in rm.partitions
        assert n._is_fetching(TP)
        await n.handle_update_metadata(
            update_metadata(epoch=3, leader=2, replicas=(1, 2, 3))
        )  # still a replica: kept
        stale = await n.handle_update_metadata(update_metadata(epoch=2, leader=2, replicas=(2, 3)))
        assert stale.error_code == ErrorCode.STALE_CONTROLLER_EPOCH
        assert TP in rm.partitions
        answer = await n.handle_update_metadata(update_metadata(epoch=4, leader=2, replicas=(2, 3)))
        assert answer.error_code == ErrorCode.NONE
        assert TP not in rm.partitions
        assert not n._is_fetching(TP)
        assert rm.log_manager.get_log(TP) is None
        assert not (tmp_path / "t-0").exists()
        assert n.metadata.partitions[TP].replicas == (2, 3)  # the topic lives on
        await n.fetchers.stop()
        await n.client.close()

    asyncio.run(body())


def test_make_follower_caps_the_checkpointed_high_watermark(tmp_path: Path) -> None:
    n = node(tmp_path)
    config = effective_topic_config(n.config, {})
    changed = n.replica_manager.make_follower(
        TP,
        TOPIC_ID,
        config,
        leader=BrokerId(2),
        leader_epoch=5,
        partition_epoch=5,
        replicas=[BrokerId(1), BrokerId(2)],
        isr=[BrokerId(1), BrokerId(2)],
        high_watermark=100,  # a checkpoint beyond the (empty) log
    )
    assert changed
    assert n.replica_manager.partitions[TP].partition.high_watermark == 0


def test_concurrent_requests_to_the_controller_share_one_connection(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """AlterPartition proposals of many partitions run at once; they share one connection
    to the controller, opened once (never one each, overwriting the previous unclosed)."""
    opened: list[FakeConnection] = []

    class FakeConnection:
        def __init__(self, host: str, port: int) -> None:
            self.host, self.port, self.is_closed = host, port, False

        async def close(self) -> None:
            self.is_closed = True

    async def connect(host: str, port: int, **_: object) -> FakeConnection:
        await asyncio.sleep(0.01)  # the TCP and ApiVersions round trips
        conn = FakeConnection(host, port)
        opened.append(conn)
        return conn

    monkeypatch.setattr(cluster_module.BrokerConnection, "connect", connect)
    n = node(tmp_path)
    n.metadata.controller_id = 2
    n.metadata.brokers[2] = CachedBroker(2, "127.0.0.1", 9)

    async def scenario() -> None:
        conns = await asyncio.gather(*(n._connection_to_controller() for _ in range(16)))
        assert len(opened) == 1
        assert all(c is opened[0] for c in conns)

    asyncio.run(scenario())
