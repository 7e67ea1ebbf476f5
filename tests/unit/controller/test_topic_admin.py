"""CreateTopics' replica checks (``tidelog.controller.topic_admin``): an explicit assignment
checked, or replicas planned by rule 11, each refusal with Kafka's error and message."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import pytest

from tidelog.controller.topic_admin import CreateTopicResult, _given_replicas, _planned_replicas
from tidelog.errors import ErrorCode
from tidelog.model import BrokerId

LIVE = [BrokerId(1), BrokerId(2), BrokerId(3)]


def _brokers(assignment: Mapping[int, Sequence[int]]) -> dict[int, list[BrokerId]]:
    return {p: [BrokerId(r) for r in rs] for p, rs in assignment.items()}


@pytest.mark.parametrize(
    ("assignment", "message"),
    [
        ({}, "Partitions should be consecutive and start from 0"),
        ({0: [1], 2: [2]}, "Partitions should be consecutive and start from 0"),
        ({1: [1]}, "Partitions should be consecutive and start from 0"),
        ({0: [1], 1: []}, "The manual partition assignment includes an empty replica list."),
        (
            {0: [1, 2], 1: [2, 2]},
            "Duplicate brokers not allowed in replica assignment: 1 -> 2,2",
        ),
        (
            {0: [1, 2], 1: [2, 3, 1], 2: [3]},
            "Inconsistent replication factor between partitions, partition 0 has 2 while "
            "partitions [1, 2] have replication factors [3, 1], respectively.",
        ),
        ({0: [1, 4], 1: [5, 2]}, "Unknown broker(s) in replica assignment: 4, 5."),
    ],
)
def test_a_given_assignment_is_refused(
    assignment: Mapping[int, Sequence[int]], message: str
) -> None:
    assert _given_replicas(_brokers(assignment), LIVE) == CreateTopicResult(
        ErrorCode.INVALID_REPLICA_ASSIGNMENT, message
    )


def test_a_given_assignment_is_kept_as_tuples() -> None:
    assert _given_replicas(_brokers({1: [3, 1], 0: [2, 3]}), LIVE) == {1: (3, 1), 0: (2, 3)}


@pytest.mark.parametrize(
    ("partitions", "rf", "expected"),
    [
        (
            0,
            1,
            CreateTopicResult(
                ErrorCode.INVALID_PARTITIONS, "Number of partitions must be larger than 0."
            ),
        ),
        (
            1,
            0,
            CreateTopicResult(
                ErrorCode.INVALID_REPLICATION_FACTOR, "Replication factor must be larger than 0."
            ),
        ),
        (
            1,
            4,
            CreateTopicResult(
                ErrorCode.INVALID_REPLICATION_FACTOR,
                "Replication factor: 4 larger than available brokers: 3.",
            ),
        ),
    ],
)
def test_planned_replicas_refuse_bad_counts(
    partitions: int, rf: int, expected: CreateTopicResult
) -> None:
    assert _planned_replicas(partitions, rf, LIVE) == expected


def test_planned_replicas_place_every_partition_on_distinct_live_brokers() -> None:
    planned = _planned_replicas(6, 2, LIVE)
    assert not isinstance(planned, CreateTopicResult)
    assert sorted(planned) == list(range(6))
    for replicas in planned.values():
        assert len(replicas) == 2
        assert len(set(replicas)) == 2
        assert set(replicas) <= set(LIVE)
    # Rule 11: the leaders are spread round-robin over the brokers.
    assert sorted(replicas[0] for replicas in planned.values()) == [1, 1, 2, 2, 3, 3]
