"""Exceptions of the storage layer.

Hierarchy (``KafkaError`` subclasses carry the ``ErrorCode`` a client should see)::

    TidelogError
     └── StorageError                     root of everything tidelog.storage raises on purpose
          ├── CorruptCheckpointError       a checkpoint / metadata file is malformed (names it)
          ├── OffsetOutOfRangeError        + KafkaError(OFFSET_OUT_OF_RANGE): read outside
          │                                  [log_start_offset, log_end_offset]
          ├── UnexpectedAppendOffsetError  + KafkaError(OFFSET_OUT_OF_RANGE): a follower append
          │                                  that does not continue at log_end_offset
          ├── RecordTooLargeError          + KafkaError(MESSAGE_TOO_LARGE / RECORD_LIST_TOO_LARGE)
          ├── InvalidTimestampError        + KafkaError(INVALID_TIMESTAMP): CreateTimes outside
          │                                  the topic's KIP-937 window, per record (KIP-467)
          ├── InconsistentTopicIdError     + KafkaError(INCONSISTENT_TOPIC_ID): partition.metadata
          │                                  names another topic id
          └── CorruptLogError              + KafkaError(KAFKA_STORAGE_ERROR): flushed data (below
                                             the recovery point) failed validation; names the
                                             file, byte position and offset

Bad batches offered for append raise ``tidelog.protocol.records.CorruptRecordBatchError``
(CORRUPT_MESSAGE) before anything is written.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from tidelog.errors import ErrorCode, KafkaError, TidelogError


class StorageError(TidelogError):
    """Root of the storage layer's exceptions."""


class CorruptCheckpointError(StorageError):
    """A checkpoint or partition.metadata file cannot be parsed."""

    def __init__(self, path: Path, message: str) -> None:
        super().__init__(f"{path}: {message}")
        self.path = path


class OffsetOutOfRangeError(StorageError, KafkaError):
    """The requested offset lies outside ``[log_start_offset, log_end_offset]``."""

    def __init__(self, message: str) -> None:
        KafkaError.__init__(self, ErrorCode.OFFSET_OUT_OF_RANGE, message)


class UnexpectedAppendOffsetError(StorageError, KafkaError):
    """A follower append whose batches do not continue exactly at the log end offset."""

    def __init__(self, message: str, *, first_offset: int, log_end_offset: int) -> None:
        KafkaError.__init__(self, ErrorCode.OFFSET_OUT_OF_RANGE, message)
        self.first_offset = first_offset
        self.log_end_offset = log_end_offset


class RecordTooLargeError(StorageError, KafkaError):
    """A batch above ``max.message.bytes`` or an append above ``segment.bytes``."""

    def __init__(self, message: str, code: ErrorCode = ErrorCode.MESSAGE_TOO_LARGE) -> None:
        KafkaError.__init__(self, code, message)


class InvalidTimestampError(StorageError, KafkaError):
    """Records whose CreateTime lies outside the topic's KIP-937 window
    (``tidelog.storage.log_timestamps`` rule 2). ``message`` is the whole append's, as
    Kafka's ``RecordValidationException`` answers it; ``record_errors`` are the offending
    records of one batch, ``(index in the batch, message)`` (KIP-467)."""

    def __init__(self, message: str, record_errors: Sequence[tuple[int, str]] = ()) -> None:
        KafkaError.__init__(self, ErrorCode.INVALID_TIMESTAMP, message)
        self.message = message
        self.record_errors = tuple(record_errors)


class CorruptLogError(StorageError, KafkaError):
    """Data that was already flushed (below the recovery point) is corrupt.

    Recovery never truncates flushed data silently: the log is refused and the operator told
    which file, byte position and offset failed.
    """

    def __init__(self, path: Path, position: int, offset: int, reason: str) -> None:
        KafkaError.__init__(
            self,
            ErrorCode.KAFKA_STORAGE_ERROR,
            f"{path} is corrupt at byte {position} (offset {offset}): {reason}",
        )
        self.path = path
        self.position = position
        self.offset = offset


class InconsistentTopicIdError(StorageError, KafkaError):
    """The partition directory belongs to a topic with another id (a deleted namesake)."""

    def __init__(self, message: str) -> None:
        KafkaError.__init__(self, ErrorCode.INCONSISTENT_TOPIC_ID, message)
