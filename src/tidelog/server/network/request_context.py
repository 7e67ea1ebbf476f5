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
