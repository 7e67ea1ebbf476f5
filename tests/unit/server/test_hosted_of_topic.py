"""HostedOfTopic: one topic's hosted partitions, listed again only after the hosted set
changed (the coordinators' timer ticks walk a few partitions, not every hosted one)."""

from __future__ import annotations

from dataclasses import dataclass, field

from tidelog.model import TopicPartition
from tidelog.server.replica.hosted_of_topic import HostedOfTopic


@dataclass
class Replicas:
    partitions: dict[TopicPartition, object] = field(default_factory=dict)
    hosting_generation: int = 0


def test_listed_again_only_when_the_generation_moves() -> None:
    replicas = Replicas({TopicPartition("t", 0): 1, TopicPartition("__consumer_offsets", 3): 1})
    index = HostedOfTopic(replicas, "__consumer_offsets")
    assert index.hosted() == [TopicPartition("__consumer_offsets", 3)]
    replicas.partitions[TopicPartition("__consumer_offsets", 4)] = 1
    assert index.hosted() == [TopicPartition("__consumer_offsets", 3)]  # not walked again
    replicas.hosting_generation += 1
    assert index.hosted() == [
        TopicPartition("__consumer_offsets", 3),
        TopicPartition("__consumer_offsets", 4),
    ]


def test_replicas_without_a_generation_are_walked_every_time() -> None:
    @dataclass
    class Plain:
        partitions: dict[TopicPartition, object]

    plain = Plain({TopicPartition("x", 0): 1})
    index = HostedOfTopic(plain, "x")
    assert index.hosted() == [TopicPartition("x", 0)]
    plain.partitions[TopicPartition("x", 1)] = 1
    assert index.hosted() == [TopicPartition("x", 0), TopicPartition("x", 1)]
