"""Delayed operations: requests parked until a partition changes or a timeout fires.

Kafka's ``DelayedOperationPurgatory`` on one event loop (no locks needed). A produce with
``acks=all`` waits until the high watermark passes its batches; a fetch waits until
``min_bytes`` are available or ``max_wait_ms`` passes (docs/design.md rule 6). Rules:

1. An operation completes exactly once: ``force_complete`` flips ``completed`` and calls
   ``on_complete``; every later call is a no-op that returns False.
2. ``try_complete_else_watch`` first tries to complete the operation; only if it cannot does
   it watch the operation under its keys (partitions) and arm its timer. So an operation
   that is ready never waits, and one that is not ready is always woken by the next change.
3. ``check_and_complete(key)`` is called after anything that may satisfy operations on
   ``key`` (an append, a high-watermark move, a partition leaving this broker); it tells each
   watched operation which key changed (``notice``), tries it, and drops completed ones from
   every watch list lazily.
4. On timeout the operation is force-completed; ``on_complete`` decides what the client sees
   (e.g. REQUEST_TIMED_OUT for produce, whatever is there for fetch).
5. A completed operation stays in the watch lists of the keys nobody checks: a follower's
   fetch over many partitions completes through the one that got an append (or by its
   timeout), and the lists of the idle partitions keep it. So every ``purge_interval`` new
   watch entries, every list is swept of completed operations (Kafka's
   ``*.purgatory.purge.interval.requests``, default 1000): the lists hold the live
   operations plus at most ``purge_interval`` entries, at an amortised cost of one sweep per
   ``purge_interval`` watches. Without it a broker whose followers fetch idle partitions
   (``__consumer_offsets``, any quiet topic) keeps every follower fetch it ever parked:
   11,000 after 25 s at 1,000 acks=all records/s, and gen-2 garbage collections over them
   grow past 200 ms, stalling the event loop (acks=all p99 of 200-400 ms).
6. ``key_listener``, when set, is told of every key checked before its operations are
   tried, and names further keys to check with it (``fetch_session`` rule 7: a change to a
   partition parked in fetch sessions wakes those sessions' keys).
"""

from __future__ import annotations

import asyncio
from abc import ABC, abstractmethod
from collections.abc import Callable, Hashable, Iterable


class DelayedOperation(ABC):
    """One parked request. Subclasses implement ``try_complete`` and ``on_complete``."""

    __slots__ = ("_timer", "completed", "timeout_ms")

    def __init__(self, timeout_ms: int) -> None:
        self.timeout_ms = timeout_ms
        self.completed = False
        self._timer: asyncio.TimerHandle | None = None

    @abstractmethod
    def try_complete(self) -> bool:
        """Complete (via ``force_complete``) if the condition holds; say whether it did."""

    @abstractmethod
    def on_complete(self) -> None:
        """Send the response. Called exactly once, by ``force_complete``."""

    def notice(self, key: Hashable) -> None:  # noqa: B027 - optional hook
        """``key``, one this operation is watched under, changed (called before a try)."""

    def on_expiration(self) -> None:  # noqa: B027 - optional hook
        """Called once when the timeout fires, before ``on_complete``."""

    def force_complete(self) -> bool:
        if self.completed:
            return False
        self.completed = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self.on_complete()
        return True

    def _expire(self) -> None:
        self._timer = None
        if not self.completed:
            self.on_expiration()
            self.force_complete()


#: Rule 5: watch entries added between two sweeps (Kafka's purge interval default).
PURGE_INTERVAL = 1000


