"""The cluster as ``tidelog reassign`` and ``tidelog brokers decommission`` see it: the
``Admin`` calls they make (a fake in the unit tests) and ``ClusterAdmin``, those calls over a
``BlockingClient`` (KIP-455 at the controller, KIP-113 and incremental configs at each
broker).
"""

from __future__ import annotations

import argparse
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Protocol

from tidelog.cli.output import resolve_bootstrap, resolve_security
from tidelog.client import BlockingClient
from tidelog.client import config_admin as ca
from tidelog.client import log_dir_admin as lda
from tidelog.client import reassign_admin as ra
from tidelog.errors import ErrorCode
from tidelog.model import TopicPartition


class Admin(Protocol):
    def live_brokers(self) -> list[int]: ...

    def broker_racks(self) -> dict[int, str | None]:
        """Each live broker's ``broker.rack`` (None: it has none)."""
        ...

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

    def broker_racks(self) -> dict[int, str | None]:
        brokers = self.client.metadata([]).brokers
        return {b: brokers[b].rack for b in sorted(brokers)}

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
