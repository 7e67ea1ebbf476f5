"""``tidelog reassign generate|execute|verify|cancel|list``: move partition replicas between
brokers, like ``kafka-reassign-partitions.sh`` (KIP-455: AlterPartitionReassignments and
ListPartitionReassignments at the controller, ``tidelog.client.reassign_admin``; the log dir
half, KIP-113, with AlterReplicaLogDirs and DescribeLogDirs at each broker).

- ``generate --topics-to-move-json-file F --broker-list 1,2,3``: prints "Current partition
  replica assignment" and "Proposed partition reassignment configuration", each one line of
  Kafka's reassignment JSON (``{"version":1,"partitions":[{"topic":..,"partition":..,
  "replicas":[..],"log_dirs":["any",..]}]}``). The proposal keeps each topic's replication
  factor and spreads its replicas round-robin over the broker list with the controller's
  placement rule (``tidelog.controller.decisions.assign_replicas``, Kafka's rack-unaware
  ``AdminUtils.assignReplicasToBrokers``). Kafka starts each topic at a random broker; here
  the first topic starts at the first broker and each next topic where the previous one
  ended, so the same input gives the same proposal. Nothing changes in the cluster.
- ``execute --reassignment-json-file F [--throttle B/s] [--replica-alter-log-dirs-throttle
  B/s] [--additional] [--timeout MS]``: prints the current assignment of those partitions
  ("Save this to use as the --reassignment-json-file option during rollback"), sets the
  throttles, sends AlterPartitionReassignments and prints "Successfully started partition
  reassignments for t-0,t-1"; then, for replicas the file puts in a given log dir, sends
  AlterReplicaLogDirs to their brokers until each has started (a replica being added is
  not there yet: REPLICA_NOT_AVAILABLE is asked again every 100 ms for ``--timeout`` ms, as
  Kafka's tool does). Refused while other reassignments run, unless ``--additional`` (which
  also changes the throttle of running ones when they are resubmitted).
- ``verify --reassignment-json-file F [--preserve-throttles]``: per partition "Reassignment
  of partition t-0 is completed." / "... is still in progress." / "There is no active
  reassignment of partition t-0, but replica set is 1 rather than 2,3."; per log dir move
  Kafka's lines too. Once nothing runs in the cluster any more, removes every throttle
  (below) unless ``--preserve-throttles``.
- ``cancel --reassignment-json-file F [--preserve-throttles]``: cancels those of the
  partitions still being reassigned (their replicas go back to the original ones), prints
  "Successfully cancelled partition reassignments for: t-0" (or "None of the specified
  partition reassignments are active."), sends running log dir moves back to the dir the
  replica is in, and removes the throttles.
- ``list``: Kafka's ``--list``, the reassignments running in the cluster.

Throttles (KIP-73), as Kafka's tool sets them: with ``--throttle B``, every broker that holds
or receives a replica of a partition of the file (or of a running reassignment) gets the
dynamic broker configs ``leader.replication.throttled.rate`` and
``follower.replication.throttled.rate`` = B, and each topic
``leader.replication.throttled.replicas`` = the existing replicas and
``follower.replication.throttled.replicas`` = the added ones (``p:b,...``);
``--replica-alter-log-dirs-throttle`` sets ``replica.alter.log.dirs.io.max.bytes.per.second``
on the brokers with a log dir move. Verify and cancel delete all of these from every live
broker and from the file's topics.

Exit status: 0 done; 1 the cluster refused or could not be reached (Kafka's error code and
message); 2 a bad option or file (Kafka's message; nothing was changed). ``verify`` improves
on Kafka's tool, which exits 0 in every case, so a script can poll it: 3 while a
reassignment or log dir move of the file is still in progress, 4 when none is but a
partition's replicas differ from the file (cancelled, or replaced by another reassignment).
"""

from __future__ import annotations

import argparse
import json
import os
import time
from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, NamedTuple, Protocol

from tidelog.cli.main import COMMANDS
from tidelog.cli.output import (
    CommandError,
    UsageError,
    add_bootstrap_flags,
    resolve_bootstrap,
    resolve_security,
)
from tidelog.client import BlockingClient
from tidelog.client import config_admin as ca
from tidelog.client import log_dir_admin as lda
from tidelog.client import reassign_admin as ra
from tidelog.controller.decisions import assign_replicas
from tidelog.errors import ErrorCode
from tidelog.model import BrokerId, TopicPartition

