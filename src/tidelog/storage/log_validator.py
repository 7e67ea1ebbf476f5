"""The leader's validation of compressed batches and its recompression (Kafka's
``LogValidator.validateMessagesAndAssignOffsetsCompressed``).

Uncompressed batches stored uncompressed never come here: the append path checks their
header and CRC and writes them (``tidelog.storage.log`` rule 1, docs/design.md "Speed"). A batch
comes here when a leader appends it and its codec or the log's ``compression.type`` is not
"none" (followers store the leader's bytes unchecked, as Kafka's followers do). Its CRC-32C
has been checked first, so what is decompressed is what the client sent.

Rules, in order:
  1. The target codec is the batch's own under ``compression.type=producer``, else the one
     the setting names (``uncompressed`` = none; Kafka's ``BrokerCompressionType``). A
     control batch (transaction marker) keeps its codec: markers are never recompressed
     ("Do not compress control records unless they are written compressed").
  2. The records are decompressed with a bound: a batch whose records take more than
     ``max_decompressed_bytes(max.message.bytes)`` is refused with RECORD_LIST_TOO_LARGE
     after at most about that many bytes were produced (Kafka has no such bound; without
     one a few KiB of zstd could make the broker allocate gigabytes). A stream that is not
     a whole, well-formed stream of its codec is refused with CORRUPT_MESSAGE.
  3. The records are walked (``tidelog.storage.record_scan.check_records``): exactly
     ``recordsCount`` records, each as long as it says, nothing after the last. A breach is
     CORRUPT_MESSAGE. (Kafka answers INVALID_RECORD for some of these; a batch whose
     compressed body does not hold what its header declares is corrupt to the client.)
  4. Offset deltas must be 0..n-1; Kafka does not refuse a batch whose deltas are not
     ("Some older clients do not implement the V1 internal offsets correctly. Historically
     the broker handled this by rewriting the batches rather than rejecting the request")
     but rewrites it, and so does this module: its records get deltas 0..n-1.
  5. When the target codec differs from the batch's (or rule 4 rewrote records) the batch
     is rebuilt: the same header fields (base offset, partition leader epoch, last offset
     delta, base and max timestamps, producer id, epoch and base sequence, record count,
     timestamp type, transactional and control bits: the idempotence and transaction state
     of ``producer_state`` sees the same batch), the records compressed with the target
     codec, attributes carrying it, a new batch length and a new CRC-32C. The record bytes
     themselves are kept (their timestamps are deltas from the kept base timestamp).
     Kafka's rebuild (``buildRecordsAndAssignOffsets``) keeps the same fields.
  6. A rebuilt batch larger than ``max.message.bytes`` is refused with MESSAGE_TOO_LARGE by
     the append path, which checks it again (Kafka: "re-validate message sizes if there's a
     possibility that they have changed (due to re-compression ...)").
"""

from __future__ import annotations

import struct
from typing import Final

import crc32c

from tidelog.errors import ErrorCode
from tidelog.protocol.records import (
    BATCH_HEADER_SIZE,
    CRC_START,
    LOG_OVERHEAD,
    Compression,
    CorruptRecordBatchError,
)
from tidelog.storage.compression import (
    DEFAULT_LEVELS,
    CodecError,
    CompressionLevels,
    DecompressedTooLargeError,
    codec_name,
    compress,
    decompress,
    target_codec,
)
from tidelog.storage.errors import RecordTooLargeError
from tidelog.storage.record_scan import (
    RecordFormatError,
    check_records,
    encode_records,
    iter_records,
)

#: Rule 2: the records of one batch may decompress to this many times max.message.bytes,
#: and never less than ``_MIN_DECOMPRESSED_BYTES``.
DECOMPRESSED_FACTOR: Final = 64
_MIN_DECOMPRESSED_BYTES: Final = 64 << 20
_CONTROL_FLAG: Final = 0x20
_COMPRESSION_MASK: Final = 0x07
_BATCH_LENGTH: Final = struct.Struct(">i")
_ATTRIBUTES: Final = struct.Struct(">h")
_CRC: Final = struct.Struct(">I")
_ATTRIBUTES_AT: Final = 21
_RECORDS_COUNT: Final = struct.Struct(">i")
_RECORDS_COUNT_AT: Final = 57


def max_decompressed_bytes(max_message_bytes: int) -> int:
    """Rule 2's bound for a log whose ``max.message.bytes`` is ``max_message_bytes``."""
    return max(_MIN_DECOMPRESSED_BYTES, DECOMPRESSED_FACTOR * max_message_bytes)


