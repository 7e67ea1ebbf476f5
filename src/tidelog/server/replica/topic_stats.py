"""Per-topic ``BrokerTopicMetrics`` counts (Kafka's BrokerTopicStats): plain integers the
replica manager's produce and fetch paths bump, read by the metrics collector at scrape time
(``tidelog.server.observability.metrics`` rule 3)."""

from __future__ import annotations

from collections.abc import Container


class TopicStats:
    """One topic's ``BrokerTopicMetrics`` counters, bumped by the replica manager's produce
    and fetch paths (``tidelog.server.observability.metrics`` rule 3). ``produced`` counts
    partition appends tried, ``appended`` those that succeeded; the difference is Kafka's
    FailedProduceRequests."""

    __slots__ = (
        "appended",
        "bytes_in",
        "bytes_out",
        "bytes_rejected",
        "failed_fetch",
        "fetched",
        "messages_in",
        "produced",
        "replication_bytes_out",
    )

    def __init__(self) -> None:
        self.produced = 0
        self.appended = 0
        self.bytes_in = 0
        self.messages_in = 0
        self.bytes_rejected = 0
        self.fetched = 0
        self.failed_fetch = 0
        self.bytes_out = 0
        self.replication_bytes_out = 0

    @property
    def failed_produce(self) -> int:
        return self.produced - self.appended

    def add(self, other: TopicStats) -> None:
        for name in TopicStats.__slots__:
            setattr(self, name, getattr(self, name) + getattr(other, name))


class BrokerTopicStats(dict[str, TopicStats]):
    """``TopicStats`` by topic, made on first use (``stats[topic].bytes_in += n``: one dict
    lookup on the request path). The counts of topics no longer hosted here move into
    ``retired`` at a scrape (``retire``): their series go, and the all-topics totals never
    go back."""

    def __init__(self) -> None:
        super().__init__()
        self.retired = TopicStats()

    def __missing__(self, topic: str) -> TopicStats:
        stats = self[topic] = TopicStats()
        return stats

    def retire(self, hosted: Container[str]) -> None:
        """Drop the topics not in ``hosted``, keeping their counts in the totals."""
        for topic in [t for t in self if t not in hosted]:
            self.retired.add(self.pop(topic))

    def all_topics(self) -> TopicStats:
        total = TopicStats()
        total.add(self.retired)
        for stats in self.values():
            total.add(stats)
        return total


__all__ = ["BrokerTopicStats", "TopicStats"]
