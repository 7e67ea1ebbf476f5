"""Groups in a 3-broker cluster: committed offsets survive SIGKILL of the coordinator, a
restarted group resumes exactly at its commits, and a live member follows the coordinator
to its new broker."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from confluent_kafka import Consumer, TopicPartition

from tests.harness import BrokerCluster, wait_until
from tests.integration.groups.helpers import GROUP_OVERRIDES, Member, create_topic, produce
from tests.integration.rawclient import Raw
from tidelog.coordinator import partition_for
from tidelog.errors import ErrorCode
from tidelog.protocol.apis import ApiKey

pytestmark = pytest.mark.integration

OFFSETS_PARTITIONS = int(GROUP_OVERRIDES["offsets.topic.num.partitions"])


def consumer(bootstrap: str, group: str) -> Consumer:
    return Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "session.timeout.ms": 3000,
            "heartbeat.interval.ms": 500,
        }
    )


def read(c: Consumer, count: int, timeout: float = 60.0) -> list[tuple[int, int]]:
    """``count`` records as (partition, offset), each committed (synchronously) once read."""
    got: list[tuple[int, int]] = []

    def step() -> bool:
        msg = c.poll(0.5)
        if msg is not None and not msg.error():
            got.append((msg.partition(), msg.offset()))
            c.commit(message=msg, asynchronous=False)
        return len(got) >= count

    wait_until(step, timeout, f"{count} records", interval=0)
    return got


def wait_for_member(member: Member, predicate: Callable[[], bool], what: str) -> None:
    try:
        wait_until(predicate, 120, what)
    except AssertionError as exc:
        raise AssertionError(f"{exc}; {member}") from None


def test_commits_survive_killing_the_coordinator(tmp_path: Path, zk_connect: str) -> None:
    with BrokerCluster(tmp_path, zk_connect, overrides=GROUP_OVERRIDES) as cluster:
        bootstrap = cluster.bootstrap
        create_topic(bootstrap, "orders", 2, replication_factor=3)
        produce(bootstrap, "orders", 2, 40)
        live = Member("kafka-python", bootstrap, "live", "orders", records=True)
        try:
            first = consumer(bootstrap, "durable")
            first.subscribe(["orders"])
            before = read(first, 30)
            committed = {
                tp.partition: tp.offset
                for tp in first.committed([TopicPartition("orders", p) for p in range(2)], 10)
            }
            first.close()
            # What was read is exactly what was committed: next offset = last read + 1.
            for p in range(2):
                offsets = [o for q, o in before if q == p]
                assert committed[p] == (max(offsets) + 1 if offsets else -1001)
            wait_until(
                lambda: len(live.records) >= 80, 120, f"the live member to read all 80: {live}"
            )

            # The coordinator of both groups: the leader of their __consumer_offsets partition.
            p_durable = partition_for("durable", OFFSETS_PARTITIONS)
            coordinator = cluster.wait_for_leader("__consumer_offsets", p_durable)
            cluster.broker(coordinator).kill()
            cluster.wait_for_leader("__consumer_offsets", p_durable, not_in=(coordinator,))
            new_coordinator = cluster.wait_for_leader("__consumer_offsets", p_durable)
            bootstrap = ",".join(b.bootstrap for b in cluster.alive)
            # Any other broker refuses the group's requests: NOT_COORDINATOR.
            other = next(b for b in cluster.alive if b.broker_id != new_coordinator)
            raw = Raw(other)
            try:
                fetched = raw.call(
                    ApiKey.OFFSET_FETCH,
                    8,
                    {"groups": [{"group_id": "durable", "topics": None}]},
                )
            finally:
                raw.close()
            assert fetched.groups[0].error_code == ErrorCode.NOT_COORDINATOR

            second = consumer(bootstrap, "durable")
            second.subscribe(["orders"])
            after = read(second, 80 - 30)
            second.close()
            # Resumed exactly at the commits: no gaps, nothing read twice.
            assert sorted(before + after) == [(p, o) for p in range(2) for o in range(40)]

            # The live member finds the new coordinator and keeps consuming.
            produce(bootstrap, "orders", 2, 10)
            wait_for_member(
                live, lambda: len(set(live.records)) >= 100, "the live member to read 100"
            )
            assert sorted(set(live.records)) == [(p, o) for p in range(2) for o in range(50)]
        finally:
            live.stop()
