"""``tidelog broker-api-versions`` and ``tidelog features`` against a two-broker ZooKeeper
cluster, and what they read on the wire: ApiVersions' KIP-584 features, UpdateFeatures as a
ZooKeeper-mode Kafka answers it, DescribeQuorum served but not advertised. On the same
cluster (one start for all): KIP-951's leader hints, as exact protocol bytes decoded by kio
(a broker without the partition refusing a Produce v10 or a Fetch v16 names the leader, its
epoch and its endpoint; older versions carry no hint)."""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from kafka.admin import KafkaAdminClient
from kafka.structs import OffsetAndMetadata, TopicPartition
from kio.schema.describe_quorum.v2 import request as dq

from tests.harness import BrokerCluster, BrokerProcess
from tests.integration.cli.conftest import Tidelog
from tests.integration.cluster.helpers import create_topic
from tests.integration.rawclient import Raw, batch
from tidelog.client import BlockingClient
from tidelog.errors import ErrorCode
from tidelog.protocol.apis import ApiKey
from tidelog.testing.zookeeper import ZooKeeperProcess

pytestmark = pytest.mark.integration

NOT_SUPPORTED = (
    "Could not apply finalized feature update because the provided feature is not supported."
)
INCOMPATIBLE = (
    "Could not apply finalized feature update because brokers were found to have incompatible "
    "versions for the feature."
)


@pytest.fixture(scope="module")
def pair(
    tmp_path_factory: pytest.TempPathFactory, zookeeper: ZooKeeperProcess
) -> Iterator[BrokerCluster]:
    directory = tmp_path_factory.mktemp("protocol-tools")
    cluster = BrokerCluster(directory, f"{zookeeper.connect_string}/{directory.name}", 2).start()
    try:
        cluster.wait_for_live(2)
        yield cluster
    finally:
        cluster.stop()


def test_broker_api_versions(pair: BrokerCluster, tidelog: Tidelog) -> None:
    result = tidelog("broker-api-versions", "--bootstrap-server", pair.bootstrap)
    assert result.returncode == 0, result.stderr
    out = result.stdout
    for b in pair.brokers:
        assert f"{b.host}:{b.port} (id: {b.broker_id} rack: null) -> (\n" in out
    assert "\tProduce(0): 0 to 12 [usable: 12],\n" in out
    assert "\tListGroups(16): 0 to 5 [usable: 5],\n" in out
    assert "\tDescribeGroups(15): 0 to 6 [usable: 6],\n" in out
    assert "\tListTransactions(66): 0 to 2 [usable: 2],\n" in out
    assert "\tUpdateFeatures(57): 0 to 1 [usable: 1],\n" in out
    # ZooKeeper-mode Kafka does not expose DescribeQuorum (a KRaft API).
    assert "\tDescribeQuorum(55): UNSUPPORTED,\n" in out
    assert out.count(" -> (\n") == 2
    assert out.endswith(")\n")


def test_describe_quorum_is_served_unadvertised(pair: BrokerCluster) -> None:
    with BlockingClient(pair.brokers[0].bootstrap, request_timeout_s=5.0) as client:
        assert int(ApiKey.DESCRIBE_QUORUM) not in client.api_versions()
        # tidelog's own tools still ask it (a topic partition; the KRaft one is unknown).
        answer = client.send(
            dq.DescribeQuorumRequest(
                topics=(
                    dq.TopicData(
                        topic_name="__cluster_metadata",
                        partitions=(dq.PartitionData(partition_index=0),),
                    ),
                )
            )
        )
    assert answer.topics[0].partitions[0].error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


def test_api_versions_features(pair: BrokerCluster) -> None:
    raw = Raw(pair.brokers[0])
    try:
        v4 = raw.call(ApiKey.API_VERSIONS, 4, {})
        supported = {(f.name, f.min_version, f.max_version) for f in v4.supported_features}
        assert supported == {("group.version", 0, 0), ("transaction.version", 0, 0)}
        assert (v4.finalized_features, v4.finalized_features_epoch) == ((), 0)
        # Below v4 the schema leaves out features whose minimum is 0.
        v3 = raw.call(ApiKey.API_VERSIONS, 3, {})
        assert (v3.supported_features, v3.finalized_features_epoch) == ((), 0)
    finally:
        raw.close()


