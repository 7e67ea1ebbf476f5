"""What clients see when replicas are missing: min.insync.replicas, unclean election,
controlled shutdown in a rolling restart, leadership moves and even placement."""

from __future__ import annotations

from typing import Any

import pytest
from confluent_kafka.admin import AdminClient, NewTopic
from kio.schema.elect_leaders.v2 import request as el

from tests.harness import BrokerCluster, wait_until
from tests.integration.cluster.helpers import (
    BackgroundProducer,
    consume_all,
    create_topic,
    produce,
    wait_for_isr,
)
from tidelog.client import BlockingClient, Record, build_batch
from tidelog.errors import ErrorCode
from tidelog.model import TopicPartition

pytestmark = pytest.mark.integration


def _produce_raw(bootstrap: str, tp: TopicPartition, acks: int, node_id: int | None = None) -> Any:
    with BlockingClient(bootstrap, request_timeout_s=10.0) as client:
        return client.produce(
            tp, build_batch([Record(b"raw")]), acks=acks, timeout_ms=5000, node_id=node_id
        )


def test_two_of_three_down_acks_all_refused_acks_1_works(cluster: BrokerCluster) -> None:
    create_topic(cluster, "mi")
    wait_for_isr(cluster, "mi", {0, 1, 2})
    leader = cluster.partition("mi").leader_id
    for b in cluster.brokers:
        if b.broker_id != leader:
            b.kill()
    wait_for_isr(cluster, "mi", {leader})
    tp = TopicPartition("mi", 0)
    refused = _produce_raw(cluster.broker(leader).bootstrap, tp, acks=-1)
    assert refused.error_code == ErrorCode.NOT_ENOUGH_REPLICAS
    accepted = _produce_raw(cluster.broker(leader).bootstrap, tp, acks=1)
    assert accepted.error_code == ErrorCode.NONE
    assert produce(cluster.broker(leader).bootstrap, "mi", [b"one"], acks="1") == [1]


def test_all_down_replica_outside_isr_returns_first_unclean_only_where_enabled(
    cluster: BrokerCluster,
) -> None:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    topics = {"clean": "false", "unclean": "true"}
    futures = admin.create_topics(
        [
            NewTopic(
                name,
                num_partitions=1,
                replica_assignment=[[0, 1, 2]],
                config={"unclean.leader.election.enable": flag},
            )
            for name, flag in topics.items()
        ]
    )
    for f in futures.values():
        f.result(timeout=30)
    for name in topics:
        wait_for_isr(cluster, name, {0, 1, 2})
    cluster.broker(2).kill()  # 2 falls out of the ISR ...
    for name in topics:
        wait_for_isr(cluster, name, {0, 1})
        produce(cluster.broker(0).bootstrap, name, [b"after-2-left"])  # ... and misses this
    cluster.broker(1).kill()
    for name in topics:
        wait_for_isr(cluster, name, {0})
    cluster.broker(0).kill()
    cluster.broker(2).start()  # the replica outside the ISR returns first

    def decided() -> tuple[int, int] | None:
        meta = cluster.metadata(list(topics), via=cluster.broker(2))
        clean = meta.topics["clean"].partitions[0]
        unclean = meta.topics["unclean"].partitions[0]
        return (clean.leader_id, unclean.leader_id) if unclean.leader_id == 2 else None

    clean_leader, _ = wait_until(decided, 90, "the unclean election on broker 2")  # type: ignore[misc]
    assert clean_leader == -1  # offline: no ISR member is live, unclean is off for "clean"
    meta = cluster.metadata(["clean"], via=cluster.broker(2))
    assert meta.topics["clean"].partitions[0].error_code == ErrorCode.LEADER_NOT_AVAILABLE
    # The unclean leader serves what it has (the record it missed is lost, by choice).
    assert produce(cluster.broker(2).bootstrap, "unclean", [b"x"], acks="1") == [0]


def test_rolling_restart_with_controlled_shutdown_fails_no_produce(
    cluster: BrokerCluster,
) -> None:
    create_topic(cluster, "roll")
    wait_for_isr(cluster, "roll", {0, 1, 2})
    with BackgroundProducer(cluster.bootstrap, "roll") as producer:
        producer.wait_for_acks(50)
        for b in cluster.brokers:
            assert b.stop() == 0  # SIGTERM: controlled shutdown first
            b.start()
            wait_for_isr(cluster, "roll", {0, 1, 2})
            producer.wait_for_acks(50)
    assert not producer.failed, producer.failed[:3]
    consumed = consume_all(cluster.bootstrap, "roll", len(producer.acked))
    assert set(producer.acked) <= set(consumed)


def test_old_leader_answers_not_leader_and_clients_recover(cluster: BrokerCluster) -> None:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic("moved", num_partitions=1, replica_assignment=[[1, 0, 2]])])[
        "moved"
    ].result(30)
    wait_for_isr(cluster, "moved", {0, 1, 2})
    tp = TopicPartition("moved", 0)
    with BackgroundProducer(cluster.bootstrap, "moved") as producer:
        producer.wait_for_acks(50)
        cluster.broker(1).kill()  # leadership moves to 0
        assert cluster.wait_for_leader("moved", not_in=(1,)) == 0
        producer.wait_for_acks(50)
        cluster.broker(1).start()
        wait_for_isr(cluster, "moved", {0, 1, 2})
        # Preferred leader election (ElectLeaders, API 43) moves it back to broker 1.
        controller = cluster.metadata().controller_id
        with BlockingClient(cluster.broker(controller).bootstrap) as client:
            response = client.send(
                el.ElectLeadersRequest(
                    election_type=0,
                    topic_partitions=(el.TopicPartitions(topic="moved", partitions=(0,)),),
                )
            )
        result = response.replica_election_results[0].partition_result[0]
        assert result.error_code == ErrorCode.NONE
        assert cluster.wait_for_leader("moved", not_in=(0, 2)) == 1
        # The old leader refuses writes with NOT_LEADER_OR_FOLLOWER (6) ...
        with BlockingClient(cluster.broker(0).bootstrap, request_timeout_s=10.0) as client:
            client.metadata(["moved"])
            answer = client.produce(tp, build_batch([Record(b"stale")]), acks=1, node_id=0)
        assert answer is not None
        assert answer.error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER
        # ... and confluent-kafka recovered through Metadata by itself: acks keep coming.
        producer.wait_for_acks(50)
    assert not producer.failed, producer.failed[:3]


def test_the_last_broker_stopping_does_not_wait_for_a_handover_nobody_can_take(
    cluster: BrokerCluster,
) -> None:
    """Stopping a whole cluster broker by broker: the last one still leads every partition
    and no live broker could take them. It says so and stops, instead of retrying the
    controlled shutdown for its full 10 s bound (what every `cluster down` used to cost)."""
    create_topic(cluster, "last")
    wait_for_isr(cluster, "last", {0, 1, 2})
    first, second, last = cluster.brokers
    assert first.stop() == 0
    assert second.stop() == 0
    assert last.stop() == 0
    out = last.output()
    assert "controlled shutdown: no other live broker to lead" in out, out[-3000:]
    assert "controlled shutdown did not complete" not in out
