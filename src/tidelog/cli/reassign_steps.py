"""The cluster steps ``tidelog reassign`` shares with ``tidelog brokers decommission``:
checking the brokers and partitions named, setting and clearing the KIP-73 throttles (as
``kafka-reassign-partitions.sh`` sets them: see :mod:`tidelog.cli.reassign`), and starting
a reassignment.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Final

from tidelog.cli.output import CommandError, UsageError
from tidelog.cli.reassign_cluster import Admin
from tidelog.cli.reassign_files import Assignment, partitions_text, plural
from tidelog.cli.reassign_log_dirs import Replica, execute_moves
from tidelog.cli.reassign_plans import proposed_moves, throttle_plan
from tidelog.client import config_admin as ca
from tidelog.errors import ErrorCode
from tidelog.model import TopicPartition

#: Throttle configs (KIP-73), as kafka-reassign-partitions.sh sets them.
LEADER_RATE: Final = "leader.replication.throttled.rate"
FOLLOWER_RATE: Final = "follower.replication.throttled.rate"
LOG_DIR_RATE: Final = "replica.alter.log.dirs.io.max.bytes.per.second"
LEADER_REPLICAS: Final = "leader.replication.throttled.replicas"
FOLLOWER_REPLICAS: Final = "follower.replication.throttled.replicas"
BROKER_THROTTLES: Final = (LEADER_RATE, FOLLOWER_RATE, LOG_DIR_RATE)
TOPIC_THROTTLES: Final = (LEADER_REPLICAS, FOLLOWER_REPLICAS)

CANNOT_EXECUTE_WITH_EXISTING: Final = (
    "Cannot execute because there is an existing partition assignment.  Use --additional to "
    "override this and create a new partition assignment in addition to the existing one. "
    "The --additional flag can also be used to change the throttle by resubmitting the "
    "current reassignment."
)


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
    """Kafka's ``modifyReassignmentThrottle`` (see :mod:`tidelog.cli.reassign`)."""
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
