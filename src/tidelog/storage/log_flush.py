"""A log's durability bookkeeping (``tidelog.storage.log`` rules 5 and 8): when it flushes
(``flush.messages`` / ``flush.ms`` counted since the last flush, else the segments that
rolled since then, as Kafka flushes after a roll so that recovery after a crash only
re-reads the active segment) and its recovery point. Nothing here syncs anything: ``Log``
asks under its lock and fsyncs without it.
"""

from __future__ import annotations

from collections.abc import Callable

from tidelog.storage.log_config import LogConfig


class FlushSchedule:
    """Messages appended since the last flush and when that flush ran."""

    __slots__ = ("last_flush_ms", "unflushed_messages")

    def __init__(self, now_ms: int) -> None:
        self.unflushed_messages = 0
        self.last_flush_ms = now_ms

    def due(self, now_ms: int, config: LogConfig) -> bool:
        """``flush.messages`` messages appended or ``flush.ms`` passed since the last flush."""
        return (
            self.unflushed_messages >= config.flush_interval_messages
            or now_ms - self.last_flush_ms >= config.flush_interval_ms
        )

    def flushed(self, now_ms: int) -> None:
        """Everything appended so far is being flushed at ``now_ms``."""
        self.unflushed_messages = 0
        self.last_flush_ms = now_ms


class RecoveryPoint:
    """The offset below which everything is fsynced (rule 5). A truncation below it lowers
    it and calls ``listener`` at once: the LogManager rewrites
    recovery-point-offset-checkpoint there, under the log's lock, so the lowered value is
    durable before any new data can be appended past it (rule 8)."""

    __slots__ = ("listener", "offset")

    def __init__(self, offset: int) -> None:
        self.offset = offset
        self.listener: Callable[[], None] | None = None

    def lower(self, offset: int) -> None:
        """Rule 8: a lowered recovery point is made durable before the lock is released."""
        if offset >= self.offset:
            return
        self.offset = offset
        if self.listener is not None:
            self.listener()

    def restart_at(self, offset: int) -> None:
        """The log was emptied and restarts at ``offset``: lowered as by a truncation, or
        else set there (nothing is left below ``offset``; a checkpointed lower value stays
        safe, it only makes recovery re-validate more)."""
        if offset < self.offset:
            self.lower(offset)
        else:
            self.offset = offset

    def flushed(self, target: int, log_end_offset: int) -> None:
        """A flush made everything below ``target`` (at most the log end) durable."""
        self.offset = max(self.offset, min(target, log_end_offset))


def periodic_flush_target(
    schedule: FlushSchedule,
    now_ms: int,
    config: LogConfig,
    *,
    log_end_offset: int,
    active_base: int,
    recovery_point: int,
) -> int | None:
    """What a periodic flush syncs up to: the log end offset when the schedule is due and
    something is unflushed, else the active segment's base when segments rolled past the
    recovery point; None when nothing needs a flush."""
    if schedule.unflushed_messages and schedule.due(now_ms, config):
        return log_end_offset
    if active_base > recovery_point:
        return active_base
    return None
