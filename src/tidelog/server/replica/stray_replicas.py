"""Stray replicas: logs a broker keeps for partitions whose replicas no longer include it.

A reassignment (``tidelog.controller.reassignment``) ends with StopReplica(delete) to the
replicas it removed, sent after the new assignment is written to ZooKeeper. That request can
be lost: the removed replica's broker is dead, or restarting (the request is addressed to its
old incarnation and the new one refuses it as a stale broker epoch), or the controller dies
between the write and the send (the next controller reads a finished assignment, has no
reassignment to resume, and sends the still-running removed replica nothing, so it keeps
fetching and its log stays for ever). Kafka's ZooKeeper mode leaves such logs on disk; a KRaft
broker finds them when it loads the metadata (KIP-858's stray detection). Here:

Rule 1: every UpdateMetadata lists partitions with their replicas (RS, which during a
reassignment includes the replicas being added). A partition listed without this broker among
its replicas, whose log this broker keeps (hosted or not), is a stray: it stops being served
and its log is deleted, with a warning. Safe because a controller's requests to one broker
travel on one ordered channel and each reflects the controller's state when it was sent (a
LeaderAndIsr that adds this broker back comes after the UpdateMetadata that left it out), and
an older controller's requests are fenced by the controller epoch. The first UpdateMetadata of
a registration, and the first of every new controller, lists every partition.

Rule 2: a log whose topic is not in the metadata after the first UpdateMetadata of a
registration is left alone (logged): deleting on an absence is not worth a mistake. (Deleted
topics go through StopReplica and the LEADER_DURING_DELETE UpdateMetadata instead.)
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping
from typing import Protocol

from tidelog.model import TopicPartition


class _Replicas(Protocol):
    @property
    def replicas(self) -> tuple[int, ...]: ...


def stray_logs(
    listed: Mapping[TopicPartition, _Replicas],
    is_local: Callable[[TopicPartition], bool],
    broker_id: int,
) -> list[TopicPartition]:
    """Rule 1: the partitions ``listed`` in an UpdateMetadata without ``broker_id`` among
    their replicas whose log ``is_local`` (on disk or hosted). Costs O(listed)."""
    return sorted(
        tp for tp, state in listed.items() if broker_id not in state.replicas and is_local(tp)
    )


def unknown_topic_logs(
    local: Iterable[TopicPartition], topics: Collection[str]
) -> list[TopicPartition]:
    """Rule 2: local logs of topics the metadata does not know (kept, reported)."""
    return sorted(tp for tp in set(local) if tp.topic not in topics)
