"""The replica manager on real storage and the real replication core (no network): the
leader side of acks=all with followers, long-poll wake-ups, and fencing."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

from tidelog.client.records import Record, build_batch
from tidelog.errors import ErrorCode
from tidelog.model import BrokerId, TopicPartition
from tidelog.server.config.broker_config import load_broker_config
from tidelog.server.config.topic_config import effective_topic_config
from tidelog.server.replica.manager import ReplicaManager, log_config_for, now_ms
from tidelog.server.replica.reads import FetchResult, PartitionRead, ProduceResult
from tidelog.storage.log_manager import LogManager

TP = TopicPartition("t", 0)


def manager(tmp_path: Path) -> ReplicaManager:
    config = load_broker_config({"log.dirs": str(tmp_path)})
    logs = LogManager(
        [tmp_path], log_config_for(effective_topic_config(config, {})), now_ms=now_ms()
    )
    return ReplicaManager(config, logs)


def batch(value: bytes) -> bytes:
    return build_batch([Record(value=value)], base_timestamp_ms=1)


def test_acks_all_waits_for_every_isr_follower(tmp_path: Path) -> None:
    async def scenario() -> None:
        rm = manager(tmp_path)
        config = effective_topic_config(rm.config, {"min.insync.replicas": 2})
        ids = [BrokerId(0), BrokerId(1), BrokerId(2)]
        rm.make_leader(TP, uuid.uuid4(), config, leader_epoch=3, replicas=ids, isr=ids)
        appended = rm.append_records({TP: batch(b"a")}, acks=-1)
        assert appended[TP][0].error == ErrorCode.NONE
        answers: list[dict[TopicPartition, ProduceResult]] = []
        rm.wait_for_acks(appended, 10_000, answers.append)
        assert answers == []  # followers' LEOs are unknown: the HW cannot pass the batch

        consumer: list[list[FetchResult]] = []
        rm.fetch(
            [PartitionRead(TP, 0, 1 << 20)],
            max_bytes=1 << 20,
            min_bytes=1,
            max_wait_ms=10_000,
            respond=lambda _reads, results: consumer.append(results),
        )
        assert consumer == []  # a consumer sees nothing above the HW (still 0)

        def follower_fetch(replica: int) -> list[FetchResult]:
            got: list[list[FetchResult]] = []
            rm.fetch(
                [PartitionRead(TP, 1, 1 << 20, current_leader_epoch=3)],
                max_bytes=1 << 20,
                min_bytes=0,
                max_wait_ms=0,
                respond=lambda _reads, results: got.append(results),
                replica_id=replica,
            )
            return got[0]

        follower_fetch(1)
        assert answers == []  # one of two followers caught up: HW = min over the ISR
        follower_fetch(2)
        assert [a[TP].error for a in answers] == [ErrorCode.NONE]
        assert rm.partitions[TP].partition.high_watermark == 1
        assert len(consumer) == 1  # the HW move woke the parked consumer fetch
        assert consumer[0][0].records is not None
        rm.shutdown()
        rm.log_manager.close()

    asyncio.run(scenario())


def test_fenced_and_unknown_leader_epochs(tmp_path: Path) -> None:
    async def scenario() -> None:
        rm = manager(tmp_path)
        rm.make_leader(TP, uuid.uuid4(), effective_topic_config(rm.config, {}), leader_epoch=5)
        rm.append_records({TP: batch(b"a")}, acks=1)
        results = rm.read(
            [
                PartitionRead(TP, 0, 1000, current_leader_epoch=4),
                PartitionRead(TP, 0, 1000, current_leader_epoch=6),
                PartitionRead(TP, 0, 1000, current_leader_epoch=5),
                PartitionRead(TP, 0, 1000),
            ],
            1 << 20,
        )
        assert [r.error for r in results] == [
            ErrorCode.FENCED_LEADER_EPOCH,
            ErrorCode.UNKNOWN_LEADER_EPOCH,
            ErrorCode.NONE,
            ErrorCode.NONE,
        ]
        rm.log_manager.close()

    asyncio.run(scenario())


def test_restart_hw_follows_the_log_not_a_stale_checkpoint(tmp_path: Path) -> None:
    async def scenario() -> None:
        rm = manager(tmp_path)
        topic_id = uuid.uuid4()
        rm.make_leader(TP, topic_id, effective_topic_config(rm.config, {}))
        rm.append_records({TP: batch(b"a")}, acks=1)
        rm.append_records({TP: batch(b"b")}, acks=1)
        rm.log_manager.close()  # checkpoints nothing of the HW (as after a crash)
        again = manager(tmp_path)
        hosted = again.make_leader(
            TP, topic_id, effective_topic_config(again.config, {}), high_watermark=0
        )
        assert hosted.partition.high_watermark == 2  # alone in the ISR: HW = LEO at once
        again.log_manager.close()

    asyncio.run(scenario())


def idempotent_batch(value: bytes, *, epoch: int, sequence: int) -> bytes:
    return build_batch(
        [Record(value=value)],
        base_timestamp_ms=1,
        producer_id=7,
        producer_epoch=epoch,
        base_sequence=sequence,
    )


def test_idempotent_outcomes_reach_the_producer(tmp_path: Path) -> None:
    # A retried batch is answered with its original offset and not written again; a sequence
    # gap or a fenced epoch is answered with its error and writes nothing.
    async def scenario() -> None:
        rm = manager(tmp_path)
        config = effective_topic_config(rm.config, {})
        rm.make_leader(
            TP, uuid.uuid4(), config, leader_epoch=0, replicas=[BrokerId(0)], isr=[BrokerId(0)]
        )
        first = rm.append_records({TP: idempotent_batch(b"a", epoch=1, sequence=0)}, acks=1)
        assert (first[TP][0].error, first[TP][0].base_offset) == (ErrorCode.NONE, 0)
        second = rm.append_records({TP: idempotent_batch(b"b", epoch=1, sequence=1)}, acks=1)
        assert (second[TP][0].error, second[TP][0].base_offset) == (ErrorCode.NONE, 1)

        retry = rm.append_records({TP: idempotent_batch(b"a", epoch=1, sequence=0)}, acks=1)
        assert (retry[TP][0].error, retry[TP][0].base_offset) == (ErrorCode.NONE, 0)

        gap = rm.append_records({TP: idempotent_batch(b"c", epoch=1, sequence=5)}, acks=1)
        assert gap[TP][0].error == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
        assert gap[TP][1] == -1

        rm.append_records({TP: idempotent_batch(b"d", epoch=2, sequence=0)}, acks=1)
        fenced = rm.append_records({TP: idempotent_batch(b"e", epoch=1, sequence=2)}, acks=1)
        assert fenced[TP][0].error == ErrorCode.INVALID_PRODUCER_EPOCH

        hosted = rm.partitions[TP]
        assert hosted.log.log_end_offset == 3  # a, b, d: nothing of the retry or refusals

    asyncio.run(scenario())


def test_a_parked_follower_fetch_wakes_on_an_append_and_reads_it_once(tmp_path: Path) -> None:
    """A follower's fetch with min_bytes 1 is answered as soon as its leader appends past its
    fetch offset: the completion check does not read the log (the follower reads up to the
    log end offset, so a batch is there); only the answer reads it."""

    async def scenario() -> None:
        rm = manager(tmp_path)
        config = effective_topic_config(rm.config, {})
        ids = [BrokerId(0), BrokerId(1)]
        rm.make_leader(TP, uuid.uuid4(), config, leader_epoch=3, replicas=ids, isr=ids)
        the_log = rm.partitions[TP].log
        reads: list[int] = []
        real_read = the_log.read

        def counting_read(*args: object, **kwargs: object) -> object:
            reads.append(1)
            return real_read(*args, **kwargs)  # type: ignore[arg-type]

        the_log.read = counting_read  # type: ignore[method-assign]
        got: list[list[FetchResult]] = []
        rm.fetch(
            [PartitionRead(TP, 0, 1 << 20, current_leader_epoch=3)],
            max_bytes=1 << 20,
            min_bytes=1,
            max_wait_ms=10_000,
            respond=lambda _reads, results: got.append(results),
            replica_id=1,
        )
        assert got == []  # nothing to read yet: parked
        rm.append_records({TP: batch(b"a")}, acks=1)
        assert len(got) == 1
        assert got[0][0].error == ErrorCode.NONE
        assert got[0][0].records is not None
        assert len(reads) == 1  # the answer's read only
        rm.shutdown()
        rm.log_manager.close()

    asyncio.run(scenario())