ANY_LOG_DIR: Final = "any"
#: Throttle configs (KIP-73), as kafka-reassign-partitions.sh sets them.
LEADER_RATE: Final = "leader.replication.throttled.rate"
FOLLOWER_RATE: Final = "follower.replication.throttled.rate"
LOG_DIR_RATE: Final = "replica.alter.log.dirs.io.max.bytes.per.second"
LEADER_REPLICAS: Final = "leader.replication.throttled.replicas"
FOLLOWER_REPLICAS: Final = "follower.replication.throttled.replicas"
BROKER_THROTTLES: Final = (LEADER_RATE, FOLLOWER_RATE, LOG_DIR_RATE)
TOPIC_THROTTLES: Final = (LEADER_REPLICAS, FOLLOWER_REPLICAS)

#: How long verify looks again at a partition whose metadata differs from the file while
#: no reassignment of it runs (the metadata may trail the controller's).
VERIFY_SETTLE_S: Final = 3.0
#: verify's exit statuses beyond 0/1/2 (module docstring).
EXIT_IN_PROGRESS: Final = 3
EXIT_DIFFERENT: Final = 4

CANNOT_EXECUTE_WITH_EXISTING: Final = (
    "Cannot execute because there is an existing partition assignment.  Use --additional to "
    "override this and create a new partition assignment in addition to the existing one. "
    "The --additional flag can also be used to change the throttle by resubmitting the "
    "current reassignment."
)

Assignment = Mapping[TopicPartition, Sequence[int]]


# --- the cluster, as the commands see it (a fake in the unit tests) ---------------------------


class Admin(Protocol):
    def live_brokers(self) -> list[int]: ...

    def assignment(self, topics: Iterable[str] | None) -> dict[TopicPartition, tuple[int, ...]]:
        """Replicas of every partition of ``topics`` (None: all); unknown topics absent."""
        ...

    def list_reassignments(
        self, partitions: Iterable[TopicPartition] | None
    ) -> dict[TopicPartition, ra.OngoingReassignment]: ...

    def alter_reassignments(
        self, reassignments: Mapping[TopicPartition, Sequence[int] | None]
    ) -> dict[TopicPartition, ra.AlterResult]: ...

    def alter_configs(
        self, resource_type: int, name: str, ops: Sequence[ca.AlterOp]
    ) -> tuple[ErrorCode, str | None]: ...

    def alter_replica_log_dirs(
        self, broker: int, dirs: Mapping[TopicPartition, str]
    ) -> dict[TopicPartition, ErrorCode]: ...

    def describe_log_dirs(
        self, broker: int, partitions: Iterable[TopicPartition]
    ) -> lda.DescribeLogDirsResult: ...


class ClusterAdmin:
    """``Admin`` over a ``BlockingClient``."""

    def __init__(self, client: BlockingClient) -> None:
        self.client = client

    def live_brokers(self) -> list[int]:
        return sorted(self.client.metadata([]).brokers)

    def assignment(self, topics: Iterable[str] | None) -> dict[TopicPartition, tuple[int, ...]]:
        cluster = self.client.metadata(None if topics is None else list(topics))
        return {
            TopicPartition(name, p.partition): tuple(p.replicas)
            for name, topic in cluster.topics.items()
            if topic.error_code == ErrorCode.NONE or topic.partitions
            for p in topic.partitions.values()
        }

    def list_reassignments(
        self, partitions: Iterable[TopicPartition] | None
    ) -> dict[TopicPartition, ra.OngoingReassignment]:
        return self.client.run(ra.list_partition_reassignments(self.client.client, partitions))

    def alter_reassignments(
        self, reassignments: Mapping[TopicPartition, Sequence[int] | None]
    ) -> dict[TopicPartition, ra.AlterResult]:
        return self.client.run(ra.alter_partition_reassignments(self.client.client, reassignments))

    def alter_configs(
        self, resource_type: int, name: str, ops: Sequence[ca.AlterOp]
    ) -> tuple[ErrorCode, str | None]:
        return self.client.run(
            ca.incremental_alter_configs(self.client.client, resource_type, name, ops)
        )

    def alter_replica_log_dirs(
        self, broker: int, dirs: Mapping[TopicPartition, str]
    ) -> dict[TopicPartition, ErrorCode]:
        return self.client.run(lda.alter_replica_log_dirs(self.client.client, broker, dirs))

    def describe_log_dirs(
        self, broker: int, partitions: Iterable[TopicPartition]
    ) -> lda.DescribeLogDirsResult:
        by_topic: dict[str, list[int]] = {}
        for tp in sorted(set(partitions)):
            by_topic.setdefault(tp.topic, []).append(tp.partition)
        return self.client.run(lda.describe_log_dirs(self.client.client, broker, by_topic))


@contextmanager
def open_admin(args: argparse.Namespace) -> Iterator[Admin]:
    """The cluster of ``--bootstrap-server``/``--dir`` with ``--command-config``'s security
    (the unit tests replace this)."""
    bootstrap = resolve_bootstrap(args)
    security = resolve_security(args)
    with BlockingClient(bootstrap, client_id="tidelog-cli", security=security) as client:
        yield ClusterAdmin(client)


