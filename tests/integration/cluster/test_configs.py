"""Configs on three real brokers (issue 21, point 4) with confluent-kafka's AdminClient and
kafka-python's KafkaAdminClient: real sources and synonyms, a dynamic broker config set
cluster-wide in ZooKeeper taking effect without a restart, Kafka's refusals, CreatePartitions
with explicit replica assignments, ListConfigResources, paged DescribeTopicPartitions and
``tidelog configs``."""

from __future__ import annotations

from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewPartitions,
)
from kafka.admin import ConfigResource as KpResource
from kafka.admin import ConfigResourceType, KafkaAdminClient

from tests.harness import BrokerCluster, wait_until
from tests.integration.cluster.helpers import create_topic
from tidelog.cli.main import main
from tidelog.client import BlockingClient
from tidelog.client import config_admin as ca

pytestmark = pytest.mark.integration

BROKER, TOPIC = ConfigResource.Type.BROKER, ConfigResource.Type.TOPIC


def source(entry: Any) -> int:
    return int(getattr(entry.source, "value", entry.source))


def describe(admin: AdminClient, rtype: Any, name: str) -> dict[str, Any]:
    resource = ConfigResource(rtype, name)
    result: dict[str, Any] = admin.describe_configs([resource])[resource].result(timeout=20)
    return result


def alter(admin: AdminClient, rtype: Any, name: str, *entries: ConfigEntry) -> None:
    resource = ConfigResource(rtype, name, incremental_configs=list(entries))
    admin.incremental_alter_configs([resource])[resource].result(timeout=20)


def send_batch(bootstrap: str, topic: str, size: int) -> KafkaError | None:
    """One record of ``size`` bytes; the delivery error (None: written)."""
    outcome: list[KafkaError | None] = []
    producer = Producer(
        {"bootstrap.servers": bootstrap, "acks": "all", "message.timeout.ms": 20000}
    )
    producer.produce(topic, b"x" * size, on_delivery=lambda err, _msg: outcome.append(err))
    assert producer.flush(30) == 0
    return outcome[0]