class Purgatory:
    """Operations watched by key; woken by ``check_and_complete``, expired by a timer."""

    def __init__(
        self,
        name: str,
        loop: asyncio.AbstractEventLoop | None = None,
        *,
        purge_interval: int = PURGE_INTERVAL,
    ) -> None:
        self.name = name
        self._loop = loop
        self._watchers: dict[Hashable, list[DelayedOperation]] = {}
        self.expired_count = 0
        self._purge_interval = purge_interval
        self._added_since_purge = 0
        #: Rule 6.
        self.key_listener: Callable[[Hashable], Iterable[Hashable]] | None = None

    def _get_loop(self) -> asyncio.AbstractEventLoop:
        if self._loop is None:
            self._loop = asyncio.get_running_loop()
        return self._loop

    def try_complete_else_watch(self, op: DelayedOperation, keys: Iterable[Hashable]) -> bool:
        """Rule 2. Returns True if the operation completed at once."""
        if op.try_complete():
            return True
        for key in keys:
            self._watchers.setdefault(key, []).append(op)
            self._added_since_purge += 1
        if self._added_since_purge >= self._purge_interval:
            self.purge_completed()
        # The state may have changed between the try and the watch only if try_complete
        # itself changed it; on one event loop nothing else runs in between.
        if op.completed:
            return True
        if op.timeout_ms <= 0:
            op._expire()
            self.expired_count += 1
            return False
        op._timer = self._get_loop().call_later(op.timeout_ms / 1000.0, self._expire, op)
        return False

    def _expire(self, op: DelayedOperation) -> None:
        self.expired_count += 1
        op._expire()

    def check_and_complete(self, key: Hashable) -> int:
        """Rule 3: try every operation watched under ``key`` (and rule 6's further keys);
        return how many completed."""
        listener = self.key_listener
        if listener is None:
            return self._check(key)
        further = listener(key)
        completed = self._check(key)
        for more in further:
            completed += self._check(more)
        return completed

    def _check(self, key: Hashable) -> int:
        ops = self._watchers.get(key)
        if not ops:
            return 0
        completed = 0
        remaining: list[DelayedOperation] = []
        for op in ops:
            if op.completed:
                continue
            op.notice(key)
            if op.try_complete():
                completed += 1
            elif not op.completed:
                remaining.append(op)
        if remaining:
            self._watchers[key] = remaining
        else:
            del self._watchers[key]
        return completed

    def check_and_complete_all(self, keys: Iterable[Hashable]) -> int:
        """``check_and_complete`` for many keys, trying each watched operation once.

        A follower's fetch is watched under every partition it asks for: checking each of
        a LeaderAndIsr's partitions in turn tried it once per partition, all of its
        partitions each time (1,666 x 1,666 in a controlled shutdown of a broker with 5,000
        replicas: seconds of event loop). Returns how many completed.
        """
        keys = list(keys)
        listener = self.key_listener
        if listener is not None:
            keys += [more for key in keys for more in listener(key)]
        keys = [key for key in dict.fromkeys(keys) if key in self._watchers]
        ops: dict[int, DelayedOperation] = {}
        for key in keys:
            for op in self._watchers[key]:
                if not op.completed:
                    op.notice(key)
                    ops[id(op)] = op
        completed = sum(1 for op in ops.values() if op.try_complete())
        self._drop_completed(keys)
        return completed

    def purge_completed(self) -> None:
        """Rule 5: drop completed operations from every watch list."""
        self._added_since_purge = 0
        self._drop_completed(list(self._watchers))

    def _drop_completed(self, keys: Iterable[Hashable]) -> None:
        for key in keys:
            live = [op for op in self._watchers.get(key, ()) if not op.completed]
            if live:
                self._watchers[key] = live
            else:
                self._watchers.pop(key, None)

    def watch_entries(self) -> int:
        """Entries in all watch lists, completed operations included (rule 5 bounds it)."""
        return sum(len(ops) for ops in self._watchers.values())

    def watched(self) -> int:
        """Operations still pending (each counted once)."""
        return len({id(op) for ops in self._watchers.values() for op in ops if not op.completed})

    def complete_all(self) -> None:
        """Force-complete everything (shutdown): each client gets its answer now."""
        ops = {id(op): op for ops in self._watchers.values() for op in ops}
        self._watchers.clear()
        for op in ops.values():
            op.force_complete()