# --- the JSON files (pure) --------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PartitionMove:
    """One entry of a reassignment file."""

    partition: TopicPartition
    replicas: tuple[int, ...]
    log_dirs: tuple[str, ...]


def _load_json(text: str) -> Any:
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        raise UsageError("The input string is not a valid JSON") from None


def _version(document: Any) -> None:
    if not isinstance(document, dict):
        raise UsageError('The input JSON must be an object with "version" and its entries')
    version = document.get("version", 1)
    if version != 1 or isinstance(version, bool):
        raise UsageError(f"Not supported version field value {json.dumps(version)}")


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def parse_reassignment_json(text: str) -> list[PartitionMove]:
    """Kafka's ``parsePartitionReassignmentData`` and ``parseExecuteAssignmentArgs`` checks,
    with their messages; a ``UsageError`` for each."""
    document = _load_json(text)
    _version(document)
    entries = document.get("partitions")
    if entries is None:
        entries = []
    if not isinstance(entries, list):
        raise UsageError('"partitions" must be a list')
    moves: list[PartitionMove] = []
    for index, entry in enumerate(entries):
        where = f"partitions[{index}]"
        if not isinstance(entry, dict):
            raise UsageError(f"{where} must be an object with topic, partition and replicas")
        topic, partition, replicas = (
            entry.get("topic"),
            entry.get("partition"),
            entry.get("replicas"),
        )
        if not isinstance(topic, str) or not topic:
            raise UsageError(f'{where}: "topic" must be a topic name')
        if not isinstance(partition, int) or isinstance(partition, bool) or partition < 0:
            raise UsageError(f'{where}: "partition" must be a partition number')
        if not isinstance(replicas, list) or not all(_is_int(r) for r in replicas):
            raise UsageError(f'{where}: "replicas" must be a list of broker ids')
        tp = TopicPartition(topic, partition)
        log_dirs = entry.get("log_dirs")
        if log_dirs is None:
            log_dirs = [ANY_LOG_DIR] * len(replicas)
        if not isinstance(log_dirs, list) or not all(isinstance(d, str) for d in log_dirs):
            raise UsageError(f'{where}: "log_dirs" must be a list of paths or "any"')
        if len(log_dirs) != len(replicas):
            raise UsageError(
                f"Size of replicas list {ids_text(replicas)} is different from size of log dirs "
                f"list {json.dumps(log_dirs)} for partition {tp}"
            )
        moves.append(PartitionMove(tp, tuple(replicas), tuple(log_dirs)))
    if not moves:
        raise UsageError("Partition reassignment list cannot be empty")
    if any(not m.replicas for m in moves):
        raise UsageError("Partition replica list cannot be empty")
    seen: set[TopicPartition] = set()
    repeated = []
    for m in moves:
        if m.partition in seen:
            repeated.append(str(m.partition))
        seen.add(m.partition)
    if repeated:
        raise UsageError(
            f"Partition reassignment contains duplicate topic partitions: {','.join(repeated)}"
        )
    duplicates = [
        f"{m.partition} contains multiple entries for "
        f"{','.join(str(r) for r in sorted({r for r in m.replicas if m.replicas.count(r) > 1}))}"
        for m in moves
        if len(set(m.replicas)) != len(m.replicas)
    ]
    if duplicates:
        raise UsageError(
            f"Partition replica lists may not contain duplicate entries: {'. '.join(duplicates)}"
        )
    return moves


def parse_topics_json(text: str) -> list[str]:
    """Kafka's ``parseTopicsData``: ``{"topics":[{"topic":"t"}],"version":1}``."""
    document = _load_json(text)
    _version(document)
    entries = document.get("topics") or []
    if not isinstance(entries, list):
        raise UsageError('"topics" must be a list')
    topics = []
    for index, entry in enumerate(entries):
        name = entry.get("topic") if isinstance(entry, dict) else None
        if not isinstance(name, str) or not name:
            raise UsageError(f'topics[{index}] must be an object {{"topic": NAME}}')
        topics.append(name)
    if not topics:
        raise UsageError("List of topics to reassign cannot be empty")
    duplicates = sorted({t for t in topics if topics.count(t) > 1})
    if duplicates:
        raise UsageError(
            f"List of topics to reassign contains duplicate entries: {','.join(duplicates)}"
        )
    return topics


