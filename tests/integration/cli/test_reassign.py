"""``tidelog reassign`` and ``tidelog brokers decommission`` as subprocesses against three
real brokers (ids 1, 2, 3; two log dirs each) on a real ZooKeeper, with confluent-kafka
producing (acks=all), consuming and describing configs, and kafka-python's KafkaAdminClient
cross-checking ListPartitionReassignments. confluent-kafka's AdminClient (2.16) has no
reassignment calls.

1. generate + execute + verify move a partition from [1] to [2, 3] while a producer
   writes; every acknowledged record is read back at its offset; broker 1's log is deleted;
   bad files and unknown brokers/partitions print Kafka's messages and change nothing.
2. A throttled (--throttle 20000 B/s) move of ~4 MB is still running when verify (exit 3)
   and cancel run; the throttle configs are set on the brokers and the topic and cleared by
   cancel; the replicas go back to [1]; verify then exits 4.
3. decommission refuses while a partition cannot leave broker 3 (RF 3), then, once that
   topic is down to RF 2 (an execute + verify), moves every replica off 3 under a producer.
4. decommission of a broker that crashed.
5. execute with a log dir in the file: the new replica lands in that dir.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer
from confluent_kafka import TopicPartition as CTopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, ConfigSource, NewTopic
from kafka import TopicPartition as KTopicPartition
from kafka.admin import KafkaAdminClient

from tests.harness import CLUSTER_TEST_OVERRIDES, BrokerCluster, BrokerProcess, wait_until
from tests.integration.cli.conftest import Result, Tidelog
from tests.integration.cluster.helpers import BackgroundProducer

pytestmark = pytest.mark.integration

IDS = (1, 2, 3)


@pytest.fixture
def cluster(tmp_path: Path, zk_connect: str) -> Iterator[BrokerCluster]:
    """Three brokers with ids 1, 2, 3 (the harness numbers from 0), stopped by PID."""
    directory = tmp_path / "cluster"
    made = BrokerCluster(directory, zk_connect, size=0)
    props = {"zookeeper.connect": zk_connect, **CLUSTER_TEST_OVERRIDES}
    made.brokers = [
        BrokerProcess(
            directory / f"broker{i}",
            {**props, "log.dirs": ",".join(str(d) for d in log_dirs(directory, i))},
            broker_id=i,
        )
        for i in IDS
    ]
    made.start()
    try:
        yield made
    finally:
        made.stop()


def log_dirs(directory: Path, broker_id: int) -> tuple[Path, Path]:
    """Each broker has two log dirs, a and b (for the log_dirs of a reassignment file)."""
    base = (directory / f"broker{broker_id}").resolve()
    return base / "a", base / "b"


def hosts(broker: BrokerProcess, topic: str, partition: int = 0) -> list[str]:
    """The log dirs (a, b) of ``broker`` holding a log of the partition."""
    return [
        d.parent.name for d in sorted(broker.directory.resolve().glob(f"*/{topic}-{partition}"))
    ]


def by_id(cluster: BrokerCluster, broker_id: int) -> BrokerProcess:
    return next(b for b in cluster.brokers if b.broker_id == broker_id)


def create(cluster: BrokerCluster, name: str, assignment: list[list[int]]) -> None:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    config = {"min.insync.replicas": "1"}
    topic = NewTopic(name, len(assignment), replica_assignment=assignment, config=config)
    futures = admin.create_topics([topic])
    futures[name].result(timeout=30)
    for p in range(len(assignment)):
        cluster.wait_for_leader(name, p)


def prefill(bootstrap: str, topic: str, n: int, size: int) -> dict[tuple[int, int], bytes]:
    """``n`` records of ``size`` bytes (acks=all): (partition, offset) -> value."""
    acked: dict[tuple[int, int], bytes] = {}
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 20})

    def delivered(err: Any, msg: Any) -> None:
        assert err is None, err
        acked[(msg.partition(), msg.offset())] = msg.value()

    filler = b"." * size
    for i in range(n):
        producer.produce(topic, value=b"pre-%06d" % i + filler, on_delivery=delivered)
        if i % 500 == 499:
            producer.poll(0)
    assert producer.flush(60) == 0
    return acked


def read_all(
    bootstrap: str, topic: str, expected: int, partitions: int = 1, timeout: float = 90.0
) -> dict[tuple[int, int], bytes]:
    """(partition, offset) -> value, until ``expected`` records were read."""
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "reassign-check", "enable.auto.commit": False}
    )
    consumer.assign([CTopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
    got: dict[tuple[int, int], bytes] = {}
    deadline = time.monotonic() + timeout
    try:
        while len(got) < expected and time.monotonic() < deadline:
            for m in consumer.consume(num_messages=2000, timeout=0.5):
                assert m.error() is None, m.error()
                partition, offset, value = m.partition(), m.offset(), m.value()
                assert partition is not None
                assert offset is not None
                assert value is not None
                got[(partition, offset)] = value
    finally:
        consumer.close()
    return got


def plan_file(tmp_path: Path, name: str, entries: dict[tuple[str, int], list[int]]) -> str:
    path = tmp_path / name
    path.write_text(
        json.dumps(
            {
                "version": 1,
                "partitions": [
                    {"topic": t, "partition": p, "replicas": r} for (t, p), r in entries.items()
                ],
            }
        )
    )
    return str(path)


def verify_until_done(
    tidelog: Tidelog, bs: tuple[str, str], f: str, timeout: float = 120
) -> Result:
    deadline = time.monotonic() + timeout
    while True:
        result = tidelog("reassign", "verify", *bs, "--reassignment-json-file", f)
        if result.returncode != 3 or time.monotonic() > deadline:
            return result
        assert "is still in progress." in result.stdout
        time.sleep(1)


def replicas(cluster: BrokerCluster, topic: str, partition: int = 0) -> list[int]:
    return list(cluster.partition(topic, partition).replicas)


def test_generate_execute_verify_move_a_partition_under_a_producer(
    cluster: BrokerCluster, tidelog: Tidelog, tmp_path: Path
) -> None:
    bs = ("--bootstrap-server", cluster.bootstrap)
    create(cluster, "moving", [[1]])
    prefilled = prefill(cluster.bootstrap, "moving", 2000, 500)

    topics = tmp_path / "topics.json"
    topics.write_text('{"topics":[{"topic":"moving"}],"version":1}')
    generated = tidelog("reassign", "generate", *bs, "--topics-to-move-json-file", str(topics),
                        "--broker-list", "2,3")  # fmt: skip
    assert generated.returncode == 0, generated.stderr
    assert generated.stdout.splitlines() == [
        "Current partition replica assignment",
        '{"version":1,"partitions":[{"topic":"moving","partition":0,"replicas":[1],'
        '"log_dirs":["any"]}]}',
        "",
        "Proposed partition reassignment configuration",
        '{"version":1,"partitions":[{"topic":"moving","partition":0,"replicas":[2],'
        '"log_dirs":["any"]}]}',
    ]
    unknown = tidelog("reassign", "generate", *bs, "--topics-to-move-json-file", str(topics),
                      "--broker-list", "2,7")  # fmt: skip
    assert (unknown.returncode, unknown.stderr.splitlines()[0]) == (
        2, "tidelog reassign: error: Unknown broker id 7"
    )  # fmt: skip

    # Bad files and unknown partitions: Kafka's messages, nothing changes, no traceback.
    bad = tmp_path / "bad.json"
    bad.write_text("{oops")
    for document, code, message in (
        (str(bad), 2, "The input string is not a valid JSON"),
        (plan_file(tmp_path, "dup.json", {("moving", 0): [2, 2]}), 2,
         "Partition replica lists may not contain duplicate entries: moving-0 contains "
         "multiple entries for 2"),
        (plan_file(tmp_path, "p9.json", {("moving", 9): [2]}), 2,
         "UNKNOWN_TOPIC_OR_PARTITION: Unable to find partition: moving-9"),
        (plan_file(tmp_path, "b9.json", {("moving", 0): [9]}), 2, "Unknown broker id 9"),
    ):  # fmt: skip
        refused = tidelog("reassign", "execute", *bs, "--reassignment-json-file", document)
        assert refused.returncode == code, refused.stderr
        assert message in refused.stderr
        assert "Traceback" not in refused.stderr
    assert replicas(cluster, "moving") == [1]

    f = plan_file(tmp_path, "plan.json", {("moving", 0): [2, 3]})
    with BackgroundProducer(cluster.bootstrap, "moving") as producer:
        producer.wait_for_acks(200)
        executed = tidelog("reassign", "execute", *bs, "--reassignment-json-file", f)
        assert executed.returncode == 0, executed.stderr
        assert executed.stdout.splitlines() == [
            "Current partition replica assignment",
            "",
            '{"version":1,"partitions":[{"topic":"moving","partition":0,"replicas":[1],'
            '"log_dirs":["any"]}]}',
            "",
            "Save this to use as the --reassignment-json-file option during rollback",
            "Successfully started partition reassignment for moving-0",
        ]
        verified = verify_until_done(tidelog, bs, f)
        producer.wait_for_acks(200)
    assert verified.returncode == 0, verified.stdout + verified.stderr
    assert verified.stdout.splitlines()[:2] == [
        "Status of partition reassignment:",
        "Reassignment of partition moving-0 is completed.",
    ]
    assert "Clearing topic-level throttles on topic moving" in verified.stdout
    assert not producer.failed, producer.failed[:3]
    assert replicas(cluster, "moving") == [2, 3]
    assert set(cluster.partition("moving").isr) == {2, 3}

    # Every acknowledged record at its offset: the prefill's by offset, the background
    # producer's by value (it does not keep offsets), both in one read.
    total = len(prefilled) + len(producer.acked)
    got = read_all(cluster.bootstrap, "moving", total)
    assert {k: got.get(k) for k in prefilled} == prefilled
    assert set(producer.acked) <= set(got.values())
    wait_until(
        lambda: not hosts(by_id(cluster, 1), "moving"), 60, "broker 1's log of moving-0 deleted"
    )


def describe_configs(bootstrap: str, kind: str, name: str) -> dict[str, str | None]:
    """confluent-kafka's DescribeConfigs: the configs set on the resource itself."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    resource = ConfigResource(kind, name)
    entries = admin.describe_configs([resource])[resource].result(timeout=30)
    wanted = (ConfigSource.DYNAMIC_TOPIC_CONFIG.value, ConfigSource.DYNAMIC_BROKER_CONFIG.value)
    return {k: e.value for k, e in entries.items() if e.source in wanted}


