"""Control-plane messages kio lacks: LeaderAndIsr (4), StopReplica (5), UpdateMetadata (6),
ControlledShutdown (7).

Kafka 4 removed these (KRaft replaced them); tidelog's ZooKeeper-era controller needs them
(docs/design.md rule 10, 12). They keep Kafka's names and fields, trimmed to what tidelog uses, as
version 0 of each API, non-flexible: request header v1, response header v0, legacy
(int16-length) strings and (int32-count) arrays, on the same framing as everything else.
``partition_epoch`` is Kafka's ``zkVersion`` under its KRaft-era name (the partition state
znode's version, bumped by every leader/ISR change).

Each message is a frozen slotted dataclass whose fields carry their wire type in
``metadata["wire"]``; ``encode()`` writes the body and ``read(buf, pos)`` returns
``(message, bytes consumed)`` like kio's readers, refusing truncated input and lengths
beyond the buffer with ``ControlDecodeError``.
"""

from __future__ import annotations

import dataclasses
import struct
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Final, Self, TypeVar

CONTROL_API_KEYS: Final = frozenset({4, 5, 6, 7})

_STRUCTS: Final = {
    "i8": struct.Struct(">b"),
    "i16": struct.Struct(">h"),
    "i32": struct.Struct(">i"),
    "i64": struct.Struct(">q"),
    "bool": struct.Struct(">?"),
}
_I16 = _STRUCTS["i16"]
_I32 = _STRUCTS["i32"]


class ControlDecodeError(ValueError):
    """A control message does not fit its schema."""


def _wire(kind: Any, **kwargs: Any) -> Any:
    return field(metadata={"wire": kind}, **kwargs)


def _encode_value(kind: Any, value: Any, out: list[bytes]) -> None:
    if isinstance(kind, str):
        if kind in _STRUCTS:
            out.append(_STRUCTS[kind].pack(value))
        elif kind in ("str", "nstr"):
            if value is None:
                if kind == "str":
                    raise ValueError("non-nullable string is None")
                out.append(_I16.pack(-1))
            else:
                data = value.encode()
                out.append(_I16.pack(len(data)))
                out.append(data)
        elif kind == "uuid":
            out.append(value.bytes)
        else:
            raise AssertionError(kind)
    elif isinstance(kind, tuple):
        _array, item = kind
        out.append(_I32.pack(len(value)))
        for element in value:
            _encode_value(item, element, out)
    else:
        _encode_struct(value, out)


def _encode_struct(obj: Any, out: list[bytes]) -> None:
    for f in dataclasses.fields(obj):
        _encode_value(f.metadata["wire"], getattr(obj, f.name), out)


def _need(buf: bytes, pos: int, size: int) -> None:
    if size > len(buf) - pos:
        raise ControlDecodeError(f"needs {size} bytes at {pos}, {len(buf) - pos} remain")


def _read_value(kind: Any, buf: bytes, pos: int) -> tuple[Any, int]:
    if isinstance(kind, str):
        s = _STRUCTS.get(kind)
        if s is not None:
            _need(buf, pos, s.size)
            return s.unpack_from(buf, pos)[0], pos + s.size
        if kind in ("str", "nstr"):
            _need(buf, pos, 2)
            (length,) = _I16.unpack_from(buf, pos)
            pos += 2
            if length == -1 and kind == "nstr":
                return None, pos
            if length < 0:
                raise ControlDecodeError(f"bad string length {length}")
            _need(buf, pos, length)
            try:
                return buf[pos : pos + length].decode(), pos + length
            except UnicodeDecodeError as exc:
                raise ControlDecodeError(f"string is not UTF-8: {exc}") from None
        if kind == "uuid":
            _need(buf, pos, 16)
            return uuid.UUID(bytes=bytes(buf[pos : pos + 16])), pos + 16
        raise AssertionError(kind)
    if isinstance(kind, tuple):
        _array, item = kind
        _need(buf, pos, 4)
        (count,) = _I32.unpack_from(buf, pos)
        pos += 4
        if count < 0 or count > len(buf) - pos:
            raise ControlDecodeError(f"array of {count} items, {len(buf) - pos} bytes remain")
        items = []
        for _ in range(count):
            value, pos = _read_value(item, buf, pos)
            items.append(value)
        return tuple(items), pos
    return _read_struct(kind, buf, pos)


