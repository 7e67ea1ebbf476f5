"""``tidelog topics`` against three real brokers (ids 0, 1, 2), as ``kafka-topics.sh``:
``--replica-assignment`` on create and alter, the refusals of bad assignments, and the
describe filters after a broker stops. One cluster for the module; the broker-stopping test
comes last."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator

import pytest

from tests.harness import BrokerCluster
from tests.integration.cli.conftest import Result
from tidelog.cli.main import main
from tidelog.client import BlockingClient, NewTopic
from tidelog.errors import ErrorCode
from tidelog.testing.zookeeper import ZooKeeperProcess

pytestmark = pytest.mark.integration

Tidelog = Callable[..., Result]


@pytest.fixture(scope="module")
def cluster(
    tmp_path_factory: pytest.TempPathFactory, zookeeper: ZooKeeperProcess
) -> Iterator[BrokerCluster]:
    directory = tmp_path_factory.mktemp("topics-cli")
    started = BrokerCluster(directory, f"{zookeeper.connect_string}/{directory.name}").start()
    try:
        yield started
    finally:
        started.stop()


@pytest.fixture
def tidelog(capsys: pytest.CaptureFixture[str]) -> Tidelog:
    """The command run in this process (``main``), its output captured: the subprocess
    fixture's start-up cost, paid some forty times, would dominate the module."""

    def run(*args: str) -> Result:
        code = main(list(args))
        out, err = capsys.readouterr()
        return Result(code, out, err)

    return run


def _topics(tidelog: Tidelog, cluster: BrokerCluster, *args: str) -> Result:
    return tidelog("topics", *args, "--bootstrap-server", cluster.bootstrap)


def _describe_json(tidelog: Tidelog, cluster: BrokerCluster, *args: str) -> list[dict[str, object]]:
    result = _topics(tidelog, cluster, "describe", "--json", *args)
    assert result.returncode == 0, result.stderr
    topics = json.loads(result.stdout)["topics"]
    assert isinstance(topics, list)
    return topics


def _partition_lines(text: str) -> list[tuple[str, int]]:
    """(topic, partition) of each ``Partition:`` line, in order."""
    found = []
    for line in text.splitlines():
        if line.startswith("\tTopic: "):
            fields = dict(f.split(": ", 1) for f in line.strip("\t").split("\t"))
            found.append((fields["Topic"], int(fields["Partition"])))
    return found


def test_replica_assignment_is_honoured_on_create_and_alter(
    cluster: BrokerCluster, tidelog: Tidelog
) -> None:
    created = _topics(
        tidelog, cluster, "create", "--topic", "placed", "--replica-assignment", "2:0:1,0:1:2,1:2:0"
    )
    assert created.returncode == 0, created.stderr
    assert created.stdout == "Created topic placed.\n"
    for p in range(3):
        cluster.wait_for_leader("placed", p)
    text = _topics(tidelog, cluster, "describe", "--topic", "placed").stdout
    # The first broker of each entry is the preferred replica, and leads.
    for line in (
        "\tTopic: placed\tPartition: 0\tLeader: 2\tReplicas: 2,0,1\tIsr: ",
        "\tTopic: placed\tPartition: 1\tLeader: 0\tReplicas: 0,1,2\tIsr: ",
        "\tTopic: placed\tPartition: 2\tLeader: 1\tReplicas: 1,2,0\tIsr: ",
    ):
        assert any(row.startswith(line) for row in text.splitlines()), text

    # Kafka's alter: the entries of the existing partitions are skipped.
    grown = _topics(
        tidelog, cluster, "alter", "--topic", "placed", "--partitions", "5",
        "--replica-assignment", "9:9:9,9:9:9,9:9:9,1:0:2,0:2:1",
    )  # fmt: skip
    assert grown.returncode == 0, grown.stderr
    described = _describe_json(tidelog, cluster, "--topic", "placed")
    partitions = described[0]["partitions"]
    assert isinstance(partitions, list)
    assert [p["replicas"] for p in partitions] == [
        [2, 0, 1], [0, 1, 2], [1, 2, 0], [1, 0, 2], [0, 2, 1]
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("assignment", "message"),
    [
        ("0:0:1,1:2:0", "Duplicate brokers not allowed in replica assignment: 0 -> 0,0,1"),
        (
            "0:1,1",
            "Inconsistent replication factor between partitions, partition 0 has 2 while "
            "partitions [1] have replication factors [1], respectively.",
        ),
        ("0:7,1:8", "Unknown broker(s) in replica assignment: 7, 8."),
    ],
)
def test_a_bad_assignment_is_the_brokers_invalid_replica_assignment(
    cluster: BrokerCluster, tidelog: Tidelog, assignment: str, message: str
) -> None:
    result = _topics(
        tidelog, cluster, "create", "--topic", "bad", "--replica-assignment", assignment
    )
    assert result.returncode == 1
    assert result.stderr.splitlines()[0] == (
        f"tidelog topics: error: INVALID_REPLICA_ASSIGNMENT: topic 'bad': {message}"
    )
    assert "bad" not in _topics(tidelog, cluster, "list").stdout.split()


