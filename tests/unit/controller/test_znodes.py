"""Kafka's ZooKeeper-era znode encodings: shapes, round-trips and what bad data looks like."""

from __future__ import annotations

import json
import uuid

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tidelog.model import BrokerId, ControllerEpoch, LeaderEpoch, PartitionEpoch
from tidelog.zk import znodes
from tidelog.zk.znodes import (
    BrokerRegistration,
    ControllerRegistration,
    EndPoint,
    PartitionState,
    TopicAssignment,
    ZNodeDecodeError,
)

# -- what Kafka writes (captured shapes of Kafka 3.x ZooKeeper-mode nodes) -----------------------

KAFKA_BROKER = (
    b'{"features":{},"listener_security_protocol_map":{"PLAINTEXT":"PLAINTEXT"},'
    b'"endpoints":["PLAINTEXT://127.0.0.1:9092"],"jmx_port":-1,"port":9092,'
    b'"host":"127.0.0.1","version":5,"timestamp":"1700000000000"}'
)
KAFKA_TOPIC = (
    b'{"removing_replicas":{},"partitions":{"2":[3,1,2],"1":[2,3,1],"0":[1,2,3]},'
    b'"topic_id":"rXEqTcbfQ96tyIX3FyDCKQ","adding_replicas":{},"version":3}'
)
KAFKA_STATE = b'{"controller_epoch":7,"leader":2,"version":1,"leader_epoch":4,"isr":[2,3]}'


def test_broker_registration_decodes_kafkas_node() -> None:
    reg = BrokerRegistration.decode(1, KAFKA_BROKER)
    assert reg.broker_id == 1
    assert reg.endpoints == (EndPoint("PLAINTEXT", "127.0.0.1", 9092, "PLAINTEXT"),)
    assert (reg.host, reg.port, reg.rack, reg.jmx_port) == ("127.0.0.1", 9092, None, -1)
    assert reg.timestamp_ms == 1700000000000


def test_broker_registration_encodes_kafkas_shape() -> None:
    reg = BrokerRegistration(
        broker_id=BrokerId(1),
        endpoints=(EndPoint("PLAINTEXT", "127.0.0.1", 9092),),
        timestamp_ms=1700000000000,
    )
    encoded = reg.encode()
    assert b" " not in encoded  # Kafka's compact JSON
    assert json.loads(encoded) == json.loads(KAFKA_BROKER)
    with_rack = BrokerRegistration(
        broker_id=BrokerId(2), endpoints=reg.endpoints, rack="r1", timestamp_ms=5
    )
    assert json.loads(with_rack.encode())["rack"] == "r1"
    assert BrokerRegistration.decode(2, with_rack.encode()) == with_rack


def test_endpoint_ipv6_and_listener_protocols() -> None:
    ep = EndPoint("INTERNAL", "::1", 9093, "SSL")
    assert ep.connection_string == "INTERNAL://[::1]:9093"
    reg = BrokerRegistration(broker_id=BrokerId(3), endpoints=(ep,), timestamp_ms=1)
    obj = json.loads(reg.encode())
    assert obj["host"] is None
    assert obj["port"] == -1
    assert obj["listener_security_protocol_map"] == {"INTERNAL": "SSL"}
    assert BrokerRegistration.decode(3, reg.encode()) == reg


def test_controller_nodes() -> None:
    reg = ControllerRegistration(broker_id=BrokerId(2), timestamp_ms=1700000000123)
    assert json.loads(reg.encode()) == {"version": 1, "brokerid": 2, "timestamp": "1700000000123"}
    assert ControllerRegistration.decode(reg.encode()) == reg
    assert znodes.encode_controller_epoch(12) == b"12"
    assert znodes.decode_controller_epoch(b"12") == 12
    assert znodes.INITIAL_CONTROLLER_EPOCH == 0


def test_topic_assignment_decodes_kafkas_node() -> None:
    topic = TopicAssignment.decode("t", KAFKA_TOPIC)
    assert topic.partitions == {0: (1, 2, 3), 1: (2, 3, 1), 2: (3, 1, 2)}
    assert topic.topic_id is not None
    assert znodes.encode_uuid(topic.topic_id) == "rXEqTcbfQ96tyIX3FyDCKQ"
    assert json.loads(topic.encode()) == json.loads(KAFKA_TOPIC)


