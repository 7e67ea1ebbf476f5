"""KIP-392 on the replica manager, real storage: a follower serves a consumer's Fetch v11+
(client metadata) below its own high watermark with Kafka's errors, and a leader with
``replica.selector.class`` sends a consumer of another rack to its follower."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

from tidelog.client.records import Record, build_batch
from tidelog.errors import ErrorCode
from tidelog.model import BrokerId, TopicPartition
from tidelog.server.config.broker_config import load_broker_config
from tidelog.server.config.topic_config import effective_topic_config
from tidelog.server.config.values import RACK_AWARE_REPLICA_SELECTOR
from tidelog.server.replica.manager import ReplicaManager, log_config_for, now_ms
from tidelog.server.replica.reads import READ_COMMITTED, FetchResult, PartitionRead
from tidelog.server.replica.selector import ClientMetadata
from tidelog.storage.log_manager import LogManager

TP = TopicPartition("t", 0)
IDS = [BrokerId(0), BrokerId(1), BrokerId(2)]
RACKS = {0: "a", 1: "b", 2: "c"}
RACK_B = ClientMetadata("b")
BATCHES = [
    build_batch([Record(value=b"v%d" % i)], base_offset=i, partition_leader_epoch=3)
    for i in range(5)
]


def manager(tmp_path: Path, broker_id: int, **extra: str) -> ReplicaManager:
    config = load_broker_config({"log.dirs": str(tmp_path), "broker.id": str(broker_id), **extra})
    logs = LogManager(
        [tmp_path], log_config_for(effective_topic_config(config, {})), now_ms=now_ms()
    )
    rm = ReplicaManager(config, logs)
    rm.broker_rack = lambda b, _listener: RACKS.get(b)
    return rm


def follower(tmp_path: Path) -> ReplicaManager:
    """Broker 1 following broker 0 (epoch 3): five records, high watermark 3."""
    rm = manager(tmp_path, 1)
    config = effective_topic_config(rm.config, {})
    rm.make_follower(
        TP, uuid.uuid4(), config, leader=IDS[0], leader_epoch=3, partition_epoch=0,
        replicas=IDS, isr=IDS,
    )  # fmt: skip
    hosted = rm.partitions[TP]
    hosted.log.append_as_follower(b"".join(BATCHES), now_ms=now_ms())
    hosted.partition.update_follower_high_watermark(log_end_offset=5, leader_high_watermark=3)
    return rm


def read_one(
    rm: ReplicaManager,
    offset: int,
    client: ClientMetadata | None = RACK_B,
    *,
    epoch: int = -1,
    isolation_level: int = 0,
) -> FetchResult:
    (result,) = rm.read(
        [PartitionRead(TP, offset, 1 << 20, epoch)],
        1 << 20,
        isolation_level=isolation_level,
        client=client,
    )
    return result


def test_a_follower_serves_a_consumer_below_its_high_watermark(tmp_path: Path) -> None:
    rm = follower(tmp_path)
    result = read_one(rm, 0)
    assert result.error == ErrorCode.NONE
    assert result.high_watermark == 3
    assert result.records is not None
    assert result.records.read_bytes() == b"".join(BATCHES[:3])
    # read_committed: the follower's last stable offset (no open transaction: its HW).
    committed = read_one(rm, 1, isolation_level=READ_COMMITTED)
    assert committed.records is not None
    assert committed.records.read_bytes() == b"".join(BATCHES[1:3])
    assert committed.last_stable_offset == 3


def test_a_follower_answers_kafkas_errors(tmp_path: Path) -> None:
    rm = follower(tmp_path)
    # Between its HW and its log end: nothing yet, no error (Kafka's LocalLog.read).
    above_hw = read_one(rm, 4)
    assert (above_hw.error, above_hw.records) == (ErrorCode.NONE, None)
    assert read_one(rm, 6).error == ErrorCode.OFFSET_OUT_OF_RANGE  # past its log end
    assert read_one(rm, 0, epoch=2).error == ErrorCode.FENCED_LEADER_EPOCH
    assert read_one(rm, 0, epoch=4).error == ErrorCode.UNKNOWN_LEADER_EPOCH
    assert read_one(rm, 0, epoch=3).error == ErrorCode.NONE
    # Fetch below v11 (no client metadata) and any other replica's fetch need the leader.
    assert read_one(rm, 0, client=None).error == ErrorCode.NOT_LEADER_OR_FOLLOWER
    (as_replica,) = rm.read([PartitionRead(TP, 0, 1 << 20)], 1 << 20, replica_id=2)
    assert as_replica.error == ErrorCode.NOT_LEADER_OR_FOLLOWER
    # A follower never selects another replica.
    assert read_one(rm, 0, ClientMetadata("c")).preferred_read_replica == -1


def test_a_consumer_long_poll_on_a_follower_wakes_when_its_hw_moves(tmp_path: Path) -> None:
    async def scenario() -> None:
        rm = follower(tmp_path)
        answers: list[list[FetchResult]] = []
        rm.fetch(
            [PartitionRead(TP, 3, 1 << 20)],
            max_bytes=1 << 20,
            min_bytes=1,
            max_wait_ms=10_000,
            respond=lambda _reads, results: answers.append(results),
            client=ClientMetadata("b"),
        )
        assert answers == []  # parked: nothing below the follower's HW at offset 3
        rm.partitions[TP].partition.update_follower_high_watermark(
            log_end_offset=5, leader_high_watermark=5
        )
        rm.fetch_purgatory.check_and_complete(TP)  # what the fetcher does when its HW moves
        ((result,),) = answers
        assert result.records is not None
        assert result.records.read_bytes() == b"".join(BATCHES[3:])
        rm.shutdown()

    asyncio.run(scenario())


def leader(tmp_path: Path, **extra: str) -> ReplicaManager:
    """Broker 0 leading (epoch 3) five records; follower 1 caught up, follower 2 at 2."""
    rm = manager(tmp_path, 0, **extra)
    config = effective_topic_config(rm.config, {})
    rm.make_leader(TP, uuid.uuid4(), config, leader_epoch=3, replicas=IDS, isr=IDS)
    for i in range(5):
        rm.append_records({TP: build_batch([Record(value=b"v%d" % i)])}, acks=1)
    # Follower 1 says its log starts at 1 (retention ran there first).
    rm.update_follower_fetch_state(IDS[1], [PartitionRead(TP, 5, 1 << 20, log_start_offset=1)])
    rm.update_follower_fetch_state(IDS[2], [PartitionRead(TP, 2, 1 << 20)])
    return rm


def test_the_leader_sends_a_consumer_to_a_follower_of_its_rack(tmp_path: Path) -> None:
    rm = leader(tmp_path, **{"replica.selector.class": RACK_AWARE_REPLICA_SELECTOR})
    sent = read_one(rm, 1, ClientMetadata("b"))
    assert (sent.error, sent.preferred_read_replica, sent.records) == (ErrorCode.NONE, 1, None)
    # Offset 0 is gone from follower 1: the leader serves it.
    assert read_one(rm, 0, ClientMetadata("b")).preferred_read_replica == -1
    assert sent.high_watermark == 2  # follower 2 holds the HW back
    # Follower 2 has not reached offset 3: the leader serves that fetch itself.
    assert read_one(rm, 2, ClientMetadata("c")).preferred_read_replica == 2
    kept = read_one(rm, 3, ClientMetadata("c"))
    assert (kept.preferred_read_replica, kept.records) == (-1, None)  # at the HW: nothing yet
    served = read_one(rm, 0, ClientMetadata("a"))
    assert served.preferred_read_replica == -1
    assert served.records is not None
    assert read_one(rm, 0, ClientMetadata("")).preferred_read_replica == -1
    # A long poll sent elsewhere is answered at once (Kafka's DelayedFetch).

    async def long_poll() -> None:
        answers: list[list[FetchResult]] = []
        rm.fetch(
            [PartitionRead(TP, 2, 1 << 20)],
            max_bytes=1 << 20,
            min_bytes=1 << 20,
            max_wait_ms=10_000,
            respond=lambda _reads, results: answers.append(results),
            client=ClientMetadata("b"),
        )
        assert [[r.preferred_read_replica for r in rs] for rs in answers] == [[1]]
        rm.shutdown()

    asyncio.run(long_poll())


def test_without_a_selector_the_leader_serves_every_consumer(tmp_path: Path) -> None:
    rm = leader(tmp_path)
    result = read_one(rm, 0, ClientMetadata("b"))
    assert result.preferred_read_replica == -1
    assert result.records is not None
