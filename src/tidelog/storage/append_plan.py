"""What an append writes and what it answers (``tidelog.storage.log`` rules 1-3, 7, 9):
from the validated batches, the leader's stamped batches with their new offsets, or the
follower's batches checked to continue the log; the per-batch index data, the producer
batches for the producer state and the new leader epochs; and ``AppendInfo``, the answer.
Nothing here touches the log: ``Log`` takes the plan, checks it against its producer state
and epoch cache, and writes it.
"""

from __future__ import annotations

import struct
from dataclasses import KW_ONLY, dataclass, field
from typing import Final, NamedTuple

from tidelog.errors import ErrorCode
from tidelog.model import TopicPartition
from tidelog.protocol.records import LOG_OVERHEAD
from tidelog.storage.batch_validation import (
    CONTROL_FLAG,
    TRANSACTIONAL_FLAG,
    ValidatedBatch,
    check_crcs,
    follower_marker,
    leader_marker,
)
from tidelog.storage.errors import UnexpectedAppendOffsetError
from tidelog.storage.log_validator import missing_key
from tidelog.storage.producer_entry import LeaderAppendCheck
from tidelog.storage.producer_state import ProducerBatch

#: baseOffset, batchLength, partitionLeaderEpoch: the stamped prefix of a batch.
_STAMP: Final = struct.Struct(">qii")


@dataclass(frozen=True, slots=True)
class AppendInfo:
    """What an append wrote; for an empty append ``num_batches == 0`` and
    ``first_offset == log end offset``, ``last_offset == first_offset - 1``.

    Leader appends of idempotent batches (``tidelog.storage.producer_state``) have two more
    outcomes, both writing nothing:
      * ``duplicate``: a retry of a batch already in the log; ``first_offset``,
        ``last_offset`` and ``max_timestamp`` are the ORIGINAL batch's, the counts are 0.
        Answer the produce request with NONE and that base offset (for acks=-1 wait until
        the high watermark passes ``last_offset``, like any append).
      * ``error`` other than NONE (OUT_OF_ORDER_SEQUENCE_NUMBER, INVALID_PRODUCER_EPOCH,
        UNKNOWN_PRODUCER_ID, INVALID_RECORD, INVALID_TXN_STATE,
        TRANSACTION_COORDINATOR_FENCED): offsets -1, counts 0; ``error_message`` says why.
    """

    first_offset: int
    last_offset: int
    max_timestamp: int
    num_batches: int
    num_records: int
    size_bytes: int
    _: KW_ONLY
    error: ErrorCode = ErrorCode.NONE
    error_message: str | None = None
    duplicate: bool = False


def empty_append_info(log_end_offset: int) -> AppendInfo:
    """The answer to an append without batches: nothing written at the log end offset."""
    return AppendInfo(log_end_offset, log_end_offset - 1, -1, 0, 0, 0)


def refused(error: ErrorCode, message: str | None) -> AppendInfo:
    """An append answered with ``error`` and nothing written (rule 7, rule 9)."""
    return AppendInfo(-1, -1, -1, 0, 0, 0, error=error, error_message=message)


def answer_without_write(check: LeaderAppendCheck) -> AppendInfo | None:
    """Rule 7: a duplicate is answered with the original batch's offsets, a refused
    idempotent batch with its error; None when the append is to be written."""
    if check.duplicate is not None:
        dup = check.duplicate
        return AppendInfo(dup.first_offset, dup.last_offset, dup.timestamp, 0, 0, 0, duplicate=True)
    if check.error is not ErrorCode.NONE:
        return refused(check.error, check.message)
    return None


class Refusal(NamedTuple):
    """A leader append refused before anything is written (INVALID_RECORD, Kafka's
    ``LogValidator``)."""

    error: ErrorCode
    message: str


@dataclass(slots=True)
class WritePlan:
    """The bytes of one append and what the log learns from them."""

    #: The pieces written with one ``pwritev``.
    pieces: list[bytes | memoryview]
    #: ``(size, last offset, max timestamp)`` of each batch, for the segment's indexes.
    meta: list[tuple[int, int, int]]
    first_offset: int
    last_offset: int
    max_timestamp: int
    num_records: int
    #: Batches with a producer id (rule 7), None when there are none (the common case).
    producer_batches: list[ProducerBatch] | None = None
    #: ``(epoch, first offset)`` of each leader epoch the batches start (followers, rule 3).
    new_epochs: list[tuple[int, int]] = field(default_factory=list)

    def info(self, num_batches: int, size_bytes: int) -> AppendInfo:
        """The answer once the plan is written."""
        return AppendInfo(
            self.first_offset,
            self.last_offset,
            self.max_timestamp,
            num_batches,
            self.num_records,
            size_bytes,
        )