def needs_validation(attributes: int, compression_type: str) -> bool:
    """Whether a batch with ``attributes`` goes through ``validate_batch`` (rule 1)."""
    codec = attributes & _COMPRESSION_MASK
    if attributes & _CONTROL_FLAG:
        return codec != Compression.NONE
    return codec != Compression.NONE or target_codec(compression_type, codec) != codec


def validate_batch(
    batch: bytes | memoryview,
    *,
    compression_type: str,
    max_decompressed: int,
    position: int = 0,
    levels: CompressionLevels = DEFAULT_LEVELS,
) -> bytes | None:
    """Rules 1-5 for ONE whole batch whose header and CRC-32C were checked. Returns the
    rebuilt batch, or None when the batch is stored as sent. Raises
    ``CorruptRecordBatchError`` (CORRUPT_MESSAGE) or ``RecordTooLargeError``
    (RECORD_LIST_TOO_LARGE); ``position`` (the batch's byte in the request) goes into the
    message."""
    view = memoryview(batch)
    (attributes,) = _ATTRIBUTES.unpack_from(view, _ATTRIBUTES_AT)
    (count,) = _RECORDS_COUNT.unpack_from(view, _RECORDS_COUNT_AT)
    source = attributes & _COMPRESSION_MASK
    target = source if attributes & _CONTROL_FLAG else target_codec(compression_type, source)
    try:
        body = decompress(source, view[BATCH_HEADER_SIZE:], max_bytes=max_decompressed)
    except DecompressedTooLargeError as exc:
        raise RecordTooLargeError(
            f"batch at byte {position}: {exc} (the bound is {DECOMPRESSED_FACTOR} x "
            "max.message.bytes)",
            ErrorCode.RECORD_LIST_TOO_LARGE,
        ) from None
    except CodecError as exc:
        raise CorruptRecordBatchError(
            f"batch at byte {position} does not decompress ({exc})"
        ) from None
    try:
        in_order = check_records(body, count)
    except RecordFormatError as exc:
        raise CorruptRecordBatchError(
            f"{codec_name(source)} batch at byte {position} is malformed: {exc}"
        ) from None
    if in_order and target == source:
        return None
    if not in_order:
        body = encode_records(
            r._replace(offset_delta=i) for i, r in enumerate(iter_records(body, count))
        )
    return rebuild_batch(view, body, target, levels)


def rebuild_batch(
    batch: bytes | memoryview,
    records: bytes,
    codec: int,
    levels: CompressionLevels = DEFAULT_LEVELS,
) -> bytes:
    """Rule 5: ``batch``'s header over ``records`` (uncompressed) compressed with ``codec``
    at ``levels`` (KIP-390)."""
    header = bytearray(memoryview(batch)[:BATCH_HEADER_SIZE])
    payload = compress(codec, records, levels)
    _BATCH_LENGTH.pack_into(header, 8, BATCH_HEADER_SIZE - LOG_OVERHEAD + len(payload))
    (attributes,) = _ATTRIBUTES.unpack_from(header, _ATTRIBUTES_AT)
    _ATTRIBUTES.pack_into(
        header, _ATTRIBUTES_AT, (attributes & ~_COMPRESSION_MASK) | (codec & _COMPRESSION_MASK)
    )
    crc = crc32c.crc32c(bytes(header[CRC_START:]))
    crc = crc32c.crc32c(payload, crc)
    _CRC.pack_into(header, 17, crc)
    return bytes(header) + payload


#: Kafka's message for a keyless record sent to a compacted topic (INVALID_RECORD).
MISSING_KEY: Final = "Compacted topic cannot accept message without key"


def missing_key(batch: bytes | memoryview, max_decompressed: int) -> str | None:
    """``MISSING_KEY`` when a record of ONE whole data batch for a compacted topic has a
    null key (Kafka's ``LogValidator.validateKey``: the leader refuses the append with
    INVALID_RECORD), else None. Raises ``CorruptRecordBatchError`` for a body that does not
    hold its records (compressed ones were checked by ``validate_batch`` already)."""
    view = memoryview(batch)
    (attributes,) = _ATTRIBUTES.unpack_from(view, _ATTRIBUTES_AT)
    (count,) = _RECORDS_COUNT.unpack_from(view, _RECORDS_COUNT_AT)
    try:
        body = decompress(
            attributes & _COMPRESSION_MASK, view[BATCH_HEADER_SIZE:], max_bytes=max_decompressed
        )
        if any(record.key is None for record in iter_records(bytes(body), count)):
            return MISSING_KEY
    except (CodecError, RecordFormatError) as exc:
        raise CorruptRecordBatchError(f"batch is malformed: {exc}") from None
    return None