def test_assignment_option_mistakes_are_refused(cluster: BrokerCluster, tidelog: Tidelog) -> None:
    both = _topics(
        tidelog, cluster, "create", "--topic", "bad", "--partitions", "2",
        "--replica-assignment", "0:1,1:0",
    )  # fmt: skip
    assert both.returncode == 2
    assert both.stderr.splitlines()[0] == (
        "tidelog topics: error: "
        'Option "[replica-assignment]" can\'t be used with option "[partitions]"'
    )
    created = _topics(tidelog, cluster, "create", "--topic", "pair", "--replica-assignment", "0:1")
    assert created.returncode == 0, created.stderr
    short = _topics(
        tidelog, cluster, "alter", "--topic", "pair", "--partitions", "3",
        "--replica-assignment", "0:1,1:0",
    )  # fmt: skip
    assert short.returncode == 1
    assert short.stderr.splitlines()[0] == (
        "tidelog topics: error: INVALID_REPLICA_ASSIGNMENT: topic 'pair': "
        "Increasing the number of partitions by 2 but 1 assignments provided."
    )
    # The broker refuses counts beside an assignment, as Kafka's ZkAdminManager.
    with BlockingClient(cluster.bootstrap) as client:
        errors = client.create_topics([NewTopic("raw", num_partitions=1, assignments={0: [0, 1]})])
    assert errors["raw"].error_code == ErrorCode.INVALID_REQUEST
    assert errors["raw"].message == (
        "Both numPartitions or replicationFactor and replicasAssignments were set. "
        "Both cannot be used at the same time."
    )


def _wait_for_lines(
    tidelog: Tidelog, cluster: BrokerCluster, flag: str, expected: list[tuple[str, int]]
) -> None:
    topics = ("--topic", "spread", "--topic", "strict", "--topic", "solo")
    deadline = time.monotonic() + 30
    while True:
        result = _topics(tidelog, cluster, "describe", flag, *topics)
        assert result.returncode == 0, result.stderr
        if _partition_lines(result.stdout) == expected:
            assert not any(line.startswith("Topic: ") for line in result.stdout.splitlines())
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"{flag}: expected {expected}, last output:\n{result.stdout}")
        time.sleep(0.5)


def test_describe_filters_after_a_broker_stops(cluster: BrokerCluster, tidelog: Tidelog) -> None:
    for args in (
        ("--topic", "spread", "--replica-assignment", "0:1:2,1:2:0,2:0:1"),
        ("--topic", "strict", "--replica-assignment", "0:1:2", "--config", "min.insync.replicas=3"),
        ("--topic", "solo", "--replica-assignment", "2"),
    ):
        created = _topics(tidelog, cluster, "create", *args)
        assert created.returncode == 0, created.stderr
    with BlockingClient(cluster.bootstrap) as client:
        client.find_coordinator("a-group", key_type=0)  # creates __consumer_offsets
    listed = _topics(tidelog, cluster, "list").stdout.split()
    assert "__consumer_offsets" in listed
    assert (
        "__consumer_offsets" not in _topics(tidelog, cluster, "list", "--exclude-internal").stdout
    )
    overrides = _topics(
        tidelog, cluster, "describe", "--topics-with-overrides", "--exclude-internal"
    ).stdout.splitlines()
    assert [line.split("\t")[0] for line in overrides] == ["Topic: strict"]
    assert overrides[0].endswith("\tConfigs: min.insync.replicas=3")

    # All replicas in sync: strict is at its minimum of 3, nothing is under-replicated.
    _wait_for_lines(tidelog, cluster, "--under-replicated-partitions", [])
    _wait_for_lines(tidelog, cluster, "--at-min-isr-partitions", [("strict", 0)])

    cluster.broker(2).stop()
    spread = [("spread", 0), ("spread", 1), ("spread", 2)]
    _wait_for_lines(tidelog, cluster, "--under-replicated-partitions", [*spread, ("strict", 0)])
    _wait_for_lines(tidelog, cluster, "--at-min-isr-partitions", spread)
    # Topics in name order; no leader counts as under the minimum (Kafka's isUnderMinIsr).
    _wait_for_lines(tidelog, cluster, "--under-min-isr-partitions", [("solo", 0), ("strict", 0)])
    _wait_for_lines(tidelog, cluster, "--unavailable-partitions", [("solo", 0)])
    both = _topics(
        tidelog, cluster, "describe", "--at-min-isr-partitions", "--unavailable-partitions",
        "--topic", "spread", "--topic", "solo",
    )  # fmt: skip
    assert _partition_lines(both.stdout) == [("solo", 0), *spread]
    assert "\tTopic: solo\tPartition: 0\tLeader: none\tReplicas: 2\t" in both.stdout
