"""Topic creation and partition growth, from any broker (Kafka's ``AdminZkClient``).

Both validate as Kafka does, place replicas over the live brokers with
``tidelog.controller.placement`` (rule 11, rack-aware when the brokers have ``broker.rack``)
and write the topic znode only; the active controller sees the change (the
``/brokers/topics`` watch, the per-topic watch) and creates the new partitions' states.
"""

from __future__ import annotations

import logging
import random
import uuid
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, replace

from tidelog.controller import placement
from tidelog.controller.context import MAX_CAS_ROUNDS
from tidelog.errors import ErrorCode
from tidelog.model import BrokerId
from tidelog.zk import TopicCreateOutcome, ZkClient, znodes
from tidelog.zk.znodes import TopicAssignment

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class CreateTopicResult:
    error: ErrorCode
    message: str | None = None
    topic_id: uuid.UUID | None = None


async def create_topic(
    zk: ZkClient,
    topic: str,
    *,
    num_partitions: int,
    replication_factor: int,
    config: Mapping[str, str] | None = None,
    assignment: Mapping[int, Sequence[BrokerId]] | None = None,
    validate_only: bool = False,
) -> CreateTopicResult:
    """Validate and write a new topic's assignment (``placement``), topic id and config.

    The active controller sees the new topic and creates its partition states. Errors are
    Kafka's, with the message CreateTopics returns: INVALID_TOPIC_EXCEPTION (17),
    INVALID_PARTITIONS (37), INVALID_REPLICATION_FACTOR (38), INVALID_REPLICA_ASSIGNMENT (39),
    TOPIC_ALREADY_EXISTS (36); UNKNOWN_SERVER_ERROR (-1) without one for a placement over
    brokers with and without racks (``placement`` rule 4).
    """
    if (reason := znodes.topic_name_error(topic)) is not None:
        return CreateTopicResult(ErrorCode.INVALID_TOPIC_EXCEPTION, reason)
    live = await _live_racks(zk)
    replicas = (
        _given_replicas(assignment, live)
        if assignment is not None
        else _planned_replicas(num_partitions, replication_factor, live)
    )
    if isinstance(replicas, CreateTopicResult):
        return replicas
    if validate_only:
        exists = topic in await zk.get_topics()
        return CreateTopicResult(
            ErrorCode.TOPIC_ALREADY_EXISTS if exists else ErrorCode.NONE,
            f"Topic '{topic}' already exists." if exists else None,
        )
    topic_id = uuid.uuid4()
    outcome = await zk.create_topic(
        topic, TopicAssignment(partitions=replicas, topic_id=topic_id), config or {}
    )
    if outcome is TopicCreateOutcome.ALREADY_EXISTS:
        return CreateTopicResult(ErrorCode.TOPIC_ALREADY_EXISTS, f"Topic '{topic}' already exists.")
    return CreateTopicResult(ErrorCode.NONE, None, topic_id)


def _given_replicas(
    assignment: Mapping[int, Sequence[BrokerId]], live: Collection[BrokerId]
) -> dict[int, tuple[BrokerId, ...]] | CreateTopicResult:
    """CreateTopics' explicit assignment checked as Kafka checks one: partitions 0..n-1, no
    empty replica list, then ``replica_assignment_error`` (no broker twice in a partition,
    every partition with partition 0's replica count, every broker live)."""
    replicas = {p: tuple(r) for p, r in assignment.items()}
    if sorted(replicas) != list(range(len(replicas))) or not replicas:
        return CreateTopicResult(
            ErrorCode.INVALID_REPLICA_ASSIGNMENT,
            "Partitions should be consecutive and start from 0",
        )
    if any(not rs for rs in replicas.values()):
        return CreateTopicResult(
            ErrorCode.INVALID_REPLICA_ASSIGNMENT,
            "The manual partition assignment includes an empty replica list.",
        )
    problem = replica_assignment_error(replicas, len(replicas[0]), live)
    if problem is not None:
        return CreateTopicResult(ErrorCode.INVALID_REPLICA_ASSIGNMENT, problem)
    return replicas


def _planned_replicas(
    num_partitions: int, replication_factor: int, live: Mapping[BrokerId, str | None]
) -> dict[int, tuple[BrokerId, ...]] | CreateTopicResult:
    """Replicas placed over the live brokers (``placement``: rack-aware when they have
    racks), from a random start index and shift as Kafka's ``AdminUtils`` picks them so
    topics spread their leaders."""
    n = max(1, len(live))
    planned = placement.place_replicas(
        live,
        num_partitions,
        replication_factor,
        start_index=random.randrange(n),
        replica_shift=random.randrange(n),
    )
    if isinstance(planned, placement.PlacementError):
        return _refused(planned)
    return {p: tuple(rs) for p, rs in enumerate(planned)}


