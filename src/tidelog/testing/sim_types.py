"""The simulator's data: its configuration, a replica's in-memory log, the messages brokers
exchange, a broker's state, and the run's statistics (``tidelog.testing.sim``)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import NamedTuple

from tidelog.errors import ErrorCode
from tidelog.model import NO_EPOCH, BrokerId, TopicPartition
from tidelog.replication.epoch import LeaderEpochCache
from tidelog.replication.partition import Partition
from tidelog.replication.truncation import EpochEndOffset

CONTROLLER = -1000  # node id of the controller in the network model
CLIENT = -2000


@dataclass(frozen=True, slots=True, kw_only=True)
class SimConfig:
    brokers: int = 3
    partitions: int = 1
    replication_factor: int = 3
    min_insync_replicas: int = 2
    replica_lag_time_max_ms: int = 300
    fetch_interval_ms: int = 25  # an idle follower polls this often (long-poll stand-in)
    fetch_timeout_ms: int = 120
    fetch_max_records: int = 20
    request_timeout_ms: int = 1500  # produce purgatory timeout (REQUEST_TIMED_OUT)
    net_delay_ms: tuple[int, int] = (1, 8)
    net_drop_rate: float = 0.0
    #: Chance that the controller applies an AlterPartition but its answer is lost (the
    #: leader's request times out after ``controller_request_timeout_ms``).
    alter_response_loss_rate: float = 0.0
    controller_request_timeout_ms: int = 200
    controller_delay_ms: tuple[int, int] = (1, 5)
    flush_interval_ms: int = 100
    zookeeper_session_timeout_ms: int = 150  # a longer pause may expire the session
    unclean_leader_election: bool = False
    truncate_to_hw_on_follow: bool = False  # the pre-KIP-101 rule (seed 002); sim only


@dataclass(slots=True)
class SimLog:
    """A replica's persistent state: records, their epochs, the epoch cache, checkpoints."""

    records: list[int] = field(default_factory=list)
    epochs: list[int] = field(default_factory=list)
    cache: LeaderEpochCache = field(default_factory=LeaderEpochCache)
    hw_checkpoint: int = 0
    flushed: int = 0

    @property
    def log_end_offset(self) -> int:
        return len(self.records)

    def last_epoch(self) -> int:
        return self.epochs[-1] if self.epochs else NO_EPOCH

    def append(self, epoch: int, record_id: int) -> int:
        offset = len(self.records)
        latest = self.cache.latest_epoch()
        if latest is None or epoch > latest:
            self.cache.assign(epoch, offset)
        self.records.append(record_id)
        self.epochs.append(epoch)
        return offset

    def truncate_to(self, offset: int) -> None:
        if offset < len(self.records):
            del self.records[offset:]
            del self.epochs[offset:]
        self.cache.truncate_from_end(offset)
        self.flushed = min(self.flushed, offset)
        self.hw_checkpoint = min(self.hw_checkpoint, offset)


@dataclass(slots=True)
class Fetcher:
    """A follower's fetcher for one partition (Kafka's ``ReplicaFetcherThread`` state)."""

    leader: BrokerId
    leader_epoch: int
    truncating: bool
    inflight: int = 0  # id of the outstanding request, 0 when none


@dataclass(frozen=True, slots=True)
class EpochRequest:
    """OffsetForLeaderEpoch (API 23) for one partition."""

    leader: BrokerId
    follower: BrokerId
    tp: TopicPartition
    current_leader_epoch: int
    requested_epoch: int
    rid: int


@dataclass(frozen=True, slots=True)
class FetchRequest:
    """A follower's Fetch for one partition (fetch offset = its LEO, rule 2)."""

    leader: BrokerId
    follower: BrokerId
    tp: TopicPartition
    current_leader_epoch: int
    fetch_offset: int
    last_fetched_epoch: int
    rid: int


@dataclass(frozen=True, slots=True, kw_only=True)
class FetchResponse:
    error: ErrorCode = ErrorCode.NONE
    diverging: EpochEndOffset | None = None
    records: tuple[int, ...] = ()
    epochs: tuple[int, ...] = ()
    leader_hw: int = 0
    leader_leo: int = 0


@dataclass(slots=True)
class PendingProduce:
    record_id: int
    offset: int
    deadline_ms: int


@dataclass(slots=True)
class SimBroker:
    broker_id: BrokerId
    alive: bool = True
    incarnation: int = 0  # bumps on crash and restart: messages to an old one are lost
    broker_epoch: int = 0  # KIP-380: bumps on every registration (restart, re-registration)
    session_expired: bool = False
    paused_until: int = 0
    backlog: list[tuple[Callable[..., None], tuple[object, ...]]] = field(default_factory=list)
    logs: dict[TopicPartition, SimLog] = field(default_factory=dict)
    partitions: dict[TopicPartition, Partition] = field(default_factory=dict)
    fetchers: dict[TopicPartition, Fetcher] = field(default_factory=dict)
    purgatory: dict[TopicPartition, list[PendingProduce]] = field(default_factory=dict)


class ReassignOutcome(NamedTuple):
    """AlterPartitionReassignments' answer for one partition."""

    error: ErrorCode
    message: str | None = None


@dataclass(slots=True)
class Stats:
    events: int = 0
    produced: dict[int, int] = field(default_factory=lambda: {0: 0, 1: 0, -1: 0})
    acked_all: int = 0
    errors: dict[str, int] = field(default_factory=dict)
    unclean_elections: int = 0
    consumed: int = 0
    lost_alter_responses: int = 0
    reassignments_started: int = 0
    reassignments_completed: int = 0
    reassignments_refused: int = 0
    replicas_deleted: int = 0
    controller_failovers: int = 0

    def error(self, code: ErrorCode) -> None:
        self.errors[code.name] = self.errors.get(code.name, 0) + 1