def test_confluent_admin_dynamic_broker_default_applies_without_restart(
    shared_cluster: BrokerCluster,
) -> None:
    create_topic(shared_cluster, "dyn")
    admin = AdminClient({"bootstrap.servers": shared_cluster.bootstrap})
    # Sources before anything is set: static keys of server.properties and defaults.
    broker = describe(admin, BROKER, "1")
    assert source(broker["num.partitions"]) == 4  # STATIC_BROKER_CONFIG
    assert broker["num.partitions"].is_read_only
    assert source(broker["message.max.bytes"]) == 5  # DEFAULT_CONFIG
    assert not broker["message.max.bytes"].is_read_only
    assert source(describe(admin, TOPIC, "dyn")["max.message.bytes"]) == 5
    assert send_batch(shared_cluster.bootstrap, "dyn", 5000) is None

    # Cluster-wide default in /config/brokers/<default> (librdkafka cannot name the default
    # resource: `tidelog configs` does, as kafka-configs.sh --entity-default).
    boot = ["--bootstrap-server", shared_cluster.bootstrap]
    default = ["configs", "alter", "--entity-type", "brokers", "--entity-default"]
    assert main([*default, "--add-config", "message.max.bytes=2000", *boot]) == 0

    def everywhere(value: str, wanted: str) -> bool:
        # Each broker asked itself (librdkafka would send every topic describe to the
        # controller).
        for b in shared_cluster.brokers:
            with BlockingClient(b.bootstrap) as client:
                (dyn,) = client.run(ca.describe_configs(client.client, [(ca.TOPIC, "dyn")]))
            entry = next(e for e in dyn.entries if e.name == "max.message.bytes")
            if (entry.value, entry.source) != (value, wanted):
                return False
        return True

    wait_until(
        lambda: everywhere("2000", "DYNAMIC_DEFAULT_BROKER_CONFIG"), 20, "the default everywhere"
    )
    error = send_batch(shared_cluster.bootstrap, "dyn", 5000)
    assert error is not None
    assert error.code() == KafkaError.MSG_SIZE_TOO_LARGE
    assert source(describe(admin, BROKER, "2")["message.max.bytes"]) == 3
    with BlockingClient(shared_cluster.bootstrap) as client:
        (listed,) = client.run(ca.describe_configs(client.client, [(ca.BROKER, "")]))
    assert [(e.name, e.value, e.source) for e in listed.entries] == [
        ("message.max.bytes", "2000", "DYNAMIC_DEFAULT_BROKER_CONFIG")
    ]

    # Kafka's refusals.
    with pytest.raises(KafkaException) as refused:
        alter(admin, BROKER, "0", ConfigEntry("num.partitions", "3",
              incremental_operation=AlterConfigOpType.SET))  # fmt: skip
    assert refused.value.args[0].code() == KafkaError.INVALID_REQUEST
    assert "Cannot update these configs dynamically" in refused.value.args[0].str()
    with pytest.raises(KafkaException) as appended:
        alter(admin, TOPIC, "dyn", ConfigEntry("retention.ms", "1",
              incremental_operation=AlterConfigOpType.APPEND))  # fmt: skip
    assert appended.value.args[0].code() == KafkaError.INVALID_CONFIG

    # Deleted: back to the static default, still without a restart.
    assert main([*default, "--delete-config", "message.max.bytes", *boot]) == 0
    wait_until(lambda: everywhere("1048588", "DEFAULT_CONFIG"), 20, "the default gone everywhere")
    assert send_batch(shared_cluster.bootstrap, "dyn", 5000) is None

    # CreatePartitions with explicit replica assignments.
    grown = NewPartitions("dyn", 3, replica_assignment=[[2, 0, 1], [1, 2, 0]])
    admin.create_partitions([grown])["dyn"].result(timeout=20)
    for p, leader in ((1, 2), (2, 1)):
        shared_cluster.wait_for_leader("dyn", p)
        assert shared_cluster.partition("dyn", p).replicas[0] == leader
    for assignment, words in (
        ([[0, 0, 1]], "Duplicate brokers"),
        ([[0, 1, 9]], "Unknown broker(s) in replica assignment: 9."),
        ([[0, 1]], "Inconsistent replication factor"),
    ):
        future = admin.create_partitions([NewPartitions("dyn", 4, replica_assignment=assignment)])
        with pytest.raises(KafkaException) as bad:
            future["dyn"].result(timeout=20)
        assert bad.value.args[0].code() == KafkaError.INVALID_REPLICA_ASSIGNMENT
        assert words in bad.value.args[0].str()


def test_kafka_python_admin_per_broker_config(shared_cluster: BrokerCluster) -> None:
    create_topic(shared_cluster, "kp")
    admin = KafkaAdminClient(bootstrap_servers=shared_cluster.bootstrap)
    try:
        resource = KpResource(ConfigResourceType.BROKER, "1")
        admin.alter_configs(
            [KpResource(ConfigResourceType.BROKER, "1", configs={"log.retention.ms": "7200000"})],
            incremental=False,
        )
        described = admin.describe_configs([resource], include_synonyms=True)
        entry = described["broker"]["1"]["log.retention.ms"]
        assert (entry["value"], entry["config_source"]) == ("7200000", "DYNAMIC_BROKER_CONFIG")
        assert entry["config_type"] == "LONG"
        assert entry["synonyms"][0]["source"] == "DYNAMIC_BROKER_CONFIG"
        # A topic without overrides follows the answering broker's own value (KIP-226).
        for broker_id, value, where in (
            (1, "7200000", "DYNAMIC_BROKER_CONFIG"),
            (0, "604800000", "DEFAULT_CONFIG"),
        ):
            with BlockingClient(shared_cluster.broker(broker_id).bootstrap) as client:
                (kp,) = client.run(ca.describe_configs(client.client, [(ca.TOPIC, "kp")]))
            retention = next(e for e in kp.entries if e.name == "retention.ms")
            assert (retention.value, retention.source) == (value, where)
        admin.alter_configs(
            [KpResource(ConfigResourceType.TOPIC, "kp", configs={"retention.ms": "1000"})],
            incremental=False,
        )
        topic = admin.describe_configs([KpResource(ConfigResourceType.TOPIC, "kp")])
        assert topic["topic"]["kp"]["retention.ms"]["config_source"] == "DYNAMIC_TOPIC_CONFIG"
        with BlockingClient(shared_cluster.bootstrap) as client:
            zero = client.run(ca.describe_configs(client.client, [(ca.BROKER, "0")]))[0]
            by_name = {e.name: e for e in zero.entries}
            assert by_name["log.retention.ms"].source == "DEFAULT_CONFIG"
            error, listed = client.run(ca.list_config_resources(client.client))
            assert error == 0
            assert {(ca.BROKER, "0"), (ca.BROKER, "1"), (ca.BROKER, "2")} <= set(listed)
            assert (ca.TOPIC, "kp") in listed
        admin.alter_configs([KpResource(ConfigResourceType.BROKER, "1", configs={})],
                            incremental=False)  # fmt: skip
    finally:
        admin.close()


