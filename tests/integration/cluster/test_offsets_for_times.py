"""Offsets by time on three brokers, asked by aiokafka (issue 30 point 3): a topic created
by the producer's Metadata request with two partitions, records with explicit old CreateTime
timestamps, segments rolled under the records, and a lookup on the follower that took over
from a leader while its high watermark still lagged (KIP-207: Kafka answers "not yet",
retriable, where tidelog answered "no such record")."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable, Iterator, Sequence

import aiokafka
import pytest
from aiokafka.structs import OffsetAndTimestamp
from confluent_kafka.admin import AdminClient, NewTopic

from tests.harness import BrokerCluster, wait_until
from tests.integration.cluster.helpers import describe_quorum, wait_for_isr
from tidelog.client import BlockingClient
from tidelog.errors import ErrorCode
from tidelog.model import TopicPartition
from tidelog.protocol.list_offsets import LATEST_TIMESTAMP
from tidelog.testing.zookeeper import ZooKeeperProcess

pytestmark = pytest.mark.integration

#: Explicit CreateTime timestamps from 2001, far older than the segments holding them; the
#: brokers keep them (log.retention.ms -1: the default 7 days would delete them).
OLD = 1_000_000_000_000


@pytest.fixture(scope="module")
def two_partition_cluster(
    tmp_path_factory: pytest.TempPathFactory, zookeeper: ZooKeeperProcess
) -> Iterator[BrokerCluster]:
    """Three brokers whose auto-created topics get two partitions, three replicas each."""
    directory = tmp_path_factory.mktemp("ts-cluster")
    chroot = f"{zookeeper.connect_string}/ts-{directory.name}"
    cluster = BrokerCluster(
        directory, chroot, overrides={"num.partitions": "2", "log.retention.ms": "-1"}
    ).start()
    try:
        yield cluster
    finally:
        cluster.stop()


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


async def produce(
    bootstrap: str, topic: str, records: Sequence[tuple[int, int]], *, acks: int | str
) -> list[int]:
    """``(partition, timestamp)`` records, one batch each, in order; returns their offsets."""
    producer = aiokafka.AIOKafkaProducer(bootstrap_servers=bootstrap, acks=acks)
    await producer.start()
    try:
        offsets = []
        for partition, ts in records:
            sent = await producer.send_and_wait(
                topic, b"at %d" % ts, partition=partition, timestamp_ms=ts
            )
            offsets.append(sent.offset)
        return offsets
    finally:
        await producer.stop()


def first_at_or_after(timestamps: Sequence[int], target: int) -> tuple[int, int] | None:
    """What Kafka answers: the first offset whose timestamp is >= ``target``."""
    for offset, ts in enumerate(timestamps):
        if ts >= target:
            return offset, ts
    return None


async def lookups(
    consumer: aiokafka.AIOKafkaConsumer, tp: aiokafka.TopicPartition, targets: Sequence[int]
) -> list[tuple[int, int] | None]:
    answers: list[tuple[int, int] | None] = []
    for target in targets:
        found = (await consumer.offsets_for_times({tp: target}))[tp]
        answers.append(None if found is None else (found.offset, found.timestamp))
    return answers


def test_aiokafka_offsets_for_times_on_an_auto_created_two_partition_topic(
    two_partition_cluster: BrokerCluster,
) -> None:
    cluster = two_partition_cluster
    topic = unique("auto")
    # aiokafka's producer defaults to acks=1, as aiokafka's own tests produce: the leader
    # answers before the followers have the records. Records answer lookups once below the
    # high watermark (as in Kafka), so the consumer waits for the end offsets first.
    stamps = {0: [OLD + 1000 * i for i in range(6)], 1: [OLD + 500 + 1000 * i for i in range(6)]}

    async def scenario() -> dict[int, list[tuple[int, int] | None]]:
        plan = [(p, ts) for i in range(6) for p, ts in ((0, stamps[0][i]), (1, stamps[1][i]))]
        offsets = await produce(cluster.bootstrap, topic, plan, acks=1)
        assert offsets == [i for i in range(6) for _ in range(2)]
        consumer = aiokafka.AIOKafkaConsumer(bootstrap_servers=cluster.bootstrap)
        await consumer.start()
        try:
            tps = [aiokafka.TopicPartition(topic, p) for p in (0, 1)]
            for _ in range(600):
                if await consumer.end_offsets(tps) == dict.fromkeys(tps, 6):
                    break
                await asyncio.sleep(0.1)
            assert await consumer.end_offsets(tps) == dict.fromkeys(tps, 6)
            targets = [0, OLD, OLD + 2500, OLD + 5000, OLD + 5500, OLD + 10**9]
            return {tp.partition: await lookups(consumer, tp, targets) for tp in tps}
        finally:
            await consumer.stop()

    answers = asyncio.run(scenario())
    assert answers[0] == [(0, OLD), (0, OLD), (3, OLD + 3000), (5, OLD + 5000), None, None]
    assert answers[1] == [
        (0, OLD + 500),
        (0, OLD + 500),
        (2, OLD + 2500),
        (5, OLD + 5500),
        (5, OLD + 5500),
        None,
    ]
    assert len(cluster.partition(topic, 1).replicas) == 3


def test_lookups_find_records_in_rolled_segments(two_partition_cluster: BrokerCluster) -> None:
    cluster = two_partition_cluster
    topic = unique("rolled")
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    new = NewTopic(topic, num_partitions=1, replication_factor=3, config={"segment.bytes": "1024"})
    admin.create_topics([new])[topic].result(timeout=30)
    cluster.wait_for_leader(topic)
    # 60 records of ~110 bytes, a batch each: ~9 per segment. Timestamps rise by a second,
    # except records 30-39, 20 minutes older than record 0: a segment whose timestamps are
    # older than those of the segments before it.
    stamps = [OLD - 1_200_000 + i if 30 <= i < 40 else OLD + 1000 * i for i in range(60)]
    targets = [
        0,
        OLD - 1_200_000 + 35,  # the first record that new is record 0, not record 35
        OLD + 17_500,
        OLD + 29_000,
        OLD + 29_001,  # not the old records 30-39: record 40
        OLD + 45_000,
        OLD + 59_000,
        OLD + 59_001,
    ]

    async def scenario() -> list[tuple[int, int] | None]:
        await produce(cluster.bootstrap, topic, [(0, ts) for ts in stamps], acks="all")
        consumer = aiokafka.AIOKafkaConsumer(bootstrap_servers=cluster.bootstrap)
        await consumer.start()
        try:
            return await lookups(consumer, aiokafka.TopicPartition(topic, 0), targets)
        finally:
            await consumer.stop()

    answers = asyncio.run(scenario())
    leader = cluster.broker(cluster.wait_for_leader(topic))
    segments = sorted((leader.log_dir / f"{topic}-0").glob("*.log"))
    assert len(segments) >= 5, segments
    assert answers == [first_at_or_after(stamps, t) for t in targets]
    assert answers[4] == (40, OLD + 40_000)


def create_with_assignment(cluster: BrokerCluster, topic: str, replicas: list[int]) -> None:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic(topic, num_partitions=1, replica_assignment=[replicas])])[
        topic
    ].result(timeout=30)
    cluster.wait_for_leader(topic)


def test_a_follower_turned_leader_with_a_lagging_hw_answers_after_catching_up(
    new_cluster: Callable[..., BrokerCluster],
) -> None:
    # A paused follower stays in the ISR for the whole test (no lag or session timeout
    # removes it), so the high watermark cannot pass what it has.
    cluster = new_cluster(
        overrides={
            "replica.lag.time.max.ms": "120000",
            "zookeeper.session.timeout.ms": "60000",
            "log.retention.ms": "-1",
        }
    )
    controller = cluster.metadata().controller_id
    old_leader, paused = (b for b in (0, 1, 2) if b != controller)
    # The controller is the next in line (a paused controller would elect no one).
    topic = unique("failover")
    create_with_assignment(cluster, topic, [old_leader, controller, paused])
    assert cluster.wait_for_leader(topic) == old_leader
    wait_for_isr(cluster, topic, {0, 1, 2})
    stamps = [OLD + 1000 * i for i in range(10)]
    tp = TopicPartition(topic, 0)

    async def first_half() -> None:
        # Acknowledged by all: every replica has records 0-4 below its high watermark.
        await produce(cluster.bootstrap, topic, [(0, ts) for ts in stamps[:5]], acks="all")

    asyncio.run(first_half())
    wait_until(
        lambda: (
            {int(r.log_end_offset) for r in describe_quorum(cluster, topic).current_voters} == {5}
        ),
        60,
        "every replica at offset 5",
    )
    cluster.broker(paused).pause()
    leader_address = cluster.broker(old_leader).bootstrap

    async def second_half() -> None:
        # acks=1 while one ISR member is paused: the leader and the controller's replica
        # have records 5-9, the high watermark stays at 5.
        await produce(leader_address, topic, [(0, ts) for ts in stamps[5:]], acks=1)

    asyncio.run(second_half())
    wait_until(
        lambda: (
            {
                int(r.replica_id): int(r.log_end_offset)
                for r in describe_quorum(cluster, topic).current_voters
            }.get(controller)
            == 10
        ),
        60,
        "the next leader at offset 10",
    )
    cluster.broker(old_leader).stop()  # controlled shutdown: the controller's replica leads
    assert cluster.wait_for_leader(topic, not_in=(old_leader,)) == controller
    new_leader = cluster.broker(controller).bootstrap
    with BlockingClient(new_leader, request_timeout_s=10.0) as client:
        lagging = client.list_offsets({tp: OLD + 7000})[tp]
        latest = client.list_offsets({tp: LATEST_TIMESTAMP})[tp]
        below_hw = client.list_offsets({tp: OLD + 2000})[tp]
    # Records 5-9 were acknowledged by the previous leader: not "none" (-1) and no end
    # offset below the one it gave, but "not yet" (KIP-207); older records are answered.
    assert (lagging.error_code, latest.error_code) == (ErrorCode.OFFSET_NOT_AVAILABLE,) * 2
    assert (below_hw.error_code, below_hw.offset) == (ErrorCode.NONE, 2)

    async def lookup_while_catching_up() -> tuple[object, object]:
        consumer = aiokafka.AIOKafkaConsumer(bootstrap_servers=new_leader)
        await consumer.start()
        try:
            atp = aiokafka.TopicPartition(topic, 0)
            # aiokafka asks with ListOffsets v1-v3: answered LEADER_NOT_AVAILABLE, which it
            # retries; the follower resumes meanwhile and the high watermark reaches 10.
            asked = asyncio.ensure_future(consumer.offsets_for_times({atp: OLD + 7000}))
            await asyncio.sleep(1.0)
            cluster.broker(paused).resume()
            found = (await asked)[atp]
            end = await consumer.end_offsets([atp])
            return found, end[atp]
        finally:
            await consumer.stop()

    found, end = asyncio.run(lookup_while_catching_up())
    assert found == OffsetAndTimestamp(7, OLD + 7000)
    assert end == 10
