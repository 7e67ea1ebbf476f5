"""Each invariant of the checker fails when fed the history it forbids (and only then)."""

from __future__ import annotations

import pytest

from tidelog.model import TopicPartition
from tidelog.testing.invariants import InvariantChecker

pytestmark = pytest.mark.sim

TP = TopicPartition("t", 0)


def kinds(c: InvariantChecker) -> list[str]:
    return [v.kind for v in c.violations]


def test_consistent_history_passes() -> None:
    c = InvariantChecker()
    c.on_make_leader(0, 0, TP, 1, [], authoritative=True)
    c.on_leader_append(1, 0, TP, 0, 10)
    c.on_high_watermark(2, 1, TP, 1, [10], leader_term=None)
    c.on_high_watermark(2, 0, TP, 1, [10], leader_term=(0, 1))
    c.on_acked(2, TP, 0, 10)
    c.on_consumed(3, TP, 0, 10)
    c.on_make_leader(4, 1, TP, 2, [10], authoritative=True)
    c.final_check(5, TP, 1, [10, 11])
    assert c.ok, c.violations


def test_log_matching_below_hw() -> None:
    c = InvariantChecker()
    c.on_high_watermark(0, 0, TP, 2, [10, 11], leader_term=(0, 1))
    c.on_high_watermark(1, 1, TP, 2, [10, 12], leader_term=None)
    assert kinds(c) == ["log-matching"]


def test_hw_above_leo_and_leader_hw_backwards() -> None:
    c = InvariantChecker()
    c.on_high_watermark(0, 0, TP, 3, [1, 2], leader_term=None)
    c.on_high_watermark(1, 0, TP, 2, [1, 2], leader_term=(0, 1))
    c.on_high_watermark(2, 0, TP, 1, [1, 2], leader_term=(0, 1))
    # A new term may start lower (a new leader learns the HW lazily).
    c.on_high_watermark(3, 0, TP, 1, [1, 2], leader_term=(0, 2))
    assert kinds(c) == ["hw-above-leo", "leader-hw-backwards"]


def test_two_leaders_in_one_epoch() -> None:
    c = InvariantChecker()
    c.on_make_leader(0, 0, TP, 3, [], authoritative=True)
    c.on_make_leader(1, 0, TP, 3, [], authoritative=True)  # the same broker again: fine
    c.on_make_leader(2, 1, TP, 3, [], authoritative=False)
    assert kinds(c) == ["two-leaders"]


def test_leader_without_committed_history_reports_lost_acks_and_phantoms() -> None:
    c = InvariantChecker()
    c.on_high_watermark(0, 0, TP, 3, [10, 11, 12], leader_term=(0, 1))
    c.on_acked(0, TP, 1, 11)
    c.on_acked(0, TP, 2, 12)
    c.on_consumed(1, TP, 2, 12)
    c.on_make_leader(2, 1, TP, 2, [10], authoritative=True)
    assert kinds(c) == ["committed-data-lost"]
    assert [(r.offset, r.record_id) for r in c.lost_acked] == [(1, 11), (2, 12)]
    assert "(2, 12)" in c.violations[0].message  # the consumed record, now a phantom
    assert c.committed(TP) == (10,)  # the new leader's history from here on


def test_stale_leader_is_not_held_to_the_history() -> None:
    c = InvariantChecker()
    c.on_high_watermark(0, 0, TP, 2, [10, 11], leader_term=(0, 1))
    c.on_make_leader(1, 1, TP, 1, [10], authoritative=False)  # superseded: not judged
    assert c.ok
    c.on_make_leader(2, 1, TP, 2, [10], authoritative=True)  # the controller's choice is
    c.on_leader_append(2, 1, TP, 1, 98)
    assert kinds(c) == ["committed-data-lost"]
    c2 = InvariantChecker()
    c2.on_high_watermark(0, 0, TP, 2, [10, 11], leader_term=(0, 1))
    c2.on_leader_append(1, 0, TP, 1, 98)
    assert kinds(c2) == ["log-matching"]


def test_truncation_below_hw_phantom_reads_and_final_loss() -> None:
    c = InvariantChecker()
    c.on_truncate(0, 1, TP, 1, 2)
    c.on_high_watermark(0, 0, TP, 1, [10], leader_term=(0, 1))
    c.on_consumed(1, TP, 0, 99)
    c.on_consumed(1, TP, 5, 50)
    c.on_consumer_out_of_range(2, TP, 4, 0, 1)
    c.on_acked(3, TP, 0, 10)
    c.final_check(4, TP, 0, [])
    assert kinds(c) == [
        "truncation-below-hw",
        "phantom-read",
        "phantom-read",
        "phantom-read",
        "acked-lost",
    ]
