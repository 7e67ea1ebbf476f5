"""What the replica manager hosts and what its produce and fetch paths answer: a hosted
partition (its log and its replication state), one partition of a Fetch, and the results.
Data only; the paths are ``tidelog.server.replica.manager`` and ``delayed_ops``."""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from tidelog.errors import ErrorCode
from tidelog.model import TopicPartition
from tidelog.replication.partition import Partition
from tidelog.storage.log import FetchSlice, Log


@dataclass(slots=True)
class HostedPartition:
    log: Log
    partition: Partition
    topic_id: uuid.UUID


@dataclass(frozen=True, slots=True)
class ProduceResult:
    error: ErrorCode
    base_offset: int = -1
    log_start_offset: int = -1
    message: str | None = None
    #: The leader's stamp of a LogAppendTime topic's batches, else -1 (Kafka's
    #: ``PartitionResponse.logAppendTime``; ``tidelog.storage.log_timestamps`` rule 1).
    log_append_time_ms: int = -1
    #: The records that refused the append, ``(index in their batch, message)`` (KIP-467;
    #: ``tidelog.storage.log_timestamps`` rule 2).
    record_errors: tuple[tuple[int, str], ...] = ()


@dataclass(frozen=True, slots=True)
class PartitionRead:
    """One partition of a Fetch, as the replica manager reads it from the local log (the
    client's side of the same request is ``tidelog.client.fetch.FetchRequestPartition``)."""

    tp: TopicPartition
    fetch_offset: int
    max_bytes: int
    #: The leader epoch the client believes current (-1: unknown, not checked), rule 8.
    current_leader_epoch: int = -1
    #: A follower's fetch: its own log start offset (-1 unknown; KIP-392's selection).
    log_start_offset: int = -1


#: Fetch / ListOffsets isolation levels (KIP-98).
READ_UNCOMMITTED = 0
READ_COMMITTED = 1


@dataclass(slots=True)
class FetchResult:
    error: ErrorCode
    high_watermark: int = -1
    log_start_offset: int = -1
    records: FetchSlice | None = None
    #: KIP-98: the offset below which every transaction is decided (-1 unknown).
    last_stable_offset: int = -1
    #: read_committed only: (producer id, first offset) of aborted transactions the records
    #: may hold; None for read_uncommitted.
    aborted_transactions: list[tuple[int, int]] | None = None
    #: KIP-392: the replica the consumer should read from instead (no records then); -1
    #: none (``tidelog.server.replica.selector``).
    preferred_read_replica: int = -1
