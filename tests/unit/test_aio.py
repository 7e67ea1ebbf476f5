"""tidelog.aio.cancel_and_wait: the task's cancellation is consumed, the caller's is not;
tidelog.aio.wait_for: a cancellation that arrives as the awaited thing finishes is kept."""

from __future__ import annotations

import asyncio
import contextlib

import pytest

from tidelog.aio import cancel_and_wait, wait_for


def test_cancel_and_wait_ends_the_task_and_consumes_its_outcome() -> None:
    async def body() -> None:
        async def forever() -> None:
            await asyncio.Event().wait()

        async def fails() -> None:
            raise RuntimeError("boom")

        task = asyncio.ensure_future(forever())
        await asyncio.sleep(0)
        await cancel_and_wait(task)
        assert task.cancelled()
        failed = asyncio.ensure_future(fails())
        await asyncio.sleep(0)
        await cancel_and_wait(failed)  # already failed: its exception is retrieved, not raised
        assert isinstance(failed.exception(), RuntimeError)

    asyncio.run(body())


def test_a_caller_cancelled_while_waiting_is_cancelled() -> None:
    """The idiom it replaces swallowed this: ``suppress(CancelledError): await task``."""

    async def body() -> None:
        async def stubborn() -> None:  # takes a while to finish after its cancel
            try:
                await asyncio.Event().wait()
            finally:
                await asyncio.shield(asyncio.sleep(0.5))

        async def closer(task: asyncio.Task[None]) -> str:
            await cancel_and_wait(task)
            return "ran on"

        task = asyncio.ensure_future(stubborn())
        await asyncio.sleep(0)
        caller = asyncio.ensure_future(closer(task))
        await asyncio.sleep(0.05)
        caller.cancel()
        with pytest.raises(asyncio.CancelledError):
            await caller
        with contextlib.suppress(asyncio.CancelledError):
            await task

    asyncio.run(body())


def test_a_cancellation_swallowed_by_the_task_is_repeated() -> None:
    """Python 3.11's wait_for returns the result of a future that is done when the cancel
    arrives, swallowing the cancel; the task then runs on into its next wait."""

    async def body() -> None:
        loop = asyncio.get_running_loop()
        response: asyncio.Future[None] = loop.create_future()
        rounds: list[str] = []

        async def fetcher() -> None:
            try:
                await asyncio.wait_for(response, 10)
            except asyncio.CancelledError:
                rounds.append("cancelled in the first wait")
                raise
            rounds.append("ran on")
            await asyncio.Event().wait()  # the next long poll

        task = asyncio.ensure_future(fetcher())
        await asyncio.sleep(0)
        response.set_result(None)  # the response arrives with the stop
        await asyncio.wait_for(cancel_and_wait(task), 5)
        assert task.cancelled()
        assert rounds in (["ran on"], ["cancelled in the first wait"])

    asyncio.run(body())


@pytest.mark.parametrize("outcome", ["result", "error"])
def test_wait_for_keeps_a_cancel_that_comes_as_the_inner_future_finishes(outcome: str) -> None:
    """The inner future finishes and the caller is cancelled in the same loop iteration
    (CPython 3.11's asyncio.wait_for then returned the result, or raised the inner error,
    and the caller ran on)."""

    async def body() -> None:
        inner: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        ran_on: list[str] = []

        async def caller() -> None:
            with contextlib.suppress(OSError):
                await wait_for(inner, 5.0)
            ran_on.append("ran on")

        task = asyncio.ensure_future(caller())
        await asyncio.sleep(0)
        if outcome == "result":
            inner.set_result("x")
        else:
            inner.set_exception(ConnectionRefusedError("refused"))
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert ran_on == []

    asyncio.run(body())


def test_wait_for_passes_results_errors_and_timeouts_through() -> None:
    async def body() -> None:
        async def value() -> int:
            return 7

        async def fails() -> None:
            raise ConnectionRefusedError("refused")

        assert await wait_for(value(), 1.0) == 7
        with pytest.raises(ConnectionRefusedError):
            await wait_for(fails(), 1.0)
        with pytest.raises(TimeoutError):
            await wait_for(asyncio.Event().wait(), 0.01)

    asyncio.run(body())


def test_a_result_dropped_for_a_cancel_is_handed_to_discard() -> None:
    """A connection opened just as the caller was cancelled must be closed, not left to the
    garbage collector (an unclosed transport: a ResourceWarning, a leaked socket)."""

    async def body() -> None:
        inner: asyncio.Future[list[str]] = asyncio.get_running_loop().create_future()
        discarded: list[list[str]] = []

        async def caller() -> None:
            await wait_for(inner, 5.0, discard=discarded.append)

        task = asyncio.ensure_future(caller())
        await asyncio.sleep(0)
        opened = ["connection"]
        inner.set_result(opened)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert discarded == [opened]
        # Not cancelled: the result is returned and nothing is discarded.
        assert await wait_for(asyncio.sleep(0, ["kept"]), 1.0, discard=discarded.append) == ["kept"]
        assert discarded == [opened]

    asyncio.run(body())