def reassignment_json(
    assignment: Assignment, log_dirs: Mapping[TopicPartition, Sequence[str]] | None = None
) -> str:
    """Kafka's ``formatAsReassignmentJson``: one line, partitions by topic and number."""
    partitions = [
        {
            "topic": tp.topic,
            "partition": tp.partition,
            "replicas": list(assignment[tp]),
            "log_dirs": list((log_dirs or {}).get(tp) or [ANY_LOG_DIR] * len(assignment[tp])),
        }
        for tp in sorted(assignment)
    ]
    return json.dumps({"version": 1, "partitions": partitions}, separators=(",", ":"))


def ids_text(ids: Iterable[int]) -> str:
    return "[" + ", ".join(str(i) for i in ids) + "]"


def partitions_text(tps: Iterable[TopicPartition]) -> str:
    return ",".join(str(tp) for tp in sorted(tps))


def plural(n: int) -> str:
    return "" if n == 1 else "s"


# --- plans (pure) -----------------------------------------------------------------------------


def propose_assignment(
    current: Assignment, topics: Sequence[str], brokers: Collection[int]
) -> dict[TopicPartition, list[int]]:
    """generate's proposal (module docstring): each topic keeps its replication factor (its
    first partition's); ``UsageError`` (INVALID_REPLICATION_FACTOR) when it exceeds the
    broker list."""
    proposal: dict[TopicPartition, list[int]] = {}
    start = 0
    for topic in topics:
        parts = sorted(tp for tp in current if tp.topic == topic)
        replication_factor = len(current[parts[0]])
        placed = assign_replicas(
            len(parts),
            replication_factor,
            [BrokerId(b) for b in brokers],
            start_index=start,
        )
        if isinstance(placed, ErrorCode):
            raise UsageError(
                f"Replication factor: {replication_factor} larger than available brokers: "
                f"{len(brokers)}.",
                code=placed,
            )
        for tp, replicas in zip(parts, placed, strict=True):
            proposal[tp] = [int(r) for r in replicas]
        start += len(parts)
    return proposal


@dataclass(frozen=True, slots=True)
class ThrottlePlan:
    """KIP-73 throttles for a set of moves (module docstring)."""

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


# --- log dirs (KIP-113): the file's "log_dirs" other than "any" --------------------------------


class Replica(NamedTuple):
    """One replica of a partition (Kafka's ``TopicPartitionReplica``)."""

    partition: TopicPartition
    broker: int

    def __str__(self) -> str:
        return f"{self.partition}-{self.broker}"

    @property
    def order(self) -> tuple[int, str, int]:
        """Kafka's ``compareTopicPartitionReplicas``: broker, topic, partition."""
        return (self.broker, self.partition.topic, self.partition.partition)


def replica_dirs(moves: Iterable[PartitionMove]) -> dict[Replica, str]:
    """The replicas the file places in a given log dir."""
    return {
        Replica(m.partition, broker): os.path.normpath(path)
        for m in moves
        for broker, path in zip(m.replicas, m.log_dirs, strict=True)
        if path != ANY_LOG_DIR
    }


def replicas_text(replicas: Iterable[Replica]) -> str:
    return ",".join(str(r) for r in sorted(replicas, key=lambda r: r.order))


def move_state(
    described: lda.DescribeLogDirsResult, replica: Replica, target: str
) -> tuple[bool, str]:
    """Kafka's ``findLogDirMoveStates`` and ``replicaMoveStatesToString``: (done, line)."""
    current: list[str] = []
    future: list[str] = []
    for log_dir in described.log_dirs:
        for r in log_dir.replicas:
            if r.partition == replica.partition:
                (future if r.is_future else current).append(os.path.normpath(log_dir.path))
    tp, broker = replica
    if not current and not future:
        return False, (
            f"Partition {tp} cannot be found in any live log directory on broker {broker}."
        )
    if not current:
        return False, (
            f"Partition {tp} is not found in any live log dir on broker {broker}. There is "
            "likely an offline log directory on the broker."
        )
    if future:
        if future[0] == target:
            return False, f"Reassignment of replica {replica} is still in progress."
        return False, (
            f"Partition {tp} on broker {broker} is being moved to log dir {future[0]} instead "
            f"of {target}."
        )
    if current[0] == target:
        return True, f"Reassignment of replica {replica} completed successfully."
    return True, (
        f"Partition {tp} on broker {broker} is not being moved from log dir {current[0]} to "
        f"{target}."
    )


#: AlterReplicaLogDirs' answers for a replica the broker does not host yet (it is being
#: added; the broker remembers the dir and creates the log there): ask again. Kafka's
#: brokers answer REPLICA_NOT_AVAILABLE, newer ones NOT_LEADER_OR_FOLLOWER.
NOT_THERE_YET: Final = frozenset(
    {ErrorCode.REPLICA_NOT_AVAILABLE, ErrorCode.NOT_LEADER_OR_FOLLOWER}
)