S = TypeVar("S")


def _read_struct(cls: type[S], buf: bytes, pos: int) -> tuple[S, int]:
    values = {}
    for f in dataclasses.fields(cls):  # type: ignore[arg-type]
        values[f.name], pos = _read_value(f.metadata["wire"], buf, pos)
    return cls(**values), pos


class ControlMessage:
    """Base of the control requests and responses (encode/read like a kio entity)."""

    __slots__ = ()
    __api_key__: ClassVar[int]
    __version__: ClassVar[int] = 0
    __flexible__: ClassVar[bool] = False

    def encode(self) -> bytes:
        out: list[bytes] = []
        _encode_struct(self, out)
        return b"".join(out)

    @classmethod
    def read(cls, buf: bytes, pos: int = 0) -> tuple[Self, int]:
        start = pos
        message, pos = _read_struct(cls, buf, pos)
        return message, pos - start

    @classmethod
    def decode(cls, buf: bytes) -> Self:
        message, size = cls.read(buf, 0)
        if size != len(buf):
            raise ControlDecodeError(f"{len(buf) - size} bytes left after {cls.__name__}")
        return message


# --- LeaderAndIsr (4) ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class LeaderAndIsrPartitionState:
    topic_name: str = _wire("str")
    partition_index: int = _wire("i32")
    controller_epoch: int = _wire("i32")
    leader: int = _wire("i32")
    leader_epoch: int = _wire("i32")
    isr: tuple[int, ...] = _wire(("array", "i32"))
    partition_epoch: int = _wire("i32")
    replicas: tuple[int, ...] = _wire(("array", "i32"))
    is_new: bool = _wire("bool", default=False)


@dataclass(frozen=True, slots=True, kw_only=True)
class TopicIdEntry:
    topic_name: str = _wire("str")
    topic_id: uuid.UUID = _wire("uuid")  # noqa: RUF009 (a field(), no default)


@dataclass(frozen=True, slots=True, kw_only=True)
class LeaderAndIsrLiveLeader:
    broker_id: int = _wire("i32")
    host_name: str = _wire("str")
    port: int = _wire("i32")


@dataclass(frozen=True, slots=True, kw_only=True)
class LeaderAndIsrRequest(ControlMessage):
    __api_key__: ClassVar[int] = 4
    controller_id: int = _wire("i32")
    controller_epoch: int = _wire("i32")
    broker_epoch: int = _wire("i64", default=-1)
    partition_states: tuple[LeaderAndIsrPartitionState, ...] = _wire(
        ("array", LeaderAndIsrPartitionState)
    )
    topic_ids: tuple[TopicIdEntry, ...] = _wire(("array", TopicIdEntry), default=())
    live_leaders: tuple[LeaderAndIsrLiveLeader, ...] = _wire(("array", LeaderAndIsrLiveLeader))


@dataclass(frozen=True, slots=True, kw_only=True)
class PartitionError:
    topic_name: str = _wire("str")
    partition_index: int = _wire("i32")
    error_code: int = _wire("i16", default=0)


@dataclass(frozen=True, slots=True, kw_only=True)
class LeaderAndIsrResponse(ControlMessage):
    __api_key__: ClassVar[int] = 4
    error_code: int = _wire("i16", default=0)
    partition_errors: tuple[PartitionError, ...] = _wire(("array", PartitionError), default=())


# --- StopReplica (5) --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class StopReplicaPartition:
    topic_name: str = _wire("str")
    partition_index: int = _wire("i32")
    #: -1: no fencing; -2: the partition is being deleted (Kafka's sentinels).
    leader_epoch: int = _wire("i32", default=-1)
    delete_partition: bool = _wire("bool", default=False)


@dataclass(frozen=True, slots=True, kw_only=True)
class StopReplicaRequest(ControlMessage):
    __api_key__: ClassVar[int] = 5
    controller_id: int = _wire("i32")
    controller_epoch: int = _wire("i32")
    broker_epoch: int = _wire("i64", default=-1)
    partitions: tuple[StopReplicaPartition, ...] = _wire(("array", StopReplicaPartition))


