"""Building kio requests and reading their answers, for every version a helper speaks.

Each API's request helpers pick a version, load that version's schema module
(``schema_module``) and build the request with ``make``, which drops the fields the
version lacks; readers turn wire error codes into ``ErrorCode`` with ``error_code``.
"""

from __future__ import annotations

import dataclasses
import datetime
import functools
import importlib
from typing import Any

from kio.index import load_request_schema

from tidelog.errors import ErrorCode
from tidelog.protocol.apis import ApiKey


@functools.cache
def schema_module(api_key: ApiKey, version: int) -> Any:
    """The kio module of ``api_key``'s request ``version`` (its entity classes); looked up
    once per pair, as a follower asks for it on every fetch."""
    return importlib.import_module(load_request_schema(api_key, version).__module__)


#: Each kio entity class's field names, as ``make`` needs them on every request.
_FIELD_NAMES: dict[type[Any], frozenset[str]] = {}


def make(cls: type[Any], **kwargs: Any) -> Any:
    """Build a kio entity from the keyword arguments its version has (others dropped)."""
    names = _FIELD_NAMES.get(cls)
    if names is None:
        names = _FIELD_NAMES[cls] = frozenset(f.name for f in dataclasses.fields(cls))
    return cls(**{k: v for k, v in kwargs.items() if k in names})


def error_code(value: int) -> ErrorCode:
    """Our ``ErrorCode`` for a wire value; codes we do not know map to UNKNOWN_SERVER_ERROR."""
    try:
        return ErrorCode._value2member_map_[int(value)]  # type: ignore[return-value]
    except KeyError:
        return ErrorCode.UNKNOWN_SERVER_ERROR


def ms(value: int) -> datetime.timedelta:
    """Milliseconds as the ``timedelta`` kio writes for a duration field."""
    return datetime.timedelta(milliseconds=value)
