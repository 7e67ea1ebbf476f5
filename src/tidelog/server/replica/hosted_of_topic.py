"""The hosted partitions of one topic, listed again only when the hosted set changed.

The group and transaction coordinators look for the partitions of their internal topic
(``__consumer_offsets``, ``__transaction_state``) they lead at every timer tick (10 per
second). Walking every hosted partition for that cost each coordinator ~8 % of a core with
5,000 replicas on an idle broker of the 2-CPU VM; this walks the few partitions of the one
topic, and the whole set only after ``ReplicaManager.hosting_generation`` moved.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

from tidelog.model import TopicPartition


class HostingReplicas(Protocol):
    """What is read of the replica manager (a fake without a generation is walked each
    time)."""

    @property
    def partitions(self) -> Mapping[TopicPartition, object]: ...


class HostedOfTopic:
    """``hosted()``: this broker's hosted partitions of ``topic``."""

    def __init__(self, replicas: HostingReplicas, topic: str) -> None:
        self._replicas = replicas
        self._topic = topic
        self._generation: int | None = None
        self._listed: list[TopicPartition] = []

    def hosted(self) -> list[TopicPartition]:
        generation = getattr(self._replicas, "hosting_generation", None)
        if generation is None or generation != self._generation:
            self._listed = [tp for tp in list(self._replicas.partitions) if tp.topic == self._topic]
            self._generation = generation
        return self._listed


__all__ = ["HostedOfTopic", "HostingReplicas"]
