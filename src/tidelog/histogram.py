"""Millisecond timers as Prometheus histograms: fixed buckets, plain counters.

Shared by the request metrics (``tidelog.server.observability.metrics``) and the controller's
election timer (``Controller.election_times``, Kafka's LeaderElectionRateAndTimeMs): no
locks, no prometheus_client here; everything that bumps them runs on the event loop.
"""

from __future__ import annotations

from bisect import bisect_left
from typing import Final

#: Upper bounds (ms) of the request time histogram's buckets; +Inf is added. Fetch
#: long-polls (replica.fetch.wait.max.ms: 500) and acks=all produces wait for followers.
TIME_BUCKETS_MS: Final = (
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    25.0,
    50.0,
    100.0,
    250.0,
    500.0,
    1000.0,
    2500.0,
    5000.0,
    10000.0,
    30000.0,
)
#: The ``le`` label of each bucket, +Inf last.
BOUND_TEXTS: Final = (*(repr(b) for b in TIME_BUCKETS_MS), "+Inf")


class Histogram:
    """One ``...Ms`` timer: per-bucket counts (not cumulative, the last one +Inf) and the
    sum, plain numbers bumped on the event loop (tidelog.server.observability.metrics' rule 3)."""

    __slots__ = ("buckets", "sum_ms")

    def __init__(self) -> None:
        self.sum_ms = 0.0
        self.buckets = [0] * (len(TIME_BUCKETS_MS) + 1)

    @property
    def count(self) -> int:
        return sum(self.buckets)

    def observe(self, ms: float) -> None:
        self.sum_ms += ms
        self.buckets[bisect_left(TIME_BUCKETS_MS, ms)] += 1

    def cumulative(self) -> list[tuple[str, float]]:
        """``(le, count)`` pairs as a Prometheus histogram wants them."""
        out: list[tuple[str, float]] = []
        running = 0
        for bound, n in zip(BOUND_TEXTS, self.buckets, strict=True):
            running += n
            out.append((bound, running))
        return out
