"""``tidelog topics describe``'s layout and filters, and ``topics``' option checks (no
processes): Kafka's TopicCommand lines, its DescribeOptions rules, its usage errors."""

from __future__ import annotations

import json
import uuid

import pytest

from tidelog.cli import admin
from tidelog.cli.main import main
from tidelog.cli.topics import parse_replica_assignment
from tidelog.cli.topics_describe import (
    DescribeFilter,
    PartitionDescription,
    ReplicaDescription,
    TopicDescription,
    describe_to_json,
    format_describe,
    kafka_uuid,
    min_insync_replicas,
    replica_descriptions,
    replica_racks,
)
from tidelog.errors import ErrorCode


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
        min_isr=2,
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
        min_isr=2,
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
        min_isr=2,
    )
    single = PartitionDescription(
        partition=3,
        leader=3,
        leader_epoch=4,
        replicas=(3, 1, 2),
        isr=(3,),
        high_watermark=5,
        replica_states=(),
        leader_live=False,
        min_isr=2,
    )
    return TopicDescription(
        name="orders",
        topic_id="QwhVzy7QRWyiVbG8qDeRZA",
        replication_factor=3,
        configs={"min.insync.replicas": "2", "retention.ms": "60000"},
        partitions=(healthy, shrunk, offline, single),
    )


def test_describe_has_kafka_topics_layout_and_replica_lines() -> None:
    text = format_describe([_topic()])
    lines = text.splitlines()
    assert lines[0] == (
        "Topic: orders\tTopicId: QwhVzy7QRWyiVbG8qDeRZA\tPartitionCount: 4\t"
        "ReplicationFactor: 3\tConfigs: min.insync.replicas=2,retention.ms=60000"
    )
    assert lines[1] == (
        "\tTopic: orders\tPartition: 0\tLeader: 1\tReplicas: 1,2,3\tIsr: 1,2,3\tHW: 10"
    )
    assert lines[2] == "\t\tReplica: 1\tLEO: 10\tLag: 0\tInSync: yes"
    assert lines[3] == "\t\tReplica: 2\tLEO: 10\tLag: 0\tInSync: yes\tCaughtUp: 0.3s ago"
    assert "\t\tReplica: 1\tLEO: ?\tLag: ?\tInSync: no" in lines
    assert "\tTopic: orders\tPartition: 2\tLeader: none\tReplicas: 1\tIsr: " in lines


def _partitions(text: str) -> list[int]:
    """The partition numbers of the ``Partition:`` lines of ``text``."""
    return [
        int(line.split("\t")[2].removeprefix("Partition: "))
        for line in text.splitlines()
        if line.startswith("\tTopic:")
    ]


@pytest.mark.parametrize(
    ("selection", "partitions"),
    [
        (DescribeFilter(under_replicated=True), [1, 2, 3]),
        (DescribeFilter(unavailable=True), [2, 3]),
        # No leader counts as under min ISR (Kafka's isUnderMinIsr).
        (DescribeFilter(under_min_isr=True), [2, 3]),
        (DescribeFilter(at_min_isr=True), [1]),
        # Filters together: a partition line when any matches.
        (DescribeFilter(at_min_isr=True, unavailable=True), [1, 2, 3]),
        (DescribeFilter(), [0, 1, 2, 3]),
    ],
)
def test_partition_filters_print_matching_partition_lines_only(
    selection: DescribeFilter, partitions: list[int]
) -> None:
    text = format_describe([_topic()], selection)
    assert _partitions(text) == partitions
    assert any(line.startswith("Topic: ") for line in text.splitlines()) is (
        not selection.partition_filtered
    )


def test_unavailable_partition_line_is_kafkas() -> None:
    lines = format_describe([_topic()], DescribeFilter(unavailable=True)).splitlines()
    assert lines[0] == "\tTopic: orders\tPartition: 2\tLeader: none\tReplicas: 1\tIsr: "


def test_topics_with_overrides_prints_only_topic_lines_of_overridden_topics() -> None:
    plain = TopicDescription(
        name="plain", topic_id="AAAAAAAAAAAAAAAAAAAAAA", replication_factor=3, configs={},
        partitions=_topic().partitions,
    )  # fmt: skip
    text = format_describe([_topic(), plain], DescribeFilter(topics_with_overrides=True))
    assert text.splitlines() == [
        "Topic: orders\tTopicId: QwhVzy7QRWyiVbG8qDeRZA\tPartitionCount: 4\t"
        "ReplicationFactor: 3\tConfigs: min.insync.replicas=2,retention.ms=60000"
    ]
    data = describe_to_json([_topic(), plain], DescribeFilter(topics_with_overrides=True))
    assert [t["topic"] for t in data] == ["orders"]
    assert len(data[0]["partitions"]) == 4


