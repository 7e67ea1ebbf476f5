"""tidelog.aio.cancel_and_wait: the task's cancellation is consumed, the caller's is not."""

from __future__ import annotations

import asyncio
import contextlib

import pytest

from tidelog.aio import cancel_and_wait


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