def plan_leader_append(
    view: memoryview,
    batches: list[ValidatedBatch],
    *,
    first_offset: int,
    leader_epoch: int,
    client: bool,
    compact: bool,
    max_decompressed: int,
    crc_checked: bool,
    topic_partition: TopicPartition,
) -> WritePlan | Refusal:
    """Stamp each batch with its base offset and ``leader_epoch`` without copying the
    records: each batch is written as a stamped copy of its first 16 bytes (baseOffset,
    batchLength, partitionLeaderEpoch) followed by the caller's bytes from offset 16 on
    (rule 1).

    Refused: a control batch from a ``client`` (control records come from the broker only,
    KIP-98), and on a ``compact`` log a record without a key. A control batch with a
    producer id must be a transaction marker (rule 9, CorruptRecordBatchError otherwise);
    ``crc_checked`` says whether its CRC-32C was checked already (its record is read here).
    A ``compact`` log's batches not ``crc_checked`` have every CRC-32C checked first: what
    is decoded for its keys is what was sent.
    """
    if compact and not crc_checked:
        check_crcs(view, batches)
        crc_checked = True
    pieces: list[bytes | memoryview] = []
    meta: list[tuple[int, int, int]] = []
    max_timestamp = -1
    producer_batches: list[ProducerBatch] | None = None
    offset = first_offset
    for batch in batches:
        if client and batch.attributes & CONTROL_FLAG:
            return Refusal(
                ErrorCode.INVALID_RECORD,
                "control records are not allowed to be appended by clients",
            )
        pos = batch.position
        if compact and not batch.attributes & CONTROL_FLAG:
            problem = missing_key(view[pos : pos + batch.size], max_decompressed)
            if problem is not None:
                return Refusal(
                    ErrorCode.INVALID_RECORD, f"{problem} in topic partition {topic_partition}."
                )
        pieces.append(_STAMP.pack(offset, batch.size - LOG_OVERHEAD, leader_epoch))
        pieces.append(view[pos + _STAMP.size : pos + batch.size])
        if batch.producer_id >= 0:  # the only cost for non-idempotent batches
            if producer_batches is None:
                producer_batches = []
            attrs = batch.attributes
            producer_batches.append(
                ProducerBatch(
                    batch.producer_id,
                    batch.producer_epoch,
                    batch.base_sequence,
                    offset,
                    offset + batch.last_offset_delta,
                    batch.max_timestamp,
                    bool(attrs & TRANSACTIONAL_FLAG),
                    leader_marker(view, batch, crc_checked=crc_checked)
                    if attrs & CONTROL_FLAG
                    else None,
                )
            )
        offset += batch.last_offset_delta + 1
        meta.append((batch.size, offset - 1, batch.max_timestamp))
        max_timestamp = max(max_timestamp, batch.max_timestamp)
    return WritePlan(
        pieces,
        meta,
        first_offset,
        offset - 1,
        max_timestamp,
        offset - first_offset,
        producer_batches,
    )


def plan_follower_append(
    view: memoryview,
    batches: list[ValidatedBatch],
    total: int,
    *,
    log_end_offset: int,
    gaps: bool,
    latest_epoch: int,
    crc_checked: bool,
    topic_partition: TopicPartition,
) -> WritePlan:
    """The leader's batches unchanged (rule 2): the first must start at ``log_end_offset``
    and each next where the previous ended (UnexpectedAppendOffsetError otherwise); a
    compacted (``gaps``) leader's batches may skip offsets cleaned away, as Kafka's
    followers accept any increasing offsets. Epochs above ``latest_epoch`` are new (rule 3);
    a control batch with a producer id that is no transaction marker is left out of the
    producer batches (rule 9)."""
    expected = log_end_offset
    meta: list[tuple[int, int, int]] = []
    max_timestamp = -1
    num_records = 0
    new_epochs: list[tuple[int, int]] = []
    producer_batches: list[ProducerBatch] | None = None
    latest = latest_epoch
    for batch in batches:
        if batch.base_offset != expected and not (gaps and batch.base_offset > expected):
            raise UnexpectedAppendOffsetError(
                f"{topic_partition}: follower batch starts at offset "
                f"{batch.base_offset}, expected {expected}",
                first_offset=batches[0].base_offset,
                log_end_offset=log_end_offset,
            )
        expected = batch.base_offset + batch.last_offset_delta + 1
        num_records += batch.records_count
        meta.append((batch.size, expected - 1, batch.max_timestamp))
        max_timestamp = max(max_timestamp, batch.max_timestamp)
        if batch.partition_leader_epoch > latest:
            latest = batch.partition_leader_epoch
            new_epochs.append((latest, batch.base_offset))
        if batch.producer_id >= 0:
            marker = None
            if batch.attributes & CONTROL_FLAG:
                marker = follower_marker(
                    view, batch, crc_checked=crc_checked, topic_partition=topic_partition
                )
                if marker is None:
                    continue
            if producer_batches is None:
                producer_batches = []
            producer_batches.append(
                ProducerBatch(
                    batch.producer_id,
                    batch.producer_epoch,
                    batch.base_sequence,
                    batch.base_offset,
                    expected - 1,
                    batch.max_timestamp,
                    bool(batch.attributes & TRANSACTIONAL_FLAG),
                    marker,
                )
            )
    return WritePlan(
        [view[:total]],
        meta,
        batches[0].base_offset,
        expected - 1,
        max_timestamp,
        num_records,
        producer_batches,
        new_epochs,
    )


__all__ = ["AppendInfo", "Refusal", "WritePlan", "plan_follower_append", "plan_leader_append"]
