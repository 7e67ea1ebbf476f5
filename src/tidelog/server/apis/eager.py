"""Run a handler's coroutine eagerly: its answer now when it never waits, else a future.

A handler written once for both metadata backends awaits the backend (``tidelog.server
.metadata.backend``): the ZooKeeper one really waits (the controller, ZooKeeper), the
single broker's never does. Run eagerly, the single broker's answer is ready before the
next pipelined request on the connection is dispatched, exactly as a plain function's
would be: a CreateTopics followed at once by a Produce to the new topic finds it. The same
idea as Python 3.12's eager task factory, for one coroutine.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


def eager(coro: Coroutine[Any, Any, T]) -> T | asyncio.Future[T]:
    """``coro``'s result if it finishes without suspending; otherwise a future of it, the
    coroutine going on in a task from where it suspended."""
    try:
        waiting = coro.send(None)
    except StopIteration as finished:
        return finished.value  # type: ignore[no-any-return]
    return asyncio.ensure_future(_resume(coro, waiting))


async def _resume(coro: Coroutine[Any, Any, T], waiting: Any) -> T:
    """Drive ``coro`` as a task would: wait for what it yielded (a future, or None for a
    bare yield), then resume it; a cancellation of this task is thrown into it."""
    while True:
        try:
            if waiting is None:
                await asyncio.sleep(0)
            else:
                waiting._asyncio_future_blocking = False
                await asyncio.wait([waiting])
        except asyncio.CancelledError as exc:
            if isinstance(waiting, asyncio.Future):
                waiting.cancel()
            try:
                waiting = coro.throw(exc)
            except StopIteration as finished:
                return finished.value  # type: ignore[no-any-return]
            continue
        try:
            waiting = coro.send(None)
        except StopIteration as finished:
            return finished.value  # type: ignore[no-any-return]


__all__ = ["eager"]