def execute_moves(admin: Admin, dirs: Mapping[Replica, str], timeout_ms: int) -> None:
    """Kafka's ``executeMoves``: AlterReplicaLogDirs at each broker until every move has
    started; ``NOT_THERE_YET`` is asked again every 100 ms until ``timeout_ms``."""
    deadline = time.monotonic() + timeout_ms / 1000
    pending = dict(dirs)
    while True:
        started: list[Replica] = []
        by_broker: dict[int, dict[TopicPartition, str]] = {}
        for replica, path in pending.items():
            by_broker.setdefault(replica.broker, {})[replica.partition] = path
        for broker, wanted in sorted(by_broker.items()):
            answers = admin.alter_replica_log_dirs(broker, wanted)
            for tp in wanted:
                error = answers.get(tp, ErrorCode.UNKNOWN_SERVER_ERROR)
                if error == ErrorCode.NONE:
                    started.append(Replica(tp, broker))
                elif error not in NOT_THERE_YET:
                    raise CommandError(f"Failed to alter dir for {Replica(tp, broker)}", code=error)
        if started:
            print(
                f"Successfully started log directory move{plural(len(started))} for: "
                f"{replicas_text(started)}"
            )
        for replica in started:
            del pending[replica]
        if not pending:
            return
        if time.monotonic() >= deadline:
            raise CommandError(
                f"Timed out before log directory move{plural(len(pending))} could be "
                f"started for: {replicas_text(pending)}",
                code=ErrorCode.REQUEST_TIMED_OUT,
                hint="the partition reassignment goes on; move the replicas later with "
                "`tidelog log-dirs move`, or raise --timeout",
            )
        time.sleep(0.1)


def move_states(admin: Admin, dirs: Mapping[Replica, str]) -> dict[Replica, tuple[bool, str]]:
    by_broker: dict[int, list[Replica]] = {}
    for replica in dirs:
        by_broker.setdefault(replica.broker, []).append(replica)
    states = {}
    for broker, replicas in sorted(by_broker.items()):
        described = admin.describe_log_dirs(broker, [r.partition for r in replicas])
        if described.error_code != ErrorCode.NONE:
            raise CommandError(
                f"broker {broker} refused DescribeLogDirs", code=described.error_code
            )
        for replica in replicas:
            states[replica] = move_state(described, replica, dirs[replica])
    return states


# --- steps shared with ``tidelog brokers decommission`` ---------------------------------------


def check_brokers(admin: Admin, wanted: Iterable[int]) -> list[int]:
    """Kafka's ``verifyBrokerIds``: every broker named must be live. The live ones."""
    live = admin.live_brokers()
    for broker in sorted(set(wanted)):
        if broker not in live:
            raise UsageError(
                f"Unknown broker id {broker}",
                hint=f"the live brokers are {','.join(map(str, live)) or 'none'}",
            )
    return live


def current_of(
    admin: Admin, partitions: Iterable[TopicPartition]
) -> dict[TopicPartition, tuple[int, ...]]:
    """Kafka's ``getReplicaAssignmentForPartitions``: UNKNOWN_TOPIC_OR_PARTITION (exit 2)
    for a partition the cluster does not have."""
    wanted = sorted(set(partitions))
    known = admin.assignment(sorted({tp.topic for tp in wanted}))
    for tp in wanted:
        if tp not in known:
            raise UsageError(
                f"Unable to find partition: {tp}", code=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            )
    return {tp: known[tp] for tp in wanted}


def _alter(admin: Admin, resource_type: int, name: str, ops: Sequence[ca.AlterOp]) -> None:
    error, message = admin.alter_configs(resource_type, name, ops)
    if error != ErrorCode.NONE:
        what = f"broker {name}" if resource_type == ca.BROKER else f"topic {name}"
        raise CommandError(
            f"setting {', '.join(o.name for o in ops)} on {what}"
            + (f": {message}" if message else ""),
            code=error,
        )


def set_throttles(
    admin: Admin,
    moves: Mapping[TopicPartition, tuple[Sequence[int], Sequence[int]]],
    throttle: int,
) -> None:
    """Kafka's ``modifyReassignmentThrottle`` (module docstring)."""
    plan = throttle_plan(moves)
    for topic in sorted(set(plan.leader) | set(plan.follower)):
        ops = [
            ca.AlterOp(name, ca.SET, value)
            for name, value in (
                (LEADER_REPLICAS, plan.leader.get(topic)),
                (FOLLOWER_REPLICAS, plan.follower.get(topic)),
            )
            if value
        ]
        _alter(admin, ca.TOPIC, topic, ops)
    for broker in plan.brokers:
        _alter(
            admin,
            ca.BROKER,
            str(broker),
            [
                ca.AlterOp(LEADER_RATE, ca.SET, str(throttle)),
                ca.AlterOp(FOLLOWER_RATE, ca.SET, str(throttle)),
            ],
        )
    print(f"The inter-broker throttle limit was set to {throttle} B/s")


