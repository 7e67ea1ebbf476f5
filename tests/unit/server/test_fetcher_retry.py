"""How long a replica fetcher waits after a round without progress (``retry_delay``)."""

from __future__ import annotations

import pytest

from tidelog.server.cluster import FetchState, retry_delay


def test_nothing_delayed_waits_the_backoff() -> None:
    assert retry_delay([FetchState(0), FetchState(1, truncating=False)], 100.0, 1.0) == 1.0
    assert retry_delay([], 100.0, 1.0) == 1.0


def test_a_partition_refused_for_now_is_asked_again_when_its_delay_ends() -> None:
    # "Not the leader yet": the partition was put off 0.2 s; the round made no progress.
    states = [FetchState(3, delayed_until=100.2), FetchState(3, delayed_until=100.5)]
    assert retry_delay(states, 100.0, 1.0) == pytest.approx(0.2)


def test_delays_already_over_or_longer_than_the_backoff_do_not_count() -> None:
    assert retry_delay([FetchState(0, delayed_until=99.0)], 100.0, 1.0) == 1.0
    assert retry_delay([FetchState(0, delayed_until=105.0)], 100.0, 1.0) == 1.0
