"""KIP-951 leader discovery against a three-broker cluster: a follower refusing a Produce v10
or a Fetch v16 names the partition's leader, its epoch and its endpoint; older versions
carry no hint (exact protocol bytes, decoded by kio)."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from tests.harness import BrokerCluster, BrokerProcess
from tests.integration.cluster.helpers import create_topic
from tests.integration.rawclient import Raw, batch
from tidelog.errors import ErrorCode
from tidelog.protocol.apis import ApiKey

pytestmark = pytest.mark.integration


def produce(raw: Raw, version: int, topic: str) -> Any:
    return raw.call(
        ApiKey.PRODUCE,
        version,
        {
            "acks": 1,
            "timeout": 10_000,
            "topic_data": [
                {"name": topic, "partition_data": [{"index": 0, "records": batch(b"v")}]}
            ],
        },
    )


def fetch(raw: Raw, version: int, topic_id: uuid.UUID, *, current_leader_epoch: int = -1) -> Any:
    partition = {
        "partition": 0,
        "fetch_offset": 0,
        "partition_max_bytes": 1 << 20,
        "current_leader_epoch": current_leader_epoch,
    }
    return raw.call(
        ApiKey.FETCH,
        version,
        {
            "replica_id": -1,
            "max_wait": 0,
            "min_bytes": 1,
            "max_bytes": 1 << 20,
            "isolation_level": 0,
            "session_id": 0,
            "session_epoch": -1,
            "topics": [{"topic_id": topic_id, "partitions": [partition]}],
            "forgotten_topics_data": [],
            "rack_id": "",
        },
    )


def test_follower_names_the_leader(shared_cluster: BrokerCluster) -> None:
    create_topic(shared_cluster, "hints")
    view = shared_cluster.metadata(["hints"])
    part = view.topics["hints"].partitions[0]
    topic_id = view.topics["hints"].topic_id
    leader: BrokerProcess = shared_cluster.broker(part.leader_id)
    follower = next(b for b in shared_cluster.brokers if b is not leader)
    expected_leader = (part.leader_id, part.leader_epoch)
    endpoint = (part.leader_id, leader.host, leader.port)
    raw = Raw(follower)
    try:
        # Produce v10: CurrentLeader per partition, NodeEndpoints for the leaders named.
        answer = produce(raw, 10, "hints")
        p = answer.responses[0].partition_responses[0]
        assert p.error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER
        assert (p.current_leader.leader_id, p.current_leader.leader_epoch) == expected_leader
        assert [(n.node_id, n.host, n.port) for n in answer.node_endpoints] == [endpoint]
        # Produce v9: the same refusal, no hint (the field does not exist there).
        old = produce(raw, 9, "hints").responses[0].partition_responses[0]
        assert old.error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER
        # Fetch v16 by a consumer of a follower (no KIP-392 rack here): the same hint.
        fetched = fetch(raw, 16, topic_id)
        f = fetched.responses[0].partitions[0]
        assert f.error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER
        assert (f.current_leader.leader_id, f.current_leader.leader_epoch) == expected_leader
        assert [(n.node_id, n.host, n.port) for n in fetched.node_endpoints] == [endpoint]
        # Fetch v15: no NodeEndpoints and no CurrentLeader (Kafka writes them from v16).
        f15 = fetch(raw, 15, topic_id).responses[0].partitions[0]
        assert f15.error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER
        assert (f15.current_leader.leader_id, f15.current_leader.leader_epoch) == (-1, -1)
    finally:
        raw.close()
    # The leader itself answers without a hint.
    raw = Raw(leader)
    try:
        ok = produce(raw, 10, "hints")
        assert ok.responses[0].partition_responses[0].error_code == ErrorCode.NONE
        assert ok.node_endpoints == ()
        # An epoch from the future is UNKNOWN_LEADER_EPOCH, which Kafka answers unhinted.
        ahead = fetch(raw, 16, topic_id, current_leader_epoch=part.leader_epoch + 5)
        f = ahead.responses[0].partitions[0]
        assert f.error_code == ErrorCode.UNKNOWN_LEADER_EPOCH
        assert (f.current_leader.leader_id, f.current_leader.leader_epoch) == (-1, -1)
        assert ahead.node_endpoints == ()
    finally:
        raw.close()