def test_describe_topic_partitions_pages_and_cli(
    shared_cluster: BrokerCluster, capsys: pytest.CaptureFixture[str]
) -> None:
    create_topic(shared_cluster, "paged", partitions=5, rf=2)
    seen: list[int] = []
    cursor = None
    admin = KafkaAdminClient(bootstrap_servers=shared_cluster.bootstrap)
    try:
        while True:
            page = admin.describe_topic_partitions(
                ["paged"], response_partition_limit=2, cursor=cursor
            )
            (topic,) = page["topics"]
            assert topic["error_code"] == 0
            seen += [p["partition_index"] for p in topic["partitions"]]
            assert all(
                len(p["replica_nodes"]) == 2 and p["leader_id"] >= 0 for p in topic["partitions"]
            )
            cursor = page["next_cursor"]
            if cursor is None:
                break
        listed = admin.list_config_resources()
        assert sorted(listed["broker"]) == ["0", "1", "2"]
        assert "paged" in listed["topic"]
    finally:
        admin.close()
    assert seen == [0, 1, 2, 3, 4]
    boot = ["--bootstrap-server", shared_cluster.bootstrap]
    alter = ["configs", "alter", "--entity-type", "topics", "--entity-name", "paged"]
    assert main([*alter, "--add-config", "retention.ms=5000,cleanup.policy=[delete]", *boot]) == 0
    assert "Completed updating config for topic paged." in capsys.readouterr().out
    describe = ["configs", "describe", "--entity-type", "topics", "--entity-name", "paged"]
    assert main([*describe, *boot]) == 0
    out = capsys.readouterr().out
    assert out.startswith("Dynamic configs for topic paged are:\n")
    assert (
        "  retention.ms=5000 sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:retention.ms=5000"
        in out
    )
    assert "segment.bytes" not in out
    assert main(["configs", "describe", "--entity-type", "brokers", "--entity-name", "2",
                 "--all", *boot]) == 0  # fmt: skip
    assert "All configs for broker 2 are:" in capsys.readouterr().out
    broker = ["configs", "alter", "--entity-type", "brokers", "--entity-name", "2"]
    assert main([*broker, "--add-config", "broker.id=5", *boot]) == 1
    assert "INVALID_REQUEST" in capsys.readouterr().err


def test_per_broker_config_survives_a_restart(shared_cluster: BrokerCluster) -> None:
    create_topic(shared_cluster, "restarted")
    admin = AdminClient({"bootstrap.servers": shared_cluster.bootstrap})
    alter(admin, BROKER, "2", ConfigEntry("log.segment.bytes", "200000",
          incremental_operation=AlterConfigOpType.SET))  # fmt: skip
    broker = shared_cluster.broker(2)
    broker.restart()
    shared_cluster.wait_for_live(3)
    via = AdminClient({"bootstrap.servers": broker.bootstrap})
    entry = describe(via, BROKER, "2")["log.segment.bytes"]
    assert (entry.value, source(entry), entry.is_read_only) == ("200000", 2, False)

    def segment_bytes() -> tuple[str | None, str]:
        # librdkafka sends a topic's DescribeConfigs to the controller: ask broker 2 itself.
        with BlockingClient(broker.bootstrap) as client:
            (answer,) = client.run(ca.describe_configs(client.client, [(ca.TOPIC, "restarted")]))
        entry = next(e for e in answer.entries if e.name == "segment.bytes")
        return entry.value, entry.source

    assert segment_bytes() == ("200000", "DYNAMIC_BROKER_CONFIG")
    alter(via, BROKER, "2", ConfigEntry("log.segment.bytes", None,
          incremental_operation=AlterConfigOpType.DELETE))  # fmt: skip
    wait_until(lambda: segment_bytes() == ("1073741824", "DEFAULT_CONFIG"), 20, "the value gone")
