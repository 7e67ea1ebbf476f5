"""Delayed operations: complete exactly once, woken by keys, expired by their timeout."""

from __future__ import annotations

import asyncio
from collections.abc import Hashable

from tidelog.server.replica.purgatory import DelayedOperation, Purgatory


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


def test_operations_completed_through_one_key_leave_the_idle_keys_lists() -> None:
    """Rule 5: a follower's fetch over a busy and many idle partitions, completed through the
    busy one (or its timeout) again and again, must not pile up in the idle keys' lists."""

    async def scenario() -> None:
        purgatory = Purgatory("t", purge_interval=100)
        idle: list[Hashable] = [f"idle-{i}" for i in range(16)]
        for _ in range(1_000):
            ready = [False]
            op = Op(60_000, ready)
            assert purgatory.try_complete_else_watch(op, ["busy", *idle]) is False
            ready[0] = True
            assert purgatory.check_and_complete("busy") == 1
        # Without the sweep: 16,000 entries under the idle keys.
        assert purgatory.watch_entries() < 100
        assert purgatory.watched() == 0
        # Zero-timeout operations expire while watched: swept too.
        for _ in range(500):
            purgatory.try_complete_else_watch(Op(0, [False]), idle)
        assert purgatory.watch_entries() < 100
        # Live operations are never swept.
        live = Op(60_000, [False])
        purgatory.try_complete_else_watch(live, idle)
        purgatory.purge_completed()
        assert purgatory.watch_entries() == len(idle)
        live.ready[0] = True
        assert purgatory.check_and_complete("idle-3") == 1
        assert live.completions == ["ready"]

    run(scenario())


class CountingOp(Op):
    def __init__(self, timeout_ms: int, ready: list[bool]) -> None:
        super().__init__(timeout_ms, ready)
        self.tries = 0

    def try_complete(self) -> bool:
        self.tries += 1
        return super().try_complete()


def test_check_and_complete_all_tries_each_operation_once() -> None:
    """A follower fetch watched under 1,000 partitions, all changed by one LeaderAndIsr:
    one try, not one per partition (each try walks every partition of the fetch)."""

    async def scenario() -> None:
        purgatory = Purgatory("t")
        ready = [False]
        keys: list[Hashable] = [f"p{i}" for i in range(1000)]
        wide = CountingOp(10_000, ready)
        narrow = CountingOp(10_000, [False])  # never ready
        assert purgatory.try_complete_else_watch(wide, keys) is False
        assert purgatory.try_complete_else_watch(narrow, ["p7", "other"]) is False
        assert purgatory.check_and_complete_all(keys) == 0
        assert (wide.tries, narrow.tries) == (2, 2)  # one at watch time, one now
        ready[0] = True
        assert purgatory.check_and_complete_all([*keys, "unknown", "p0"]) == 1
        assert (wide.tries, narrow.tries) == (3, 3)
        assert wide.completions == ["ready"]
        assert narrow.completions == []
        assert purgatory.watched() == 1
        assert purgatory.check_and_complete_all([]) == 0

    run(scenario())


def test_the_key_listener_names_further_keys_checked_with_each_key() -> None:
    """Rule 6: an operation watched only under a session's key is woken when a partition
    parked in that session is checked, by check_and_complete and check_and_complete_all."""

    async def scenario() -> None:
        purgatory = Purgatory("t")
        told: list[Hashable] = []

        def listener(key: Hashable) -> list[Hashable]:
            told.append(key)
            return ["session"] if key == "parked" else []

        purgatory.key_listener = listener
        ready = [True]
        by_session, by_batch = Op(10_000, [False]), Op(10_000, [False])
        assert purgatory.try_complete_else_watch(by_session, ["session"]) is False
        assert purgatory.try_complete_else_watch(by_batch, ["session"]) is False
        by_session.ready, by_batch.ready = ready, ready
        assert purgatory.check_and_complete("elsewhere") == 0
        assert purgatory.check_and_complete("parked") == 2
        assert told == ["elsewhere", "parked"]
        assert (by_session.completions, by_batch.completions) == (["ready"], ["ready"])
        late = Op(10_000, [False])
        assert purgatory.try_complete_else_watch(late, ["session"]) is False
        late.ready = ready
        assert purgatory.check_and_complete_all(["x", "parked"]) == 1
        assert told[2:] == ["x", "parked"]
        assert purgatory.watched() == 0

    run(scenario())