def set_log_dir_throttle(admin: Admin, brokers: Iterable[int], throttle: int) -> None:
    """Kafka's ``modifyLogDirThrottle``: on the brokers with a log dir move."""
    for broker in sorted(set(brokers)):
        _alter(admin, ca.BROKER, str(broker), [ca.AlterOp(LOG_DIR_RATE, ca.SET, str(throttle))])
    print(f"The replica-alter-dir throttle limit was set to {throttle} B/s")


THROTTLE_WARNING: Final = (
    "Warning: You must run --verify periodically, until the reassignment completes, to ensure "
    "the throttle is removed."
)


def clear_throttles(admin: Admin, topics: Iterable[str], brokers: Iterable[int] = ()) -> None:
    """Kafka's ``clearAllThrottles``: the broker throttles of every live broker (and of
    ``brokers`` among them), the topic throttles of ``topics``."""
    live = admin.live_brokers()
    targets = sorted(set(live) | (set(brokers) & set(live)))
    print(
        f"Clearing broker-level throttles on broker{plural(len(targets))} "
        f"{','.join(map(str, targets))}"
    )
    for broker in targets:
        _alter(admin, ca.BROKER, str(broker), [ca.AlterOp(k, ca.DELETE) for k in BROKER_THROTTLES])
    names = sorted(set(topics))
    print(f"Clearing topic-level throttles on topic{plural(len(names))} {','.join(names)}")
    for topic in names:
        _alter(admin, ca.TOPIC, topic, [ca.AlterOp(k, ca.DELETE) for k in TOPIC_THROTTLES])


def start_reassignment(
    admin: Admin,
    proposal: Mapping[TopicPartition, Sequence[int]],
    current: Assignment,
    *,
    throttle: int = -1,
    log_dir_throttle: int = -1,
    additional: bool = False,
    dirs: Mapping[Replica, str] | None = None,
    timeout_ms: int = 10_000,
) -> None:
    """execute's steps after the checks (Kafka's ``executeAssignment``): throttles, then
    AlterPartitionReassignments, then the log dir moves; a CommandError naming each refused
    partition with the controller's message."""
    ongoing = admin.list_reassignments(None)
    if ongoing and not additional:
        raise CommandError(
            CANNOT_EXECUTE_WITH_EXISTING,
            code=ErrorCode.REASSIGNMENT_IN_PROGRESS,
            hint="see them with `tidelog reassign list`; wait for them, or cancel them",
        )
    if throttle >= 0 or log_dir_throttle >= 0:
        print(THROTTLE_WARNING)
        if throttle >= 0:
            set_throttles(admin, proposed_moves(proposal, current, ongoing), throttle)
        if log_dir_throttle >= 0:
            set_log_dir_throttle(admin, {r.broker for r in dirs or {}}, log_dir_throttle)
    answers = admin.alter_reassignments(proposal)
    refused = {tp: a for tp, a in answers.items() if a.error_code != ErrorCode.NONE}
    if refused:
        started = sorted(tp for tp in proposal if tp not in refused)
        details = "\n".join(
            f"{tp}: {a.error_code.name}" + (f": {a.error_message}" if a.error_message else "")
            for tp, a in sorted(refused.items())
        )
        codes = {a.error_code for a in refused.values()}
        raise CommandError(
            f"Error reassigning partition(s):\n{details}"
            + (f"\nStarted for {partitions_text(started)}" if started else ""),
            code=codes.pop() if len(codes) == 1 else None,
        )
    print(
        f"Successfully started partition reassignment{plural(len(proposal))} for "
        f"{partitions_text(proposal)}"
    )
    if dirs:
        execute_moves(admin, dirs, timeout_ms)


# --- the commands -----------------------------------------------------------------------------


def _read(path: Path, option: str) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except OSError as exc:
        raise UsageError(f"{option} {path}: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise UsageError(f"{option} {path}: not UTF-8 text") from None


def broker_list(text: str) -> list[int]:
    try:
        ids = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a comma-separated list of broker ids"
        ) from None
    if not ids:
        raise argparse.ArgumentTypeError("the broker list is empty")
    duplicates = sorted({b for b in ids if ids.count(b) > 1})
    if duplicates:
        raise argparse.ArgumentTypeError(
            f"Broker list contains duplicate entries: {','.join(map(str, duplicates))}"
        )
    return ids


