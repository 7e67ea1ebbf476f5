"""Who sent the request being handled: Kafka's ``RequestContext``, as a context variable.

The dispatcher sets it before each handler runs (``tidelog.server.apis.dispatcher.Dispatcher``);
handlers and the authorizer read it with ``current_request()``. Coroutines a handler starts
inherit it (asyncio copies the context into each task), so a delayed answer still knows
its principal.
"""

from __future__ import annotations

import contextvars
from dataclasses import dataclass

from tidelog.security.principal import ANONYMOUS, KafkaPrincipal


@dataclass(frozen=True, slots=True)
class RequestContext:
    principal: KafkaPrincipal
    #: The client's IP address (no port): ACL hosts match it.
    client_host: str
    listener_name: str
    security_protocol: str


#: Outside any request (the broker's own tasks): the anonymous principal on no listener.
INTERNAL = RequestContext(ANONYMOUS, "", "", "PLAINTEXT")

_current: contextvars.ContextVar[RequestContext] = contextvars.ContextVar(
    "tidelog_request_context", default=INTERNAL
)


def current_request() -> RequestContext:
    return _current.get()


def set_request(context: RequestContext) -> contextvars.Token[RequestContext]:
    return _current.set(context)


#: The throttle time (ms) the request being handled is answered with (client quotas,
#: KIP-219): set by the dispatcher, read by handlers that encode their answers themselves.
_throttle: contextvars.ContextVar[int] = contextvars.ContextVar(
    "tidelog_throttle_time_ms", default=0
)


def current_throttle_ms() -> int:
    return _throttle.get()


def set_throttle_ms(ms: int) -> contextvars.Token[int]:
    return _throttle.set(ms)


def reset_throttle_ms(token: contextvars.Token[int]) -> None:
    _throttle.reset(token)
