"""What the group coordinator writes to ``__consumer_offsets``: Kafka's own key/value schemas.

Every record of the internal topic is one of two kinds, told apart by the key's version
(Kafka's ``GroupMetadataManager`` / ``group_coordinator`` message definitions, non-flexible
versions, big-endian, strings with an int16 length, bytes with an int32 length):

- offset commit, key version 0/1: ``group string, topic string, partition int32``;
  value version 3: ``offset int64, leader_epoch int32, metadata string,
  commit_timestamp int64``; a commit with an explicit expire timestamp (OffsetCommit v2-v4
  ``retention_time_ms``) is written as version 1, the only one with a field for it:
  ``offset int64, metadata string, commit_timestamp int64, expire_timestamp int64``
  (Kafka does the same; versions 0 and 2 are read too);
- group metadata, key version 2: ``group string``; value version 3: ``protocol_type string,
  generation int32, protocol nullable string, leader nullable string,
  current_state_timestamp int64, members [member_id string, group_instance_id nullable string,
  client_id string, client_host string, rebalance_timeout int32, session_timeout int32,
  subscription bytes, assignment bytes]``.

A record with a null value is a tombstone: the offset (or the whole group) is deleted. The
last record for a key wins, so replaying the partition from its start rebuilds the state.
Pure: bytes in, values out.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass

from tidelog.model import TopicPartition

_I8 = struct.Struct(">b")
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")

OFFSET_KEY_VERSION = 1
GROUP_KEY_VERSION = 2
OFFSET_VALUE_VERSION = 3
GROUP_VALUE_VERSION = 3


class RecordFormatError(ValueError):
    """A record of ``__consumer_offsets`` that is not in Kafka's format (skipped on load)."""


@dataclass(frozen=True, slots=True)
class OffsetAndMetadata:
    offset: int
    leader_epoch: int = -1
    metadata: str = ""
    commit_timestamp_ms: int = -1
    #: Explicit expiry (OffsetCommit v2-v4 ``retention_time_ms``, KIP-211's old semantics);
    #: -1: none, the broker's ``offsets.retention.minutes`` rules apply.
    expire_timestamp_ms: int = -1


@dataclass(frozen=True, slots=True)
class MemberRecord:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    subscription: bytes
    assignment: bytes


@dataclass(frozen=True, slots=True)
class GroupRecord:
    protocol_type: str
    generation_id: int
    protocol_name: str | None
    leader_id: str | None
    current_state_timestamp_ms: int
    members: tuple[MemberRecord, ...]


@dataclass(frozen=True, slots=True)
class OffsetKey:
    group_id: str
    tp: TopicPartition


@dataclass(frozen=True, slots=True)
class GroupKey:
    group_id: str


# --- writing --------------------------------------------------------------------------


def _string(value: str) -> bytes:
    raw = value.encode()
    return _I16.pack(len(raw)) + raw


def _nullable_string(value: str | None) -> bytes:
    return _I16.pack(-1) if value is None else _string(value)


def _bytes(value: bytes) -> bytes:
    return _I32.pack(len(value)) + value


def offset_key(group_id: str, tp: TopicPartition) -> bytes:
    return (
        _I16.pack(OFFSET_KEY_VERSION)
        + _string(group_id)
        + _string(tp.topic)
        + _I32.pack(tp.partition)
    )


def group_key(group_id: str) -> bytes:
    return _I16.pack(GROUP_KEY_VERSION) + _string(group_id)


def offset_value(value: OffsetAndMetadata) -> bytes:
    if value.expire_timestamp_ms >= 0:
        return (
            _I16.pack(1)
            + _I64.pack(value.offset)
            + _string(value.metadata)
            + _I64.pack(value.commit_timestamp_ms)
            + _I64.pack(value.expire_timestamp_ms)
        )
    return (
        _I16.pack(OFFSET_VALUE_VERSION)
        + _I64.pack(value.offset)
        + _I32.pack(value.leader_epoch)
        + _string(value.metadata)
        + _I64.pack(value.commit_timestamp_ms)
    )


def group_value(value: GroupRecord) -> bytes:
    parts = [
        _I16.pack(GROUP_VALUE_VERSION),
        _string(value.protocol_type),
        _I32.pack(value.generation_id),
        _nullable_string(value.protocol_name),
        _nullable_string(value.leader_id),
        _I64.pack(value.current_state_timestamp_ms),
        _I32.pack(len(value.members)),
    ]
    for m in value.members:
        parts += [
            _string(m.member_id),
            _nullable_string(m.group_instance_id),
            _string(m.client_id),
            _string(m.client_host),
            _I32.pack(m.rebalance_timeout_ms),
            _I32.pack(m.session_timeout_ms),
            _bytes(m.subscription),
            _bytes(m.assignment),
        ]
    return b"".join(parts)


