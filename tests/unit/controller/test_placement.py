"""Replica placement with and without racks (``tidelog.controller.placement``): Kafka's own
examples from ``AdminRackAwareTest``, then properties over random clusters."""

from __future__ import annotations

from collections import Counter

from hypothesis import given
from hypothesis import strategies as st

from tidelog.controller.placement import (
    NOT_ALL_BROKERS_HAVE_RACKS,
    PlacementError,
    place_replicas,
    rack_alternated_brokers,
)
from tidelog.errors import ErrorCode
from tidelog.model import BrokerId

KAFKA_RACKS = {
    BrokerId(0): "rack1",
    BrokerId(1): "rack3",
    BrokerId(2): "rack3",
    BrokerId(3): "rack2",
    BrokerId(4): "rack2",
    BrokerId(5): "rack1",
}


def test_rack_alternated_broker_list_is_kafkas() -> None:
    assert rack_alternated_brokers(KAFKA_RACKS) == [0, 3, 1, 5, 4, 2]
    without_5 = {b: r for b, r in KAFKA_RACKS.items() if b != 5}
    assert rack_alternated_brokers(without_5) == [0, 3, 1, 4, 2]


def test_rack_aware_placement_matches_kafka_for_a_fixed_start() -> None:
    """``testGetRackAlternatedBrokerListAndAssignReplicasToBrokers``: 7 partitions, RF 3,
    start index 0, shift 0."""
    got = place_replicas(KAFKA_RACKS, 7, 3, start_index=0, replica_shift=0)
    assert got == [[0, 3, 1], [3, 1, 5], [1, 5, 4], [5, 4, 2], [4, 2, 0], [2, 0, 3], [0, 4, 2]]


def test_rack_unaware_placement_matches_kafka_for_a_fixed_start() -> None:
    """``testReplicaAssignment``: brokers 0-4, 10 partitions, RF 3, start 0."""
    brokers = {BrokerId(b): None for b in range(5)}
    got = place_replicas(brokers, 10, 3, start_index=0, replica_shift=0)
    assert got == [
        [0, 1, 2], [1, 2, 3], [2, 3, 4], [3, 4, 0], [4, 0, 1],
        [0, 2, 3], [1, 3, 4], [2, 4, 0], [3, 0, 1], [4, 1, 2],
    ]  # fmt: skip


def test_new_partitions_count_shifts_from_the_first_new_partition() -> None:
    """CreatePartitions places partitions 5.. with Kafka's ``startPartitionId``: the shift
    grows only at the multiples of n met from there (partition 5 of 5 brokers: once)."""
    brokers = {BrokerId(b): None for b in range(5)}
    got = place_replicas(brokers, 2, 3, start_index=0, replica_shift=0, start_partition_id=5)
    assert got == [[0, 2, 3], [1, 3, 4]]
    racked = place_replicas(KAFKA_RACKS, 1, 3, start_index=0, replica_shift=0, start_partition_id=6)
    assert racked == [[0, 4, 2]]


def test_bad_counts_and_mixed_racks_are_refused_with_kafkas_messages() -> None:
    brokers = {BrokerId(1): "a", BrokerId(2): "b"}
    assert place_replicas(brokers, 0, 1, start_index=0, replica_shift=0) == PlacementError(
        ErrorCode.INVALID_PARTITIONS, "Number of partitions must be larger than 0."
    )
    assert place_replicas(brokers, 1, 0, start_index=0, replica_shift=0) == PlacementError(
        ErrorCode.INVALID_REPLICATION_FACTOR, "Replication factor must be larger than 0."
    )
    assert place_replicas(brokers, 1, 3, start_index=0, replica_shift=0) == PlacementError(
        ErrorCode.INVALID_REPLICATION_FACTOR,
        "Replication factor: 3 larger than available brokers: 2.",
    )
    mixed = {BrokerId(1): "a", BrokerId(2): None}
    assert place_replicas(mixed, 1, 1, start_index=0, replica_shift=0) == PlacementError(
        ErrorCode.UNKNOWN_SERVER_ERROR, NOT_ALL_BROKERS_HAVE_RACKS
    )
    assert NOT_ALL_BROKERS_HAVE_RACKS == (
        "Not all brokers have rack information for replica rack aware assignment."
    )


@st.composite
def racked_clusters(draw: st.DrawFn) -> tuple[dict[BrokerId, str], int, int, int, int]:
    n_brokers = draw(st.integers(1, 12))
    ids = draw(st.lists(st.integers(0, 100), min_size=n_brokers, max_size=n_brokers, unique=True))
    n_racks = draw(st.integers(1, n_brokers))
    racks = {BrokerId(b): f"r{draw(st.integers(0, n_racks - 1))}" for b in ids}
    rf = draw(st.integers(1, n_brokers))
    start = draw(st.integers(0, n_brokers - 1))
    shift = draw(st.integers(0, n_brokers - 1))
    partitions = draw(st.integers(1, 40))
    return racks, rf, start, shift, partitions


@given(racked_clusters())
def test_replicas_span_as_many_racks_as_they_can(
    case: tuple[dict[BrokerId, str], int, int, int, int],
) -> None:
    """Every partition: RF distinct brokers on min(RF, racks) distinct racks; its first
    min(RF, racks) replicas are each on a rack of their own (a rack holds a second replica
    only once every rack holds one)."""
    racks, rf, start, shift, partitions = case
    got = place_replicas(racks, partitions, rf, start_index=start, replica_shift=shift)
    assert isinstance(got, list)
    assert len(got) == partitions
    n_racks = len(set(racks.values()))
    for replicas in got:
        assert len(replicas) == rf == len(set(replicas))
        per_rack = Counter(racks[b] for b in replicas)
        assert len(per_rack) == min(rf, n_racks)
        first = replicas[: min(rf, n_racks)]
        assert len({racks[b] for b in first}) == len(first)


@given(racked_clusters())
def test_leaders_spread_over_the_brokers(
    case: tuple[dict[BrokerId, str], int, int, int, int],
) -> None:
    """Leaders go round the rack-alternated list: over any n consecutive partitions each
    broker leads exactly once, so two brokers' leader counts differ by at most one."""
    racks, rf, start, shift, partitions = case
    got = place_replicas(racks, partitions, rf, start_index=start, replica_shift=shift)
    assert isinstance(got, list)
    leaders = Counter(replicas[0] for replicas in got)
    counts = [leaders.get(b, 0) for b in racks]
    assert max(counts) - min(counts) <= 1
    arranged = rack_alternated_brokers(racks)
    assert [r[0] for r in got] == [arranged[(p + start) % len(racks)] for p in range(partitions)]


@given(racked_clusters())
def test_without_racks_placement_is_rule_11(
    case: tuple[dict[BrokerId, str], int, int, int, int],
) -> None:
    """No broker with a rack: the rack-unaware placement, over the brokers sorted by id."""
    racks, rf, start, shift, partitions = case
    brokers: dict[BrokerId, str | None] = dict.fromkeys(racks, None)
    got = place_replicas(brokers, partitions, rf, start_index=start, replica_shift=shift)
    assert isinstance(got, list)
    ordered = sorted(racks)
    assert [r[0] for r in got] == [ordered[(p + start) % len(ordered)] for p in range(partitions)]
    assert all(len(set(r)) == rf for r in got)
