"""A structural pass over a request body, driven by kio's schema, before kio decodes it.

Why: kio's native decoder trusts length fields. A compact array whose length varint says
five billion makes it allocate that many slots up front, and a failed allocation *aborts
the process* (``tests/unit/protocol/test_decode_fuzz.py`` sends such bodies). Kafka refuses such
input ("tried to allocate a collection of size N, but there are only M bytes remaining").
This walk does the same: every length and count must fit in the bytes that remain, varints
are at most 5 bytes and fit an int32, and nothing runs past the end. Only then is the body
handed to kio.

It also implements the spec's rule that unknown tagged fields are skipped (kio raises
``KeyError`` on them): the walk records the tagged-field sections that hold unknown tags,
and ``check_body`` returns a copy of the body with those tags removed.

Cost: one Python step per field (not per byte: records are skipped by length), a few µs
for a Produce or Fetch request.
"""

from __future__ import annotations

import dataclasses
import struct
from collections.abc import Callable
from typing import Any, Final

from kio.serial._introspect import (
    EntityField,
    EntityTupleField,
    PrimitiveField,
    PrimitiveTupleField,
    classify_field,
    get_field_tag,
    get_schema_field_type,
    is_optional,
)

from tidelog.protocol.varint import VarintError, encode_uvarint, read_uvarint

_FIXED_SIZES: Final = {
    "int8": 1,
    "int16": 2,
    "int32": 4,
    "int64": 8,
    "uint8": 1,
    "uint16": 2,
    "uint32": 4,
    "uint64": 8,
    "float64": 8,
    "bool": 1,
    "uuid": 16,
    "error_code": 2,
    "timedelta_i32": 4,
    "timedelta_i64": 8,
    "datetime_i64": 8,
}
_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")
_INT32_MAX: Final = 2**31 - 1
_UINT32_MAX: Final = 2**32 - 1


class SchemaWalkError(ValueError):
    """The body does not fit its schema (lengths, truncation, varints)."""


# A step reads one field at ``pos`` and returns the position after it.
Step = Callable[[bytes, int, int, list[tuple[int, int, bytes]]], int]


def _uvarint(buf: bytes, pos: int, end: int) -> tuple[int, int]:
    """An unsigned varint that must fit 32 bits (Kafka's lengths and counts)."""
    if pos < end and buf[pos] < 0x80:  # the common case: one byte
        return buf[pos], pos + 1
    try:
        value, pos = read_uvarint(buf, pos, end)
    except VarintError as exc:
        raise SchemaWalkError(str(exc)) from None
    if value > _UINT32_MAX:
        raise SchemaWalkError(f"varint {value} does not fit 32 bits")
    return value, pos


def _fixed(size: int) -> Step:
    def step(buf: bytes, pos: int, end: int, edits: list[tuple[int, int, bytes]]) -> int:
        pos += size
        if pos > end:
            raise SchemaWalkError("field runs past the end")
        return pos

    return step


def _sized(length: int, pos: int, end: int) -> int:
    if length > end - pos:
        raise SchemaWalkError(f"length {length} exceeds the {end - pos} bytes that remain")
    return pos + length


def _string_step(kafka_type: str, flexible: bool) -> Step:
    if flexible:

        def compact(buf: bytes, pos: int, end: int, edits: list[tuple[int, int, bytes]]) -> int:
            length, pos = _uvarint(buf, pos, end)
            return pos if length == 0 else _sized(length - 1, pos, end)

        return compact
    if kafka_type == "string":

        def legacy_string(
            buf: bytes, pos: int, end: int, edits: list[tuple[int, int, bytes]]
        ) -> int:
            if end - pos < 2:
                raise SchemaWalkError("string length runs past the end")
            (length,) = _INT16.unpack_from(buf, pos)
            if length < -1:
                raise SchemaWalkError(f"negative string length {length}")
            return pos + 2 if length == -1 else _sized(length, pos + 2, end)

        return legacy_string

    def legacy_bytes(buf: bytes, pos: int, end: int, edits: list[tuple[int, int, bytes]]) -> int:
        if end - pos < 4:
            raise SchemaWalkError("bytes length runs past the end")
        (length,) = _INT32.unpack_from(buf, pos)
        if length < -1:
            raise SchemaWalkError(f"negative bytes length {length}")
        return pos + 4 if length == -1 else _sized(length, pos + 4, end)

    return legacy_bytes


def _primitive_step(kafka_type: str, flexible: bool) -> Step:
    size = _FIXED_SIZES.get(kafka_type)
    if size is not None:
        return _fixed(size)
    if kafka_type in ("string", "bytes", "records"):
        return _string_step(kafka_type, flexible)
    raise SchemaWalkError(f"no walker for kafka type {kafka_type!r}")