@dataclass(frozen=True, slots=True, kw_only=True)
class StopReplicaResponse(ControlMessage):
    __api_key__: ClassVar[int] = 5
    error_code: int = _wire("i16", default=0)
    partition_errors: tuple[PartitionError, ...] = _wire(("array", PartitionError), default=())


# --- UpdateMetadata (6) -----------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class UpdateMetadataPartitionState:
    topic_name: str = _wire("str")
    partition_index: int = _wire("i32")
    controller_epoch: int = _wire("i32")
    leader: int = _wire("i32")
    leader_epoch: int = _wire("i32")
    isr: tuple[int, ...] = _wire(("array", "i32"))
    partition_epoch: int = _wire("i32")
    replicas: tuple[int, ...] = _wire(("array", "i32"))
    offline_replicas: tuple[int, ...] = _wire(("array", "i32"), default=())


@dataclass(frozen=True, slots=True, kw_only=True)
class UpdateMetadataEndpoint:
    """One advertised listener of a live broker (Kafka's UpdateMetadataEndpoint)."""

    listener: str = _wire("str")
    host: str = _wire("str")
    port: int = _wire("i32")
    security_protocol: str = _wire("str")


@dataclass(frozen=True, slots=True, kw_only=True)
class UpdateMetadataBroker:
    """``host``/``port``: the inter-broker listener's; ``endpoints``: every listener, so a
    client's Metadata names brokers on the listener it came in on (KIP-103)."""

    id: int = _wire("i32")
    host: str = _wire("str")
    port: int = _wire("i32")
    rack: str | None = _wire("nstr", default=None)
    endpoints: tuple[UpdateMetadataEndpoint, ...] = _wire(
        ("array", UpdateMetadataEndpoint), default=()
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class UpdateMetadataRequest(ControlMessage):
    __api_key__: ClassVar[int] = 6
    controller_id: int = _wire("i32")
    controller_epoch: int = _wire("i32")
    broker_epoch: int = _wire("i64", default=-1)
    partition_states: tuple[UpdateMetadataPartitionState, ...] = _wire(
        ("array", UpdateMetadataPartitionState)
    )
    live_brokers: tuple[UpdateMetadataBroker, ...] = _wire(("array", UpdateMetadataBroker))
    topic_ids: tuple[TopicIdEntry, ...] = _wire(("array", TopicIdEntry), default=())


@dataclass(frozen=True, slots=True, kw_only=True)
class UpdateMetadataResponse(ControlMessage):
    __api_key__: ClassVar[int] = 6
    error_code: int = _wire("i16", default=0)


# --- ControlledShutdown (7) -------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class RemainingPartition:
    topic_name: str = _wire("str")
    partition_index: int = _wire("i32")


@dataclass(frozen=True, slots=True, kw_only=True)
class ControlledShutdownRequest(ControlMessage):
    __api_key__: ClassVar[int] = 7
    broker_id: int = _wire("i32")
    broker_epoch: int = _wire("i64", default=-1)


@dataclass(frozen=True, slots=True, kw_only=True)
class ControlledShutdownResponse(ControlMessage):
    __api_key__: ClassVar[int] = 7
    error_code: int = _wire("i16", default=0)
    remaining_partitions: tuple[RemainingPartition, ...] = _wire(
        ("array", RemainingPartition), default=()
    )


REQUEST_TYPES: Final[Mapping[tuple[int, int], type[ControlMessage]]] = {
    (4, 0): LeaderAndIsrRequest,
    (5, 0): StopReplicaRequest,
    (6, 0): UpdateMetadataRequest,
    (7, 0): ControlledShutdownRequest,
}
RESPONSE_TYPES: Final[Mapping[tuple[int, int], type[ControlMessage]]] = {
    (4, 0): LeaderAndIsrResponse,
    (5, 0): StopReplicaResponse,
    (6, 0): UpdateMetadataResponse,
    (7, 0): ControlledShutdownResponse,
}