def test_a_throttled_reassignment_is_cancelled(
    cluster: BrokerCluster, tidelog: Tidelog, tmp_path: Path
) -> None:
    bs = ("--bootstrap-server", cluster.bootstrap)
    create(cluster, "slow", [[1]])
    prefilled = prefill(cluster.bootstrap, "slow", 4000, 1000)  # ~4 MB: ~200 s at 20 kB/s
    f = plan_file(tmp_path, "plan.json", {("slow", 0): [2, 3]})
    executed = tidelog("reassign", "execute", *bs, "--reassignment-json-file", f,
                       "--throttle", "20000")  # fmt: skip
    assert executed.returncode == 0, executed.stderr
    assert executed.stdout.splitlines()[-3:] == [
        "Warning: You must run --verify periodically, until the reassignment completes, to "
        "ensure the throttle is removed.",
        "The inter-broker throttle limit was set to 20000 B/s",
        "Successfully started partition reassignment for slow-0",
    ]
    topic_configs = describe_configs(cluster.bootstrap, "topic", "slow")
    assert topic_configs["leader.replication.throttled.replicas"] == "0:1"
    assert topic_configs["follower.replication.throttled.replicas"] == "0:2,0:3"
    for broker_id in IDS:
        configs = describe_configs(cluster.bootstrap, "broker", str(broker_id))
        assert configs["leader.replication.throttled.rate"] == "20000"
        assert configs["follower.replication.throttled.rate"] == "20000"

    # Unthrottled, ~4 MB is copied in about a second on loopback; at 20 kB/s it takes minutes.
    for _ in range(2):
        time.sleep(3)
        running = tidelog("reassign", "verify", *bs, "--reassignment-json-file", f)
        assert running.returncode == 3, running.stdout + running.stderr
        assert "Reassignment of partition slow-0 is still in progress." in running.stdout
    kp = KafkaAdminClient(bootstrap_servers=cluster.bootstrap, request_timeout_ms=30000)
    try:
        ongoing = kp.list_partition_reassignments([KTopicPartition("slow", 0)])
    finally:
        kp.close()
    assert ongoing == {
        KTopicPartition("slow", 0): {
            "replicas": [2, 3, 1], "adding_replicas": [2, 3], "removing_replicas": [1]
        }
    }  # fmt: skip

    cancelled = tidelog("reassign", "cancel", *bs, "--reassignment-json-file", f)
    assert cancelled.returncode == 0, cancelled.stderr
    assert cancelled.stdout.splitlines() == [
        "Successfully cancelled partition reassignment for: slow-0",
        "Clearing broker-level throttles on brokers 1,2,3",
        "Clearing topic-level throttles on topic slow",
    ]
    wait_until(lambda: replicas(cluster, "slow") == [1], 60, "slow-0 back on [1]")
    topic_configs = describe_configs(cluster.bootstrap, "topic", "slow")
    assert topic_configs.get("leader.replication.throttled.replicas") in (None, "")
    assert topic_configs.get("follower.replication.throttled.replicas") in (None, "")
    configs = describe_configs(cluster.bootstrap, "broker", "2")
    assert configs.get("leader.replication.throttled.rate") != "20000"

    again = tidelog("reassign", "cancel", *bs, "--reassignment-json-file", f,
                    "--preserve-throttles")  # fmt: skip
    assert again.stdout == "None of the specified partition reassignments are active.\n"
    after = tidelog("reassign", "verify", *bs, "--reassignment-json-file", f,
                    "--preserve-throttles")  # fmt: skip
    assert after.returncode == 4
    assert (
        "There is no active reassignment of partition slow-0, but replica set is 1 rather "
        "than 2,3." in after.stdout
    )
    got = read_all(cluster.bootstrap, "slow", len(prefilled))
    assert {k: got.get(k) for k in prefilled} == prefilled


