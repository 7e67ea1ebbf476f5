"""Request counts and time splits per API (Kafka's RequestMetrics): the package's rule 5.

The ``Dispatcher`` and the connection mark each request (``RequestTiming``); one
``RequestStats`` per request name, made up front, keeps its count and time histograms, and
``RequestMetrics`` shows them at scrape time.
"""

from __future__ import annotations

import asyncio
import time
from bisect import bisect_left
from collections.abc import Iterable
from typing import Any, Final

from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

from tidelog.histogram import TIME_BUCKETS_MS, Histogram
from tidelog.protocol.apis import ApiKey

FETCH_CONSUMER: Final = "FetchConsumer"
FETCH_FOLLOWER: Final = "FetchFollower"


def request_name(api_key: int) -> str:
    """Kafka's name of an API (``ApiKeys.name``): ``LIST_OFFSETS`` -> ``ListOffsets``."""
    try:
        name = ApiKey(api_key).name
    except ValueError:
        return str(api_key)
    return "".join(word.capitalize() for word in name.split("_"))


#: The request time split (package rule 5): metric name suffix, Kafka's MBean name, meaning.
TIME_SPLIT: Final = (
    ("totaltimems", "TotalTimeMs", "from the request's arrival to its answer written"),
    (
        "requestqueuetimems",
        "RequestQueueTimeMs",
        "from arrival to the handler's start: decode, requests before it in the same read, "
        "the wait for the broker to be ready",
    ),
    ("localtimems", "LocalTimeMs", "in the handler, up to its answer or its parking"),
    (
        "remotetimems",
        "RemoteTimeMs",
        "parked: acks=all produces waiting for the ISR, fetches long-polling",
    ),
    (
        "responsequeuetimems",
        "ResponseQueueTimeMs",
        "from the answer being ready to its write: behind the answers before it",
    ),
    ("responsesendtimems", "ResponseSendTimeMs", "writing the answer to the socket"),
)


class RequestStats:
    """Count and time histograms of one request name (Kafka's RequestMetrics for it)."""

    __slots__ = ("name", "times")

    def __init__(self, name: str) -> None:
        self.name = name
        #: One ``Histogram`` per ``TIME_SPLIT`` entry, in its order (total first).
        self.times = tuple(Histogram() for _ in TIME_SPLIT)

    @property
    def count(self) -> int:
        """Requests answered (written, or done without an answer)."""
        return self.times[0].count

    def histogram(self, suffix: str) -> Histogram:
        """The histogram of ``TIME_SPLIT`` entry ``suffix`` (``"localtimems"``, ...)."""
        return self.times[[s for s, _, _ in TIME_SPLIT].index(suffix)]

    def record(  # noqa: PLR0917 - the marks of one request, in order
        self,
        received: float,
        started: float,
        local_done: float,
        ready: float,
        dequeued: float,
        sent: float,
    ) -> None:
        """One request answered; ``time.monotonic()`` marks (package rule 5)."""
        # Histogram.observe inlined: this runs for every request.
        bounds = TIME_BUCKETS_MS
        total, queue, local, remote, response_queue, send = self.times
        ms = (sent - received) * 1000.0
        total.sum_ms += ms
        total.buckets[bisect_left(bounds, ms)] += 1
        ms = (started - received) * 1000.0
        queue.sum_ms += ms
        queue.buckets[bisect_left(bounds, ms)] += 1
        ms = (local_done - started) * 1000.0
        local.sum_ms += ms
        local.buckets[bisect_left(bounds, ms)] += 1
        ms = (ready - local_done) * 1000.0
        remote.sum_ms += ms
        remote.buckets[bisect_left(bounds, ms)] += 1
        ms = (dequeued - ready) * 1000.0
        response_queue.sum_ms += ms
        response_queue.buckets[bisect_left(bounds, ms)] += 1
        ms = (sent - dequeued) * 1000.0
        send.sum_ms += ms
        send.buckets[bisect_left(bounds, ms)] += 1


