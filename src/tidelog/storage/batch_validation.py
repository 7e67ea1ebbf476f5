"""Validation of the batches an append brings (``tidelog.storage.log`` rules 1, 1b, 9):
framing, magic 2, record count, size and CRC-32C of every batch before any is written, the
leader's deep validation of compressed batches, and transaction markers.

Records of uncompressed batches are never decoded here: the batch headers are unpacked
with one ``struct`` call each (this is the produce path's hot loop).
"""

from __future__ import annotations

import logging
import struct
from typing import Final, NamedTuple

import crc32c

from tidelog.errors import ErrorCode
from tidelog.model import TopicPartition
from tidelog.protocol.records import (
    BATCH_HEADER_SIZE,
    CRC_START,
    LOG_OVERHEAD,
    MAGIC_V2,
    CorruptRecordBatchError,
    parse_header,
)
from tidelog.storage.compression import CompressionLevels
from tidelog.storage.errors import RecordTooLargeError
from tidelog.storage.log_config import LogConfig
from tidelog.storage.log_timestamps import (
    check_create_times,
    has_timestamp_window,
    stamp_log_append_time,
)
from tidelog.storage.log_validator import max_decompressed_bytes, needs_validation, validate_batch
from tidelog.storage.transactions import EndTxnMarker, parse_end_txn_marker

logger = logging.getLogger(__name__)

#: The v2 batch header (tidelog.protocol.records layout), unpacked without a dataclass.
HEADER: Final = struct.Struct(">qiibIhiqqqhii")
#: attributes bits 0-2: the codec; bit 4: a transactional batch; bit 5: a control batch
#: (transaction marker).
COMPRESSION_MASK: Final = 0x07
TRANSACTIONAL_FLAG: Final = 0x10
CONTROL_FLAG: Final = 0x20


class ValidatedBatch(NamedTuple):
    """What the append path needs from one validated batch header (no dataclass: hot path)."""

    position: int
    size: int
    base_offset: int
    last_offset_delta: int
    partition_leader_epoch: int
    max_timestamp: int
    records_count: int
    producer_id: int  # NO_PRODUCER_ID (-1) for plain batches
    producer_epoch: int
    base_sequence: int
    crc: int
    attributes: int


def validate_batches(
    records: bytes | bytearray | memoryview,
    *,
    max_message_bytes: int | None,
    allow_partial_tail: bool,
    check_crc: bool = True,
    cleaned: bool = False,
) -> tuple[list[ValidatedBatch], int]:
    """Check every batch (rule 1); returns the batches and the bytes they cover.

    ``allow_partial_tail``: a trailing incomplete batch (a fetch response cut by its size
    limit) is ignored instead of rejected; followers only. Any framing problem is reported
    by ``parse_header`` itself so the messages match the protocol layer's.
    ``check_crc=False`` leaves the CRC-32Cs to the caller (``check_crcs``, or the helper
    thread of ``tidelog.storage.crc_helper`` beside the write, rule 1a). ``cleaned``:
    batches of a compacted log may hold fewer records than their offset range
    (``tidelog.storage.cleaner``).
    """
    batches: list[ValidatedBatch] = []
    view = memoryview(records)
    pos = 0
    end = len(view)
    unpack = HEADER.unpack_from
    while pos < end:
        remaining = end - pos
        if remaining < BATCH_HEADER_SIZE:
            if allow_partial_tail:
                break
            parse_header(view, pos)  # raises: truncated
        (base, length, epoch, magic, crc, attrs, delta, _, max_ts, pid, p_epoch, seq, count) = (
            unpack(view, pos)
        )
        size = length + LOG_OVERHEAD
        if size > remaining and allow_partial_tail and magic == MAGIC_V2 and size >= 0:
            break
        if magic != MAGIC_V2 or size < BATCH_HEADER_SIZE or size > remaining:
            parse_header(view, pos)  # raises with the protocol layer's message
        if max_message_bytes is not None and size > max_message_bytes:
            raise RecordTooLargeError(
                f"batch at byte {pos} is {size} bytes, above max.message.bytes {max_message_bytes}"
            )
        if delta < 0 or count > delta + 1 or (count != delta + 1 and not cleaned):
            raise CorruptRecordBatchError(
                f"batch at byte {pos} declares {count} records but last offset delta {delta}"
            )
        if check_crc and crc32c.crc32c(view[pos + CRC_START : pos + size]) != crc:
            raise crc_error(pos)
        batches.append(
            ValidatedBatch(
                pos, size, base, delta, epoch, max_ts, count, pid, p_epoch, seq, crc, attrs
            )
        )
        pos += size
    return batches, pos


