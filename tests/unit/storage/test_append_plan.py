"""The write plan of an append (``tidelog.storage.append_plan``) and the batch validation
it starts from (``tidelog.storage.batch_validation``), without a Log."""

from __future__ import annotations

import pytest

from tidelog.errors import ErrorCode
from tidelog.model import TopicPartition
from tidelog.protocol.records import CorruptRecordBatchError, parse_header, stamp_batch
from tidelog.storage.append_plan import (
    WritePlan,
    answer_without_write,
    empty_append_info,
    plan_follower_append,
    plan_leader_append,
    refused,
)
from tidelog.storage.batch_validation import (
    check_append_size,
    check_crcs,
    validate_batches,
    validate_follower_append,
    validate_leader_append,
)
from tidelog.storage.errors import RecordTooLargeError, UnexpectedAppendOffsetError
from tidelog.storage.log_config import LogConfig
from tidelog.storage.producer_entry import BatchMetadata, LeaderAppendCheck

from .batches import build_batch

TP = TopicPartition("t", 0)
NONE = ErrorCode.NONE


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


def test_a_compacted_leader_plan_checks_every_crc_before_decoding_keys() -> None:
    batch = bytearray(build_batch(3))
    batch[-1] ^= 0xFF
    records = bytes(batch)
    batches, _ = validate_batches(
        records, max_message_bytes=None, allow_partial_tail=False, check_crc=False
    )
    with pytest.raises(CorruptRecordBatchError, match="CRC-32C"):
        plan_leader_append(
            memoryview(records),
            batches,
            first_offset=0,
            leader_epoch=0,
            client=True,
            compact=True,
            max_decompressed=1 << 20,
            crc_checked=False,
            topic_partition=TP,
        )


def test_the_answers_of_an_append() -> None:
    plan = leader_plan(build_batch(3) + build_batch(2, seed=1))
    info = plan.info(2, 999)
    assert (info.first_offset, info.last_offset, info.num_batches, info.num_records) == (
        10,
        14,
        2,
        5,
    )
    assert (info.size_bytes, info.max_timestamp, info.error) == (999, plan.max_timestamp, NONE)
    empty = empty_append_info(7)
    assert (empty.first_offset, empty.last_offset, empty.num_batches) == (7, 6, 0)
    no = refused(ErrorCode.INVALID_RECORD, "why")
    assert (no.first_offset, no.error, no.error_message) == (-1, ErrorCode.INVALID_RECORD, "why")


def test_a_producer_check_is_answered_without_a_write_only_for_a_duplicate_or_an_error() -> None:
    assert answer_without_write(LeaderAppendCheck()) is None
    dup = answer_without_write(LeaderAppendCheck(duplicate=BatchMetadata(0, 2, 40, 42, 123)))
    assert dup is not None
    assert (dup.first_offset, dup.last_offset, dup.max_timestamp, dup.duplicate) == (
        40,
        42,
        123,
        True,
    )
    assert dup.num_batches == 0
    fenced = answer_without_write(
        LeaderAppendCheck(error=ErrorCode.INVALID_PRODUCER_EPOCH, message="old epoch")
    )
    assert fenced is not None
    assert (fenced.error, fenced.error_message, fenced.duplicate) == (
        ErrorCode.INVALID_PRODUCER_EPOCH,
        "old epoch",
        False,
    )


def test_leader_and_follower_validation_with_the_size_limit_of_an_append() -> None:
    records = build_batch(3) + build_batch(2, seed=1)
    config = LogConfig()
    out, batches, total, parallel = validate_leader_append(records, config, parallel_crc=False)
    assert (out, len(batches), total, parallel) == (records, 2, len(records), False)
    assert validate_follower_append(records[:-1], config, parallel_crc=False)[1] == len(
        records
    ) - len(build_batch(2, seed=1))  # the incomplete tail is left out
    small = LogConfig(segment_bytes=len(records) - 1)
    with pytest.raises(RecordTooLargeError) as leader_error:
        validate_leader_append(records, small, parallel_crc=False)
    assert leader_error.value.code is ErrorCode.RECORD_LIST_TOO_LARGE
    with pytest.raises(RecordTooLargeError):
        validate_follower_append(records, small, parallel_crc=False)
    check_append_size(len(records), LogConfig(segment_bytes=len(records)))
    assert validate_leader_append(b"", small, parallel_crc=False)[1] == []