class RequestTiming:
    """The marks of one request in flight (package rule 5): made by ``RequestMetrics.start``,
    filled in by the dispatcher, recorded when the connection has written the answer
    (``sent``, network's ``ResponseTiming``)."""

    __slots__ = ("local_done", "ready", "received", "started", "stats")

    def __init__(self, stats: tuple[RequestStats, ...], received: float) -> None:
        self.stats = stats
        self.received = received
        self.started = received
        self.local_done = received
        self.ready = received

    def answered(self, _future: object = None) -> None:
        """A parked request's answer is ready (a future's done callback)."""
        self.ready = time.monotonic()

    def sent(self, dequeued: float) -> None:
        """The connection took the answer at ``dequeued`` and has written it."""
        now = time.monotonic()
        for stats in self.stats:
            stats.record(self.received, self.started, self.local_done, self.ready, dequeued, now)


def _fetch_replica_id(body: Any) -> int:
    # A top-level field before Fetch v15, inside replica_state from v15 (KIP-903).
    replica_state = getattr(body, "replica_state", None)
    if replica_state is not None:
        return int(replica_state.replica_id)
    return int(getattr(body, "replica_id", -1))


class RequestMetrics(Collector):
    """Per-API request counts and time splits, marked by the ``Dispatcher`` and the
    connection (package rule 5)."""

    def __init__(self, api_keys: Iterable[int]) -> None:
        self._by_key: dict[int, tuple[RequestStats, ...]] = {
            k: (RequestStats(request_name(k)),) for k in api_keys
        }
        self._fetch_consumer = RequestStats(FETCH_CONSUMER)
        self._fetch_follower = RequestStats(FETCH_FOLLOWER)
        # A Fetch counts as Fetch and as FetchConsumer or FetchFollower (used only when
        # Fetch is served).
        (fetch,) = self._by_key.get(ApiKey.FETCH, (self._fetch_consumer,))
        self._consumer_fetch = (fetch, self._fetch_consumer)
        self._follower_fetch = (fetch, self._fetch_follower)

    def stats(self, name: str) -> RequestStats | None:
        """The stats of request ``name`` (``Produce``, ``FetchFollower``, ...), if kept."""
        return next((s for s in self._all() if s.name == name), None)

    def _all(self) -> list[RequestStats]:
        return [
            *(stats[0] for stats in self._by_key.values()),
            self._fetch_consumer,
            self._fetch_follower,
        ]

    def start(self, api_key: int, body: Any, received: float) -> RequestTiming | None:
        """A decoded request that arrived at ``received``; None for an API not kept."""
        stats = self._by_key.get(api_key)
        if stats is None:
            return None
        if api_key == ApiKey.FETCH:
            follower = _fetch_replica_id(body) >= 0
            stats = self._follower_fetch if follower else self._consumer_fetch
        return RequestTiming(stats, received)

    @staticmethod
    def dispatched(timing: RequestTiming, result: object, timings: dict[int, Any]) -> None:
        """The dispatcher is done with the request (its ``local_done`` marked): an answer
        now, a future of one, or nothing (acks=0). ``timings`` is the connection's: it
        calls ``sent`` once it has written the answer."""
        if result is None:  # no answer to write: done now
            timing.ready = timing.local_done
            timing.sent(timing.local_done)
            return
        if isinstance(result, asyncio.Future):
            result.add_done_callback(timing.answered)
        else:
            timing.ready = timing.local_done
        timings[id(result)] = timing

    def describe(self) -> Iterable[Metric]:
        return ()

    def collect(self) -> Iterable[Metric]:
        requests = CounterMetricFamily(
            "kafka_network_requestmetrics_requests",
            "Requests answered, by request name "
            "(kafka.network:type=RequestMetrics,name=RequestsPerSec,request=<name>)",
            labels=["request"],
        )
        families = [
            HistogramMetricFamily(
                f"kafka_network_requestmetrics_{suffix}",
                f"Time {meaning}, in ms "
                f"(kafka.network:type=RequestMetrics,name={mbean},request=<name>)",
                labels=["request"],
            )
            for suffix, mbean, meaning in TIME_SPLIT
        ]
        for stats in self._all():
            count = stats.count
            requests.add_metric([stats.name], count)
            if count == 0:
                continue  # histograms only for requests seen: a smaller scrape
            for family, histogram in zip(families, stats.times, strict=True):
                family.add_metric([stats.name], histogram.cumulative(), histogram.sum_ms)
        yield requests
        yield from families


__all__ = [
    "FETCH_CONSUMER",
    "FETCH_FOLLOWER",
    "TIME_SPLIT",
    "RequestMetrics",
    "RequestStats",
    "RequestTiming",
    "request_name",
]
