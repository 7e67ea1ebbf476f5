"""The controller's decision history: what it decided, and why (for the web console).

Kafka logs its controller's decisions (``state.change.logger``) but keeps no queryable
record of them; tools that poll the admin API only see the state that resulted. This
module keeps the *why*: a bounded list (``CAPACITY`` events, oldest dropped) of the active
controller's decisions, each with its time, the controller and its epoch, and for a
partition its old and new leader, leader epoch and ISR, and a human reason.

Theory of operation:

1. The controller calls in at its decision points with a ``Cause``: a ``trigger`` (what
   made it decide: ``broker_failure``, ``broker_startup``, ``alter_partition``,
   ``preferred``, ``controlled_shutdown``, ``reassignment``, ``log_dir_failure``,
   ``failover``) and a reason (text, or a function of the partition and its state before,
   for reasons that differ per partition such as which dead broker it had).
   ``partition_changed`` classifies the written change itself, so that callers pass no
   more than the cause: a new leader epoch is an ``election`` (``unclean_election`` when
   the new leader was not in the ISR it replaced, Kafka's rule; ``offline`` when no
   leader is left), otherwise a smaller ISR is an ``isr_shrink``, a larger one an
   ``isr_expand``. Cluster events (``broker_start``, ``broker_death``,
   ``controller_failover``, ``reassignment_start``/``_complete``/``_cancel``) come through
   ``record``.
2. Persistence: the active controller writes the whole list to ``HISTORY_PATH`` as JSON
   (``{"version":1,"events":[...]}``; the znode IO is ``tidelog.zk.history_store``), at
   most once per ``FLUSH_INTERVAL_S`` (events in between are batched into one write),
   without compare-and-set: only the active controller writes, and a controller that
   resigns drops its pending write. A new controller reads what it finds there
   (``take_over``) and appends to it, so the history survives failover, and every broker
   can read it (``read_history``) for its console. The list is bounded in count and the
   JSON in size (``MAX_BYTES``, well under ZooKeeper's 1 MiB ``jute.maxbuffer``): the
   oldest events go first.
3. Nothing here blocks the controller: ``record``/``partition_changed`` append in memory
   and schedule the write; a failed write (ZooKeeper unreachable) is logged and retried
   with the next batch. Listeners (``subscribe``) are called on the loop for each event
   (the local console pushes them to its browsers at once).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections import deque
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from tidelog.model import NO_BROKER, TopicPartition
from tidelog.zk import ZkClient, ZkError
from tidelog.zk.history_store import (
    HISTORY_PATH,
    read_history_blocking,
    write_history_blocking,
)
from tidelog.zk.znodes import PartitionState

log = logging.getLogger(__name__)

#: Events kept (in memory and in the znode).
CAPACITY: Final = 1000
#: Largest JSON written; older events are dropped to fit.
MAX_BYTES: Final = 768 * 1024
#: Writes to ZooKeeper are batched: at most one per this interval.
FLUSH_INTERVAL_S: Final = 0.2

#: A per-partition reason: (partition, its state before the change) -> text.
ReasonFn = Callable[[TopicPartition, PartitionState], str]


@dataclass(frozen=True, slots=True)
class Cause:
    """Why the controller is about to write partition states (module rule 1)."""

    trigger: str
    reason: str | ReasonFn

    def text(self, tp: TopicPartition, before: PartitionState) -> str:
        return self.reason if isinstance(self.reason, str) else self.reason(tp, before)


def dead_brokers(dead: Collection[int], *, trigger: str = "broker_failure") -> Cause:
    """The cause of the elections and ISR shrinks that follow broker deaths: per partition,
    which of ``dead`` it had as leader or ISR member."""
    gone = frozenset(dead)

    def reason(_tp: TopicPartition, before: PartitionState) -> str:
        parts = []
        if before.leader in gone:
            parts.append(f"leader {before.leader} died")
        members = sorted(b for b in before.isr if b in gone and b != before.leader)
        if members:
            which = ", ".join(map(str, members))
            parts.append(f"ISR member{'s' if len(members) > 1 else ''} {which} died")
        return "; ".join(parts) or f"broker {', '.join(map(str, sorted(gone)))} died"

    return Cause(trigger, reason)


def after_failover(
    live: Collection[int], restarted: Mapping[TopicPartition, Collection[int]]
) -> Cause:
    """The cause of what a new controller repairs: replicas that died while there was no
    controller (or with the old controller), and live ones that restarted meanwhile."""
    alive = frozenset(live)

    def reason(tp: TopicPartition, before: PartitionState) -> str:
        bounced = frozenset(restarted.get(tp, ()))
        parts = []
        for b in dict.fromkeys((before.leader, *before.isr)):
            role = "leader" if b == before.leader else "ISR member"
            if b in bounced:
                parts.append(f"{role} {b} restarted while there was no controller")
            elif b != NO_BROKER and b not in alive:
                parts.append(f"{role} {b} died")
        return "; ".join(parts) or "repaired at controller failover"

    return Cause("failover", reason)


def _ids(values: Iterable[int]) -> str:
    return ", ".join(str(v) for v in sorted(values))


def classify(before: PartitionState, after: PartitionState, trigger: str = "") -> tuple[str, str]:
    """(kind, what changed) of a written partition state (module rule 1). A leader asks
    (AlterPartition) to shrink the ISR only for a replica that lagged (Kafka's
    ``replica.lag.time.max.ms``), to expand it for one that caught up."""
    if after.leader_epoch > before.leader_epoch or after.leader != before.leader:
        if after.leader == NO_BROKER:
            return "offline", "no replica can lead: partition offline"
        if before.isr and after.leader not in before.isr:
            return "unclean_election", (
                f"unclean: no ISR member alive, {after.leader} elected from outside the ISR"
            )
        return "election", f"broker {after.leader} elected from the ISR [{_ids(before.isr)}]"
    removed = set(before.isr) - set(after.isr)
    added = set(after.isr) - set(before.isr)
    asked = trigger == "alter_partition"
    if removed and not added:
        return (
            "isr_shrink",
            f"ISR shrink (replica {_ids(removed)} {'lagged' if asked else 'removed'})",
        )
    if added and not removed:
        return (
            "isr_expand",
            f"ISR expand (replica {_ids(added)} {'caught up' if asked else 'added'})",
        )
    return "isr_change", "ISR change"


class ControllerHistory:
    """The bounded decision history of one broker's controller (module docstring)."""

    def __init__(self, zk: ZkClient | None, broker_id: int, *, capacity: int = CAPACITY) -> None:
        self.zk = zk
        self.broker_id = broker_id
        self.events: deque[dict[str, Any]] = deque(maxlen=capacity)
        #: Each event's JSON, in step with ``events``: a write joins them instead of
        #: encoding the whole list again (1,000 events are ~300 KB of JSON).
        self._encoded: deque[bytes] = deque(maxlen=capacity)
        self.controller_epoch = -1
        self._seq = 0
        self._active = False
        self._flush: asyncio.TimerHandle | None = None
        self._writing: asyncio.Task[None] | None = None
        self._dirty = False
        self._listeners: list[Callable[[dict[str, Any]], None]] = []
        #: Writes done and failed (for tests and logs).
        self.writes = 0
        self.write_failures = 0

    # -- recording ---------------------------------------------------------------------------

    def record(
        self, kind: str, reason: str, *, tp: TopicPartition | None = None, **fields: Any
    ) -> dict[str, Any]:
        """Append one event (module rule 1); ``fields``: leader/ISR details, broker id, ..."""
        self._seq += 1
        event: dict[str, Any] = {
            "id": f"{self.controller_epoch}-{self.broker_id}-{self._seq}",
            "time_ms": int(time.time() * 1000),
            "kind": kind,
            "controller": self.broker_id,
            "controller_epoch": self.controller_epoch,
            "reason": reason,
        }
        if tp is not None:
            event["topic"] = tp.topic
            event["partition"] = tp.partition
        event.update(fields)
        self.events.append(event)
        self._encoded.append(encode_event(event))
        for listener in list(self._listeners):
            try:
                listener(event)
            except Exception:
                log.exception("history listener failed")
        self._schedule_write()
        return event

    def partition_changed(
        self, tp: TopicPartition, before: PartitionState, after: PartitionState, cause: Cause
    ) -> dict[str, Any] | None:
        """A partition state the controller wrote: classified and recorded (rule 1)."""
        if (
            after.leader == before.leader
            and after.leader_epoch == before.leader_epoch
            and tuple(after.isr) == tuple(before.isr)
        ):
            return None
        kind, what = classify(before, after, cause.trigger)
        reason = cause.text(tp, before)
        return self.record(
            kind,
            f"{reason}: {what}" if reason else what,
            tp=tp,
            trigger=cause.trigger,
            old_leader=int(before.leader),
            new_leader=int(after.leader),
            old_leader_epoch=int(before.leader_epoch),
            leader_epoch=int(after.leader_epoch),
            old_isr=[int(b) for b in before.isr],
            new_isr=[int(b) for b in after.isr],
        )

    def brokers_gone(
        self, live: Collection[int], states: Mapping[TopicPartition, PartitionState]
    ) -> None:
        """At failover: a ``broker_death`` for each broker that leads or is in an ISR but is
        not registered (it died with the previous controller, or while there was none)."""
        gone = sorted(
            {b for st in states.values() for b in (st.leader, *st.isr)} - set(live) - {NO_BROKER}
        )
        for b in gone:
            self.record(
                "broker_death",
                f"broker {b} died (not registered when this controller took over)",
                broker=int(b),
            )

    def subscribe(self, listener: Callable[[dict[str, Any]], None]) -> Callable[[], None]:
        """Call ``listener(event)`` for each new event; returns the unsubscribe function."""
        self._listeners.append(listener)
        return lambda: self._listeners.remove(listener) if listener in self._listeners else None

    # -- the active controller's lifecycle ----------------------------------------------------

    async def take_over(self, controller_epoch: int) -> None:
        """This controller became active: load the persisted history, append to it."""
        self.controller_epoch = controller_epoch
        self._active = True
        previous: list[dict[str, Any]] = []
        if self.zk is not None:
            try:
                previous = await read_history(self.zk)
            except ZkError:
                log.warning("controller history: cannot read %s; starting afresh", HISTORY_PATH)
        mine = [e for e in self.events if e.get("controller_epoch") == controller_epoch]
        self.events.clear()
        self.events.extend(previous)
        self.events.extend(mine)
        self._encoded.clear()
        self._encoded.extend(encode_event(e) for e in self.events)
        before = next(
            (e for e in reversed(previous) if e.get("controller") != self.broker_id), None
        )
        was = f" (previous controller: broker {before['controller']})" if before else ""
        self.record(
            "controller_failover",
            f"broker {self.broker_id} became the controller, epoch {controller_epoch}{was}",
            broker=self.broker_id,
        )

    def resign(self) -> None:
        """No longer active: never write again (a pending write is dropped)."""
        self._active = False
        if self._flush is not None:
            self._flush.cancel()
            self._flush = None

    async def close(self) -> None:
        self.resign()
        if self._writing is not None:
            self._writing.cancel()
            with contextlib.suppress(asyncio.CancelledError, ZkError):
                await self._writing

    # -- persistence (module rule 2) -------------------------------------------------------

    def _schedule_write(self) -> None:
        self._dirty = True
        if not self._active or self.zk is None or self._flush is not None:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return
        self._flush = loop.call_later(FLUSH_INTERVAL_S, self._start_write)

    def _start_write(self) -> None:
        self._flush = None
        if not self._active or not self._dirty:
            return
        if self._writing is not None and not self._writing.done():
            self._schedule_write()  # one write at a time; the next batch follows
            return
        self._dirty = False
        data = join_history(list(self._encoded))
        self._writing = asyncio.get_running_loop().create_task(self._write(data))

    async def _write(self, data: bytes) -> None:
        assert self.zk is not None
        try:
            await self.zk.call(write_history_blocking, self.zk.kazoo, data)
            self.writes += 1
        except ZkError as exc:
            self.write_failures += 1
            log.warning("controller history: write failed (%s); retried with the next", exc)
            self._schedule_write()


