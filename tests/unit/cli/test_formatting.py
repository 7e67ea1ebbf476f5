"""Formatting and parsing of the CLI (no processes): describe layout, errors, partitioner."""

from __future__ import annotations

import json
import uuid

import pytest
from hypothesis import given
from hypothesis import strategies as st
from kafka.partitioner.default import murmur2 as kafka_python_murmur2

from tidelog.cli import admin
from tidelog.cli.output import CommandError, format_table, parse_key_value
from tidelog.cli.topics import (
    PartitionDescription,
    ReplicaDescription,
    TopicDescription,
    describe_to_json,
    format_describe,
    kafka_uuid,
    replica_descriptions,
    report_election,
)
from tidelog.errors import ErrorCode
from tidelog.model import TopicPartition
from tidelog.protocol.partitioner import murmur2, partition_for_key


def _topic() -> TopicDescription:
    healthy = PartitionDescription(
        partition=0,
        leader=1,
        leader_epoch=0,
        replicas=(1, 2, 3),
        isr=(1, 2, 3),
        high_watermark=10,
        replica_states=(
            ReplicaDescription(1, 10, 0, True, None),
            ReplicaDescription(2, 10, 0, True, 300),
            ReplicaDescription(3, 10, 0, True, 200),
        ),
    )
    shrunk = PartitionDescription(
        partition=1,
        leader=2,
        leader_epoch=1,
        replicas=(1, 2, 3),
        isr=(2, 3),
        high_watermark=7,
        replica_states=(
            ReplicaDescription(1, None, None, False, None),
            ReplicaDescription(2, 9, 0, True, None),
            ReplicaDescription(3, 7, 2, True, 1500),
        ),
    )
    offline = PartitionDescription(
        partition=2,
        leader=-1,
        leader_epoch=2,
        replicas=(1,),
        isr=(),
        high_watermark=None,
        replica_states=(),
        leader_live=False,
    )
    return TopicDescription(
        name="orders",
        topic_id="QwhVzy7QRWyiVbG8qDeRZA",
        replication_factor=3,
        configs={"min.insync.replicas": "2", "retention.ms": "60000"},
        partitions=(healthy, shrunk, offline),
    )


def test_describe_has_kafka_topics_layout_and_replica_lines() -> None:
    text = format_describe([_topic()])
    lines = text.splitlines()
    assert lines[0] == (
        "Topic: orders\tTopicId: QwhVzy7QRWyiVbG8qDeRZA\tPartitionCount: 3\t"
        "ReplicationFactor: 3\tConfigs: min.insync.replicas=2,retention.ms=60000"
    )
    assert lines[1] == (
        "\tTopic: orders\tPartition: 0\tLeader: 1\tReplicas: 1,2,3\tIsr: 1,2,3\tHW: 10"
    )
    assert lines[2] == "\t\tReplica: 1\tLEO: 10\tLag: 0\tInSync: yes"
    assert lines[3] == "\t\tReplica: 2\tLEO: 10\tLag: 0\tInSync: yes\tCaughtUp: 0.3s ago"
    assert "\t\tReplica: 1\tLEO: ?\tLag: ?\tInSync: no" in lines
    assert "\tTopic: orders\tPartition: 2\tLeader: none\tReplicas: 1\tIsr: " in lines


def test_describe_filters_print_only_matching_partition_lines() -> None:
    under = format_describe([_topic()], under_replicated_only=True).splitlines()
    assert [line.split("\t")[2] for line in under if line.startswith("\tTopic")] == [
        "Partition: 1",
        "Partition: 2",
    ]
    assert not any(line.startswith("Topic:") for line in under)
    unavailable = format_describe([_topic()], unavailable_only=True).splitlines()
    assert unavailable == ["\tTopic: orders\tPartition: 2\tLeader: none\tReplicas: 1\tIsr: "]


def test_describe_json_carries_flags_and_replica_states() -> None:
    data = describe_to_json([_topic()])
    assert data[0]["partition_count"] == 3
    p1 = data[0]["partitions"][1]
    assert p1["under_replicated"] is True
    assert p1["unavailable"] is False
    assert p1["replica_states"][2] == {
        "broker_id": 3,
        "log_end_offset": 7,
        "lag": 2,
        "in_sync": True,
        "caught_up_ms_ago": 1500,
    }
    assert data[0]["partitions"][2]["unavailable"] is True
    json.dumps(data)  # serialisable as is


