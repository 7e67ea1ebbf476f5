"""The log dir half of ``tidelog reassign`` (KIP-113): the replicas a reassignment file
places in a given log dir (its "log_dirs" other than "any"), starting those moves with
AlterReplicaLogDirs and reading their state with DescribeLogDirs.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable, Mapping
from typing import Final, NamedTuple

from tidelog.cli.output import CommandError
from tidelog.cli.reassign_cluster import Admin
from tidelog.cli.reassign_files import ANY_LOG_DIR, PartitionMove, plural
from tidelog.client import log_dir_admin as lda
from tidelog.errors import ErrorCode
from tidelog.model import TopicPartition


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