def _refused(problem: placement.PlacementError) -> CreateTopicResult:
    """A placement refused with Kafka's answer: an unknown server error (mixed racks) is
    logged with its text and answered without one, as ``ApiError.fromThrowable`` does."""
    if problem.error is ErrorCode.UNKNOWN_SERVER_ERROR:
        log.error("replica placement refused: %s", problem.message)
        return CreateTopicResult(problem.error)
    return CreateTopicResult(problem.error, problem.message)


async def _live_racks(zk: ZkClient) -> dict[BrokerId, str | None]:
    """The live brokers (sorted by id) and their ``broker.rack`` (None: none)."""
    live = await zk.get_live_brokers()
    return {b: live[b].registration.rack for b in sorted(live)}


def replica_assignment_error(
    assignment: Mapping[int, Sequence[BrokerId]], rf: int, live: Collection[BrokerId]
) -> str | None:
    """Kafka's ``AdminZkClient.validateReplicaAssignment`` for new partitions: no broker
    twice in a partition, every partition with the topic's replication factor, every
    broker live; None when the assignment is valid, else Kafka's message."""
    duplicated = {p: rs for p, rs in sorted(assignment.items()) if len(set(rs)) != len(rs)}
    if duplicated:
        listed = ", ".join(f"{p} -> {','.join(map(str, rs))}" for p, rs in duplicated.items())
        return f"Duplicate brokers not allowed in replica assignment: {listed}"
    odd = {p: len(rs) for p, rs in sorted(assignment.items()) if len(rs) != rf}
    if odd:
        return (
            f"Inconsistent replication factor between partitions, partition 0 has {rf} while "
            f"partitions [{', '.join(map(str, odd))}] have replication factors "
            f"[{', '.join(map(str, odd.values()))}], respectively."
        )
    unknown = sorted({r for rs in assignment.values() for r in rs} - set(live))
    if unknown:
        return f"Unknown broker(s) in replica assignment: {', '.join(map(str, unknown))}."
    return None


async def create_partitions(
    zk: ZkClient,
    topic: str,
    *,
    count: int,
    assignment: Sequence[Sequence[BrokerId]] | None = None,
    validate_only: bool = False,
) -> CreateTopicResult:
    """CreatePartitions (API 37): grow ``topic`` to ``count`` partitions (any broker).

    New replicas are placed like Kafka's ``AdminZkClient.addPartitions`` (``placement``,
    rack-aware when the brokers have racks, starting from the index of partition 0's
    leader); ``assignment`` gives them explicitly. The write is a CAS on the
    topic znode; the controller's per-topic watch then creates the new partitions' states.
    Errors: UNKNOWN_TOPIC_OR_PARTITION, INVALID_PARTITIONS, INVALID_REPLICATION_FACTOR,
    INVALID_REPLICA_ASSIGNMENT (a lost CAS is retried with the fresh assignment),
    UNKNOWN_SERVER_ERROR without a message (placement over brokers with and without racks).
    """
    for _ in range(MAX_CAS_ROUNDS):
        found = await zk.get_topic_assignments([topic])
        if topic not in found:
            return CreateTopicResult(
                ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"The topic '{topic}' does not exist."
            )
        current, version = found[topic]
        existing = len(current.partitions)
        if count <= existing:
            message = (
                f"Topic currently has {existing} partitions, which is higher than the requested "
                f"{count}."
                if count < existing
                else f"Topic already has {existing} partitions."
            )
            return CreateTopicResult(ErrorCode.INVALID_PARTITIONS, message)
        live = await _live_racks(zk)
        rf = len(current.partitions[0])
        if assignment is not None:
            if len(assignment) != count - existing:
                return CreateTopicResult(
                    ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                    f"Increasing the number of partitions by {count - existing} but "
                    f"{len(assignment)} assignments provided.",
                )
            new = {existing + i: tuple(rs) for i, rs in enumerate(assignment)}
            problem = replica_assignment_error(new, rf, live)
            if problem is not None:
                return CreateTopicResult(ErrorCode.INVALID_REPLICA_ASSIGNMENT, problem)
        else:
            # Kafka's ``addPartitions``: the start index is that of the first broker (by
            # id) not below partition 0's first replica, for the index and the shift both.
            leader0 = current.partitions[0][0]
            start = next((i for i, b in enumerate(live) if b >= leader0), 0)
            planned = placement.place_replicas(
                live,
                count - existing,
                rf,
                start_index=start,
                replica_shift=start,
                start_partition_id=existing,
            )
            if isinstance(planned, placement.PlacementError):
                return _refused(planned)
            new = {existing + i: tuple(rs) for i, rs in enumerate(planned)}
        if validate_only:
            return CreateTopicResult(ErrorCode.NONE, None, current.topic_id)
        grown = replace(current, partitions={**current.partitions, **new})
        if await zk.set_topic_assignment(topic, grown, version):
            return CreateTopicResult(ErrorCode.NONE, None, current.topic_id)
    return CreateTopicResult(
        ErrorCode.REASSIGNMENT_IN_PROGRESS, f"The topic '{topic}' kept changing; try again."
    )