def crc_error(position: int) -> CorruptRecordBatchError:
    return CorruptRecordBatchError(f"batch at byte {position} fails its CRC-32C check")


def check_crcs(view: memoryview, batches: list[ValidatedBatch]) -> None:
    """The CRC-32C check ``validate_batches(check_crc=False)`` left out, in this thread."""
    for b in batches:
        if crc32c.crc32c(view[b.position + CRC_START : b.position + b.size]) != b.crc:
            raise crc_error(b.position)


def leader_marker(view: memoryview, batch: ValidatedBatch, *, crc_checked: bool) -> EndTxnMarker:
    """The transaction marker of a leader's control batch with a producer id (rule 9);
    INVALID_RECORD when it is not one (Kafka's ``EndTransactionMarker.deserialize``)."""
    pos = batch.position
    if not crc_checked and crc32c.crc32c(view[pos + CRC_START : pos + batch.size]) != batch.crc:
        raise crc_error(pos)  # the record is read below: check its bytes first
    marker = parse_end_txn_marker(view, pos)
    if marker is None:
        raise CorruptRecordBatchError(
            f"control batch at byte {pos} of producer {batch.producer_id} is not a "
            "transaction marker (one uncompressed COMMIT or ABORT record)",
            ErrorCode.INVALID_RECORD,
        )
    return marker


def follower_marker(
    view: memoryview, batch: ValidatedBatch, *, crc_checked: bool, topic_partition: TopicPartition
) -> EndTxnMarker | None:
    """A follower's control batch with a producer id: its marker, or None (ignored, rule
    9) when the leader accepted something else. A CRC left to the write is checked
    first: the record is read here."""
    pos = batch.position
    if not crc_checked and crc32c.crc32c(view[pos + CRC_START : pos + batch.size]) != batch.crc:
        raise crc_error(pos)
    marker = parse_end_txn_marker(view, pos)
    if marker is None:
        logger.warning(
            "%s: control batch at offset %d of producer %d is not a transaction marker; "
            "it does not change the producer state",
            topic_partition,
            batch.base_offset,
            batch.producer_id,
        )
    return marker


def validate_compressed(
    records: bytes | bytearray | memoryview,
    batches: list[ValidatedBatch],
    config: LogConfig,
    *,
    parallel_crc: bool,
) -> tuple[bytes | bytearray | memoryview, list[ValidatedBatch], int, bool]:
    """Rule 1b: the leader's compressed batches, and every batch of a log whose
    compression.type recompresses, go through ``tidelog.storage.log_validator`` (CRC-32C
    first: what is decompressed is what the client sent). Returns the records to write
    (rebuilt batches replacing their originals), their batches, their size, and whether
    CRC-32Cs are still to be checked beside the write."""
    compression_type = config.compression_type
    deep = [b for b in batches if needs_validation(b.attributes, compression_type)]
    if not deep:
        return records, batches, batches[-1].position + batches[-1].size, parallel_crc
    view = memoryview(records)
    if parallel_crc:
        check_crcs(view, batches)
    bound = max_decompressed_bytes(config.max_message_bytes)
    levels = CompressionLevels(
        gzip=config.compression_gzip_level,
        lz4=config.compression_lz4_level,
        zstd=config.compression_zstd_level,
    )
    rebuilt: dict[int, bytes] = {}
    for b in deep:
        new = validate_batch(
            view[b.position : b.position + b.size],
            compression_type=compression_type,
            max_decompressed=bound,
            position=b.position,
            levels=levels,
        )
        if new is not None:
            rebuilt[b.position] = new
    if not rebuilt:
        return records, batches, batches[-1].position + batches[-1].size, False
    joined = b"".join(
        rebuilt.get(b.position) or view[b.position : b.position + b.size] for b in batches
    )
    # Rule 1b's rebuilt batches may have grown past max.message.bytes (Kafka re-checks
    # sizes after recompression); their CRC-32Cs are new, the others' were checked.
    new_batches, total = validate_batches(
        joined,
        max_message_bytes=config.max_message_bytes,
        allow_partial_tail=False,
        check_crc=False,
    )
    return joined, new_batches, total, False


