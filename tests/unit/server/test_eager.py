"""``eager``: a coroutine that never waits answers at once; one that waits becomes a future
that resumes it where it stopped (results, exceptions and cancellation pass through)."""

from __future__ import annotations

import asyncio

import pytest

from tidelog.server.apis.eager import eager


async def _plain(x: int) -> int:
    return x + 1


async def _waits(future: asyncio.Future[int]) -> int:
    await asyncio.sleep(0)
    value = await future
    return value * 2


def test_no_wait_answers_at_once() -> None:
    assert eager(_plain(1)) == 2


def test_a_wait_becomes_a_future() -> None:
    async def main() -> int:
        future: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        result = eager(_waits(future))
        assert isinstance(result, asyncio.Future)
        asyncio.get_running_loop().call_later(0.01, future.set_result, 21)
        return await result

    assert asyncio.run(main()) == 42


def test_exceptions_pass_through() -> None:
    async def fails(future: asyncio.Future[int]) -> int:
        try:
            await future
        except ValueError:
            return -1
        return 0

    async def main() -> int:
        future: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        result = eager(fails(future))
        assert isinstance(result, asyncio.Future)
        future.set_exception(ValueError("no"))
        return await result

    assert asyncio.run(main()) == -1


def test_an_exception_before_any_wait_is_raised_at_once() -> None:
    async def boom() -> int:
        raise KeyError("k")

    with pytest.raises(KeyError):
        eager(boom())


def test_cancellation_reaches_the_coroutine() -> None:
    seen: list[str] = []

    async def forever(future: asyncio.Future[int]) -> int:
        try:
            return await future
        except asyncio.CancelledError:
            seen.append("cancelled")
            raise

    async def main() -> None:
        future: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        result = eager(forever(future))
        assert isinstance(result, asyncio.Future)
        await asyncio.sleep(0)
        result.cancel()
        with pytest.raises(asyncio.CancelledError):
            await result

    asyncio.run(main())
    assert seen == ["cancelled"]
