"""The timestamps of a leader append (Kafka's ``LogValidator`` for magic 2): the topic's
``message.timestamp.type`` and its KIP-937 CreateTime window.

Rules:
  1. LogAppendTime: the leader sets every batch's timestamp-type attribute bit (0x08) and
     its maxTimestamp to the append's time, and recomputes the batch's CRC-32C (Kafka's
     ``DefaultRecordBatch.setMaxTimestamp``). The records' own timestamps stay in the bytes;
     readers take maxTimestamp for every record of such a batch (KIP-32). The caller checks
     the CRC-32Cs first: what is stamped is what the client sent. The Produce answer's
     ``log_append_time_ms`` is that time (``tidelog.server.replica.manager``).
  2. CreateTime with a window: every record timestamp other than -1 (none) of a data batch
     must lie in [now - message.timestamp.before.max.ms, now + message.timestamp.after.max.ms],
     else the whole append is refused with INVALID_TIMESTAMP; nothing is written. As Kafka's
     ``LogValidator`` (``validateTimestamp``, ``processRecordErrors``), the batches are
     checked in order and the first one holding such records refuses the append with
     "One or more records have been rejected due to invalid timestamp" and one KIP-467
     record error per such record of it: its index in the batch and a message naming its
     timestamp, offset and the window (its bounds as Java longs: no upper bound prints
     now + Long.MAX_VALUE wrapped). Both bounds
     are Long.MAX_VALUE by default: then no record is decoded. Control batches (the
     broker's own transaction markers) are not checked.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from typing import Final

import crc32c

from tidelog.protocol.records import BATCH_HEADER_SIZE, CRC_START, CorruptRecordBatchError
from tidelog.protocol.varint import VarintError
from tidelog.storage.compression import CodecError, decompress
from tidelog.storage.errors import InvalidTimestampError
from tidelog.storage.log_config import NEVER, LogConfig
from tidelog.storage.record_scan import RecordFormatError, iter_records

#: attributes bit 3: the batch's timestamps are the broker's (LogAppendTime).
LOG_APPEND_TIME_FLAG: Final = 0x08
_CONTROL_FLAG: Final = 0x20
_COMPRESSION_MASK: Final = 0x07
_CRC: Final = struct.Struct(">I")
_ATTRIBUTES: Final = struct.Struct(">h")
_TIMESTAMP: Final = struct.Struct(">q")
_CRC_AT: Final = 17
_ATTRIBUTES_AT: Final = 21
_BASE_OFFSET_AT: Final = 0
_BASE_TIMESTAMP_AT: Final = 27
_MAX_TIMESTAMP_AT: Final = 35
_RECORDS_COUNT: Final = struct.Struct(">i")
_RECORDS_COUNT_AT: Final = 57
#: A record without a timestamp (Kafka's ``RecordBatch.NO_TIMESTAMP``).
NO_TIMESTAMP: Final = -1
#: Rule 2's answer for the whole append (Kafka's ``LogValidator.processRecordErrors``).
INVALID_TIMESTAMP_MESSAGE: Final = "One or more records have been rejected due to invalid timestamp"


def stamp_log_append_time(
    buffer: bytearray, batch: tuple[int, int], now_ms: int
) -> tuple[int, int]:
    """Rule 1 for the batch at ``(position, size)`` of ``buffer``, in place; returns its
    new ``(attributes, crc)``."""
    position, size = batch
    (attributes,) = _ATTRIBUTES.unpack_from(buffer, position + _ATTRIBUTES_AT)
    attributes |= LOG_APPEND_TIME_FLAG
    _ATTRIBUTES.pack_into(buffer, position + _ATTRIBUTES_AT, attributes)
    _TIMESTAMP.pack_into(buffer, position + _MAX_TIMESTAMP_AT, now_ms)
    crc = crc32c.crc32c(memoryview(buffer)[position + CRC_START : position + size])
    _CRC.pack_into(buffer, position + _CRC_AT, crc)
    return attributes, crc


def has_timestamp_window(config: LogConfig) -> bool:
    """Whether rule 2 has a bound to check."""
    return (
        config.message_timestamp_before_max_ms != NEVER
        or config.message_timestamp_after_max_ms != NEVER
    )


def _record_timestamps(batch: memoryview, bound: int) -> Iterator[tuple[int, int]]:
    """``(offset, CreateTime)`` of each record of one validated batch."""
    (attributes,) = _ATTRIBUTES.unpack_from(batch, _ATTRIBUTES_AT)
    (base_offset,) = _TIMESTAMP.unpack_from(batch, _BASE_OFFSET_AT)
    (base_timestamp,) = _TIMESTAMP.unpack_from(batch, _BASE_TIMESTAMP_AT)
    (count,) = _RECORDS_COUNT.unpack_from(batch, _RECORDS_COUNT_AT)
    body = decompress(attributes & _COMPRESSION_MASK, batch[BATCH_HEADER_SIZE:], max_bytes=bound)
    for record in iter_records(body, count):
        yield base_offset + record.offset_delta, base_timestamp + record.timestamp_delta


def _as_long(value: int) -> int:
    """``value`` as Kafka's Java long arithmetic prints it: now + Long.MAX_VALUE (no upper
    bound) wraps to a negative number."""
    return (value + 2**63) % 2**64 - 2**63


def check_create_times(
    view: memoryview, batches: list[tuple[int, int]], config: LogConfig, now_ms: int, bound: int
) -> None:
    """Rule 2 for the batches at ``(position, size)`` of ``view``; ``bound``: the largest
    decompressed body (the batches were validated, compressed ones decompressed once)."""
    earliest = now_ms - config.message_timestamp_before_max_ms
    latest = now_ms + config.message_timestamp_after_max_ms
    for position, size in batches:
        batch = view[position : position + size]
        (attributes,) = _ATTRIBUTES.unpack_from(batch, _ATTRIBUTES_AT)
        if attributes & _CONTROL_FLAG:
            continue
        record_errors: list[tuple[int, str]] = []
        try:
            for index, (offset, timestamp) in enumerate(_record_timestamps(batch, bound)):
                if timestamp != NO_TIMESTAMP and not earliest <= timestamp <= latest:
                    record_errors.append(
                        (
                            index,
                            f"Timestamp {timestamp} of message with offset {offset} is out of "
                            f"range. The timestamp should be within [{_as_long(earliest)}, "
                            f"{_as_long(latest)}]",
                        )
                    )
        except (CodecError, RecordFormatError, VarintError) as exc:
            raise CorruptRecordBatchError(f"batch at byte {position}: {exc}") from None
        if record_errors:
            raise InvalidTimestampError(INVALID_TIMESTAMP_MESSAGE, record_errors)


__all__ = [
    "INVALID_TIMESTAMP_MESSAGE",
    "LOG_APPEND_TIME_FLAG",
    "NO_TIMESTAMP",
    "check_create_times",
    "has_timestamp_window",
    "stamp_log_append_time",
]
