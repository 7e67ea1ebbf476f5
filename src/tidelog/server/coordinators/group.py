"""The group coordinator's asyncio shell: ``__consumer_offsets``, timers and the group APIs.

Theory of operation (Kafka's GroupCoordinator + GroupMetadataManager, classic protocol):

1. Placement. Group ``g`` belongs to partition ``partition_for(g, N)`` of the internal topic
   ``__consumer_offsets`` (``offsets.topic.num.partitions`` N, default 50); the leader of that
   partition is the group's coordinator. The topic is created on the first FindCoordinator
   (replication factor ``min(offsets.topic.replication.factor, live brokers)``); until its
   partitions have leaders FindCoordinator answers COORDINATOR_NOT_AVAILABLE (15).
2. Ownership follows leadership. A ``GroupManager`` (the pure state machine of
   ``tidelog.coordinator.group``) exists per partition this broker leads, tagged with the
   leader epoch it was loaded at. When this broker leads a partition at a new epoch it
   *loads* it: replays the partition's records (Kafka's key/value format,
   ``tidelog.coordinator.records``) from the log start to the log end. The new leader was in
   the ISR, so every acknowledged commit is in its log. When it stops leading (or the epoch
   changes) the manager is *unloaded*: parked joins/syncs answer NOT_COORDINATOR (16) and
   every group request does too, so clients look the coordinator up again. A maintenance
   loop (every ``TICK_S``) notices leadership changes and runs the managers' timers.
3. Durability. Offsets commit with acks=all through the ordinary replication path
   (``ReplicaManager.append_records`` + ``wait_for_acks``): a commit is answered, and made
   visible to OffsetFetch, only once the high watermark passed it. Group metadata (generation,
   protocol, leader, members and assignments) is appended when a generation becomes Stable or
   Empty, so a new coordinator continues the group without a rebalance. DeleteGroups and
   OffsetDelete append tombstones (null values) and answer once they are replicated.
4. Parked requests. JoinGroup/SyncGroup answers the state machine delays are futures keyed
   by member id, resolved from the ``Effects`` every call and tick returns.
5. Transactions (KIP-98/KIP-447, ``tidelog.coordinator.txn_offsets``). TxnOffsetCommit
   appends its offsets as one transactional batch of the producer (acks=all); they are
   pending from the leader's append until the broker calls ``complete_txn`` for the
   producer's COMMIT/ABORT marker in the same partition. Loading replays markers alike;
   OffsetFetch v7+ with ``require_stable`` answers UNSTABLE_OFFSET_COMMIT (88) for a
   partition a transaction holds.

6. Offset expiry (KIP-211, Kafka's ``cleanupGroupMetadata``). Every
   ``offsets.retention.check.interval.ms`` (default 10 minutes) each loaded manager removes
   the offsets whose retention passed (``offsets.retention.minutes``, default 7 days;
   tidelog's test knob ``tidelog.offsets.retention.ms`` overrides it when set): all of an
   Empty group's once it has been empty that long, a standalone consumer's by commit time,
   a Stable consumer group's only for topics it no longer subscribes to; an offset
   committed with OffsetCommit v2-v4 ``retention_time_ms`` at its own expire time; never an
   offset whose commit is in flight or a transaction's pending one (rules 6-11 of
   ``tidelog.coordinator.group``). They leave memory at once and their tombstones are
   appended in the same step (acks=all; a failure is logged: the next leader replays the
   records and expires them again). An Empty group left without offsets is removed, with a
   group tombstone when it had a generation. One line per round: "Removed N expired offsets
   in X milliseconds." The clock (``clock``) is injectable for tests.
7. Compaction. ``__consumer_offsets`` is created with ``cleanup.policy=compact`` and
   ``segment.bytes`` = ``offsets.topic.segment.bytes`` (Kafka's offsetsTopicConfigs), so
   the log cleaner keeps the last record per key and, after ``delete.retention.ms``, drops
   tombstones: the partition stays bounded by the live groups and offsets. A load therefore
   reads a log with offset gaps and possibly missing tombstones; the replay needs neither
   (the last record per key wins). An existing topic keeps its config (say
   ``cleanup.policy=delete``), as in Kafka; ``kafka-configs --alter`` changes it.
   Not done: the KIP-848 consumer protocol.

This module owns the loaded partitions' lifecycle, the timers, expiry and the appends;
the APIs are handler groups that receive only the callables they use:
``group_partitions`` (load and unload, rule 2), ``group_membership`` (JoinGroup, SyncGroup,
Heartbeat, LeaveGroup; rule 4), ``group_offsets`` (OffsetCommit, TxnOffsetCommit,
OffsetFetch, OffsetDelete; rules 3 and 5), ``group_admin`` (ListGroups, DescribeGroups,
DeleteGroups); FindCoordinator is the request layer's (``tidelog.server.apis.find_coordinator``).
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from tidelog.client.records import Record, build_batch
from tidelog.coordinator.group import Effects, GroupConfig, GroupManager
from tidelog.coordinator.records import group_key, group_value, offset_key
from tidelog.errors import ErrorCode
from tidelog.model import TopicPartition
from tidelog.protocol.apis import ApiKey
from tidelog.protocol.codec import RequestHeader
from tidelog.server.config.broker_config import BrokerConfig
from tidelog.server.coordinators.group_admin import GroupAdminApis
from tidelog.server.coordinators.group_common import AuthorizerOf, Entries, Respond
from tidelog.server.coordinators.group_membership import (
    MembershipApis,
    ParkedRequests,
    client_host,
)
from tidelog.server.coordinators.group_offsets import OffsetApis
from tidelog.server.coordinators.group_partitions import GroupPartitions, LoadedPartition
from tidelog.server.coordinators.internal_topics import (
    COORDINATOR_APPEND_ERRORS,
    OFFSETS_TOPIC,
    InternalTopicCreator,
    append_replicated,
    partition_count,
)
from tidelog.server.metadata.backend import MetadataBackend
from tidelog.server.replica.manager import ReplicaManager, now_ms

if TYPE_CHECKING:
    pass

log = logging.getLogger(__name__)

#: How often leadership is re-checked and the managers' timers run.
TICK_S = 0.1
#: Expiry tombstones per appended batch (each well under ``max.message.bytes`` together).
_TOMBSTONES_PER_BATCH = 1000
#: Kafka maps append errors of the internal topic to what group clients understand; an
#: oversized commit is INVALID_COMMIT_OFFSET_SIZE.
_APPEND_ERRORS = {
    **COORDINATOR_APPEND_ERRORS,
    ErrorCode.MESSAGE_TOO_LARGE: ErrorCode.INVALID_COMMIT_OFFSET_SIZE,
}


def _tombstones_written(p: int, future: asyncio.Future[ErrorCode]) -> None:
    """Expiry tombstones are not retried: the next leader replays the offsets and expires
    them again (Kafka appends them with acks=0)."""
    if not future.cancelled() and future.result() != ErrorCode.NONE:
        log.warning("expired offsets' tombstones in partition %d: %s", p, future.result().name)


def _metadata_written(p: int, future: asyncio.Future[ErrorCode]) -> None:
    if not future.cancelled() and future.result() != ErrorCode.NONE:
        log.warning("group metadata write to partition %d failed: %s", p, future.result())


def _offsets_topic_creator(config: BrokerConfig, backend: MetadataBackend) -> InternalTopicCreator:
    """``__consumer_offsets`` created on first use with Kafka's offsetsTopicConfigs (its
    compression.type is ``producer`` whatever the broker default)."""
    return InternalTopicCreator(
        config,
        backend,
        OFFSETS_TOPIC,
        partitions_key="offsets.topic.num.partitions",
        replication_key="offsets.topic.replication.factor",
        config={
            "cleanup.policy": "compact",
            "segment.bytes": str(config.get_int("offsets.topic.segment.bytes")),
            "retention.ms": "-1",
            "compression.type": "producer",
        },
    )


class GroupCoordinator:
    """Group APIs of one broker over its metadata backend (alone or in a cluster).

    It owns the loaded partitions, the timers and the appends to ``__consumer_offsets``;
    the APIs are answered by handler groups that receive only the callables they use:
    ``authorizer`` (the broker's ACL authorizer now), ``respond`` (a response of the
    request's version) and ``own_address`` (this broker's address on the listener of the
    current request, for FindCoordinator)."""

    def __init__(
        self,
        config: BrokerConfig,
        backend: MetadataBackend,
        replica_manager: ReplicaManager,
        *,
        authorizer: AuthorizerOf,
        respond: Respond,
        own_address: Callable[[], tuple[str, int]],
    ) -> None:
        self.config = config
        self.backend = backend
        self.replica_manager = replica_manager
        self._own_address = own_address
        self.group_config = GroupConfig(
            min_session_timeout_ms=config.get_int("group.min.session.timeout.ms"),
            max_session_timeout_ms=config.get_int("group.max.session.timeout.ms"),
            initial_rebalance_delay_ms=config.get_int("group.initial.rebalance.delay.ms"),
            max_size=config.get_int("group.max.size"),
        )
        self.commit_timeout_ms = config.get_int("offsets.commit.timeout.ms")
        retention_ms = config.get_int("tidelog.offsets.retention.ms")
        #: Kafka's offsets.retention.minutes; tidelog's ms override (a test knob) first.
        self.offsets_retention_ms = (
            retention_ms
            if retention_ms > 0
            else config.get_int("offsets.retention.minutes") * 60_000
        )
        self.retention_check_interval_ms = config.get_int("offsets.retention.check.interval.ms")
        #: The coordinator's clock (ms): timestamps, timers and expiry; tests replace it.
        self.clock: Callable[[], int] = now_ms
        self._next_expiry_check_ms = -1
        self._offsets_creator = _offsets_topic_creator(config, backend)
        self._task: asyncio.Task[None] | None = None
        self.partitions = GroupPartitions(
            self.replica_manager,
            functools.partial(partition_count, backend, OFFSETS_TOPIC),
            self.group_config,
            self._now,
            self._apply,
        )
        #: The loaded partitions by number (``partitions.loaded`` itself).
        self.loaded: dict[int, LoadedPartition] = self.partitions.loaded
        self.parked = ParkedRequests()
        lookup = self.partitions.lookup
        self.membership = MembershipApis(
            lookup=lookup,
            apply=self._apply,
            parked=self.parked,
            clock=self._now,
            authorizer=authorizer,
            respond=respond,
        )
        self.offsets = OffsetApis(
            lookup=lookup,
            is_current=self.partitions.is_current,
            append=self._append,
            partition_exists=self._partition_exists,
            clock=self._now,
            authorizer=authorizer,
            respond=respond,
        )
        self.admin = GroupAdminApis(
            lookup=lookup,
            managers=self._current_managers,
            append=self._append,
            clock=self._now,
            authorizer=authorizer,
            respond=respond,
        )

    def handlers(self) -> dict[int, Callable[[RequestHeader, Any], Any]]:
        return {
            ApiKey.JOIN_GROUP: self.membership.handle_join_group,
            ApiKey.SYNC_GROUP: self.membership.handle_sync_group,
            ApiKey.HEARTBEAT: self.membership.handle_heartbeat,
            ApiKey.LEAVE_GROUP: self.membership.handle_leave_group,
            ApiKey.OFFSET_COMMIT: self.offsets.handle_offset_commit,
            ApiKey.TXN_OFFSET_COMMIT: self.offsets.handle_txn_offset_commit,
            ApiKey.OFFSET_FETCH: self.offsets.handle_offset_fetch,
            ApiKey.LIST_GROUPS: self.admin.handle_list_groups,
            ApiKey.DESCRIBE_GROUPS: self.admin.handle_describe_groups,
            ApiKey.DELETE_GROUPS: self.admin.handle_delete_groups,
            ApiKey.OFFSET_DELETE: self.offsets.handle_offset_delete,
        }

    # --- lifecycle -------------------------------------------------------------------------

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._maintenance_loop())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
        for p in list(self.loaded):
            self._unload(p)

    async def _maintenance_loop(self) -> None:
        while True:
            await asyncio.sleep(TICK_S)
            try:
                self.maintain(self.clock())
            except Exception:  # a bug here must not stop the timers of every group
                log.exception("group coordinator maintenance failed")

    def maintain(self, now: int) -> None:
        """Load newly led partitions, unload lost ones, run every manager's timers."""
        self.partitions.load_led()
        for p, manager in self.partitions.managers():
            self._apply(p, manager.tick(now))
        if self._next_expiry_check_ms < 0:
            # Kafka schedules the first round one interval after start-up.
            self._next_expiry_check_ms = now + self.retention_check_interval_ms
        elif now >= self._next_expiry_check_ms:
            self._next_expiry_check_ms = now + self.retention_check_interval_ms
            self.cleanup_group_metadata(now)

    def cleanup_group_metadata(self, now: int) -> int:
        """One expiry round over every loaded partition (rule 6): expired offsets and
        dead groups leave memory and their tombstones are appended. Returns how many
        offsets expired."""
        removed = 0
        for p, loaded in list(self.loaded.items()):
            expired = loaded.manager.remove_expired_offsets(now, self.offsets_retention_ms)
            entries: Entries = [
                (offset_key(group_id, tp), None)
                for group_id, tps in expired.offsets.items()
                for tp in tps
            ]
            for group_id, generation in expired.dead_groups.items():
                log.info("Group %s transitioned to Dead in generation %d", group_id, generation)
                if generation > 0:  # Kafka: a generation-0 group only stored offsets
                    entries.append((group_key(group_id), None))
            removed += expired.count
            for start in range(0, len(entries), _TOMBSTONES_PER_BATCH):
                _, future = self._append(p, entries[start : start + _TOMBSTONES_PER_BATCH])
                future.add_done_callback(functools.partial(_tombstones_written, p))
        log.info("Removed %d expired offsets in %d milliseconds.", removed, self.clock() - now)
        return removed

    def complete_txn(self, offsets_partition: int, producer_id: int, commit: bool) -> None:
        """The broker wrote (and replicated) ``producer_id``'s COMMIT or ABORT marker to
        ``__consumer_offsets`` partition ``offsets_partition``: the producer's pending offsets
        of that partition's groups become committed or are dropped (Kafka's
        ``handleTxnCompletion``). Not loaded here: nothing to do, a load replays the marker."""
        loaded = self.loaded.get(offsets_partition)
        if loaded is not None:
            loaded.manager.complete_txn(producer_id, commit)

    async def ensure_offsets_topic(self) -> int:
        """``__consumer_offsets``'s partition count, creating the topic first if needed (0
        while it is not there yet)."""
        return await self._offsets_creator.ensure()

    # --- what the handler groups receive ---------------------------------------------------

    def _now(self) -> int:
        """The clock as it is now (tests replace ``clock`` after construction)."""
        return self.clock()

    def leader_for_client(self, tp: TopicPartition) -> tuple[int, str, int] | None:
        """``tp``'s leader on the listener the current request came in on."""
        return self.backend.partition_leader(tp, self._own_address())

    def _partition_exists(self, topic: str, partition: int) -> bool:
        info = self.backend.topics.get(topic)
        return info is not None and 0 <= partition < info.num_partitions

    def _current_managers(self) -> list[GroupManager]:
        """Every loaded manager after a maintenance pass (ListGroups sees current state)."""
        self.maintain(self.clock())
        return [loaded.manager for loaded in self.loaded.values()]

    def _offsets_partitions(self) -> int:
        """How many partitions ``__consumer_offsets`` has, 0 while this broker does not know
        (no such topic, or in a cluster not yet described by UpdateMetadata: a broker that
        replicates some of its partitions knows those before it knows the count, and a group
        hashed over the wrong count would live in the wrong partition)."""
        return self.partitions.partition_count()

    def _unload(self, p: int) -> None:
        self.partitions.unload(p)

    # --- effects and appends ---------------------------------------------------------------

    def _apply(self, p: int, effects: Effects) -> None:
        """Answer the parked requests ``effects`` decided and append its group records."""
        self.parked.resolve(effects)
        if effects.group_records:
            entries: Entries = [
                (group_key(g), None if rec is None else group_value(rec))
                for g, rec in effects.group_records.items()
            ]
            _, future = self._append(p, entries)
            future.add_done_callback(functools.partial(_metadata_written, p))

    def _append(
        self,
        p: int,
        entries: Entries,
        producer_id: int = -1,
        producer_epoch: int = -1,
    ) -> tuple[int, asyncio.Future[ErrorCode]]:
        """Append records as one batch with acks=all: the batch's base offset in the log (-1
        when refused) and a future resolving once it is replicated. With a producer id the
        batch is that producer's transactional batch (TxnOffsetCommit), without a sequence
        number: the log does not sequence-check a coordinator's transactional batch."""
        batch = build_batch(
            [Record(value=value, key=key) for key, value in entries],
            base_timestamp_ms=self.clock(),
            producer_id=producer_id,
            producer_epoch=producer_epoch,
            base_sequence=-1,
            is_transactional=producer_id >= 0,
        )
        return append_replicated(
            self.replica_manager,
            TopicPartition(OFFSETS_TOPIC, p),
            batch,
            self.commit_timeout_ms,
            _APPEND_ERRORS,
        )


__all__ = ["OFFSETS_TOPIC", "GroupCoordinator", "client_host"]
