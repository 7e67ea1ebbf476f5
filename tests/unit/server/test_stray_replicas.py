"""Stray replica detection (``tidelog.server.stray_replicas``)."""

from __future__ import annotations

from dataclasses import dataclass

from tidelog.model import TopicPartition
from tidelog.server.stray_replicas import stray_logs


@dataclass(frozen=True)
class P:
    replicas: tuple[int, ...]


def test_only_unhosted_logs_of_known_partitions_without_this_broker_are_stray() -> None:
    moved, kept, hosted, gone = (
        TopicPartition("t", 0),
        TopicPartition("t", 1),
        TopicPartition("t", 2),
        TopicPartition("old", 0),
    )
    strays, unknown = stray_logs(
        [moved, kept, hosted, gone],
        {moved: P((1, 2)), kept: P((0, 1)), hosted: P((1, 2))},
        {"t"},
        {hosted},
        0,
    )
    assert strays == [moved]
    assert unknown == [gone]


def test_a_replica_being_added_is_not_stray() -> None:
    tp = TopicPartition("t", 0)
    # During a reassignment the replicas are RS = target + origin: 0 is being added.
    assert stray_logs([tp], {tp: P((1, 0, 2))}, {"t"}, set(), 0) == ([], [])
