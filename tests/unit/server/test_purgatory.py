"""Delayed operations: complete exactly once, woken by keys, expired by their timeout."""

from __future__ import annotations

import asyncio
from collections.abc import Hashable

from tidelog.server.purgatory import DelayedOperation, Purgatory


class Op(DelayedOperation):
    def __init__(self, timeout_ms: int, ready: list[bool]) -> None:
        super().__init__(timeout_ms)
        self.ready = ready
        self.completions: list[str] = []
        self.expired = False

    def try_complete(self) -> bool:
        return self.force_complete() if self.ready[0] else False

    def on_complete(self) -> None:
        self.completions.append("expired" if self.expired else "ready")

    def on_expiration(self) -> None:
        self.expired = True


def run(coro: object) -> None:
    asyncio.run(coro)  # type: ignore[arg-type]


def test_ready_operation_completes_at_once_without_watching() -> None:
    async def scenario() -> None:
        purgatory = Purgatory("t")
        op = Op(10_000, [True])
        assert purgatory.try_complete_else_watch(op, ["a"]) is True
        assert op.completions == ["ready"]
        assert purgatory.watched() == 0

    run(scenario())


def test_woken_by_its_key_only_and_completes_once() -> None:
    async def scenario() -> None:
        purgatory = Purgatory("t")
        ready = [False]
        op = Op(10_000, ready)
        keys: list[Hashable] = ["a", "b"]
        assert purgatory.try_complete_else_watch(op, keys) is False
        assert purgatory.check_and_complete("a") == 0
        ready[0] = True
        assert purgatory.check_and_complete("other") == 0
        assert op.completions == []
        assert purgatory.check_and_complete("b") == 1
        assert purgatory.check_and_complete("a") == 0  # already done: dropped lazily
        assert op.completions == ["ready"]
        assert op.force_complete() is False
        assert purgatory.watched() == 0

    run(scenario())


def test_timeout_expires_and_completes_once() -> None:
    async def scenario() -> None:
        purgatory = Purgatory("t")
        op = Op(20, [False])
        purgatory.try_complete_else_watch(op, ["a"])
        for _ in range(200):
            if op.completions:
                break
            await asyncio.sleep(0.01)
        assert op.completions == ["expired"]
        assert purgatory.expired_count == 1
        op.ready[0] = True
        assert purgatory.check_and_complete("a") == 0
        assert op.completions == ["expired"]

    run(scenario())


def test_zero_timeout_answers_now_and_complete_all_on_shutdown() -> None:
    async def scenario() -> None:
        purgatory = Purgatory("t")
        now = Op(0, [False])
        purgatory.try_complete_else_watch(now, ["a"])
        assert now.completions == ["expired"]
        later = [Op(60_000, [False]) for _ in range(3)]
        for op in later:
            purgatory.try_complete_else_watch(op, ["x", "y"])
        assert purgatory.watched() == 3
        purgatory.complete_all()
        assert [op.completions for op in later] == [["ready"]] * 3
        assert purgatory.watched() == 0

    run(scenario())
