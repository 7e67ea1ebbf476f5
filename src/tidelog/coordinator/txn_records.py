"""What the transaction coordinator writes to ``__transaction_state``: Kafka's own schemas.

Every record is keyed by a transactional id (Kafka's ``TransactionLogKey`` /
``TransactionLogValue``, non-flexible version 0, big-endian, strings with an int16 length,
arrays with an int32 count):

- key, version 0: ``transactional_id string``;
- value, version 0: ``producer_id int64, producer_epoch int16, transaction_timeout_ms int32,
  transaction_status int8, transaction_partitions nullable [topic string,
  partition_ids [int32]], transaction_last_update_timestamp_ms int64,
  transaction_start_timestamp_ms int64``. The status is ``TxnState.code``; the partitions
  are null in state Empty (as Kafka writes them) and grouped by topic, sorted, otherwise.

Version 0 is written and the only version read; anything else (another version, a
truncated record, a negative length, trailing bytes, an unknown status) raises
``TxnRecordFormatError``, and the shell skips the record. A record with a null value is a
tombstone: the transactional id is gone; ``txn_record_value`` gives one for a Dead id (rule 14
of ``tidelog.coordinator.txn``: Kafka's ``removeExpiredTransactionalIds`` writes a null
value, never a Dead status). The last record for a key wins, so replaying the
partition from its start rebuilds the state (``apply_txn_record``). What is not in version 0
(``TxnMetadata.last_producer_id``/``last_producer_epoch``) reads back as -1. Pure: bytes in,
values out.
"""

from __future__ import annotations

import struct
from collections.abc import MutableMapping

from tidelog.coordinator import partition_for
from tidelog.coordinator.records import RecordReader
from tidelog.coordinator.txn import TxnMetadata, TxnState
from tidelog.model import TopicPartition

_I8 = struct.Struct(">b")
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")

TXN_KEY_VERSION = 0
TXN_VALUE_VERSION = 0


class TxnRecordFormatError(ValueError):
    """A record of ``__transaction_state`` that is not in Kafka's format (skipped on load)."""


def partition_for_txn(transactional_id: str, num_partitions: int) -> int:
    """The ``__transaction_state`` partition of a transactional id: Kafka's
    ``Utils.abs(transactionalId.hashCode) % transaction.state.log.num.partitions``, the same
    hash as a group's."""
    return partition_for(transactional_id, num_partitions)


# --- writing --------------------------------------------------------------------------


def _string(value: str) -> bytes:
    raw = value.encode()
    if len(raw) > 0x7FFF:
        raise ValueError(f"string of {len(raw)} bytes: longer than an int16 length allows")
    return _I16.pack(len(raw)) + raw


def encode_txn_key(transactional_id: str) -> bytes:
    return _I16.pack(TXN_KEY_VERSION) + _string(transactional_id)


def encode_txn_value(meta: TxnMetadata) -> bytes:
    parts = [
        _I16.pack(TXN_VALUE_VERSION),
        _I64.pack(meta.producer_id),
        _I16.pack(meta.producer_epoch),
        _I32.pack(meta.timeout_ms),
        _I8.pack(meta.state.code),
    ]
    if meta.state == TxnState.EMPTY:
        if meta.partitions:
            raise ValueError(f"{meta.transactional_id!r}: partitions in state Empty")
        parts.append(_I32.pack(-1))
    else:
        by_topic: dict[str, list[int]] = {}
        for tp in meta.partitions:
            by_topic.setdefault(tp.topic, []).append(tp.partition)
        parts.append(_I32.pack(len(by_topic)))
        for topic in sorted(by_topic):
            ids = sorted(by_topic[topic])
            parts += [_string(topic), _I32.pack(len(ids)), *(_I32.pack(i) for i in ids)]
    parts += [_I64.pack(meta.last_update_ms), _I64.pack(meta.txn_start_ms)]
    return b"".join(parts)


def txn_record_value(meta: TxnMetadata) -> bytes | None:
    """The value to write for ``meta``: None (a tombstone) when it is Dead."""
    return None if meta.state == TxnState.DEAD else encode_txn_value(meta)


# --- reading --------------------------------------------------------------------------


def _reader(raw: bytes) -> RecordReader:
    return RecordReader(raw, TxnRecordFormatError)


def decode_txn_key(raw: bytes) -> str:
    r = _reader(raw)
    version = r.i16()
    if version != TXN_KEY_VERSION:
        raise TxnRecordFormatError(f"unknown transaction key version {version}")
    txn_id = r.string()
    r.end()
    return txn_id


def decode_txn_value(transactional_id: str, raw: bytes) -> TxnMetadata:
    r = _reader(raw)
    version = r.i16()
    if version != TXN_VALUE_VERSION:
        raise TxnRecordFormatError(f"unknown transaction value version {version}")
    producer_id = r.i64()
    producer_epoch = r.i16()
    timeout_ms = r.i32()
    status = r.i8()
    try:
        state = TxnState.from_code(status)
    except ValueError as exc:
        raise TxnRecordFormatError(str(exc)) from None
    partitions: set[TopicPartition] = set()
    for _ in range(r.count(nullable=True) or 0):
        topic = r.string()
        for _ in range(r.count() or 0):
            partitions.add(TopicPartition(topic, r.i32()))
    last_update_ms = r.i64()
    txn_start_ms = r.i64()
    r.end()
    return TxnMetadata(
        transactional_id=transactional_id,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        timeout_ms=timeout_ms,
        state=state,
        partitions=frozenset(partitions),
        txn_start_ms=txn_start_ms,
        last_update_ms=last_update_ms,
    )


def apply_txn_record(
    state: MutableMapping[str, TxnMetadata], key: bytes, value: bytes | None
) -> None:
    """Replay one record into ``state`` (last record wins, a null value removes the id), as
    ``TxnManager.load`` expects it; ``TxnRecordFormatError`` leaves ``state`` unchanged."""
    txn_id = decode_txn_key(key)
    if value is None:
        state.pop(txn_id, None)
    else:
        state[txn_id] = decode_txn_value(txn_id, value)


__all__ = [
    "TXN_KEY_VERSION",
    "TXN_VALUE_VERSION",
    "TxnRecordFormatError",
    "apply_txn_record",
    "decode_txn_key",
    "decode_txn_value",
    "encode_txn_key",
    "encode_txn_value",
    "partition_for_txn",
    "txn_record_value",
]
