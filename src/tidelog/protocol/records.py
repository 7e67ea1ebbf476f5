"""Record batch v2 (magic 2): the header, its validation, and the leader's offset stamping.

The broker never decodes individual records (docs/design.md "Speed"): a batch is opaque bytes plus
this 61-byte header. Layout (all big-endian)::

    offset  size  field
         0     8  baseOffset
         8     4  batchLength          bytes after this field (= total size - 12)
        12     4  partitionLeaderEpoch
        16     1  magic                must be 2
        17     4  crc                  CRC-32C of bytes [21, end)
        21     2  attributes           bits 0-2 compression, 3 timestamp type, 4 transactional,
                                       5 control
        23     4  lastOffsetDelta
        27     8  baseTimestamp
        35     8  maxTimestamp
        43     8  producerId
        51     2  producerEpoch
        53     4  baseSequence
        57     4  recordsCount
        61     .  records

Because the CRC covers only ``attributes`` onwards, the leader may rewrite ``baseOffset`` and
``partitionLeaderEpoch`` (replication rule 1) without recomputing it.
"""

from __future__ import annotations

import enum
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Final

import crc32c

from tidelog.errors import ErrorCode, KafkaError

#: baseOffset + batchLength: the part of a batch not counted by batchLength.
LOG_OVERHEAD: Final = 12
#: Size of the v2 batch header up to the first record.
BATCH_HEADER_SIZE: Final = 61
#: Where the CRC-covered region starts.
CRC_START: Final = 21
MAGIC_V2: Final = 2

_HEADER = struct.Struct(">qiibIhiqqqhii")
_OFFSET_AND_EPOCH = struct.Struct(">q")
_EPOCH = struct.Struct(">i")
_ATTRIBUTES = struct.Struct(">h")
_BATCH_LENGTH_AT = 8
_EPOCH_AT = 12
_MAGIC_AT = 16

NO_PRODUCER_ID: Final = -1


class Compression(enum.IntEnum):
    """The codec in attributes bits 0-2."""

    NONE = 0
    GZIP = 1
    SNAPPY = 2
    LZ4 = 3
    ZSTD = 4


class TimestampType(enum.IntEnum):
    CREATE_TIME = 0
    LOG_APPEND_TIME = 1


class CorruptRecordBatchError(KafkaError):
    """A batch's framing, magic or CRC is wrong (CORRUPT_MESSAGE unless said otherwise)."""

    def __init__(self, message: str, code: ErrorCode = ErrorCode.CORRUPT_MESSAGE) -> None:
        super().__init__(code, message)


@dataclass(frozen=True, slots=True, kw_only=True)
class BatchHeader:
    """The decoded 61-byte v2 header of one batch."""

    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    records_count: int

    @property
    def size(self) -> int:
        """Bytes this batch occupies in a log or a request."""
        return self.batch_length + LOG_OVERHEAD

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.last_offset_delta + 1

    @property
    def compression(self) -> int:
        return self.attributes & 0x07

    @property
    def timestamp_type(self) -> TimestampType:
        return TimestampType((self.attributes >> 3) & 1)

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & 0x10)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & 0x20)


def parse_header(
    buf: bytes | bytearray | memoryview, pos: int = 0, *, whole: bool = True
) -> BatchHeader:
    """Decode the header of the batch at ``pos``; checks magic and length, not the CRC.

    ``whole=False`` accepts a buffer that ends inside the batch body (a reader that already
    knows the batch is complete on disk and fetched only its header).
    """
    if len(buf) - pos < BATCH_HEADER_SIZE:
        raise CorruptRecordBatchError(
            f"batch at byte {pos} is truncated: {len(buf) - pos} bytes, header needs "
            f"{BATCH_HEADER_SIZE}"
        )
    fields = _HEADER.unpack_from(buf, pos)
    header = BatchHeader(
        base_offset=fields[0],
        batch_length=fields[1],
        partition_leader_epoch=fields[2],
        magic=fields[3],
        crc=fields[4],
        attributes=fields[5],
        last_offset_delta=fields[6],
        base_timestamp=fields[7],
        max_timestamp=fields[8],
        producer_id=fields[9],
        producer_epoch=fields[10],
        base_sequence=fields[11],
        records_count=fields[12],
    )
    if header.magic != MAGIC_V2:
        # Message formats v0/v1 are not supported: clients that negotiate Produce v3+ send v2.
        raise CorruptRecordBatchError(
            f"batch at byte {pos} has magic {header.magic}; only magic 2 is supported",
            ErrorCode.UNSUPPORTED_FOR_MESSAGE_FORMAT
            if header.magic in (0, 1)
            else ErrorCode.CORRUPT_MESSAGE,
        )
    if header.batch_length < BATCH_HEADER_SIZE - LOG_OVERHEAD:
        raise CorruptRecordBatchError(
            f"batch at byte {pos} declares length {header.batch_length}, below the header size"
        )
    if whole and header.size > len(buf) - pos:
        raise CorruptRecordBatchError(
            f"batch at byte {pos} declares {header.size} bytes but only {len(buf) - pos} follow"
        )
    return header


def compute_crc(buf: bytes | bytearray | memoryview, pos: int, header: BatchHeader) -> int:
    """CRC-32C over the checksummed region of the batch at ``pos``."""
    view = memoryview(buf)[pos + CRC_START : pos + header.size]
    return int(crc32c.crc32c(view))


def iter_batches(
    buf: bytes | bytearray | memoryview, *, verify_crc: bool = True
) -> Iterator[tuple[int, BatchHeader]]:
    """Yield ``(position, header)`` for each batch of a buffer that must hold whole batches.

    Raises ``CorruptRecordBatchError`` at the first batch that is truncated, has the wrong
    magic, or (with ``verify_crc``) a CRC that does not match.
    """
    pos = 0
    end = len(buf)
    while pos < end:
        header = parse_header(buf, pos)
        if verify_crc and compute_crc(buf, pos, header) != header.crc:
            raise CorruptRecordBatchError(f"batch at byte {pos} fails its CRC-32C check")
        yield pos, header
        pos += header.size


def read_batch_size(buf: bytes | bytearray | memoryview, pos: int) -> int | None:
    """Size of the batch at ``pos`` from its length field, or None if fewer than 17 bytes."""
    if len(buf) - pos < _MAGIC_AT + 1:
        return None
    (length,) = _EPOCH.unpack_from(buf, pos + _BATCH_LENGTH_AT)
    return int(length) + LOG_OVERHEAD


def stamp_batch(buf: bytearray | memoryview, pos: int, base_offset: int, leader_epoch: int) -> None:
    """Rewrite baseOffset and partitionLeaderEpoch of the batch at ``pos`` in place.

    Both fields lie before the CRC-covered region, so the stored CRC stays valid (rule 1).
    """
    _OFFSET_AND_EPOCH.pack_into(buf, pos, base_offset)
    _EPOCH.pack_into(buf, pos + _EPOCH_AT, leader_epoch)


def uses_codec(buf: bytes | bytearray | memoryview, codec: int) -> bool:
    """Whether a batch of ``buf`` declares ``codec`` in its attributes; stops quietly at the
    first batch whose framing is broken (the append reports that). For the version checks
    of KIP-110 (zstd needs Produce v7), off the path of current clients."""
    pos = 0
    end = len(buf)
    while end - pos >= BATCH_HEADER_SIZE:
        size = read_batch_size(buf, pos)
        if size is None or size < BATCH_HEADER_SIZE:
            return False
        (attributes,) = _ATTRIBUTES.unpack_from(buf, pos + CRC_START)
        if attributes & 0x07 == codec:
            return True
        pos += size
    return False
