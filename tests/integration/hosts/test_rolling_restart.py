"""The guide's rolling restart (docs/deploy.md, "Rolling restart and rolling upgrade") on
three hosts: each broker in turn is stopped with SIGTERM (a controlled shutdown, what
``systemctl stop tidelog`` sends), its server.properties changed (a rolling upgrade's
config step: ``broker.rack`` added), started again, and the next host waits until
``tidelog topics describe --under-replicated-partitions`` prints nothing. An idempotent
acks=all producer writes throughout: no delivery fails, and every acknowledged record is
read back exactly once."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import Consumer
from confluent_kafka import TopicPartition as CTopicPartition

from tests.harness import wait_until
from tests.integration.cluster.helpers import BackgroundProducer
from tests.integration.hosts.guide import (
    GUIDE_BOOTSTRAP,
    run_guide_block,
    tidelog,
    under_replicated,
    wait_fully_replicated,
)
from tidelog.testing.hosts import HostsCluster

pytestmark = pytest.mark.integration

TOPIC = "rolling"
PARTITIONS = 3
#: The producer of the guide: idempotent, acks=all, librdkafka's unbounded retries within
#: message.timeout.ms (BackgroundProducer's 120 s).
IDEMPOTENT = {"enable.idempotence": "true", "acks": "all"}


def consume_everything(bootstrap: str, expected: int) -> list[bytes]:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "unused",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
        }
    )
    consumer.assign([CTopicPartition(TOPIC, p, 0) for p in range(PARTITIONS)])
    got: list[bytes] = []

    def take(timeout_s: float) -> int:
        for msg in consumer.consume(1000, timeout_s):
            value = msg.value()
            if msg.error() is None and value is not None:
                got.append(value)
        return len(got)

    try:
        wait_until(lambda: take(0.5) >= expected, 60, f"{expected} records from {TOPIC}")
        take(2.0)  # anything past the acknowledged records (a duplicate) arrives too
    finally:
        consumer.close()
    return got


def _describe(bootstrap: str) -> str:
    return tidelog("topics", "describe", "--bootstrap-server", bootstrap, "--topic", TOPIC)


def _described_if_preferred_lead(bootstrap: str) -> str | None:
    """The topic's description once every partition's leader is the first of its replicas."""
    described = _describe(bootstrap)
    lines = [ln for ln in described.splitlines() if ln.startswith("\tTopic: ")]
    preferred = len(lines) == PARTITIONS and all(
        f"Leader: {ln.split('Replicas: ')[1].split(',')[0]}\t" in ln for ln in lines
    )
    return described if preferred else None


def _shutdowns_logged(hosts: HostsCluster, host: int) -> int:
    text = (hosts.host(host).broker_dir / "broker.log").read_text(errors="replace")
    return text.count("controlled shutdown succeeded")


def test_a_rolling_restart_under_an_idempotent_producer_fails_no_delivery(
    guide_hosts: HostsCluster,
) -> None:
    hosts = guide_hosts
    bootstrap = hosts.bootstrap_servers
    tidelog(
        "topics", "create", "--bootstrap-server", bootstrap, "--topic", TOPIC,
        "--partitions", str(PARTITIONS), "--replication-factor", "3",
        "--config", "min.insync.replicas=2",
    )  # fmt: skip
    wait_fully_replicated(bootstrap)
    stops: dict[int, float] = {}
    rejoins: dict[int, float] = {}
    with BackgroundProducer(bootstrap, TOPIC, config=IDEMPOTENT) as producer:
        producer.wait_for_acks(100, timeout=60)
        for host in (1, 2, 3):
            before = _shutdowns_logged(hosts, host)
            started = time.monotonic()
            assert hosts.stop_broker(host) == 0  # "shut down cleanly"
            stops[host] = time.monotonic() - started
            assert _shutdowns_logged(hosts, host) == before + 1
            # The check the guide waits on sees the stopped broker's replicas out.
            assert f"Leader: {host}\t" not in under_replicated(bootstrap)
            assert under_replicated(bootstrap).count("Partition:") == PARTITIONS
            # The upgrade's config step: a key changed while the broker is down.
            with hosts.host(host).broker_config.open("a") as config:
                config.write(f"broker.rack=rack-{host}\n")
            restarted = time.monotonic()
            hosts.start_broker(host)
            wait_fully_replicated(bootstrap)
            rejoins[host] = time.monotonic() - restarted
            producer.wait_for_acks(50, timeout=60)
        # Leadership back to each partition's first replica (auto.leader.rebalance.enable
        # does it within leader.imbalance.check.interval.seconds; the guide runs it at once).
        election = run_guide_block("preferred-election", {GUIDE_BOOTSTRAP: bootstrap}).stdout
        producer.wait_for_acks(50, timeout=60)
    assert not producer.failed, producer.failed[:3]
    described = wait_until(
        lambda: _described_if_preferred_lead(bootstrap),
        30,
        f"each partition led by its first replica after: {election}",
    )
    racks = [line for line in str(described).splitlines() if "\tRacks: " in line]
    assert len(racks) == PARTITIONS, described
    assert all(line.count("rack-") == 3 for line in racks), described
    consumed = consume_everything(bootstrap, len(producer.acked))
    assert sorted(consumed) == sorted(producer.acked)  # none lost, none written twice
    print(f"rolling restart: {len(producer.acked)} records acknowledged, none failed")
    print("SIGTERM to exit (s): " + ", ".join(f"{h}: {s:.1f}" for h, s in stops.items()))
    print("start to full ISRs (s): " + ", ".join(f"{h}: {s:.1f}" for h, s in rejoins.items()))