def test_replica_descriptions_lag_is_leader_leo_minus_replica_leo() -> None:
    quorum = admin.QuorumInfo(
        error_code=ErrorCode.NONE,
        leader_id=2,
        leader_epoch=3,
        high_watermark=90,
        replicas=(
            admin.ReplicaState(2, 100, -1, -1, True),
            admin.ReplicaState(3, 90, 9_000, 9_500, True),
            admin.ReplicaState(1, 40, 5_000, 4_000, False),
        ),
    )
    states = replica_descriptions(quorum, (1, 2, 3, 4), now_ms=10_000)
    assert [(r.broker_id, r.log_end_offset, r.lag, r.in_sync) for r in states] == [
        (1, 40, 60, False),
        (2, 100, 0, True),
        (3, 90, 10, True),
        (4, None, None, False),
    ]
    assert states[0].caught_up_ms_ago == 6_000
    assert states[1].caught_up_ms_ago is None


def test_kafka_uuid_is_urlsafe_base64_without_padding() -> None:
    value = uuid.UUID("4308557b-3ed0-456c-8a89-56f1bc0de464")
    text = kafka_uuid(value)
    assert len(text) == 22
    assert "=" not in text
    assert uuid.UUID(bytes=__import__("base64").urlsafe_b64decode(text + "==")) == value
    assert kafka_uuid(None) == "AAAAAAAAAAAAAAAAAAAAAA"


def test_report_election_summarises_like_kafka_and_fails_on_errors(
    capsys: pytest.CaptureFixture[str],
) -> None:
    ok = admin.ElectionResult(ErrorCode.NONE, None)
    not_needed = admin.ElectionResult(ErrorCode.ELECTION_NOT_NEEDED, None)
    results = {TopicPartition("t", 0): ok, TopicPartition("t", 1): not_needed}
    assert report_election(results, "PREFERRED", as_json=False) == 0
    out = capsys.readouterr().out
    assert "Successfully completed leader election (PREFERRED) for partitions t-0" in out
    assert "Valid replica already elected for partitions t-1" in out
    failed = {
        TopicPartition("t", 2): admin.ElectionResult(
            ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE, "broker 1 is down"
        )
    }
    assert report_election(failed, "PREFERRED", as_json=False) == 1
    out = capsys.readouterr().out
    assert "PREFERRED_LEADER_NOT_AVAILABLE" in out
    assert "broker 1 is down" in out


def test_command_error_renders_kafka_name_and_hint() -> None:
    error = CommandError("topic 'x'", code=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
    assert error.render("topics") == (
        "tidelog topics: error: UNKNOWN_TOPIC_OR_PARTITION: topic 'x'\n"
        "hint: check the name with `tidelog topics list`"
    )
    assert CommandError("plain").render("consume") == "tidelog consume: error: plain"


def test_parse_key_value() -> None:
    assert parse_key_value("retention.ms = 1000") == ("retention.ms", "1000")
    assert parse_key_value("a=b=c") == ("a", "b=c")
    with pytest.raises(CommandError, match="'nope' is not KEY=VALUE"):
        parse_key_value("nope")
    with pytest.raises(CommandError, match="is not KEY=VALUE"):
        parse_key_value("=x")


def test_format_table_aligns_columns() -> None:
    text = format_table(("A", "LONGER"), [(1, "x"), (22222, None)])
    assert text.splitlines() == ["A      LONGER", "1      x", "22222"]


@given(st.binary(max_size=64))
def test_murmur2_matches_kafka_python(data: bytes) -> None:
    # kafka-python returns the hash unsigned; Kafka's Java (and ours) signed.
    assert murmur2(data) & 0xFFFFFFFF == kafka_python_murmur2(data)


def test_murmur2_signed_like_kafkas_utils() -> None:
    # Vectors of Kafka's UtilsTest.testMurmur2.
    assert murmur2(b"21") == -973932308
    assert murmur2(b"foobar") == -790332482


@given(st.binary(min_size=1, max_size=32), st.integers(min_value=1, max_value=64))
def test_partition_for_key_in_range(key: bytes, n: int) -> None:
    assert 0 <= partition_for_key(key, n) < n
