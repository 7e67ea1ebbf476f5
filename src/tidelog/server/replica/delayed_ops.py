"""The replica manager's parked requests (Kafka's DelayedProduce and DelayedFetch), run by
``tidelog.server.replica.purgatory``.

A follower's incremental fetch (KIP-227) leaves its session's parked partitions unread
(``fetch_session`` rule 7): the ones where the follower already stands at the leader's log
end with nothing new to tell it. When one changes, the session wakes it, and a fetch parked
meanwhile is told through the session's key (``WakeSource``): ``notice`` takes the woken
partitions into its reads before it is tried. An idle follower's fetch over thousands of
partitions so costs neither a read nor a watch per partition.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from typing import Protocol

from tidelog.errors import ErrorCode, KafkaError
from tidelog.model import TopicPartition
from tidelog.server.replica.purgatory import DelayedOperation
from tidelog.server.replica.quota import ReplicationQuotas
from tidelog.server.replica.reads import (
    READ_COMMITTED,
    READ_UNCOMMITTED,
    FetchResult,
    HostedPartition,
    PartitionRead,
    ProduceResult,
)
from tidelog.server.replica.selector import NO_PREFERRED_REPLICA, ClientMetadata

#: A parked fetch's answer: the partitions read, in order, and their results.
FetchRespond = Callable[[Sequence[PartitionRead], list[FetchResult]], None]


@dataclass(frozen=True, slots=True)
class WakeSource:
    """How a follower's session fetch learns of its parked partitions that woke: it is
    watched under ``key`` too, and ``take()`` gives their reads, in order."""

    key: Hashable
    take: Callable[[], Sequence[PartitionRead]]


class HostedReplicas(Protocol):
    """What the parked requests use of the replica manager."""

    partitions: dict[TopicPartition, HostedPartition]

    def not_hosted_error(self, tp: TopicPartition) -> ErrorCode: ...

    def replication_throttles(self) -> ReplicationQuotas: ...

    def read(
        self,
        requests: Sequence[PartitionRead],
        max_bytes: int,
        replica_id: int = ...,
        isolation_level: int = ...,
        client: ClientMetadata | None = ...,
    ) -> list[FetchResult]: ...

    def preferred_read_replica(
        self, hosted: HostedPartition, fetch_offset: int, client: ClientMetadata
    ) -> int: ...


class DelayedProduce(DelayedOperation):
    """An acks=all produce waiting for the high watermark (Kafka's DelayedProduce)."""

    __slots__ = ("_manager", "_respond", "_results", "_status")

    def __init__(
        self,
        manager: HostedReplicas,
        results: dict[TopicPartition, tuple[ProduceResult, int]],
        timeout_ms: int,
        respond: Callable[[dict[TopicPartition, ProduceResult]], None],
    ) -> None:
        super().__init__(timeout_ms)
        self._manager = manager
        self._results = results
        self._respond = respond
        # Partitions still waiting -> required offset; decided ones get their final result.
        self._status: dict[TopicPartition, ProduceResult] = {
            tp: result for tp, (result, required) in results.items() if required < 0
        }

    def try_complete(self) -> bool:
        for tp, (result, required) in self._results.items():
            if tp in self._status:
                continue
            hosted = self._manager.partitions.get(tp)
            if hosted is None:
                self._status[tp] = ProduceResult(self._manager.not_hosted_error(tp))
                continue
            done, error = hosted.partition.check_enough_replicas_reach_offset(required)
            # Kafka's DelayedProduce: an error (e.g. leadership lost) also ends the wait.
            if done or error != ErrorCode.NONE:
                self._status[tp] = result if error == ErrorCode.NONE else ProduceResult(error)
        if len(self._status) == len(self._results):
            return self.force_complete()
        return False

    def on_complete(self) -> None:
        final = {
            tp: self._status.get(tp, ProduceResult(ErrorCode.REQUEST_TIMED_OUT))
            for tp in self._results
        }
        self._respond(final)


class DelayedFetch(DelayedOperation):
    """A long-poll fetch (Kafka's DelayedFetch): complete once ``min_bytes`` are readable.
    A follower's session fetch also wakes on its session's key (``woken``): the woken
    partitions (module docstring) join the reads."""

    __slots__ = (
        "_client",
        "_isolation_level",
        "_manager",
        "_max_bytes",
        "_min_bytes",
        "_replica_id",
        "_respond",
        "_woken",
        "requests",
    )

    def __init__(  # noqa: PLR0917
        self,
        manager: HostedReplicas,
        requests: Sequence[PartitionRead],
        max_bytes: int,
        min_bytes: int,
        max_wait_ms: int,
        respond: FetchRespond,
        replica_id: int = -1,
        isolation_level: int = READ_UNCOMMITTED,
        client: ClientMetadata | None = None,
        woken: WakeSource | None = None,
    ) -> None:
        super().__init__(max_wait_ms)
        self._manager = manager
        self._replica_id = replica_id
        #: A consumer's client metadata (Fetch v11+): a follower may serve it (KIP-392).
        self._client = client
        self._isolation_level = isolation_level
        #: The partitions read when the fetch completes, in the order answered.
        self.requests = list(requests)
        self._woken = woken
        self._max_bytes = max_bytes
        self._min_bytes = min_bytes
        self._respond = respond

    def keys(self) -> list[Hashable]:
        """Every key that wakes this fetch: its partitions, and its session's."""
        keys: list[Hashable] = [r.tp for r in self.requests]
        if self._woken is not None:
            keys.append(self._woken.key)
        return keys

    def notice(self, key: Hashable) -> None:
        """The session woke parked partitions (they changed): read them too."""
        woken = self._woken
        if woken is not None and key == woken.key and not self.completed:
            self.requests.extend(woken.take())

    def try_complete(self) -> bool:
        accumulated = 0
        quota = self._manager.replication_throttles().leader if self._replica_id >= 0 else None
        for request in self.requests:
            hosted = self._manager.partitions.get(request.tp)
            if hosted is None:
                return self.force_complete()
            the_log = hosted.log
            # Followers may read up to the log end offset, consumers up to the HW
            # (read_committed: the last stable offset).
            hw = hosted.partition.high_watermark if self._replica_id < 0 else the_log.log_end_offset
            if self._replica_id < 0 and self._isolation_level == READ_COMMITTED:
                hw = the_log.last_stable_offset(hw)
            client = self._client
            if hosted.partition.validate_leader_epoch(
                request.current_leader_epoch, require_leader=client is None
            ):
                return self.force_complete()  # fenced / not leader: answer the error now
            if (
                client is not None
                and self._manager.preferred_read_replica(hosted, request.fetch_offset, client)
                != NO_PREFERRED_REPLICA
            ):
                return self.force_complete()  # KIP-392: sent to another replica at once
            if not the_log.log_start_offset <= request.fetch_offset <= the_log.log_end_offset:
                return self.force_complete()  # OFFSET_OUT_OF_RANGE: answer now
            if request.fetch_offset < hw:
                if quota is not None and quota.should_throttle(
                    request.tp, in_sync=self._replica_id in hosted.partition.isr
                ):
                    continue
                if self._replica_id >= 0 and self._min_bytes <= 1:
                    # A follower reads up to the log end offset, so a batch holds the fetch
                    # offset: its byte is there without reading it here (the answer reads).
                    return self.force_complete()
                try:
                    piece = the_log.read(
                        request.fetch_offset,
                        request.max_bytes,
                        max_offset=hw if self._replica_id < 0 else None,
                        min_one_batch=True,
                    )
                except KafkaError:
                    return self.force_complete()
                if piece is not None:
                    accumulated += piece.length
        if accumulated >= self._min_bytes:
            return self.force_complete()
        return False

    def on_complete(self) -> None:
        self._respond(
            self.requests,
            self._manager.read(
                self.requests,
                self._max_bytes,
                self._replica_id,
                self._isolation_level,
                self._client,
            ),
        )
