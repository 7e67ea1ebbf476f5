"""Broker and controller failures in a three-broker cluster (RF=3, min.insync.replicas=2,
confluent-kafka producing with acks=all)."""

from __future__ import annotations

import time

import pytest

from tests.harness import BrokerCluster, wait_until
from tests.integration.cluster.helpers import (
    BackgroundProducer,
    consume_all,
    create_topic,
    log_bytes,
    wait_for_isr,
    wait_for_replicas_in_sync,
)

pytestmark = pytest.mark.integration


def test_leader_sigkill_new_leader_from_isr_no_acked_record_lost(cluster: BrokerCluster) -> None:
    create_topic(cluster, "fo")
    wait_for_isr(cluster, "fo", {0, 1, 2})
    with BackgroundProducer(cluster.bootstrap, "fo") as producer:
        producer.wait_for_acks(100)
        old = cluster.partition("fo")
        victim = cluster.broker(old.leader_id)
        killed_at = time.monotonic()
        victim.kill()
        new_leader = cluster.wait_for_leader("fo", not_in=(old.leader_id,))
        failover_s = time.monotonic() - killed_at
        assert new_leader in old.isr
        # Producers continue: acknowledged records keep coming from the new leader.
        producer.wait_for_acks(100)
    assert not producer.failed, producer.failed[:3]
    print(f"failover: new leader {new_leader} seen {failover_s:.1f} s after SIGKILL")
    victim.start()
    wait_for_isr(cluster, "fo", {0, 1, 2})
    leo = wait_for_replicas_in_sync(cluster, "fo")
    consumed = consume_all(cluster.bootstrap, "fo", len(producer.acked))
    assert set(producer.acked) <= set(consumed)
    assert leo == len(consumed)
    copies = {log_bytes(b.log_dir, "fo") for b in cluster.brokers}
    assert len(copies) == 1, "replicas' logs differ after healing"


def test_controller_sigkill_another_takes_over_and_handles_a_later_failure(
    cluster: BrokerCluster,
) -> None:
    create_topic(cluster, "ctl")
    controller = cluster.metadata().controller_id
    cluster.broker(controller).kill()
    others = [b for b in cluster.brokers if b.broker_id != controller]

    def new_controller() -> int | None:
        views = {cluster.metadata(via=b).controller_id for b in others}
        found = views.pop() if len(views) == 1 else -1
        return found if found not in (-1, controller) else None

    successor = wait_until(new_controller, 60, "a new controller")
    assert successor in {b.broker_id for b in others}
    cluster.wait_for_live(2)
    # A later failure is handled by the new controller: the survivor leads the partition.
    survivor = next(b for b in others if b.broker_id != successor)
    cluster.broker(int(successor)).kill()  # type: ignore[call-overload]

    def led_by_survivor() -> bool:
        p = cluster.partition("ctl", via=survivor)
        return p.leader_id == survivor.broker_id

    # The last broker cannot lead: with it alone no ISR member other than itself is live,
    # but it is in the ISR, so the controller that takes over elects it.
    wait_until(led_by_survivor, 90, f"broker {survivor.broker_id} leading ctl-0")


def test_follower_sigstop_leaves_isr_hw_advances_and_rejoins(cluster: BrokerCluster) -> None:
    create_topic(cluster, "lag")
    wait_for_isr(cluster, "lag", {0, 1, 2})
    p = cluster.partition("lag")
    follower = cluster.broker(next(r for r in p.replicas if r != p.leader_id))
    others = {0, 1, 2} - {follower.broker_id}
    follower.pause()
    try:
        with BackgroundProducer(cluster.bootstrap, "lag") as producer:
            wait_for_isr(cluster, "lag", others)
            # acks=all completes with the shrunk ISR: the HW advances without the follower.
            producer.wait_for_acks(50)
    finally:
        follower.resume()
    assert not producer.failed
    wait_for_isr(cluster, "lag", {0, 1, 2})
    wait_for_replicas_in_sync(cluster, "lag")
    copies = {log_bytes(b.log_dir, "lag") for b in cluster.brokers}
    assert len(copies) == 1
