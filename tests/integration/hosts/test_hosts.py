"""A cluster on three hosts made with network namespaces (issue 33): clients in the root
namespace reach brokers at their own 10.x addresses, and a host cut off by taking its link
down is a real partition the cluster survives and heals from."""

from __future__ import annotations

import subprocess
import time
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from tests.harness import wait_until
from tests.integration.cluster.helpers import BackgroundProducer, consume_all, produce
from tidelog.client import BlockingClient
from tidelog.testing.hosts import BROKER_PORT, HostsCluster

pytestmark = pytest.mark.integration


def _partition(bootstrap: str, topic: str) -> Any:
    with BlockingClient(bootstrap, request_timeout_s=3.0) as client:
        return client.metadata([topic]).topics[topic].partitions[0]


def _create_topic(hosts: HostsCluster, topic: str) -> None:
    admin = AdminClient({"bootstrap.servers": hosts.bootstrap_servers})
    new = NewTopic(topic, num_partitions=1, replication_factor=3)
    admin.create_topics([new])[topic].result(timeout=30)
    first = hosts.host(1).bootstrap
    wait_until(lambda: set(_partition(first, topic).isr) == {1, 2, 3}, 30, f"{topic} ISR 1,2,3")


def test_an_ensemble_and_brokers_at_their_host_addresses_serve_root_namespace_clients(
    hosts: HostsCluster,
) -> None:
    modes = hosts.ensemble_modes()
    assert sorted(modes) == [1, 2, 3]
    assert sorted(map(str, modes.values())) == ["follower", "follower", "leader"]
    with BlockingClient(hosts.bootstrap_servers, request_timeout_s=5.0) as client:
        brokers = client.metadata([]).brokers
    assert {b: (m.host, m.port) for b, m in brokers.items()} == {
        i: (hosts.host(i).address, BROKER_PORT) for i in (1, 2, 3)
    }
    assert all(m.host.startswith("10.") and m.host.endswith(f".{b}") for b, m in brokers.items())
    # Nothing listens on loopback: the brokers are bound to their host's address.
    namespace = hosts.host(1).namespace
    argv = ["ip", "netns", "exec", namespace, "ss", "-ltnH"]
    listening = subprocess.run(argv, capture_output=True, text=True, check=True).stdout
    assert f"{hosts.host(1).address}:{BROKER_PORT}" in listening
    assert f"127.0.0.1:{BROKER_PORT}" not in listening
    assert f"*:{BROKER_PORT}" not in listening
    _create_topic(hosts, "where")
    values = [b"v%d" % i for i in range(20)]
    assert produce(hosts.bootstrap_servers, "where", values) == list(range(20))
    assert consume_all(hosts.bootstrap_servers, "where", 20, timeout=30) == values


def test_a_host_cut_off_loses_its_leadership_and_rejoins_the_isr_when_healed(
    hosts: HostsCluster,
) -> None:
    _create_topic(hosts, "cut")
    leader = _partition(hosts.host(1).bootstrap, "cut").leader_id
    survivor = hosts.host(1 if leader != 1 else 2).bootstrap
    # A request to a cut-off host is never answered: the producer gives up on it after its
    # request timeout and resends to the new leader (the same wait a real partition costs).
    quick = {"request.timeout.ms": 4000, "socket.timeout.ms": 4000}
    with BackgroundProducer(hosts.bootstrap_servers, "cut", config=quick) as producer:
        producer.wait_for_acks(50, timeout=30)
        hosts.link_down(leader)
        cut_at = time.monotonic()
        try:
            new_leader = wait_until(
                lambda: (
                    (p := _partition(survivor, "cut")).leader_id not in (-1, leader) and p.leader_id
                ),
                30,
                f"a leader of cut other than the cut-off host {leader}",
            )
            elected_s = time.monotonic() - cut_at
            assert leader not in _partition(survivor, "cut").isr
            producer.wait_for_acks(50, timeout=30)
        finally:
            hosts.link_up(leader)
        healed_at = time.monotonic()
        wait_until(
            lambda: set(_partition(survivor, "cut").isr) == {1, 2, 3},
            40,
            f"host {leader} back in the ISR of cut",
        )
        rejoined_s = time.monotonic() - healed_at
        producer.wait_for_acks(20, timeout=30)
    assert new_leader != leader
    assert not producer.failed, producer.failed[:3]
    consumed = consume_all(hosts.bootstrap_servers, "cut", len(producer.acked), timeout=30)
    assert set(producer.acked) <= set(consumed)
    print(f"partition: new leader {new_leader} {elected_s:.1f} s after link down; host {leader}")
    print(f"back in the ISR {rejoined_s:.1f} s after link up")
