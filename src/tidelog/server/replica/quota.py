"""Replication throttles (KIP-73): cap the bytes a second that catching-up replicas move, so
a partition reassignment or a broker coming back does not starve producers and consumers.

Theory of operation (Kafka's ``ReplicationQuotaManager``, one for the LEADER side and one
for the FOLLOWER side of each broker):

1. Rates are broker configs, applied live (KIP-226): ``leader.replication.throttled.rate``
   caps what this broker sends to followers, ``follower.replication.throttled.rate`` what its
   fetchers take from leaders, in bytes a second; Kafka's default Long.MAX is "no throttle".
2. WHICH replicas are throttled is a topic config, a list of ``partition:broker`` pairs or
   ``*`` for all: ``leader.replication.throttled.replicas`` names the replicas throttled when
   they LEAD (a pair ``P:B`` throttles partition P on broker B while B sends it), and
   ``follower.replication.throttled.replicas`` the replicas throttled when they FOLLOW (B's
   fetcher taking P). Each broker keeps only the pairs naming itself (``throttled_partitions``).
   ``kafka-reassign-partitions --throttle`` writes the current replicas in the leader list
   and the moving ones in the follower list. An item that is neither a pair nor ``*`` is
   INVALID_CONFIG with Kafka's ``ThrottledReplicaListValidator`` message
   (``parse_throttled_replicas``); an empty list throttles nothing.
3. The measured rate is Kafka's ``Rate`` over a ``SampledStat``: ``window_num`` samples of
   ``window_size_s`` seconds (``replication.quota.window.num`` = 11,
   ``replication.quota.window.size.seconds`` = 1). Samples older than the whole window are
   forgotten; the elapsed time divided by is at least ``window_num - 1`` windows, so a quiet
   quota allows a burst of about ``rate * (window_num - 1) * window_size_s`` bytes before it
   holds back. The quota is exceeded when the measured rate is above the bound (Kafka's
   ``Quota.acceptable`` is ``value <= bound``).
4. Throttling holds back only replicas OUT of the ISR (Kafka: "to avoid ISR thrashing"): an
   in-sync follower is never delayed, so ``acks=all`` produces never wait on a throttle.
   - Leader (``should_throttle(tp, in_sync=follower in the partition's ISR)``): a throttled
     partition's data is left out of a follower's Fetch answer (empty records, no error)
     while the leader quota is exceeded; such a partition does not count towards the
     fetch's ``min_bytes`` either (Kafka's ``DelayedFetch``). The bytes sent for throttled
     partitions are recorded after the answer is read.
   - Follower (``should_throttle(tp, in_sync=caught up to the leader's high watermark at
     the last fetch)``): the fetcher leaves the partition out of its Fetch request while the
     follower quota is exceeded; the bytes it fetched for throttled partitions are recorded.
5. The quota is pure: time comes from an injected ``clock`` (milliseconds), nothing here
   does IO. ``ReplicationQuotas`` pairs the two sides and applies topic configs and rates.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from tidelog.model import TopicPartition
from tidelog.server.config.throttles import (
    ALL_REPLICAS,
    DEFAULT_WINDOW_NUM,
    DEFAULT_WINDOW_SIZE_SECONDS,
    FOLLOWER_THROTTLED_REPLICAS,
    LEADER_THROTTLED_REPLICAS,
    AllReplicas,
    throttled_partitions,
)
from tidelog.server.config.values import LONG_MAX


def monotonic_ms() -> int:
    return time.monotonic_ns() // 1_000_000


# --- the rate (rule 3) -----------------------------------------------------------------


@dataclass(slots=True)
class _Sample:
    start_ms: int
    value: float = 0.0


@dataclass(slots=True)
class WindowedRate:
    """Kafka's ``Rate`` over a ``SampledStat`` of ``window_num`` samples of ``window_ms``."""

    window_num: int
    window_ms: int
    _samples: list[_Sample] = field(default_factory=list)
    _current: int = 0

    def __post_init__(self) -> None:
        if self.window_num < 1 or self.window_ms < 1:
            raise ValueError("a rate needs at least one window of at least 1 ms")

    def _sample(self, now_ms: int) -> _Sample:
        if not self._samples:
            self._samples.append(_Sample(now_ms))
            self._current = 0
        return self._samples[self._current]

    def record(self, value: float, now_ms: int) -> None:
        sample = self._sample(now_ms)
        if now_ms - sample.start_ms >= self.window_ms:
            self._current = (self._current + 1) % self.window_num
            if self._current >= len(self._samples):
                self._samples.append(_Sample(now_ms))
            else:
                self._samples[self._current] = _Sample(now_ms)
            sample = self._samples[self._current]
        sample.value += value

    def measure(self, now_ms: int) -> float:
        """Recorded value a second over the samples' span (at least ``window_num - 1``
        windows: Kafka's ``Rate.windowSize``)."""
        total = self.total(now_ms)
        return total * 1000.0 / max(self.span_ms(now_ms), 1)

    def total(self, now_ms: int) -> float:
        """What the live samples hold (samples older than the whole window are forgotten)."""
        self._purge(now_ms)
        return sum(s.value for s in self._samples)

    def span_ms(self, now_ms: int) -> int:
        """Kafka's ``Rate.windowSize``: the samples' span, at least ``window_num - 1``
        windows (what ``measure`` divides by; a throttle time is a share of it)."""
        self._purge(now_ms)
        oldest = min((s.start_ms for s in self._samples), default=now_ms)
        elapsed_ms = now_ms - oldest
        full_windows = elapsed_ms // self.window_ms
        min_full_windows = self.window_num - 1
        if full_windows < min_full_windows:
            elapsed_ms += (min_full_windows - full_windows) * self.window_ms
        return elapsed_ms

    def _purge(self, now_ms: int) -> None:
        expire_ms = self.window_num * self.window_ms
        for i, sample in enumerate(self._samples):
            if now_ms - sample.start_ms >= expire_ms:
                self._samples[i] = _Sample(now_ms)


