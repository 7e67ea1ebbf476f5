"""A log's durability bookkeeping (``tidelog.storage.log_flush``) and its truncation
record (``tidelog.storage.log_truncation``), without a Log."""

from __future__ import annotations

from tidelog.storage.log_config import LogConfig
from tidelog.storage.log_flush import FlushSchedule, RecoveryPoint, periodic_flush_target
from tidelog.storage.log_truncation import Truncations


def test_a_flush_is_due_by_messages_or_by_time() -> None:
    config = LogConfig(flush_interval_messages=3, flush_interval_ms=100)
    schedule = FlushSchedule(now_ms=1000)
    schedule.unflushed_messages = 2
    assert not schedule.due(1099, config)
    assert schedule.due(1100, config)
    schedule.unflushed_messages = 3
    assert schedule.due(1000, config)
    schedule.flushed(2000)
    assert (schedule.unflushed_messages, schedule.last_flush_ms) == (0, 2000)
    assert not FlushSchedule(now_ms=0).due(10**9, LogConfig())  # "never" by default


def test_the_periodic_flush_target() -> None:
    config = LogConfig(flush_interval_messages=1)
    schedule = FlushSchedule(now_ms=0)

    def target(active_base: int, recovery_point: int) -> int | None:
        return periodic_flush_target(
            schedule,
            5,
            config,
            log_end_offset=50,
            active_base=active_base,
            recovery_point=recovery_point,
        )

    assert target(active_base=40, recovery_point=40) is None
    assert target(active_base=40, recovery_point=10) == 40  # segments rolled since: flushed
    schedule.unflushed_messages = 1
    assert target(active_base=40, recovery_point=40) == 50


def test_a_lowered_recovery_point_calls_its_listener_at_once() -> None:
    calls: list[int] = []
    point = RecoveryPoint(100)
    point.lower(50)  # no listener yet
    point.listener = lambda: calls.append(point.offset)
    point.lower(60)  # not lower: nothing
    point.lower(40)
    assert (point.offset, calls) == (40, [40])
    point.flushed(90, log_end_offset=70)
    assert point.offset == 70
    point.flushed(10, log_end_offset=70)
    assert point.offset == 70
    point.restart_at(80)  # above: set, no listener
    assert (point.offset, calls) == (80, [40])
    point.restart_at(5)
    assert (point.offset, calls) == (5, [40, 5])


def test_truncations_keep_a_generation_and_the_lowest_floor_until_taken() -> None:
    record = Truncations()
    assert (record.generation, record.take_floor()) == (0, None)
    record.note_floor(30)
    record.note_floor(50)
    assert record.take_floor() == 30
    assert record.take_floor() is None
    record.note_floor(-1)
    record.note_floor(20)
    assert record.take_floor() == -1