def test_json_keeps_the_partitions_the_filter_keeps() -> None:
    data = describe_to_json([_topic()], DescribeFilter(under_min_isr=True))
    assert [p["partition"] for p in data[0]["partitions"]] == [2, 3]
    assert data[0]["min_insync_replicas"] == 2
    assert (
        describe_to_json([_topic()], DescribeFilter(at_min_isr=True, under_min_isr=False))[0][
            "partitions"
        ][0]["at_min_isr"]
        is True
    )
    healthy_only = TopicDescription(
        name="h", topic_id="AAAAAAAAAAAAAAAAAAAAAA", replication_factor=3, configs={},
        partitions=_topic().partitions[:1],
    )  # fmt: skip
    assert describe_to_json([healthy_only], DescribeFilter(under_replicated=True)) == []


def test_min_insync_replicas_is_the_effective_value() -> None:
    entry = admin.ConfigEntry("min.insync.replicas", "2", "STATIC_BROKER_CONFIG", False, False)
    other = admin.ConfigEntry("retention.ms", "1", "DYNAMIC_TOPIC_CONFIG", False, False)
    assert min_insync_replicas(admin.ResourceConfigs(ErrorCode.NONE, None, (other, entry))) == 2
    assert min_insync_replicas(admin.ResourceConfigs(ErrorCode.NONE, None, (other,))) is None
    refused = admin.ResourceConfigs(ErrorCode.TOPIC_AUTHORIZATION_FAILED, None, (entry,))
    assert min_insync_replicas(refused) is None
    assert min_insync_replicas(None) is None


def test_describe_json_carries_flags_and_replica_states() -> None:
    data = describe_to_json([_topic()])
    assert data[0]["partition_count"] == 4
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


def test_racks_follow_the_replicas_on_the_partition_line_and_in_json() -> None:
    racks = replica_racks([3, 1, 4, 2], {1: "a", 2: None, 3: "c"})
    assert racks == ("c", "a", "?", None)  # 4 is not live, 2 has no rack
    assert replica_racks([1, 2], {1: None, 2: None}) == ()
    p = PartitionDescription(
        partition=0, leader=3, leader_epoch=1, replicas=(3, 1, 4, 2), isr=(3, 1),
        high_watermark=None, replica_states=(), racks=racks,
    )  # fmt: skip
    t = TopicDescription(
        name="r", topic_id="AAAAAAAAAAAAAAAAAAAAAA", replication_factor=4, configs={},
        partitions=(p,),
    )  # fmt: skip
    assert format_describe([t]).splitlines()[1] == (
        "\tTopic: r\tPartition: 0\tLeader: 3\tReplicas: 3,1,4,2\tIsr: 3,1\tRacks: c,a,?,-"
    )
    assert describe_to_json([t])[0]["partitions"][0]["racks"] == ["c", "a", "?", None]
    assert describe_to_json([_topic()])[0]["partitions"][0]["racks"] is None
    assert "Racks:" not in format_describe([_topic()])


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


def test_parse_replica_assignment_keeps_order_per_partition() -> None:
    assert parse_replica_assignment("1:2:3, 2 :3:1,3:1:2") == [[1, 2, 3], [2, 3, 1], [3, 1, 2]]
    # Duplicates and differing counts are the broker's to refuse (topics rule 2).
    assert parse_replica_assignment("1:1,2") == [[1, 1], [2]]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["create", "--topic", "t", "--partitions", "2", "--replica-assignment", "1:2,2:1"],
            'Option "[replica-assignment]" can\'t be used with option "[partitions]"',
        ),
        (
            ["create", "--topic", "t", "--replication-factor", "2", "--replica-assignment", "1"],
            'Option "[replica-assignment]" can\'t be used with option "[replication-factor]"',
        ),
        (
            ["create", "--topic", "t", "--replica-assignment", "1:x,2:1"],
            "--replica-assignment '1:x,2:1': 'x' is not a broker id",
        ),
        (
            ["alter", "--topic", "t", "--replica-assignment", "1:2,2:1"],
            'Missing required argument "[partitions]"',
        ),
        (
            ["describe", "--under-min-isr-partitions", "--topics-with-overrides"],
            'Option "[under-min-isr-partitions]" can\'t be used with option '
            '"[topics-with-overrides]"',
        ),
    ],
)
def test_bad_options_are_usage_errors_before_connecting(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # Port 1: nothing listens; the check must come before any connection.
    code = main(["topics", *argv, "--bootstrap-server", "127.0.0.1:1"])
    err = capsys.readouterr().err
    assert code == 2, err
    assert err.splitlines()[0] == f"tidelog topics: error: {message}"