def encode_history(events: Iterable[Mapping[str, Any]]) -> bytes:
    """``{"version":1,"events":[...]}``, at most ``MAX_BYTES`` (oldest dropped)."""
    return join_history([encode_event(e) for e in events])


def encode_event(event: Mapping[str, Any]) -> bytes:
    """One event's compact JSON, as ``encode_history`` writes it."""
    return json.dumps(event, separators=(",", ":")).encode()


def join_history(encoded: list[bytes]) -> bytes:
    """``encode_history`` of events already encoded one by one (``encode_event``): the
    same bytes as ``json.dumps`` of the whole document."""
    kept = encoded
    while True:
        data = b'{"version":1,"events":[' + b",".join(kept) + b"]}"
        if len(data) <= MAX_BYTES or not kept:
            return data
        kept = kept[len(kept) // 4 or 1 :]


def decode_history(data: bytes | None) -> list[dict[str, Any]]:
    """The events of the znode's JSON (empty when absent or not ours)."""
    if not data:
        return []
    try:
        obj = json.loads(data)
    except (ValueError, UnicodeDecodeError):
        log.warning("controller history: %s is not JSON; ignored", HISTORY_PATH)
        return []
    events = obj.get("events") if isinstance(obj, dict) else None
    if not isinstance(events, list):
        return []
    return [e for e in events if isinstance(e, dict)]


async def read_history(zk: ZkClient) -> list[dict[str, Any]]:
    """The persisted history (any broker; ZkError when ZooKeeper cannot be reached)."""
    return decode_history(await zk.call(read_history_blocking, zk.kazoo))


__all__ = [
    "CAPACITY",
    "FLUSH_INTERVAL_S",
    "HISTORY_PATH",
    "Cause",
    "ControllerHistory",
    "after_failover",
    "classify",
    "dead_brokers",
    "decode_history",
    "encode_event",
    "encode_history",
    "join_history",
    "read_history",
]
