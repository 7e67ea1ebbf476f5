"""CreateTopics' replica checks (``tidelog.controller.topic_admin``): an explicit assignment
checked, or replicas planned (``placement``: rule 11, rack-aware with racks), each refusal
with Kafka's error and message."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import pytest

from tidelog.controller.topic_admin import CreateTopicResult, _given_replicas, _planned_replicas
from tidelog.errors import ErrorCode
from tidelog.model import BrokerId

LIVE: dict[BrokerId, str | None] = {BrokerId(1): None, BrokerId(2): None, BrokerId(3): None}


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


def test_planned_replicas_with_racks_put_each_partition_on_distinct_racks() -> None:
    racked: dict[BrokerId, str | None] = {BrokerId(b): "abc"[(b - 1) % 3] for b in range(1, 7)}
    planned = _planned_replicas(12, 3, racked)
    assert not isinstance(planned, CreateTopicResult)
    for replicas in planned.values():
        assert sorted(racked[b] or "" for b in replicas) == ["a", "b", "c"]


def test_planned_replicas_refuse_brokers_with_and_without_racks(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Kafka answers its AdminOperationException as UNKNOWN_SERVER_ERROR, no message; the
    broker logs the text."""
    mixed: dict[BrokerId, str | None] = {BrokerId(1): "a", BrokerId(2): None}
    assert _planned_replicas(1, 1, mixed) == CreateTopicResult(ErrorCode.UNKNOWN_SERVER_ERROR)
    assert "Not all brokers have rack information for replica rack aware assignment." in (
        caplog.text
    )
