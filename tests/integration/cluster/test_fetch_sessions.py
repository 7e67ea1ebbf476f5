"""Followers' fetch sessions (KIP-227) in a real three-broker cluster: each leader caches one
session per follower holding exactly the partitions that follower fetches from it, as
topics come and go and as a leader dies and comes back; nothing acknowledged is lost."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from confluent_kafka import Consumer
from confluent_kafka import TopicPartition as CTopicPartition
from confluent_kafka.admin import AdminClient

from tests.harness import BrokerCluster, wait_until
from tests.integration.cluster.helpers import create_topic, produce
from tests.integration.cluster.test_metrics import metrics_port, scrape

pytestmark = pytest.mark.integration

SESSIONS = "kafka_server_fetchsessioncache_numincrementalfetchsessions"
CACHED = "kafka_server_fetchsessioncache_numincrementalfetchpartitionscached"
UNDER_REPLICATED = "kafka_server_replicamanager_underreplicatedpartitions"
LEADERS = "kafka_server_replicamanager_leadercount"


def test_follower_sessions_track_partitions_through_topic_changes_and_a_dead_leader(
    new_cluster: Callable[..., BrokerCluster],
) -> None:
    cluster = new_cluster(3, {"metrics.listener": "http://127.0.0.1:0"})
    ports = {b.broker_id: metrics_port(b) for b in cluster.brokers}

    def sessions_hold(replicas: int, sessions: dict[int, int] | None = None) -> None:
        """Every partition in sync, the leaders' sessions holding ``replicas`` follower
        replicas in all; each broker with ``sessions[b]`` sessions (default: one per other
        broker on each leader)."""

        def check() -> object:
            views = {b: scrape(ports[b]) for b in sorted(ports)}
            if any(v[UNDER_REPLICATED] for v in views.values()):
                return None
            if sum(v[CACHED] for v in views.values()) != replicas:
                return None
            if sessions is not None:
                return all(views[b][SESSIONS] == n for b, n in sessions.items()) or None
            leading = [v for v in views.values() if v[LEADERS] > 0]
            return all(v[SESSIONS] == len(views) - 1 for v in leading) or None

        wait_until(check, 60.0, f"fetch sessions holding {replicas} follower replicas")

    create_topic(cluster, "sessions-a", partitions=6, rf=3)
    sessions_hold(6 * 2)
    first = [b"a%d" % i for i in range(200)]
    assert len(produce(cluster.bootstrap, "sessions-a", first)) == 200

    # A topic added, then deleted: the followers add its partitions to their sessions, then
    # forget them.
    create_topic(cluster, "sessions-b", partitions=3, rf=3)
    sessions_hold(6 * 2 + 3 * 2)
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.delete_topics(["sessions-b"])["sessions-b"].result(timeout=30)
    sessions_hold(6 * 2)

    # A leader dies: its partitions move to the survivors, whose one follower each fetches
    # them in its session; acks=all (min.insync.replicas=2) keeps working. The dead
    # broker's own sessions stay on the survivors, as in Kafka, until evicted (a full cache
    # and min.incremental.fetch.session.eviction.ms): one per survivor it followed.
    victim = cluster.wait_for_leader("sessions-a", 0)
    before = {b: scrape(ports[b]) for b in sorted(ports)}
    survivors = [b for b in sorted(ports) if b != victim]
    stale = {b: int(before[b][LEADERS]) for b in survivors}
    cluster.broker(victim).kill()
    for p in range(6):
        cluster.wait_for_leader("sessions-a", p, not_in=(victim,))
    second = [b"b%d" % i for i in range(200)]
    assert len(produce(cluster.bootstrap, "sessions-a", second)) == 200

    def survivors_follow() -> object:
        views = {b: scrape(ports[b]) for b in survivors}
        held = sum(v[CACHED] for v in views.values()) == 6 + sum(stale.values())
        counted = all(views[b][SESSIONS] == 1 + (stale[b] > 0) for b in survivors)
        return (held and counted) or None

    wait_until(survivors_follow, 60.0, "the survivors' sessions holding the 6 partitions")

    # It comes back (truncating first, then fetching, in new sessions): all three in sync
    # again, and every acknowledged record there.
    cluster.broker(victim).restart()
    ports[victim] = metrics_port(cluster.broker(victim))
    expected = {b: 2 + (stale[b] > 0) for b in survivors}
    sessions_hold(6 * 2 + sum(stale.values()), {**expected, victim: 0})
    third = [b"c%d" % i for i in range(200)]
    assert len(produce(cluster.bootstrap, "sessions-a", third)) == 200
    values = consume_partitions(cluster.bootstrap, "sessions-a", 6, 600)
    assert sorted(values) == sorted(first + second + third)


def consume_partitions(bootstrap: str, topic: str, partitions: int, expected: int) -> list[bytes]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "unused"})
    consumer.assign([CTopicPartition(topic, p, 0) for p in range(partitions)])
    got: list[bytes] = []
    try:

        def enough() -> bool:
            got.extend(m.value() for m in consumer.consume(1000, 0.5) if m.error() is None)
            return len(got) >= expected

        wait_until(enough, 60.0, f"{expected} records from {topic}")
    finally:
        consumer.close()
    return got