def test_features_describe(pair: BrokerCluster, tidelog: Tidelog) -> None:
    result = tidelog("features", "describe", "--bootstrap-server", pair.bootstrap)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        f"Feature: {name}\tSupportedMinVersion: 0\tSupportedMaxVersion: 0\t"
        "FinalizedVersionLevel: 0\tEpoch: 0"
        for name in ("group.version", "transaction.version")
    ]


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (
            ["upgrade", "--feature", "group.version=1"],
            f"Could not upgrade group.version to 1. {INCOMPATIBLE}",
        ),
        (
            ["upgrade", "--feature", "group.version", "--version", "1", "--dry-run"],
            f"Can not upgrade group.version to 1. {INCOMPATIBLE}",
        ),
        (
            ["upgrade", "--feature", "metadata.version=5"],
            f"Could not upgrade metadata.version to 5. {NOT_SUPPORTED}",
        ),
        (
            ["downgrade", "--unsafe", "--feature", "transaction.version=0"],
            "Could not downgrade transaction.version to 0. Can not delete non-existing "
            "finalized feature.",
        ),
        (
            ["disable", "--feature", "group.version"],
            "Could not disable group.version. Can not delete non-existing finalized feature.",
        ),
    ],
)
def test_features_updates_are_refused_as_kafka_refuses_them(
    pair: BrokerCluster, tidelog: Tidelog, args: list[str], line: str
) -> None:
    result = tidelog("features", *args, "--bootstrap-server", pair.brokers[0].bootstrap)
    assert result.returncode == 1
    assert result.stdout.splitlines() == [line]
    assert result.stderr.strip() == "1 out of 1 operation(s) failed."


def test_update_features_on_raw_requests(pair: BrokerCluster) -> None:
    controller = pair.metadata().controller_id
    other = next(b for b in pair.brokers if b.broker_id != controller)
    update = {"feature": "group.version", "max_version_level": 1, "upgrade_type": 1}
    raw = Raw(other)
    try:
        # Only the controller updates features: Kafka's Admin client retries there.
        answer = raw.call(ApiKey.UPDATE_FEATURES, 1, {"feature_updates": [update]})
        assert answer.error_code == ErrorCode.NOT_CONTROLLER
        assert answer.results == ()
    finally:
        raw.close()
    raw = Raw(pair.broker(controller))
    try:
        bad_type = {**update, "upgrade_type": 7}
        answer = raw.call(ApiKey.UPDATE_FEATURES, 1, {"feature_updates": [bad_type]})
        assert answer.error_code == ErrorCode.NONE
        assert [(r.feature, r.error_code, r.error_message) for r in answer.results] == [
            ("group.version", ErrorCode.INVALID_REQUEST, "Received unknown upgrade type.")
        ]
        empty = raw.call(ApiKey.UPDATE_FEATURES, 0, {"feature_updates": []})
        assert (empty.error_code, empty.results) == (ErrorCode.NONE, ())
        # Nothing was finalized: the epoch is still /feature's first.
        assert raw.call(ApiKey.API_VERSIONS, 4, {}).finalized_features_epoch == 0
    finally:
        raw.close()


def test_bad_feature_arguments(tidelog: Tidelog) -> None:
    result = tidelog("features", "upgrade", "--feature", "x", "--bootstrap-server", "127.0.0.1:1")
    assert result.returncode == 2
    assert re.search(r"--feature must be NAME=LEVEL", result.stderr)
    result = tidelog("features", "upgrade", "--bootstrap-server", "127.0.0.1:1")
    assert result.returncode == 2
    assert "You must specify at least one feature to upgrade" in result.stderr


def test_topics_describe_still_reads_replica_states(pair: BrokerCluster, tidelog: Tidelog) -> None:
    # DescribeQuorum is no longer advertised; `topics describe` asks it all the same.
    bootstrap = ("--bootstrap-server", pair.bootstrap)
    created = tidelog(
        "topics", "create", "--topic", "rs", "--partitions", "1", "--replication-factor", "2",
        *bootstrap,
    )  # fmt: skip
    assert created.returncode == 0, created.stderr
    pair.wait_for_leader("rs")
    result = tidelog("topics", "describe", "--topic", "rs", *bootstrap)
    assert result.returncode == 0, result.stderr
    assert "note:" not in result.stdout + result.stderr
    assert len(re.findall(r"\tReplica: \d\tLEO: 0\tLag: 0\tInSync: yes", result.stdout)) == 2


