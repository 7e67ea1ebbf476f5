"""Prometheus metrics of a real three-broker cluster (docs/metrics.md): every broker serves
its own on ``metrics.listener``; leaders, partitions, the one active controller, produce
requests counted, and under-replicated partitions once a broker is SIGKILLed."""

from __future__ import annotations

import re
import urllib.request
from collections.abc import Callable

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.harness import BrokerCluster, BrokerProcess, wait_until
from tests.integration.cluster.helpers import create_topic, produce
from tidelog.server.metrics import CONTENT_TYPE

pytestmark = pytest.mark.integration

_SERVED = re.compile(r"metrics served on http://127\.0\.0\.1:(\d+)/metrics")

LEADERS = "kafka_server_replicamanager_leadercount"
PARTITIONS = "kafka_server_replicamanager_partitioncount"
UNDER_REPLICATED = "kafka_server_replicamanager_underreplicatedpartitions"
ACTIVE_CONTROLLER = "kafka_controller_kafkacontroller_activecontrollercount"
OFFLINE = "kafka_controller_kafkacontroller_offlinepartitionscount"
PRODUCE = 'kafka_network_requestmetrics_requests_total{request="Produce"}'
FETCH_FOLLOWER = 'kafka_network_requestmetrics_requests_total{request="FetchFollower"}'
SESSION_CONNECTED = 'kafka_server_sessionexpirelistener_sessionstate{state="CONNECTED"}'


def metrics_port(broker: BrokerProcess) -> int:
    """The port the broker logged for its endpoint (``metrics.listener`` port 0); the last
    one, should the broker have been restarted."""
    found = wait_until(
        lambda: _SERVED.findall(broker.output()),
        30.0,
        f"broker {broker.broker_id}'s metrics port in its log",
    )
    assert isinstance(found, list)
    return int(found[-1])


def scrape(port: int) -> dict[str, float]:
    """Every sample, as ``name`` or ``name{label="value",...}`` (labels sorted)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as answer:
        assert answer.status == 200
        assert answer.headers["Content-Type"] == CONTENT_TYPE
        text = answer.read().decode()
    samples: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            labels = ",".join(f'{k}="{v}"' for k, v in sorted(s.labels.items()))
            samples[f"{s.name}{{{labels}}}" if labels else s.name] = s.value
    return samples


def test_cluster_metrics_follow_leaders_requests_and_a_killed_broker(
    new_cluster: Callable[..., BrokerCluster],
) -> None:
    cluster = new_cluster(3, {"metrics.listener": "http://127.0.0.1:0"})
    ports = {b.broker_id: metrics_port(b) for b in cluster.brokers}
    assert len(set(ports.values())) == 3

    def scrape_all(broker_ids: list[int] | None = None) -> dict[int, dict[str, float]]:
        ids = broker_ids if broker_ids is not None else sorted(ports)
        return {b: scrape(ports[b]) for b in ids}

    create_topic(cluster, "metered", partitions=3, rf=3)

    def settled() -> dict[int, dict[str, float]] | None:
        views = scrape_all()
        leaders = sum(v[LEADERS] for v in views.values())
        hosted = [v[PARTITIONS] for v in views.values()]
        in_sync = all(v[UNDER_REPLICATED] == 0 for v in views.values())
        return views if leaders == 3 and hosted == [3, 3, 3] and in_sync else None

    views = wait_until(settled, 60.0, "3 leaders and 3 partitions on each broker, all in sync")
    assert isinstance(views, dict)
    assert sorted(v[ACTIVE_CONTROLLER] for v in views.values()) == [0, 0, 1]
    controller = next(b for b, v in views.items() if v[ACTIVE_CONTROLLER] == 1)
    assert views[controller][OFFLINE] == 0
    assert all(v[SESSION_CONNECTED] == 1 for v in views.values())
    produced_before = sum(v[PRODUCE] for v in views.values())

    offsets = produce(cluster.bootstrap, "metered", [f"m{i}".encode() for i in range(300)])
    assert len(offsets) == 300

    def produce_counted() -> dict[int, dict[str, float]] | None:
        views = scrape_all()
        grew = sum(v[PRODUCE] for v in views.values()) > produced_before
        return views if grew else None

    views = wait_until(produce_counted, 30.0, "the Produce request counter to grow")
    assert isinstance(views, dict)
    assert sum(v[FETCH_FOLLOWER] for v in views.values()) > 0  # followers replicate

    # A non-controller broker dies: the leaders left behind report under-replicated
    # partitions (the controller takes the dead one out of every ISR).
    victim = next(b for b in sorted(ports) if b != controller)
    cluster.broker(victim).kill()
    survivors = [b for b in sorted(ports) if b != victim]

    def under_replicated() -> dict[int, dict[str, float]] | None:
        views = scrape_all(survivors)
        if sum(v[LEADERS] for v in views.values()) != 3:
            return None
        return views if sum(v[UNDER_REPLICATED] for v in views.values()) == 3 else None

    views = wait_until(under_replicated, 90.0, "under-replicated partitions on the survivors")
    assert isinstance(views, dict)
    assert all(v[UNDER_REPLICATED] > 0 for v in views.values() if v[LEADERS] > 0)
    assert sum(v[ACTIVE_CONTROLLER] for v in views.values()) == 1
    assert views[controller][OFFLINE] == 0