def _array_step(item: Step, flexible: bool) -> Step:
    def array(buf: bytes, pos: int, end: int, edits: list[tuple[int, int, bytes]]) -> int:
        if flexible:
            count, pos = _uvarint(buf, pos, end)
            count -= 1  # 0 = null
        else:
            if end - pos < 4:
                raise SchemaWalkError("array length runs past the end")
            (count,) = _INT32.unpack_from(buf, pos)
            pos += 4
            if count < -1:
                raise SchemaWalkError(f"negative array length {count}")
        # Every item takes at least one byte: a count above what remains is a lie.
        if count > end - pos:
            raise SchemaWalkError(f"array of {count} items but only {end - pos} bytes remain")
        for _ in range(count):
            pos = item(buf, pos, end, edits)
        return pos

    return array


def _nullable_entity_step(inner: Step) -> Step:
    def nullable(buf: bytes, pos: int, end: int, edits: list[tuple[int, int, bytes]]) -> int:
        if pos >= end:
            raise SchemaWalkError("struct marker runs past the end")
        marker = buf[pos]
        if marker == 0xFF:  # -1: null
            return pos + 1
        return inner(buf, pos + 1, end, edits)

    return nullable


def _field_step(field: dataclasses.Field[Any], flexible: bool, *, tagged: bool) -> Step:
    cls = classify_field(field)
    optional = False if tagged else is_optional(field)
    if isinstance(cls, PrimitiveField | PrimitiveTupleField):
        step = _primitive_step(get_schema_field_type(field), flexible)
    elif isinstance(cls, EntityField):
        step = entity_step(cls.type_)
        if optional:
            step = _nullable_entity_step(step)
    else:
        assert isinstance(cls, EntityTupleField)
        step = entity_step(cls.type_)
    if cls.is_array:
        step = _array_step(step, flexible)
    return step


_entity_steps: dict[type[Any], Step] = {}


def entity_step(schema: type[Any]) -> Step:
    """The walker for one kio entity class (built once, cached)."""
    cached = _entity_steps.get(schema)
    if cached is not None:
        return cached
    flexible = bool(schema.__flexible__)
    steps: list[Step] = []
    tagged: dict[int, Step] = {}

    def walk(buf: bytes, pos: int, end: int, edits: list[tuple[int, int, bytes]]) -> int:
        for step in steps:
            pos = step(buf, pos, end, edits)
        if not flexible:
            return pos
        return _walk_tagged(tagged, buf, pos, end, edits)

    # Register before building fields so recursive schemas terminate.
    _entity_steps[schema] = walk
    fixed_run = 0  # consecutive fixed-size fields are checked as one step
    for field in dataclasses.fields(schema):
        tag = get_field_tag(field)
        if tag is not None:
            tagged[tag] = _field_step(field, flexible, tagged=True)
            continue
        size = _fixed_size(field)
        if size is not None:
            fixed_run += size
            continue
        if fixed_run:
            steps.append(_fixed(fixed_run))
            fixed_run = 0
        steps.append(_field_step(field, flexible, tagged=False))
    if fixed_run:
        steps.append(_fixed(fixed_run))
    return walk


def _fixed_size(field: dataclasses.Field[Any]) -> int | None:
    """Size of a non-array primitive of fixed size, else None."""
    if not isinstance(classify_field(field), PrimitiveField):
        return None
    return _FIXED_SIZES.get(get_schema_field_type(field))


def _walk_tagged(
    known: dict[int, Step], buf: bytes, pos: int, end: int, edits: list[tuple[int, int, bytes]]
) -> int:
    if pos < end and buf[pos] == 0:  # the common case: no tagged fields
        return pos + 1
    start = pos
    count, pos = _uvarint(buf, pos, end)
    if count > end - pos:
        raise SchemaWalkError(f"{count} tagged fields but only {end - pos} bytes remain")
    kept: list[bytes] = []
    dropped = 0
    for _ in range(count):
        field_start = pos
        tag, pos = _uvarint(buf, pos, end)
        size, pos = _uvarint(buf, pos, end)
        field_end = _sized(size, pos, end)
        step = known.get(tag)
        if step is None:
            dropped += 1
        else:
            nested: list[tuple[int, int, bytes]] = []
            if step(buf, pos, field_end, nested) != field_end:
                raise SchemaWalkError(f"tagged field {tag} does not fill its {size} bytes")
            if nested:
                raise SchemaWalkError(f"tagged field {tag} holds unknown tagged fields")
            kept.append(buf[field_start:field_end])
        pos = field_end
    if dropped:
        edits.append((start, pos, encode_uvarint(count - dropped) + b"".join(kept)))
    return pos


def check_body(schema: type[Any], buf: bytes, pos: int) -> bytes | None:
    """Walk the body of ``schema`` at ``buf[pos:]``.

    Raises ``SchemaWalkError`` if it does not fit; returns None when kio can decode it as it
    is, or a copy of the body (from ``pos``) without its unknown tagged fields.
    """
    edits: list[tuple[int, int, bytes]] = []
    entity_step(schema)(buf, pos, len(buf), edits)
    if not edits:
        return None
    parts = []
    cursor = pos
    for start, stop, replacement in sorted(edits):
        parts.append(buf[cursor:start])
        parts.append(replacement)
        cursor = stop
    parts.append(buf[cursor:])
    return b"".join(parts)
