"""Brokers with and without ``broker.rack``: replica placement refuses, as Kafka's
``AdminUtils`` does ("Not all brokers have rack information for replica rack aware
assignment.", an ``AdminOperationException`` that CreateTopics and CreatePartitions answer
as UNKNOWN_SERVER_ERROR without a message); an explicit assignment needs no placement and
is accepted. Two real brokers on one ZooKeeper: broker 0 on rack a, broker 1 on none."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic

from tests.harness import BrokerCluster, wait_until

pytestmark = pytest.mark.integration

REFUSAL = "Not all brokers have rack information for replica rack aware assignment."


def test_placement_over_brokers_with_and_without_racks_is_refused(
    tmp_path: Path, zk_connect: str
) -> None:
    cluster = BrokerCluster(tmp_path, zk_connect, 2, {"default.replication.factor": "2"})
    cluster.brokers[0].properties["broker.rack"] = "a"
    with cluster:
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
        futures = admin.create_topics([NewTopic("placed", num_partitions=2)])
        with pytest.raises(KafkaException) as raised:
            futures["placed"].result(timeout=30)
        error = raised.value.args[0]
        assert error.code() == KafkaError.UNKNOWN  # -1, UNKNOWN_SERVER_ERROR
        assert REFUSAL not in error.str()  # Kafka does not send an unknown error's text
        wait_until(
            lambda: any(REFUSAL in b.output() for b in cluster.brokers),
            10.0,
            "the refusal in a broker's log",
        )

        # An explicit assignment is not placed: accepted. Growing it needs placement.
        given = admin.create_topics([NewTopic("given", 1, replica_assignment=[[0, 1]])])
        given["given"].result(timeout=30)
        grown = admin.create_partitions([NewPartitions("given", 3)])
        with pytest.raises(KafkaException) as raised:
            grown["given"].result(timeout=30)
        assert raised.value.args[0].code() == KafkaError.UNKNOWN

        cli = subprocess.run(
            [sys.executable, "-m", "tidelog", "topics", "create", "--bootstrap-server",
             cluster.bootstrap, "--topic", "by-cli", "--partitions", "1"],
            capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
        assert cli.returncode == 1
        assert "UNKNOWN_SERVER_ERROR" in cli.stderr
        assert "Traceback" not in cli.stderr