def rate(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of bytes a second") from None
    if value <= 0:
        raise argparse.ArgumentTypeError("a throttle must be at least 1 byte a second")
    return value


def add_throttle_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--throttle",
        type=rate,
        default=-1,
        metavar="B/s",
        help="replication throttle for the moving replicas, bytes a second (KIP-73)",
    )


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="action", metavar="ACTION", required=True)

    def add(name: str, help_text: str) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help_text, description=help_text)
        add_bootstrap_flags(p)
        return p

    p = add("generate", "propose a reassignment of whole topics onto a broker list")
    p.add_argument(
        "--topics-to-move-json-file",
        type=Path,
        required=True,
        metavar="FILE",
        help='{"topics":[{"topic":"t"}],"version":1}',
    )
    p.add_argument(
        "--broker-list",
        type=broker_list,
        required=True,
        metavar="1,2,3",
        help="the brokers to place the replicas on",
    )
    p = add("execute", "start the reassignment of a JSON file")
    p.add_argument("--reassignment-json-file", type=Path, required=True, metavar="FILE")
    add_throttle_flag(p)
    p.add_argument(
        "--replica-alter-log-dirs-throttle",
        type=rate,
        default=-1,
        metavar="B/s",
        help="replica.alter.log.dirs.io.max.bytes.per.second on the brokers of log dir moves",
    )
    p.add_argument(
        "--additional",
        action="store_true",
        help="start although other reassignments run (or re-throttle them)",
    )
    p.add_argument(
        "--timeout",
        type=int,
        default=10_000,
        metavar="MS",
        help="how long to try to start the log dir moves, in ms as Kafka's (default: 10000)",
    )
    for name, help_text in (
        ("verify", "whether the reassignment of a JSON file is done (exit 3 while it runs)"),
        ("cancel", "cancel the running reassignments of a JSON file"),
    ):
        p = add(name, help_text)
        p.add_argument("--reassignment-json-file", type=Path, required=True, metavar="FILE")
        p.add_argument(
            "--preserve-throttles", action="store_true", help="leave the throttles in place"
        )
        if name == "cancel":
            p.add_argument(
                "--timeout",
                type=int,
                default=10_000,
                metavar="MS",
                help="how long to try to stop log dir moves (default: 10000)",
            )
    add("list", "the partition reassignments running in the cluster")


def run(args: argparse.Namespace) -> int:
    if args.action == "generate":
        topics = parse_topics_json(
            _read(args.topics_to_move_json_file, "--topics-to-move-json-file")
        )
        with open_admin(args) as admin:
            return generate(admin, topics, args.broker_list)
    if args.action == "list":
        with open_admin(args) as admin:
            return list_command(admin)
    moves = parse_reassignment_json(_read(args.reassignment_json_file, "--reassignment-json-file"))
    targets = {m.partition: list(m.replicas) for m in moves}
    dirs = replica_dirs(moves)
    with open_admin(args) as admin:
        if args.action == "execute":
            return execute(
                admin,
                targets,
                throttle=args.throttle,
                log_dir_throttle=args.replica_alter_log_dirs_throttle,
                additional=args.additional,
                dirs=dirs,
                timeout_ms=args.timeout,
            )
        if args.action == "verify":
            return verify(admin, targets, dirs, preserve_throttles=args.preserve_throttles)
        return cancel(
            admin,
            targets,
            dirs,
            preserve_throttles=args.preserve_throttles,
            timeout_ms=args.timeout,
        )


def generate(admin: Admin, topics: Sequence[str], brokers: Sequence[int]) -> int:
    current = admin.assignment(topics)
    missing = [t for t in topics if not any(tp.topic == t for tp in current)]
    if missing:
        raise UsageError(
            f"Topic{plural(len(missing))} {', '.join(missing)} not found",
            code=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        )
    check_brokers(admin, brokers)
    proposal = propose_assignment(current, topics, brokers)
    print(f"Current partition replica assignment\n{reassignment_json(current)}\n")
    print(f"Proposed partition reassignment configuration\n{reassignment_json(proposal)}")
    return 0


def execute(
    admin: Admin,
    targets: Mapping[TopicPartition, Sequence[int]],
    *,
    throttle: int = -1,
    log_dir_throttle: int = -1,
    additional: bool = False,
    dirs: Mapping[Replica, str] | None = None,
    timeout_ms: int = 10_000,
) -> int:
    check_brokers(admin, {b for replicas in targets.values() for b in replicas})
    current = current_of(admin, targets)
    print(
        f"Current partition replica assignment\n\n{reassignment_json(current)}\n\n"
        "Save this to use as the --reassignment-json-file option during rollback"
    )
    start_reassignment(
        admin,
        targets,
        current,
        throttle=throttle,
        log_dir_throttle=log_dir_throttle,
        additional=additional,
        dirs=dirs,
        timeout_ms=timeout_ms,
    )
    return 0


