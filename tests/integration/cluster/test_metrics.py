"""Prometheus metrics of a real three-broker cluster (docs/metrics.md): every broker serves
its own on ``metrics.listener``; leaders, partitions, the one active controller, produce
requests counted, and under-replicated partitions once a broker is SIGKILLed; bytes and
records in and out per topic, the acks=all request time split (local, remote), log sizes
and offsets per replica, and follower lag going to 0 once caught up."""

from __future__ import annotations

import re
import urllib.request
from collections.abc import Callable
from typing import Any

import pytest
from confluent_kafka import Producer
from prometheus_client.parser import text_string_to_metric_families

from tests.harness import BrokerCluster, BrokerProcess, wait_until
from tests.integration.cluster.helpers import consume_all, create_topic, produce
from tidelog.server.observability.metrics.endpoint import CONTENT_TYPE

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


def bytes_in(topic: str) -> str:
    return f'kafka_server_brokertopicmetrics_bytesin_total{{topic="{topic}"}}'


def labelled(name: str, **labels: object) -> str:
    inner = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    return f"{name}{{{inner}}}"


MAX_LAG = 'kafka_server_replicafetchermanager_maxlag{clientid="Replica"}'


def test_cluster_metrics_show_topic_traffic_time_split_fetcher_lag_and_logs(
    new_cluster: Callable[..., BrokerCluster],
) -> None:
    cluster = new_cluster(3, {"metrics.listener": "http://127.0.0.1:0"})
    ports = {b.broker_id: metrics_port(b) for b in cluster.brokers}
    create_topic(cluster, "traffic", partitions=2, rf=3)

    # 150 records of 100 bytes to each partition, acks=all.
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "linger.ms": 5})
    last: dict[int, int] = {}
    errors: list[object] = []

    def delivered(err: Any, msg: Any) -> None:
        if err is not None:
            errors.append(err)
        else:
            last[msg.partition()] = max(last.get(msg.partition(), -1), msg.offset())

    for i in range(300):
        producer.produce("traffic", b"%0100d" % i, partition=i % 2, on_delivery=delivered)
    assert producer.flush(60) == 0
    assert not errors, errors
    assert sorted(last) == [0, 1]
    log_end = {p: offset + 1 for p, offset in last.items()}

    def scrape_all() -> dict[int, dict[str, float]]:
        return {b: scrape(port) for b, port in ports.items()}

    def replicated() -> dict[int, dict[str, float]] | None:
        views = scrape_all()
        for view in views.values():
            for p, leo in log_end.items():
                key = labelled("kafka_log_log_logendoffset", partition=p, topic="traffic")
                if view.get(key) != leo:
                    return None
            if view[MAX_LAG] != 0:
                return None
        return views

    # Every replica reaches the leader's log end; the followers' lag goes to 0.
    views = wait_until(replicated, 60.0, "every replica at the log end, no follower lag")
    assert isinstance(views, dict)
    leaders = {
        p: cluster.wait_for_leader("traffic", p) for p in log_end
    }  # broker id leading each partition
    for b, view in views.items():
        for p in log_end:
            size = labelled("kafka_log_log_size", partition=p, topic="traffic")
            assert view[size] > 150 * 100, (b, p)  # the records and their batch headers
            segments = labelled("kafka_log_log_numlogsegments", partition=p, topic="traffic")
            assert view[segments] >= 1
            start = labelled("kafka_log_log_logstartoffset", partition=p, topic="traffic")
            assert view[start] == 0
            if leaders[p] != b:  # a follower: its fetcher's lag series, caught up
                lag = labelled(
                    "kafka_server_fetcherlagmetrics_consumerlag",
                    clientid=f"ReplicaFetcherThread-0-{leaders[p]}",
                    partition=p,
                    topic="traffic",
                )
                assert view[lag] == 0, (b, lag)
        assert 0.0 <= view["kafka_network_socketserver_networkprocessoravgidlepercent"] <= 1.0
    # Bytes and records in are counted by the leaders, 100 payload bytes a record at least.
    assert sum(v[bytes_in("traffic")] for v in views.values() if bytes_in("traffic") in v) >= (
        300 * 100
    )
    messages = 'kafka_server_brokertopicmetrics_messagesin_total{topic="traffic"}'
    assert sum(v.get(messages, 0) for v in views.values()) >= 300
    for p, b in leaders.items():
        assert views[b][bytes_in("traffic")] >= 150 * 100, (p, b)
    # The followers' fetches: replication bytes out on the leaders, none to consumers yet.
    assert all(
        v["kafka_server_brokertopicmetrics_replicationbytesout_total"] > 0
        for b, v in views.items()
        if b in leaders.values()
    )
    # acks=all produces spent time parked (remote) and in the handler (local).
    for b in set(leaders.values()):
        view = views[b]
        for split in ("localtimems", "remotetimems", "totaltimems", "responsesendtimems"):
            count = f'kafka_network_requestmetrics_{split}_count{{request="Produce"}}'
            assert view[count] > 0, (b, split)
        remote = 'kafka_network_requestmetrics_remotetimems_sum{request="Produce"}'
        assert view[remote] > 0, b

    # A consumer reads partition 0: bytes out on its leader.
    got = consume_all(cluster.bootstrap, "traffic", 150, partition=0)
    assert len(got) == 150
    out = 'kafka_server_brokertopicmetrics_bytesout_total{topic="traffic"}'
    view = scrape(ports[leaders[0]])
    assert view[out] >= 150 * 100
    assert view['kafka_network_requestmetrics_requests_total{request="FetchConsumer"}'] > 0
