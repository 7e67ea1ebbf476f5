"""Where new partitions' replicas go (Kafka's ``AdminUtils.assignReplicasToBrokers``), with
or without racks (``broker.rack``, KIP-36). Pure: brokers and their racks in, replica lists
or a ``PlacementError`` out; the random start index and shift are arguments.

Theory of operation:

1. The counts are checked first, with Kafka's messages: partitions > 0
   (INVALID_PARTITIONS), 0 < replication factor <= brokers (INVALID_REPLICATION_FACTOR).
2. No broker has a rack: rule 11 over the brokers sorted by id
   (``decisions.assign_replicas``, Kafka's ``assignReplicasToBrokersRackUnaware``).
3. Every broker has a rack: Kafka's ``assignReplicasToBrokersRackAware``. The brokers are
   interleaved by rack (``rack_alternated_brokers``: racks sorted, each rack's brokers
   sorted by id, one from each rack in turn), so consecutive leaders sit on different racks
   and leaders spread over brokers and racks. Partition p's leader is
   ``arranged[(p + start) mod n]``; its followers are walked from there with Kafka's
   ``replicaIndex`` and a shift of ``shift * racks`` (the shift grows by one every n
   partitions), skipping a broker whose rack already holds a replica of p while some rack
   holds none, and a broker already holding one while some broker holds none. So the
   replicas of a partition are on min(RF, racks) distinct racks, and on RF distinct
   brokers.
4. Some brokers have a rack and some not: refused. Kafka raises ``AdminOperationException``
   ("Not all brokers have rack information for replica rack aware assignment."), which
   CreateTopics and CreatePartitions answer as UNKNOWN_SERVER_ERROR without a message
   (``ApiError.fromThrowable`` hides an unknown error's text); the broker logs the text.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from tidelog.controller.decisions import assign_replicas, replica_index
from tidelog.errors import ErrorCode
from tidelog.model import BrokerId

#: Kafka's ``AdminOperationException`` text for rule 4.
NOT_ALL_BROKERS_HAVE_RACKS: Final = (
    "Not all brokers have rack information for replica rack aware assignment."
)


@dataclass(frozen=True, slots=True)
class PlacementError:
    """Why no placement was made: Kafka's error code and its message."""

    error: ErrorCode
    message: str


def place_replicas(
    brokers: Mapping[BrokerId, str | None],
    n_partitions: int,
    replication_factor: int,
    *,
    start_index: int,
    replica_shift: int,
    start_partition_id: int = 0,
) -> list[list[BrokerId]] | PlacementError:
    """Replicas of partitions ``start_partition_id`` .. ``+ n_partitions - 1`` over
    ``brokers`` (id -> rack, None: no rack), leader first (rules 1-4)."""
    if n_partitions <= 0:
        return PlacementError(
            ErrorCode.INVALID_PARTITIONS, "Number of partitions must be larger than 0."
        )
    if replication_factor <= 0:
        return PlacementError(
            ErrorCode.INVALID_REPLICATION_FACTOR, "Replication factor must be larger than 0."
        )
    if replication_factor > len(brokers):
        return PlacementError(
            ErrorCode.INVALID_REPLICATION_FACTOR,
            f"Replication factor: {replication_factor} larger than available brokers: "
            f"{len(brokers)}.",
        )
    racks = {b: r for b, r in brokers.items() if r is not None}
    if not racks:
        placed = assign_replicas(
            n_partitions,
            replication_factor,
            list(brokers),
            start_index=start_index,
            replica_shift=replica_shift,
            start_partition_id=start_partition_id,
        )
        assert not isinstance(placed, ErrorCode)  # rule 1 checked the counts
        return placed
    if len(racks) != len(brokers):
        return PlacementError(ErrorCode.UNKNOWN_SERVER_ERROR, NOT_ALL_BROKERS_HAVE_RACKS)
    return assign_replicas_rack_aware(
        racks,
        n_partitions,
        replication_factor,
        start_index=start_index,
        replica_shift=replica_shift,
        start_partition_id=start_partition_id,
    )


def rack_alternated_brokers(racks: Mapping[BrokerId, str]) -> list[BrokerId]:
    """Kafka's ``getRackAlternatedBrokerList``: racks in sorted order, taking the next
    broker (by id) of each in turn, skipping racks that have run out."""
    by_rack: dict[str, list[BrokerId]] = {}
    for broker, rack in sorted(racks.items()):
        by_rack.setdefault(rack, []).append(broker)
    queues = [by_rack[rack] for rack in sorted(by_rack)]
    arranged: list[BrokerId] = []
    for depth in range(max((len(q) for q in queues), default=0)):
        arranged.extend(q[depth] for q in queues if depth < len(q))
    return arranged


def assign_replicas_rack_aware(
    racks: Mapping[BrokerId, str],
    n_partitions: int,
    replication_factor: int,
    *,
    start_index: int,
    replica_shift: int,
    start_partition_id: int = 0,
) -> list[list[BrokerId]]:
    """Rule 3 (Kafka's ``assignReplicasToBrokersRackAware``); the counts are the caller's
    to check (0 < replication factor <= brokers)."""
    arranged = rack_alternated_brokers(racks)
    n = len(arranged)
    num_racks = len(set(racks.values()))
    result: list[list[BrokerId]] = []
    shift = replica_shift
    for p in range(start_partition_id, start_partition_id + n_partitions):
        if p > 0 and p % n == 0:
            shift += 1
        first = (p + start_index) % n
        leader = arranged[first]
        replicas = [leader]
        racks_used = {racks[leader]}
        k = 0
        while len(replicas) < replication_factor:
            broker = arranged[replica_index(first, shift * num_racks, k, n)]
            k += 1
            rack = racks[broker]
            # Invariant: a rack holds a second replica only once every rack holds one, and
            # a broker never holds two (RF <= n, so the walk always finds one).
            if (rack not in racks_used or len(racks_used) == num_racks) and (
                broker not in replicas
            ):
                replicas.append(broker)
                racks_used.add(rack)
        result.append(replicas)
    return result


__all__ = [
    "NOT_ALL_BROKERS_HAVE_RACKS",
    "PlacementError",
    "assign_replicas_rack_aware",
    "place_replicas",
    "rack_alternated_brokers",
]
