"""Build kio response entities of any version from one version-independent description.

Kafka's schemas add, rename and drop fields between versions (``topic`` vs ``topic_id``,
``throttle_time`` appearing at v1, ...). Handlers describe a response once, as plain dicts
and lists holding the union of the fields any version has; ``build(cls, data)`` keeps what
``cls`` (one concrete version) declares and fills anything it requires but was not given
with Kafka's zero value for the field's type. Conversions: ints become kio's ``ErrorCode``
for ``error_code`` fields and ``timedelta`` for ``timedelta_*`` fields; dicts become nested
entities; lists become tuples.
"""

from __future__ import annotations

import datetime
import sys
import types
import uuid
from collections.abc import Callable, Mapping
from dataclasses import MISSING, Field, fields, is_dataclass
from functools import cache
from typing import Any, Union, get_args, get_origin

from kio.schema.errors import ErrorCode as KioErrorCode

_Converter = Callable[[Any], Any]


def _unwrap_optional(tp: Any) -> tuple[Any, bool]:
    origin = get_origin(tp)
    if origin in (types.UnionType, Union):
        args = [a for a in get_args(tp) if a is not type(None)]
        return args[0], True
    return tp, False


def _zero(kafka_type: str | None, nullable: bool, is_array: bool) -> Any:
    if is_array:
        return ()
    if nullable:
        return None
    match kafka_type:
        case "string":
            return ""
        case "bytes" | "records":
            return b""
        case "bool":
            return False
        case "uuid":
            return uuid.UUID(int=0)
        case "error_code":
            return KioErrorCode.none
        case "timedelta_i32" | "timedelta_i64":
            return datetime.timedelta(0)
        case "float64":
            return 0.0
        case _:
            return 0


@cache
def _plan(cls: Any) -> tuple[tuple[str, _Converter, bool, Any], ...]:
    """Per field: (name, converter, required, zero)."""
    plan = []
    module = sys.modules[cls.__module__]
    hints = {f.name: f for f in fields(cls)}
    for f in hints.values():
        tp = f.type
        if isinstance(tp, str):  # pragma: no cover - kio does not use string annotations
            tp = eval(tp, vars(module))
        inner, nullable = _unwrap_optional(tp)
        is_array = get_origin(inner) is tuple
        element = get_args(inner)[0] if is_array else inner
        element, _ = _unwrap_optional(element)
        kafka_type = f.metadata.get("kafka_type")
        converter = _converter(element, kafka_type, is_array)
        zero: Any
        if is_dataclass(element) and not is_array and not nullable:
            zero = _LazyEntity(element)  # type: ignore[arg-type]
        else:
            zero = _zero(kafka_type, nullable, is_array)
        plan.append((f.name, converter, _required(f), zero))
    return tuple(plan)


class _LazyEntity:
    """The zero of a required nested entity: the entity with every field at its zero."""

    __slots__ = ("cls",)

    def __init__(self, cls: type[Any]) -> None:
        self.cls = cls


def _required(f: Field[Any]) -> bool:
    return f.default is MISSING and f.default_factory is MISSING


def _converter(element: Any, kafka_type: str | None, is_array: bool) -> _Converter:
    one: _Converter
    if is_dataclass(element):
        entity_cls = element

        def one(value: Any) -> Any:
            if isinstance(value, Mapping):
                return build(entity_cls, value)
            return value

    elif kafka_type == "error_code":

        def one(value: Any) -> Any:
            return value if isinstance(value, KioErrorCode) else KioErrorCode(int(value))

    elif kafka_type in ("timedelta_i32", "timedelta_i64"):

        def one(value: Any) -> Any:
            if isinstance(value, datetime.timedelta):
                return value
            return datetime.timedelta(milliseconds=int(value))

    else:

        def one(value: Any) -> Any:
            return value

    if not is_array:
        return one

    def many(value: Any) -> Any:
        if value is None:
            return None
        return tuple(one(v) for v in value)

    return many


def build(cls: Any, data: Mapping[str, Any]) -> Any:
    """An instance of the kio entity ``cls`` from a version-independent ``data`` dict."""
    kwargs: dict[str, Any] = {}
    for name, convert, required, zero in _plan(cls):
        if name in data:
            value = data[name]
            kwargs[name] = None if value is None else convert(value)
        elif required:
            kwargs[name] = build(zero.cls, {}) if isinstance(zero, _LazyEntity) else zero
    return cls(**kwargs)


def field_names(cls: type[Any]) -> frozenset[str]:
    return frozenset(f.name for f in fields(cls))
