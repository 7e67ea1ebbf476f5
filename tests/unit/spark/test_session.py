"""The connector's one backoff schedule (sync and async callers sleep on its delays)."""

from __future__ import annotations

import pytest

from tidelog.spark.errors import ConnectorError
from tidelog.spark.session import Backoff


def test_delays_double_from_100_ms_to_2_s() -> None:
    backoff = Backoff(deadline=1_000.0, what="reading t-0")
    delays = [backoff.next_delay(0.0, "NOT_LEADER_OR_FOLLOWER") for _ in range(8)]
    assert delays == [0.1, 0.2, 0.4, 0.8, 1.6, 2.0, 2.0, 2.0]
    assert backoff.attempts == 8


def test_reset_starts_over_at_100_ms() -> None:
    backoff = Backoff(deadline=1_000.0, what="producing")
    for _ in range(4):
        backoff.next_delay(0.0, "timeout")
    backoff.reset()
    assert backoff.next_delay(0.0, "timeout") == 0.1


def test_a_wait_past_the_deadline_gives_up_naming_the_last_error() -> None:
    backoff = Backoff(deadline=10.0, what="offsets of t")
    assert backoff.next_delay(9.85, "first") == 0.1
    # The next wait (0.2 s) would end past the deadline.
    with pytest.raises(
        ConnectorError, match=r"offsets of t: gave up after 2 attempts; last error: second"
    ):
        backoff.next_delay(9.85, "second")