# --- reading --------------------------------------------------------------------------


class RecordReader:
    """Reads Kafka's non-flexible big-endian fields; every malformation raises ``error``
    (the format error of the record kind being read)."""

    def __init__(self, buf: bytes, error: type[ValueError] = RecordFormatError) -> None:
        self.buf = buf
        self.pos = 0
        self.error = error

    def _take(self, n: int) -> bytes:
        if n < 0 or self.pos + n > len(self.buf):
            raise self.error("truncated record")
        out = self.buf[self.pos : self.pos + n]
        self.pos += n
        return out

    def i8(self) -> int:
        value: int = _I8.unpack(self._take(1))[0]
        return value

    def i16(self) -> int:
        value: int = _I16.unpack(self._take(2))[0]
        return value

    def i32(self) -> int:
        value: int = _I32.unpack(self._take(4))[0]
        return value

    def i64(self) -> int:
        value: int = _I64.unpack(self._take(8))[0]
        return value

    def nullable_string(self) -> str | None:
        n = self.i16()
        if n < 0:
            return None
        try:
            return self._take(n).decode()
        except UnicodeDecodeError as exc:
            raise self.error(str(exc)) from None

    def string(self) -> str:
        """A non-null string: a negative length is malformed."""
        n = self.i16()
        if n < 0:
            raise self.error(f"string length {n} (null string)")
        try:
            return self._take(n).decode()
        except UnicodeDecodeError as exc:
            raise self.error(str(exc)) from None

    def bytes_(self) -> bytes:
        n = self.i32()
        return b"" if n < 0 else self._take(n)

    def count(self, nullable: bool = False) -> int | None:
        """An array length; -1 is None when ``nullable``, any other negative malformed."""
        n = self.i32()
        if n == -1 and nullable:
            return None
        if n < 0:
            raise self.error(f"array length {n}")
        return n

    def end(self) -> None:
        if self.pos != len(self.buf):
            raise self.error(f"{len(self.buf) - self.pos} trailing bytes")


def decode_key(raw: bytes) -> OffsetKey | GroupKey:
    r = RecordReader(raw)
    version = r.i16()
    if version in (0, 1):
        group = r.string()
        topic = r.string()
        return OffsetKey(group, TopicPartition(topic, r.i32()))
    if version == GROUP_KEY_VERSION:
        return GroupKey(r.string())
    raise RecordFormatError(f"unknown key version {version}")


def decode_offset_value(raw: bytes) -> OffsetAndMetadata:
    r = RecordReader(raw)
    version = r.i16()
    if version not in (0, 1, 2, 3):
        raise RecordFormatError(f"unknown offset value version {version}")
    offset = r.i64()
    leader_epoch = r.i32() if version >= 3 else -1
    metadata = r.string()
    commit_ts = r.i64()
    expire_ts = r.i64() if version == 1 else -1
    return OffsetAndMetadata(offset, leader_epoch, metadata, commit_ts, expire_ts)


def decode_group_value(raw: bytes) -> GroupRecord:
    r = RecordReader(raw)
    version = r.i16()
    if version not in (0, 1, 2, 3):
        raise RecordFormatError(f"unknown group value version {version}")
    protocol_type = r.string()
    generation = r.i32()
    protocol = r.nullable_string()
    leader = r.nullable_string()
    state_ts = r.i64() if version >= 2 else -1
    members = []
    for _ in range(r.i32()):
        member_id = r.string()
        instance_id = r.nullable_string() if version >= 3 else None
        client_id = r.string()
        client_host = r.string()
        rebalance_timeout = r.i32() if version >= 1 else 0
        session_timeout = r.i32()
        subscription = r.bytes_()
        assignment = r.bytes_()
        members.append(
            MemberRecord(
                member_id,
                instance_id,
                client_id,
                client_host,
                rebalance_timeout or session_timeout,
                session_timeout,
                subscription,
                assignment,
            )
        )
    return GroupRecord(protocol_type, generation, protocol, leader, state_ts, tuple(members))


def subscribed_topics(protocol_type: str, subscription: bytes) -> Sequence[str] | None:
    """The topics of a ``consumer`` member's ConsumerProtocolSubscription (version int16,
    topics [string], ...), or None when it cannot be read (another protocol type)."""
    if protocol_type != "consumer":
        return None
    try:
        r = RecordReader(subscription)
        r.i16()
        return [r.string() for _ in range(r.i32())]
    except RecordFormatError:
        return None