def test_decommission_moves_everything_off_a_broker(
    cluster: BrokerCluster, tidelog: Tidelog, tmp_path: Path
) -> None:
    bs = ("--bootstrap-server", cluster.bootstrap)
    create(cluster, "spread", [[1, 2], [2, 3], [3, 1], [1, 3], [3, 2], [2, 1]])
    create(cluster, "wide", [[3, 1, 2]])

    refused = tidelog("brokers", "decommission", *bs, "3")
    assert refused.returncode == 1
    assert (
        "tidelog brokers: error: INVALID_REPLICATION_FACTOR: cannot move every replica off "
        "broker 3 (live brokers besides it: 1,2): 1 partition cannot move: wide-0 (replicas "
        "[3, 1, 2]: no other live broker to take it)"
    ) in refused.stderr
    assert replicas(cluster, "wide") == [3, 1, 2]

    # Down to RF 2 with a plain reassignment (3 leaves: 1 becomes the preferred leader).
    f = plan_file(tmp_path, "wide.json", {("wide", 0): [1, 2]})
    assert tidelog("reassign", "execute", *bs, "--reassignment-json-file", f).returncode == 0
    assert verify_until_done(tidelog, bs, f).returncode == 0
    assert replicas(cluster, "wide") == [1, 2]

    dry = tidelog("brokers", "decommission", *bs, "3", "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert dry.stdout.endswith("Dry run: nothing was changed.\n")
    with BackgroundProducer(cluster.bootstrap, "spread") as producer:
        producer.wait_for_acks(100)
        moved = tidelog("brokers", "decommission", *bs, "3", "--throttle", "10000000",
                        "--timeout", "180", timeout=240)  # fmt: skip
        producer.wait_for_acks(100)
    assert moved.returncode == 0, moved.stdout + moved.stderr
    assert not producer.failed, producer.failed[:3]
    assert "Broker 3 hosts no replicas any more: moved 4 replicas in " in moved.stdout
    # The preferred leader changed only where 3 was first (spread-2 and spread-4).
    after = {p: replicas(cluster, "spread", p) for p in range(6)}
    assert all(3 not in r and len(r) == 2 for r in after.values()), after
    assert after[0] == [1, 2]
    assert after[5] == [2, 1]
    assert after[1][0] == 2
    assert after[3][0] == 1
    # Throttles removed after the wait.
    configs = describe_configs(cluster.bootstrap, "broker", "1")
    assert configs.get("leader.replication.throttled.rate") != "10000000"
    nothing = tidelog("brokers", "decommission", *bs, "3")
    assert nothing.returncode == 0
    assert "Broker 3 hosts no replicas: nothing to move." in nothing.stdout
    # Last: the consumer's group creates __consumer_offsets, on broker 3 too.
    got = read_all(cluster.bootstrap, "spread", len(producer.acked), partitions=6)
    assert set(producer.acked) <= set(got.values())


def test_decommission_a_dead_broker(cluster: BrokerCluster, tidelog: Tidelog) -> None:
    """Broker 3 crashed: its replicas are rebuilt on 1 and 2 from the surviving leaders."""
    bs = ("--bootstrap-server", cluster.bootstrap)
    create(cluster, "gone", [[1, 3], [3, 2]])
    acked = prefill(cluster.bootstrap, "gone", 400, 100)
    by_id(cluster, 3).kill()
    cluster.wait_for_live(2)
    cluster.wait_for_leader("gone", 1, not_in=(3,))
    moved = tidelog("brokers", "decommission", *bs, "3", "--timeout", "120", timeout=180)
    assert moved.returncode == 0, moved.stdout + moved.stderr
    assert "Broker 3 hosts no replicas any more: moved 2 replicas in " in moved.stdout
    assert replicas(cluster, "gone", 0) == [1, 2]
    assert replicas(cluster, "gone", 1) == [1, 2]
    assert all(set(cluster.partition("gone", p).isr) == {1, 2} for p in (0, 1))
    got = read_all(cluster.bootstrap, "gone", len(acked), partitions=2)
    assert {k: got.get(k) for k in acked} == acked


def test_execute_with_log_dirs_places_the_new_replica(
    cluster: BrokerCluster, tidelog: Tidelog, tmp_path: Path
) -> None:
    """[1] -> [2, 3] with broker 2's replica in its log dir b (AlterReplicaLogDirs right
    after the reassignment started, while broker 2 may not host the replica yet)."""
    bs = ("--bootstrap-server", cluster.bootstrap)
    create(cluster, "placed", [[1]])
    acked = prefill(cluster.bootstrap, "placed", 1000, 200)
    target = log_dirs(by_id(cluster, 2).directory.parent, 2)[1]
    path = tmp_path / "placed.json"
    path.write_text(
        json.dumps(
            {
                "version": 1,
                "partitions": [
                    {"topic": "placed", "partition": 0, "replicas": [2, 3],
                     "log_dirs": [str(target), "any"]}
                ],
            }
        )
    )  # fmt: skip
    executed = tidelog("reassign", "execute", *bs, "--reassignment-json-file", str(path),
                       "--timeout", "60000", timeout=120)  # fmt: skip
    assert executed.returncode == 0, executed.stdout + executed.stderr
    assert executed.stdout.splitlines()[-2:] == [
        "Successfully started partition reassignment for placed-0",
        "Successfully started log directory move for: placed-0-2",
    ]
    verified = verify_until_done(tidelog, bs, str(path))
    assert verified.returncode == 0, verified.stdout + verified.stderr
    assert "Reassignment of replica placed-0-2 completed successfully." in verified.stdout
    assert replicas(cluster, "placed") == [2, 3]
    assert hosts(by_id(cluster, 2), "placed") == ["b"]
    got = read_all(cluster.bootstrap, "placed", len(acked))
    assert {k: got.get(k) for k in acked} == acked