def test_topic_id_is_kafkas_uuid_string() -> None:
    # Kafka's Uuid.toString: URL-safe base64 of the 16 bytes, no padding (22 characters).
    value = uuid.UUID("ad712a4d-c6df-43de-adc8-85f71720c229")
    assert znodes.encode_uuid(value) == "rXEqTcbfQ96tyIX3FyDCKQ"
    assert znodes.decode_uuid("rXEqTcbfQ96tyIX3FyDCKQ") == value
    with pytest.raises(ValueError, match="not a Kafka Uuid"):
        znodes.decode_uuid("abc")


def test_topic_without_id_from_old_kafka() -> None:
    old = b'{"version":1,"partitions":{"0":[1]}}'
    topic = TopicAssignment.decode("old", old)
    assert topic.topic_id is None
    assert topic.partitions == {0: (1,)}
    assert "topic_id" not in json.loads(topic.encode())


def test_partition_state_round_trip_and_epoch_from_version() -> None:
    state = PartitionState.decode(KAFKA_STATE, zk_version=9)
    assert state == PartitionState(
        leader=BrokerId(2),
        leader_epoch=LeaderEpoch(4),
        isr=(BrokerId(2), BrokerId(3)),
        controller_epoch=ControllerEpoch(7),
        partition_epoch=PartitionEpoch(9),
    )
    assert json.loads(state.encode()) == json.loads(KAFKA_STATE)  # the epoch is not in the JSON
    recovering = PartitionState(
        leader=BrokerId(1),
        leader_epoch=LeaderEpoch(1),
        isr=(BrokerId(1),),
        controller_epoch=ControllerEpoch(1),
        leader_recovery_state=znodes.LEADER_RECOVERY_RECOVERING,
    )
    assert json.loads(recovering.encode())["leader_recovery_state"] == 1
    assert PartitionState.decode(recovering.encode(), zk_version=0) == recovering


def test_offline_partition_has_no_leader() -> None:
    state = PartitionState.decode(
        b'{"controller_epoch":1,"leader":-1,"version":1,"leader_epoch":3,"isr":[2]}', zk_version=3
    )
    assert not state.has_leader
    assert state.isr == (2,)


def test_topic_config_and_change_notification() -> None:
    data = znodes.encode_topic_config({"retention.ms": "1000", "min.insync.replicas": "2"})
    assert json.loads(data) == {
        "version": 1,
        "config": {"retention.ms": "1000", "min.insync.replicas": "2"},
    }
    assert znodes.decode_topic_config("t", data) == {
        "retention.ms": "1000",
        "min.insync.replicas": "2",
    }
    assert znodes.decode_topic_config("t", b"") == {}
    change = znodes.encode_config_change("t")
    assert json.loads(change) == {"version": 2, "entity_path": "topics/t"}
    assert znodes.decode_config_change(change) == "t"
    assert znodes.decode_config_change(b'{"version":2,"entity_path":"brokers/1"}') is None


def test_cluster_id_node() -> None:
    data = znodes.encode_cluster_id("rXEqTcbfQ96tyIX3FyDCKQ")
    assert json.loads(data) == {"version": "1", "id": "rXEqTcbfQ96tyIX3FyDCKQ"}
    assert znodes.decode_cluster_id(data) == "rXEqTcbfQ96tyIX3FyDCKQ"


def test_paths() -> None:
    assert znodes.broker_path(3) == "/brokers/ids/3"
    assert znodes.topic_path("t") == "/brokers/topics/t"
    assert znodes.partition_state_path("t", 4) == "/brokers/topics/t/partitions/4/state"
    assert znodes.topic_config_path("t") == "/config/topics/t"
    assert znodes.delete_topic_path("t") == "/admin/delete_topics/t"


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("", "can't be empty"),
        ("..", 'cannot be "." or ".."'),
        ("a/b", "contains a character other than ASCII alphanumerics"),
        ("x" * 250, "can't be longer than 249 characters"),
    ],
)
def test_illegal_topic_names(name: str, message: str) -> None:
    error = znodes.topic_name_error(name)
    assert error is not None
    assert message in error


def test_legal_topic_names() -> None:
    assert znodes.topic_name_error("orders.v1_eu-west") is None
    assert znodes.topic_name_error("x" * 249) is None


