"""What ``tidelog reassign`` plans and reports (pure): generate's proposal, the KIP-73
throttles of a set of moves, and verify's view of each partition (Kafka's
``ReassignPartitionsCommand`` helpers of the same names).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Final

from tidelog.cli.output import CommandError, UsageError
from tidelog.cli.reassign_files import Assignment
from tidelog.client import reassign_admin as ra
from tidelog.controller.placement import PlacementError, place_replicas
from tidelog.model import BrokerId, TopicPartition

#: Kafka's ``ReassignPartitionsCommand.getBrokerMetadata`` refusal (an
#: ``AdminOperationException``: the tool prints it and exits 1).
NOT_ALL_BROKERS_HAVE_RACKS: Final = (
    "Not all brokers have rack information. Add --disable-rack-aware in command line to make "
    "replica assignment without rack information."
)


def placement_brokers(
    brokers: Collection[int], racks: Mapping[int, str | None], *, rack_aware: bool = True
) -> dict[BrokerId, str | None]:
    """Kafka's ``getBrokerMetadata``: the brokers of the list with their racks (``racks``:
    the live brokers'), none with ``--disable-rack-aware``; CommandError when some have a
    rack and some not."""
    chosen = {BrokerId(b): racks.get(b) if rack_aware else None for b in sorted(brokers)}
    rackless = sum(1 for r in chosen.values() if r is None)
    if rack_aware and rackless not in (0, len(chosen)):
        raise CommandError(NOT_ALL_BROKERS_HAVE_RACKS)
    return chosen


def propose_assignment(
    current: Assignment, topics: Sequence[str], brokers: Mapping[BrokerId, str | None]
) -> dict[TopicPartition, list[int]]:
    """generate's proposal (see :mod:`tidelog.cli.reassign`): each topic keeps its
    replication factor (its first partition's), placed rack-aware when ``brokers`` (id ->
    rack, ``placement_brokers``) have racks; ``UsageError`` (INVALID_REPLICATION_FACTOR)
    when it exceeds the broker list."""
    proposal: dict[TopicPartition, list[int]] = {}
    start = 0
    for topic in topics:
        parts = sorted(tp for tp in current if tp.topic == topic)
        placed = place_replicas(
            brokers, len(parts), len(current[parts[0]]), start_index=start, replica_shift=0
        )
        if isinstance(placed, PlacementError):
            raise UsageError(placed.message, code=placed.error)
        for tp, replicas in zip(parts, placed, strict=True):
            proposal[tp] = [int(r) for r in replicas]
        start += len(parts)
    return proposal


@dataclass(frozen=True, slots=True)
class ThrottlePlan:
    """KIP-73 throttles for a set of moves (see :mod:`tidelog.cli.reassign`)."""

    #: topic -> ``leader.replication.throttled.replicas`` (the existing replicas).
    leader: Mapping[str, str]
    #: topic -> ``follower.replication.throttled.replicas`` (the replicas being added).
    follower: Mapping[str, str]
    #: Every broker holding or receiving a replica of a moving partition.
    brokers: tuple[int, ...]


def throttle_plan(
    moves: Mapping[TopicPartition, tuple[Sequence[int], Sequence[int]]],
) -> ThrottlePlan:
    """Kafka's ``calculateLeaderThrottles``/``calculateFollowerThrottles``/
    ``calculateReassigningBrokers``: ``moves`` maps a partition to (its sources, its
    target); the values are ``partition:broker`` sorted as Kafka's tree set sorts them."""
    leader: dict[str, set[str]] = {}
    follower: dict[str, set[str]] = {}
    brokers: set[int] = set()
    for tp, (sources, targets) in moves.items():
        leader.setdefault(tp.topic, set()).update(f"{tp.partition}:{b}" for b in sources)
        added = {f"{tp.partition}:{b}" for b in targets if b not in sources}
        follower.setdefault(tp.topic, set()).update(added)
        brokers.update(sources)
        brokers.update(targets)
    return ThrottlePlan(
        {t: ",".join(sorted(v)) for t, v in leader.items() if v},
        {t: ",".join(sorted(v)) for t, v in follower.items() if v},
        tuple(sorted(brokers)),
    )


def proposed_moves(
    proposal: Mapping[TopicPartition, Sequence[int]],
    current: Assignment,
    ongoing: Mapping[TopicPartition, ra.OngoingReassignment],
) -> dict[TopicPartition, tuple[Sequence[int], Sequence[int]]]:
    """Kafka's ``calculateProposedMoveMap``: every running reassignment (its original
    replicas to its target) and the proposal, whose sources are those of a running
    reassignment of the partition, else its current replicas. The topic throttles are set
    as a whole, so running ones must be in them."""
    moves: dict[TopicPartition, tuple[Sequence[int], Sequence[int]]] = {
        tp: (r.origin, r.target) for tp, r in ongoing.items()
    }
    for tp, target in proposal.items():
        running = ongoing.get(tp)
        moves[tp] = (running.origin if running else current[tp], target)
    return moves


@dataclass(frozen=True, slots=True)
class PartitionState:
    """verify's view of one partition (Kafka's ``PartitionReassignmentState``)."""

    current: tuple[int, ...]
    target: tuple[int, ...]
    done: bool

    def describe(self, tp: TopicPartition) -> str:
        if not self.done:
            return f"Reassignment of partition {tp} is still in progress."
        if self.current == self.target:
            return f"Reassignment of partition {tp} is completed."
        return (
            f"There is no active reassignment of partition {tp}, but replica set is "
            f"{','.join(map(str, self.current))} rather than {','.join(map(str, self.target))}."
        )


def partition_states(
    targets: Assignment,
    ongoing: Mapping[TopicPartition, ra.OngoingReassignment],
    current: Assignment,
) -> dict[TopicPartition, PartitionState]:
    """Kafka's ``findPartitionReassignmentStates``: in progress while listed; else done,
    compared with the replicas the metadata shows (none for a partition that is gone)."""
    states = {}
    for tp, target in targets.items():
        running = ongoing.get(tp)
        if running is not None:
            states[tp] = PartitionState(running.replicas, tuple(target), False)
        else:
            states[tp] = PartitionState(tuple(current.get(tp, ())), tuple(target), True)
    return states