def verify(
    admin: Admin,
    targets: Mapping[TopicPartition, Sequence[int]],
    dirs: Mapping[Replica, str] | None = None,
    *,
    preserve_throttles: bool,
) -> int:
    """Kafka's ``verifyAssignment``; the exit status of the module docstring. The throttles
    go only once no reassignment at all runs in the cluster (Kafka's rule: the others may
    be throttled by the same configs)."""
    ongoing = admin.list_reassignments(None)
    topics = sorted({tp.topic for tp in targets})
    states = partition_states(targets, ongoing, admin.assignment(topics))
    # A reassignment that just ended: the metadata of the broker asked may trail the
    # controller's for a moment (RS instead of the target); look again before saying so.
    settle = time.monotonic() + VERIFY_SETTLE_S
    while (
        any(s.done and s.current != s.target for s in states.values()) and time.monotonic() < settle
    ):
        time.sleep(0.5)
        states = partition_states(targets, ongoing, admin.assignment(topics))
    print("Status of partition reassignment:")
    for tp in sorted(states):
        print(states[tp].describe(tp))
    moves = move_states(admin, dirs) if dirs else {}
    for replica in sorted(moves, key=lambda r: r.order):
        print(moves[replica][1])
    in_progress = any(not s.done for s in states.values()) or any(
        not done for done, _ in moves.values()
    )
    others = sorted(tp for tp in ongoing if tp not in targets)
    if not in_progress and others:
        print(f"Throttles kept: other partition reassignments run ({partitions_text(others)}).")
    if not in_progress and not others and not preserve_throttles:
        clear_throttles(
            admin, {tp.topic for tp in targets}, {b for r in targets.values() for b in r}
        )
    if in_progress:
        return EXIT_IN_PROGRESS
    if any(s.current != s.target for s in states.values()):
        return EXIT_DIFFERENT
    return 0


def cancel(
    admin: Admin,
    targets: Mapping[TopicPartition, Sequence[int]],
    dirs: Mapping[Replica, str] | None = None,
    *,
    preserve_throttles: bool,
    timeout_ms: int = 10_000,
) -> int:
    """Kafka's ``cancelAssignment``: running reassignments of the file's partitions are
    cancelled, running log dir moves sent back to the dir the replica is in."""
    ongoing = admin.list_reassignments(targets)
    running = sorted(tp for tp, r in ongoing.items() if tp in targets and (r.adding or r.removing))
    cancelled = []
    if running:
        answers = admin.alter_reassignments(dict.fromkeys(running))
        # One that completed in the meantime is no error: there is nothing left to cancel.
        refused = {
            tp: a
            for tp, a in answers.items()
            if a.error_code not in (ErrorCode.NONE, ErrorCode.NO_REASSIGNMENT_IN_PROGRESS)
        }
        if refused:
            details = "\n".join(
                f"{tp}: {a.error_code.name}" + (f": {a.error_message}" if a.error_message else "")
                for tp, a in sorted(refused.items())
            )
            raise CommandError(
                f"Error cancelling partition reassignment{plural(len(refused))} for:\n{details}"
            )
        cancelled = [tp for tp in running if answers[tp].error_code == ErrorCode.NONE]
    if cancelled:
        print(
            f"Successfully cancelled partition reassignment{plural(len(cancelled))} for: "
            f"{partitions_text(cancelled)}"
        )
    else:
        print("None of the specified partition reassignments are active.")
    if dirs:
        back = {}
        for replica, (done, _line) in move_states(admin, dirs).items():
            if not done:
                described = admin.describe_log_dirs(replica.broker, [replica.partition])
                here = [
                    os.path.normpath(d.path)
                    for d in described.log_dirs
                    for r in d.replicas
                    if r.partition == replica.partition and not r.is_future
                ]
                if here:
                    back[replica] = here[0]
        if back:
            execute_moves(admin, back, timeout_ms)
        else:
            print("None of the specified partition moves are active.")
    if not preserve_throttles:
        clear_throttles(
            admin, {tp.topic for tp in targets}, {b for r in targets.values() for b in r}
        )
    return 0


def list_command(admin: Admin) -> int:
    """Kafka's ``--list``."""
    ongoing = admin.list_reassignments(None)
    if not ongoing:
        print("No partition reassignments found.")
        return 0
    print("Current partition reassignments:")
    for tp in sorted(ongoing):
        r = ongoing[tp]
        line = f"{tp}: replicas: {','.join(map(str, r.replicas))}."
        if r.adding:
            line += f" adding: {','.join(map(str, r.adding))}."
        if r.removing:
            line += f" removing: {','.join(map(str, r.removing))}."
        print(line)
    return 0


COMMANDS["reassign"] = (
    "move partition replicas between brokers (like kafka-reassign-partitions.sh)",
    add_arguments,
    run,
)
