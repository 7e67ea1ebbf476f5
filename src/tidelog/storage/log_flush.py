"""When a log flushes (``tidelog.storage.log`` rule 5): ``flush.messages`` / ``flush.ms``
counted since the last flush, else the segments that rolled since then (as Kafka flushes
after a roll, so recovery after a crash only re-reads the active segment). Nothing here
syncs anything: ``Log`` asks under its lock and fsyncs without it.
"""

from __future__ import annotations

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
