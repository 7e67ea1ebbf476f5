"""Stray replicas: logs a broker keeps for partitions that were moved away while it was down.

A reassignment (``tidelog.controller.reassignment``) ends with StopReplica(delete) to the
replicas it removed; a removed replica whose broker is dead then, or restarting (its old
incarnation is the one the request is addressed to, and the new one refuses it as a stale
broker epoch), never hears it. Kafka's ZooKeeper mode leaves such logs on disk for ever; a
KRaft broker finds them when it loads the metadata (KIP-858's stray detection). Here:

Rule: after the first UpdateMetadata of a registration (the controller sends a starting
broker every partition, before its LeaderAndIsr; ``tidelog.server.readiness`` relies on the
same), a local log is stray when its topic is in that metadata, the partition is known, this
broker is not among its replicas (RS, which during a reassignment includes the replicas being
added) and it is not hosted. Such logs are deleted with a warning. A log whose topic is not in
the metadata is left alone (logged): deleting on an absence is not worth a mistake.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from typing import Protocol

from tidelog.model import TopicPartition


class _Replicas(Protocol):
    @property
    def replicas(self) -> tuple[int, ...]: ...


def stray_logs(
    local: Iterable[TopicPartition],
    partitions: Mapping[TopicPartition, _Replicas],
    topics: Collection[str],
    hosted: Collection[TopicPartition],
    broker_id: int,
) -> tuple[list[TopicPartition], list[TopicPartition]]:
    """(stray logs to delete, logs of topics the metadata does not know) per the rule."""
    strays: list[TopicPartition] = []
    unknown: list[TopicPartition] = []
    for tp in sorted(local):
        if tp in hosted:
            continue
        if tp.topic not in topics:
            unknown.append(tp)
            continue
        state = partitions.get(tp)
        if state is not None and broker_id not in state.replicas:
            strays.append(tp)
    return strays, unknown