# --- one side's quota (rules 3, 4) ------------------------------------------------------


class ReplicationQuota:
    """One side (leader or follower) of a broker's replication throttle."""

    def __init__(
        self,
        *,
        rate: int = LONG_MAX,
        window_num: int = DEFAULT_WINDOW_NUM,
        window_size_s: int = DEFAULT_WINDOW_SIZE_SECONDS,
        clock: Callable[[], int] = monotonic_ms,
    ) -> None:
        self.bound = rate
        self._rate = WindowedRate(window_num, window_size_s * 1000)
        self._clock = clock
        #: Throttled partitions by topic (rule 2): a set of partition ids, or all of them.
        self.throttled: dict[str, frozenset[int] | AllReplicas] = {}
        #: Bytes recorded since start (the metrics' counter).
        self.total_bytes = 0

    def update_rate(self, bytes_per_second: int) -> None:
        self.bound = bytes_per_second

    def record(self, nbytes: int) -> None:
        if nbytes > 0:
            self.total_bytes += nbytes
            self._rate.record(nbytes, self._clock())

    def rate(self) -> float:
        """The measured bytes a second (Kafka's ``byte-rate`` metric)."""
        return self._rate.measure(self._clock())

    def is_exceeded(self) -> bool:
        """Rule 3: the measured rate is above the bound."""
        if self.bound >= LONG_MAX:
            return False
        return self.rate() > self.bound

    def mark_throttled(self, topic: str, partitions: frozenset[int] | AllReplicas) -> None:
        if partitions == ALL_REPLICAS or partitions:
            self.throttled[topic] = partitions
        else:
            self.throttled.pop(topic, None)

    def remove_throttle(self, topic: str) -> None:
        self.throttled.pop(topic, None)

    def is_throttled(self, tp: TopicPartition) -> bool:
        partitions = self.throttled.get(tp.topic)
        if partitions is None:
            return False
        return partitions == ALL_REPLICAS or tp.partition in partitions

    def should_throttle(self, tp: TopicPartition, *, in_sync: bool) -> bool:
        """Rule 4: hold ``tp`` back now (out of the ISR, throttled, over the rate)."""
        return not in_sync and self.is_throttled(tp) and self.is_exceeded()


class ReplicationQuotas:
    """A broker's leader and follower quotas (Kafka's ``QuotaManagers.leader/follower``)."""

    def __init__(
        self,
        broker_id: int,
        *,
        window_num: int = DEFAULT_WINDOW_NUM,
        window_size_s: int = DEFAULT_WINDOW_SIZE_SECONDS,
        clock: Callable[[], int] = monotonic_ms,
    ) -> None:
        self.broker_id = broker_id
        self.leader = ReplicationQuota(
            window_num=window_num, window_size_s=window_size_s, clock=clock
        )
        self.follower = ReplicationQuota(
            window_num=window_num, window_size_s=window_size_s, clock=clock
        )

    def update_rates(self, *, leader: int, follower: int) -> None:
        """Rule 1: the live broker rates."""
        self.leader.update_rate(leader)
        self.follower.update_rate(follower)

    def apply_topic_config(self, topic: str, topic_config: Mapping[str, object]) -> None:
        """Rule 2: a topic's effective config (Kafka's ``TopicConfigHandler``
        ``updateThrottledList``): its lists mark its throttled partitions on both sides."""
        for key, quota in (
            (LEADER_THROTTLED_REPLICAS, self.leader),
            (FOLLOWER_THROTTLED_REPLICAS, self.follower),
        ):
            text = str(topic_config.get(key) or "").strip()
            if text:
                quota.mark_throttled(topic, throttled_partitions(text, self.broker_id))
            else:
                quota.remove_throttle(topic)


__all__ = [
    "ReplicationQuota",
    "ReplicationQuotas",
    "WindowedRate",
]
