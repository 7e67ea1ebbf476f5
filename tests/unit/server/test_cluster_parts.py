"""The small parts of the cluster side: peer addresses, the broker registration, wire error
codes, AlterPartition without a known topic, and which partitions a fetcher's steps take."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

from tidelog.errors import ErrorCode
from tidelog.model import BrokerId, TopicPartition
from tidelog.replication.partition import AlterPartitionProposal
from tidelog.server.cluster.alter_partition import send_alter_partition
from tidelog.server.cluster.controller_connection import error_code_of
from tidelog.server.cluster.fetcher import FetchState, LeaderFetcher
from tidelog.server.cluster.peers import listener_address, registered_address
from tidelog.server.cluster.registration import broker_registration
from tidelog.server.config.broker_config import load_broker_config
from tidelog.server.config.topic_config import effective_topic_config
from tidelog.zk.znodes import BrokerRegistration, EndPoint

from .nodes import cluster_node

TP = TopicPartition("t", 0)


def test_registered_address_is_the_address_given() -> None:
    assert registered_address(3, "10.0.0.3", 9093) == ("10.0.0.3", 9093)


def test_listener_address_prefers_the_named_listener_and_falls_back_to_plaintext() -> None:
    reg = BrokerRegistration(
        broker_id=BrokerId(2),
        endpoints=(
            EndPoint("PLAINTEXT", "h", 9092, "PLAINTEXT"),
            EndPoint("REPLICATION", "", 9094, "SSL"),
        ),
    )
    assert listener_address(reg, "REPLICATION") == ("127.0.0.1", 9094)
    assert listener_address(reg, "OTHER") == ("h", 9092)


def test_broker_registration_fills_advertised_port_0_with_the_bound_port(tmp_path: Path) -> None:
    config = load_broker_config(
        {
            "log.dirs": str(tmp_path),
            "broker.id": "4",
            "zookeeper.connect": "127.0.0.1:1",
            "listeners": "PLAINTEXT://127.0.0.1:0",
            "broker.rack": "r1",
        }
    )
    reg = broker_registration(BrokerId(4), config, {"PLAINTEXT": 45678})
    assert reg.broker_id == 4
    assert reg.rack == "r1"
    assert [(e.listener_name, e.port) for e in reg.endpoints] == [("PLAINTEXT", 45678)]


def test_error_code_of_known_and_unknown_codes() -> None:
    assert error_code_of(0) is ErrorCode.NONE
    assert error_code_of(int(ErrorCode.STALE_BROKER_EPOCH)) is ErrorCode.STALE_BROKER_EPOCH
    assert error_code_of(-12345) is ErrorCode.UNKNOWN_SERVER_ERROR


def test_alter_partition_of_a_topic_not_in_the_metadata_asks_nobody() -> None:
    proposal = AlterPartitionProposal(
        topic_partition=TP,
        leader_id=BrokerId(1),
        leader_epoch=1,
        partition_epoch=1,
        new_isr=(BrokerId(1),),
    )

    async def connect() -> object:
        raise AssertionError("no connection for a topic we do not know")

    answer = asyncio.run(
        send_alter_partition(
            proposal,
            broker_id=BrokerId(1),
            broker_epoch=5,
            controller=None,
            topic_id=None,
            connect=connect,  # type: ignore[arg-type]
        )
    )
    assert answer == (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, None)


def test_a_fetcher_step_takes_the_partitions_due_in_that_step(tmp_path: Path) -> None:
    node = cluster_node(tmp_path)
    fetcher = LeaderFetcher(node, 2, "127.0.0.1", 1)
    truncating, fetching, paused = (TopicPartition("t", i) for i in range(3))
    fetcher.follow(truncating, FetchState(0))
    fetcher.follow(fetching, FetchState(0, truncating=False))
    fetcher.follow(paused, FetchState(0, truncating=False, delayed_until=10.0))
    config = effective_topic_config(node.config, {})
    for tp in (truncating, fetching, paused):
        node.replica_manager.make_follower(
            tp,
            uuid.uuid4(),
            config,
            leader=BrokerId(2),
            leader_epoch=0,
            partition_epoch=0,
            replicas=[BrokerId(1), BrokerId(2)],
            isr=[BrokerId(1), BrokerId(2)],
        )
    assert list(fetcher._truncating(now=5.0)) == [truncating]
    assert list(fetcher._truncating(now=1.0)) == [truncating]
    due, requests, changed = fetcher._fetch_requests(now=5.0)
    assert (list(due), list(requests), changed) == ([fetching], [fetching], None)
    assert requests[fetching].fetch_offset == 0
    due, requests, changed = fetcher._fetch_requests(now=10.0)
    assert (list(due), list(requests)) == ([fetching, paused], [fetching, paused])


def test_the_fetcher_manager_knows_what_it_fetches(tmp_path: Path) -> None:
    node = cluster_node(tmp_path)

    async def body() -> None:
        assert not node.fetchers.is_fetching(TP)
        node.fetchers.add(TP, 2, "127.0.0.1", 1, leader_epoch=0)
        assert node.fetchers.is_fetching(TP)
        node.fetchers.remove(TP)
        assert not node.fetchers.is_fetching(TP)
        await node.fetchers.stop()
        await node.client.close()

    asyncio.run(body())
