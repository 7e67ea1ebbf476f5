"""Small asyncio helpers shared by the client, the controller and the server."""

from __future__ import annotations

import asyncio
import contextlib


async def cancel_and_wait(task: asyncio.Task[object] | asyncio.Future[object]) -> None:
    """Cancel ``task`` and wait until it has finished, whatever it ended with.

    ``with suppress(CancelledError): await task`` is the usual idiom and it is wrong in a
    coroutine that may itself be cancelled meanwhile: the caller's own cancellation arrives
    as a CancelledError at that ``await`` and is swallowed, so the caller runs on. A replica
    fetcher closing its connection when its stop came swallowed the stop and ran until the
    shutdown's 5 s bound (found by the fault harness: SIGTERM stops of 6-30 s). Here the
    task's outcome is consumed, but a cancellation of the caller propagates.
    """
    task.cancel()
    await asyncio.wait([task])
    if not task.cancelled():
        with contextlib.suppress(BaseException):
            task.exception()  # retrieved: no "exception was never retrieved" at GC