def check_append_size(total: int, config: LogConfig) -> None:
    """An append larger than a whole segment is refused (RECORD_LIST_TOO_LARGE)."""
    if total > config.segment_bytes:
        raise RecordTooLargeError(
            f"{total} bytes in one append exceed segment.bytes {config.segment_bytes}",
            ErrorCode.RECORD_LIST_TOO_LARGE,
        )


def validate_leader_append(
    records: bytes | bytearray | memoryview,
    config: LogConfig,
    *,
    parallel_crc: bool,
    now_ms: int = -1,
) -> tuple[bytes | bytearray | memoryview, list[ValidatedBatch], int, bool]:
    """Rule 1: every batch of a leader append is validated before any is written (its
    CRC-32C beside the write when ``parallel_crc``: rule 1a, then the last value stays
    True); rule 1b for compressed batches, which may replace ``records``. Also the append's
    size limit, and its timestamps at ``now_ms`` (``tidelog.storage.log_timestamps``: a
    LogAppendTime topic's batches are stamped, a copy of ``records``). Returns the records
    to write, their batches, their size and whether CRC-32Cs are still to be checked."""
    batches, total = validate_batches(
        records,
        max_message_bytes=config.max_message_bytes,
        allow_partial_tail=False,
        check_crc=not parallel_crc,
    )
    if not batches:
        return records, batches, total, parallel_crc
    if config.compression_type != "producer" or any(
        b.attributes & COMPRESSION_MASK for b in batches
    ):
        records, batches, total, parallel_crc = validate_compressed(
            records, batches, config, parallel_crc=parallel_crc
        )
    check_append_size(total, config)
    if config.log_append_time:
        if parallel_crc:
            check_crcs(memoryview(records), batches)  # stamped is what the client sent
        records, batches = _stamp(records, batches, now_ms)
        parallel_crc = False
    elif has_timestamp_window(config):
        check_create_times(
            memoryview(records),
            [(b.position, b.size) for b in batches],
            config,
            now_ms,
            max_decompressed_bytes(config.max_message_bytes),
        )
    return records, batches, total, parallel_crc


def _stamp(
    records: bytes | bytearray | memoryview, batches: list[ValidatedBatch], now_ms: int
) -> tuple[bytearray, list[ValidatedBatch]]:
    """``log_timestamps`` rule 1 on a copy of ``records`` (the client's buffer stays)."""
    buffer = bytearray(records)
    stamped = []
    for b in batches:
        attributes, crc = stamp_log_append_time(buffer, (b.position, b.size), now_ms)
        stamped.append(b._replace(attributes=attributes, crc=crc, max_timestamp=now_ms))
    return buffer, stamped


def validate_follower_append(
    records: bytes | bytearray | memoryview, config: LogConfig, *, parallel_crc: bool
) -> tuple[list[ValidatedBatch], int]:
    """Rule 1 for a follower append: the leader's batches are validated as the leader's
    own (their CRC-32C beside the write when ``parallel_crc``, rule 1a), without its
    per-batch size limit; a trailing incomplete batch is left out, and a compacted log's
    batches may skip offsets. Also the append's size limit."""
    batches, total = validate_batches(
        records,
        max_message_bytes=None,
        allow_partial_tail=True,
        check_crc=not parallel_crc,
        cleaned=config.compact,
    )
    if batches:
        check_append_size(total, config)
    return batches, total


__all__ = [
    "COMPRESSION_MASK",
    "CONTROL_FLAG",
    "HEADER",
    "TRANSACTIONAL_FLAG",
    "ValidatedBatch",
    "check_append_size",
    "check_crcs",
    "crc_error",
    "follower_marker",
    "leader_marker",
    "validate_batches",
    "validate_compressed",
    "validate_follower_append",
    "validate_leader_append",
]
