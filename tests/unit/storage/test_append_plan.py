"""The write plan of an append (``tidelog.storage.append_plan``) and the batch validation
it starts from (``tidelog.storage.batch_validation``), without a Log."""

from __future__ import annotations

import pytest

from tidelog.model import TopicPartition
from tidelog.protocol.records import CorruptRecordBatchError, parse_header, stamp_batch
from tidelog.storage.append_plan import (
    WritePlan,
    plan_follower_append,
    plan_leader_append,
)
from tidelog.storage.batch_validation import check_crcs, validate_batches
from tidelog.storage.errors import RecordTooLargeError, UnexpectedAppendOffsetError

from .batches import build_batch

TP = TopicPartition("t", 0)


def stamped(batch: bytes, base_offset: int, epoch: int) -> bytes:
    buf = bytearray(batch)
    stamp_batch(buf, 0, base_offset, epoch)
    return bytes(buf)


def leader_plan(records: bytes, *, first_offset: int = 10, compact: bool = False) -> WritePlan:
    batches, _ = validate_batches(records, max_message_bytes=None, allow_partial_tail=False)
    plan = plan_leader_append(
        memoryview(records),
        batches,
        first_offset=first_offset,
        leader_epoch=7,
        client=True,
        compact=compact,
        max_decompressed=1 << 20,
        crc_checked=True,
        topic_partition=TP,
    )
    assert isinstance(plan, WritePlan)
    return plan


def test_leader_plan_stamps_offsets_and_epoch_without_touching_the_records() -> None:
    first, second = build_batch(3), build_batch(2, seed=1)
    plan = leader_plan(first + second)
    written = b"".join(bytes(piece) for piece in plan.pieces)
    headers = [parse_header(written, 0), parse_header(written, len(first))]
    assert [(h.base_offset, h.partition_leader_epoch) for h in headers] == [(10, 7), (13, 7)]
    assert written[16 : len(first)] == first[16:]
    assert (plan.first_offset, plan.last_offset, plan.num_records) == (10, 14, 5)
    assert [m[:2] for m in plan.meta] == [(len(first), 12), (len(second), 14)]
    assert plan.producer_batches is None
    # The stamped fields lie outside the CRC: the written batches still pass it.
    validate_batches(written, max_message_bytes=None, allow_partial_tail=False)


def test_follower_plan_keeps_offsets_and_reports_new_epochs() -> None:
    first = stamped(build_batch(3), 5, 2)
    second = stamped(build_batch(2, seed=1), 8, 3)
    records = first + second
    batches, total = validate_batches(records, max_message_bytes=None, allow_partial_tail=True)
    plan = plan_follower_append(
        memoryview(records),
        batches,
        total,
        log_end_offset=5,
        gaps=False,
        latest_epoch=2,
        crc_checked=True,
        topic_partition=TP,
    )
    assert bytes(plan.pieces[0]) == records
    assert (plan.first_offset, plan.last_offset, plan.num_records) == (5, 9, 5)
    assert plan.new_epochs == [(3, 8)]


def test_follower_plan_refuses_a_batch_that_does_not_continue_the_log() -> None:
    records = stamped(build_batch(3), 6, 0)
    batches, total = validate_batches(records, max_message_bytes=None, allow_partial_tail=True)
    with pytest.raises(UnexpectedAppendOffsetError):
        plan_follower_append(
            memoryview(records),
            batches,
            total,
            log_end_offset=5,
            gaps=False,
            latest_epoch=0,
            crc_checked=True,
            topic_partition=TP,
        )


def test_validation_refuses_a_bad_crc_and_an_oversized_batch() -> None:
    batch = bytearray(build_batch(3))
    with pytest.raises(RecordTooLargeError):
        validate_batches(bytes(batch), max_message_bytes=len(batch) - 1, allow_partial_tail=False)
    batch[-1] ^= 0xFF
    with pytest.raises(CorruptRecordBatchError, match="CRC-32C"):
        validate_batches(bytes(batch), max_message_bytes=None, allow_partial_tail=False)
    batches, _ = validate_batches(
        bytes(batch), max_message_bytes=None, allow_partial_tail=False, check_crc=False
    )
    with pytest.raises(CorruptRecordBatchError, match="CRC-32C"):
        check_crcs(memoryview(bytes(batch)), batches)
