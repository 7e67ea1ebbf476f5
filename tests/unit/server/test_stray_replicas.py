"""Stray replica detection (``tidelog.server.replica.stray_replicas``)."""

from __future__ import annotations

from dataclasses import dataclass

from tidelog.model import TopicPartition
from tidelog.server.replica.stray_replicas import stray_logs, unknown_topic_logs


@dataclass(frozen=True)
class P:
    replicas: tuple[int, ...]


def test_listed_partitions_without_this_broker_whose_log_is_local_are_stray() -> None:
    moved, kept, hosted_moved, not_local, unlisted = (TopicPartition("t", i) for i in range(5))
    local = {moved, kept, hosted_moved, unlisted}
    strays = stray_logs(
        {moved: P((1, 2)), kept: P((0, 1)), hosted_moved: P((2, 1)), not_local: P((1, 2))},
        local.__contains__,
        0,
    )
    # A hosted replica the controller removed (its StopReplica lost with the controller
    # that sent nothing after writing the new assignment) is a stray too; a partition the
    # request does not list is not judged.
    assert strays == [moved, hosted_moved]


def test_a_replica_being_added_is_not_stray() -> None:
    tp = TopicPartition("t", 0)
    # During a reassignment the replicas are RS = target + origin: 0 is being added.
    assert stray_logs({tp: P((1, 0, 2))}, lambda _tp: True, 0) == []


def test_logs_of_unknown_topics_are_reported_not_judged() -> None:
    known, gone = TopicPartition("t", 0), TopicPartition("old", 3)
    assert unknown_topic_logs([known, gone], {"t"}) == [gone]