def _produce(raw: Raw, version: int, topic: str) -> Any:
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


def _fetch(raw: Raw, version: int, topic_id: uuid.UUID, *, current_leader_epoch: int = -1) -> Any:
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


def test_kip_951_a_broker_without_the_partition_names_the_leader(pair: BrokerCluster) -> None:
    # RF=1: the other broker holds no replica, so it refuses Produce and Fetch alike (a
    # follower would serve a consumer's Fetch v11+ itself: KIP-392, test_nearest_replica).
    create_topic(pair, "hints", rf=1)
    view = pair.metadata(["hints"])
    part = view.topics["hints"].partitions[0]
    topic_id = view.topics["hints"].topic_id
    leader: BrokerProcess = pair.broker(part.leader_id)
    other = next(b for b in pair.brokers if b is not leader)
    expected_leader = (part.leader_id, part.leader_epoch)
    endpoint = (part.leader_id, leader.host, leader.port)
    raw = Raw(other)
    try:
        # Produce v10: CurrentLeader per partition, NodeEndpoints for the leaders named.
        answer = _produce(raw, 10, "hints")
        p = answer.responses[0].partition_responses[0]
        assert p.error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER
        assert (p.current_leader.leader_id, p.current_leader.leader_epoch) == expected_leader
        assert [(n.node_id, n.host, n.port) for n in answer.node_endpoints] == [endpoint]
        # Produce v9: the same refusal, no hint (the field does not exist there).
        old = _produce(raw, 9, "hints").responses[0].partition_responses[0]
        assert old.error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER
        # Fetch v16 by a consumer: the same hint.
        fetched = _fetch(raw, 16, topic_id)
        f = fetched.responses[0].partitions[0]
        assert f.error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER
        assert (f.current_leader.leader_id, f.current_leader.leader_epoch) == expected_leader
        assert [(n.node_id, n.host, n.port) for n in fetched.node_endpoints] == [endpoint]
        # Fetch v15: no NodeEndpoints and no CurrentLeader (Kafka writes them from v16).
        f15 = _fetch(raw, 15, topic_id).responses[0].partitions[0]
        assert f15.error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER
        assert (f15.current_leader.leader_id, f15.current_leader.leader_epoch) == (-1, -1)
    finally:
        raw.close()
    # The leader itself answers without a hint.
    raw = Raw(leader)
    try:
        ok = _produce(raw, 10, "hints")
        assert ok.responses[0].partition_responses[0].error_code == ErrorCode.NONE
        assert ok.node_endpoints == ()
        # An epoch from the future is UNKNOWN_LEADER_EPOCH, which Kafka answers unhinted.
        ahead = _fetch(raw, 16, topic_id, current_leader_epoch=part.leader_epoch + 5)
        f = ahead.responses[0].partitions[0]
        assert f.error_code == ErrorCode.UNKNOWN_LEADER_EPOCH
        assert (f.current_leader.leader_id, f.current_leader.leader_epoch) == (-1, -1)
        assert ahead.node_endpoints == ()
    finally:
        raw.close()


def test_kafka_python_admin(pair: BrokerCluster) -> None:
    """kafka-python's admin client (3.0) on the versions and features above: ApiVersions
    v4's features, UpdateFeatures at the controller, ListGroups v5's type filter and
    ListTransactions v2's pattern."""
    create_topic(pair, "kp", rf=1)
    admin = KafkaAdminClient(bootstrap_servers=pair.bootstrap, request_timeout_ms=10_000)
    try:
        assert admin.describe_features() == {
            "group.version": {"supported": (0, 0)},
            "transaction.version": {"supported": (0, 0)},
        }
        assert admin.update_features({"group.version": 1}) == {
            "group.version": f"[Error 42] InvalidRequestError: {INCOMPATIBLE}"
        }
        # A "simple" group (offsets committed without members) is a classic group.
        admin.alter_group_offsets(
            "kp-group", {TopicPartition("kp", 0): OffsetAndMetadata(3, "", -1)}
        )
        classic = [g["group_id"] for g in admin.list_groups(types_filter=["classic"])]
        assert "kp-group" in classic
        assert admin.list_groups(types_filter=["consumer"]) == []
        by_broker = admin.list_transactions(transactional_id_pattern="x.*")
        assert by_broker == {b.broker_id: [] for b in pair.brokers}
    finally:
        admin.close()
