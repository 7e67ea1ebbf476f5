"""The broker's handler table: one declarative list of handler groups merged once.

Each group (``DataApis``, ``TopicApis``, ``ConfigApis``, the coordinators, ...) answers a
family of APIs and says which through ``handlers()``. An API claimed by two groups is a
wiring mistake refused at start-up (``DuplicateHandlerError``), never one silently
replacing the other.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any, Protocol

from tidelog.protocol.apis import ApiKey
from tidelog.protocol.codec import RequestHeader

#: A handler: the decoded request in; the response entity, a ready ``Response``, None (no
#: response due) or a future of one of these out.
Handler = Callable[[RequestHeader, Any], Any]


class HandlerGroup(Protocol):
    """A family of APIs and their handlers."""

    def handlers(self) -> Mapping[int, Handler]: ...


class DuplicateHandlerError(ValueError):
    """Two handler groups claim one API."""


class Routes(Protocol):
    """What the dispatcher routes by: API key -> handler."""

    @property
    def handlers(self) -> Mapping[int, Handler]: ...


class HandlerTable:
    """The merged table of a list of handler groups (``merge_handlers``)."""

    def __init__(self, groups: Iterable[HandlerGroup]) -> None:
        self.handlers: Mapping[int, Handler] = merge_handlers(groups)


def merge_handlers(groups: Iterable[HandlerGroup]) -> dict[int, Handler]:
    """Every group's handlers in one table; DuplicateHandlerError names an API claimed
    twice and both claimants."""
    table: dict[int, Handler] = {}
    owner: dict[int, HandlerGroup] = {}
    for group in groups:
        for key, handler in group.handlers().items():
            if key in table:
                raise DuplicateHandlerError(
                    f"{ApiKey(key).name} is handled by both {type(owner[key]).__name__} "
                    f"and {type(group).__name__}"
                )
            table[key] = handler
            owner[key] = group
    return table


__all__ = [
    "DuplicateHandlerError",
    "Handler",
    "HandlerGroup",
    "HandlerTable",
    "Routes",
    "merge_handlers",
]
