"""Small asyncio helpers shared by the client, the controller and the server."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from typing import TypeVar

T = TypeVar("T")

#: How long to wait before cancelling a task again that did not end on its cancel.
_RECANCEL_S = 0.05


async def cancel_and_wait(task: asyncio.Task[object] | asyncio.Future[object]) -> None:
    """Cancel ``task`` and wait until it has finished, whatever it ended with.

    ``with suppress(CancelledError): await task`` is the usual idiom and it is wrong in a
    coroutine that may itself be cancelled meanwhile: the caller's own cancellation arrives
    as a CancelledError at that ``await`` and is swallowed, so the caller runs on (a replica
    fetcher closing its connection when its stop came would run until the shutdown's 5 s
    bound). Here the task's outcome is consumed, but a cancellation of the caller
    propagates.
    """
    # Python 3.11's asyncio.wait_for swallows a cancellation that arrives when the awaited
    # future is already done (it returns the result instead), so one cancel() can be lost:
    # a replica fetcher whose fetch response came in with its stop would run into its next
    # long poll and hold the shutdown for the 5 s bound. So cancel again until the task has
    # ended.
    while not task.done():
        task.cancel()
        await asyncio.wait([task], timeout=_RECANCEL_S)
    if not task.cancelled():
        with contextlib.suppress(BaseException):
            task.exception()  # retrieved: no "exception was never retrieved" at GC


async def wait_for(
    aw: Awaitable[T], timeout: float | None, *, discard: Callable[[T], object] | None = None
) -> T:
    """``asyncio.wait_for`` that never swallows the caller's cancellation.

    On CPython 3.11, ``asyncio.wait_for`` returns the inner result (or raises its
    exception) when the caller is cancelled in the loop iteration after the inner awaitable
    finished: the cancellation is lost and the caller runs on. ``cancel_and_wait`` cancels
    again until the task ends, but a task cancelled once (``asyncio.run``'s final
    cancellation of what is left, the broker's cancel of its background AlterPartition
    tasks) is not: a replica fetcher retrying a refused connection lost about one cancel
    in 14, and a broker left with one after "shut down cleanly" hung in ``asyncio.run``
    until SIGKILL (three brokers with 5,000 replicas each, stopped at once). Here a
    cancellation that arrived while waiting is raised. (3.12's ``wait_for`` does not lose
    it; there this adds a counter check.) A result dropped that way is passed to
    ``discard`` first: a connection opened as the cancel came must still be closed.
    """
    task = asyncio.current_task()
    requested = 0 if task is None else task.cancelling()
    try:
        result = await asyncio.wait_for(aw, timeout)
    except asyncio.CancelledError:
        raise
    except BaseException:
        if task is not None and task.cancelling() > requested:
            raise asyncio.CancelledError from None
        raise
    if task is not None and task.cancelling() > requested:
        if discard is not None:
            discard(result)
        raise asyncio.CancelledError
    return result