@pytest.mark.parametrize(
    ("decode", "data", "reason"),
    [
        (lambda d: PartitionState.decode(d, zk_version=0), b"{", "not JSON"),
        (lambda d: PartitionState.decode(d, zk_version=0), b"[1]", "not a JSON object"),
        (
            lambda d: PartitionState.decode(d, zk_version=0),
            b'{"controller_epoch":1,"leader":"2","leader_epoch":0,"isr":[]}',
            "'leader' is not an integer",
        ),
        (
            lambda d: PartitionState.decode(d, zk_version=0),
            b'{"controller_epoch":1,"leader":2,"leader_epoch":0,"isr":[true]}',
            "'isr' is not a list of integers",
        ),
        (lambda d: TopicAssignment.decode("t", d), b'{"version":3}', "'partitions' is missing"),
        (
            lambda d: TopicAssignment.decode("t", d),
            b'{"partitions":{"x":[1]}}',
            "non-numeric key",
        ),
        (lambda d: BrokerRegistration.decode(1, d), b'{"version":5}', "bad 'endpoints'"),
        (
            lambda d: BrokerRegistration.decode(1, d),
            b'{"version":5,"endpoints":["nonsense"]}',
            "not an endpoint",
        ),
        (znodes.decode_controller_epoch, b"x1", "not a number"),
        (lambda d: znodes.decode_topic_config("t", d), b'{"config":{"a":1}}', "map of strings"),
    ],
)
def test_malformed_nodes_are_named_errors(decode, data: bytes, reason: str) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ZNodeDecodeError, match=reason):
        decode(data)


# -- round-trips ---------------------------------------------------------------------------------

broker_ids = st.integers(min_value=0, max_value=2**31 - 1).map(BrokerId)
replica_lists = st.lists(broker_ids, min_size=1, max_size=5, unique=True).map(tuple)


@given(
    partitions=st.dictionaries(st.integers(0, 1000), replica_lists, max_size=20),
    topic_id=st.none() | st.uuids(),
    adding=st.dictionaries(st.integers(0, 1000), replica_lists, max_size=3),
)
def test_topic_assignment_round_trip(partitions, topic_id, adding) -> None:  # type: ignore[no-untyped-def]
    topic = TopicAssignment(partitions=partitions, topic_id=topic_id, adding_replicas=adding)
    assert TopicAssignment.decode("t", topic.encode()) == topic


@given(
    leader=st.integers(-1, 2**31 - 1),
    leader_epoch=st.integers(0, 2**31 - 1),
    isr=st.lists(broker_ids, max_size=5, unique=True).map(tuple),
    controller_epoch=st.integers(0, 2**31 - 1),
    version=st.integers(0, 2**31 - 1),
)
def test_partition_state_round_trip(leader, leader_epoch, isr, controller_epoch, version) -> None:  # type: ignore[no-untyped-def]
    state = PartitionState(
        leader=BrokerId(leader),
        leader_epoch=LeaderEpoch(leader_epoch),
        isr=isr,
        controller_epoch=ControllerEpoch(controller_epoch),
        partition_epoch=PartitionEpoch(version),
    )
    assert PartitionState.decode(state.encode(), zk_version=version) == state


@given(st.uuids())
def test_uuid_round_trip(value: uuid.UUID) -> None:
    text = znodes.encode_uuid(value)
    assert len(text) == 22
    assert "=" not in text
    assert znodes.decode_uuid(text) == value


def test_feature_znode() -> None:
    # Kafka's FeatureZNode, version 2, status 1 (enabled), as its controller first writes it.
    assert znodes.encode_feature_znode({}) == b'{"features":{},"version":2,"status":1}'
    data = znodes.encode_feature_znode({"group.version": 1})
    assert data == b'{"features":{"group.version":{"max_version_level":1}},"version":2,"status":1}'
    assert znodes.decode_feature_znode(data) == {"group.version": 1}
    # Version 1 (Kafka 2.7-3.2) also wrote min_version_level; a disabled node finalizes none.
    old = b'{"features":{"f":{"min_version_level":1,"max_version_level":2}},"version":1,"status":1}'
    assert znodes.decode_feature_znode(old) == {"f": 2}
    assert (
        znodes.decode_feature_znode(b'{"features":{"f":{"max_version_level":2}},"status":0}') == {}
    )
    with pytest.raises(znodes.ZNodeDecodeError):
        znodes.decode_feature_znode(b'{"features":{"f":{}},"version":2,"status":1}')
