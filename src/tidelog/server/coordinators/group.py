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
   (the last record per key wins). A topic created before (``cleanup.policy=delete``,
   ``retention.ms=-1``) keeps its config, as in Kafka; ``kafka-configs --alter`` changes it.
   Not done: the KIP-848 consumer protocol.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from tidelog.client.records import Record, build_batch, decode_records
from tidelog.coordinator import partition_for
from tidelog.coordinator.group import (
    OFFSET_METADATA_MAX_BYTES,
    Effects,
    GroupConfig,
    GroupManager,
    GroupState,
    JoinRequest,
    JoinResult,
    SyncResult,
)
from tidelog.coordinator.records import (
    OffsetAndMetadata,
    RecordFormatError,
    group_key,
    group_value,
    offset_key,
    offset_value,
)
from tidelog.coordinator.txn_offsets import PartitionReplay
from tidelog.errors import ErrorCode
from tidelog.model import TopicPartition
from tidelog.protocol.apis import ApiKey
from tidelog.protocol.codec import RequestHeader
from tidelog.security.acls import AclOperation, ResourceType
from tidelog.server.auth import authz
from tidelog.server.coordinators.internal_topics import (
    InternalTopicCreator,
    append_replicated,
    leader_of,
    replay_batches,
)
from tidelog.server.replica.manager import now_ms

if TYPE_CHECKING:
    from tidelog.server.apis.kafka_apis import KafkaApis
    from tidelog.server.cluster.node import ClusterNode
    from tidelog.server.coordinators.txn import TransactionCoordinator

log = logging.getLogger(__name__)

OFFSETS_TOPIC = "__consumer_offsets"
#: How often leadership is re-checked and the managers' timers run.
TICK_S = 0.1
#: Expiry tombstones per appended batch (each well under ``max.message.bytes`` together).
_TOMBSTONES_PER_BATCH = 1000
#: The address of the client whose request is being handled (set by the dispatcher).
client_host: contextvars.ContextVar[str] = contextvars.ContextVar("client_host", default="")

COORDINATOR_GROUP = 0
COORDINATOR_TRANSACTION = 1
#: Kafka maps append errors of the internal topic to what group clients understand.
_APPEND_ERRORS = {
    ErrorCode.NOT_LEADER_OR_FOLLOWER: ErrorCode.NOT_COORDINATOR,
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.NOT_ENOUGH_REPLICAS: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.REQUEST_TIMED_OUT: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.MESSAGE_TOO_LARGE: ErrorCode.INVALID_COMMIT_OFFSET_SIZE,
}


@dataclass(slots=True)
class _Loaded:
    manager: GroupManager
    leader_epoch: int


def _tombstones_written(p: int, future: asyncio.Future[ErrorCode]) -> None:
    """Expiry tombstones are not retried: the next leader replays the offsets and expires
    them again (Kafka appends them with acks=0)."""
    if not future.cancelled() and future.result() != ErrorCode.NONE:
        log.warning("expired offsets' tombstones in partition %d: %s", p, future.result().name)


def _host_of(peer: str) -> str:
    return "/" + peer.rsplit(":", 1)[0] if peer else ""


class GroupCoordinator:
    """Group APIs of one broker; ``node`` is the cluster side (None: a single broker)."""

    def __init__(self, apis: KafkaApis, node: ClusterNode | None = None) -> None:
        self.apis = apis
        self.config = apis.config
        self.replica_manager = apis.replica_manager
        self.node = node
        config = self.config
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
        self.loaded: dict[int, _Loaded] = {}
        self._joins: dict[str, Callable[[JoinResult], None]] = {}
        self._syncs: dict[str, Callable[[SyncResult], None]] = {}
        self._offsets_creator = InternalTopicCreator(
            apis,
            node,
            OFFSETS_TOPIC,
            partitions_key="offsets.topic.num.partitions",
            replication_key="offsets.topic.replication.factor",
            # compression.type: Kafka's offsetsTopicConfigs (the broker default does not apply).
            config={
                "cleanup.policy": "compact",
                "segment.bytes": str(config.get_int("offsets.topic.segment.bytes")),
                "retention.ms": "-1",
                "compression.type": "producer",
            },
        )
        #: The transaction coordinator (set by the broker): FindCoordinator key type 1.
        self.transactions: TransactionCoordinator | None = None
        self._task: asyncio.Task[None] | None = None

    def handlers(self) -> dict[int, Callable[[RequestHeader, Any], Any]]:
        return {
            ApiKey.FIND_COORDINATOR: self.handle_find_coordinator,
            ApiKey.JOIN_GROUP: self.handle_join_group,
            ApiKey.SYNC_GROUP: self.handle_sync_group,
            ApiKey.HEARTBEAT: self.handle_heartbeat,
            ApiKey.LEAVE_GROUP: self.handle_leave_group,
            ApiKey.OFFSET_COMMIT: self.handle_offset_commit,
            ApiKey.TXN_OFFSET_COMMIT: self.handle_txn_offset_commit,
            ApiKey.OFFSET_FETCH: self.handle_offset_fetch,
            ApiKey.LIST_GROUPS: self.handle_list_groups,
            ApiKey.DESCRIBE_GROUPS: self.handle_describe_groups,
            ApiKey.DELETE_GROUPS: self.handle_delete_groups,
            ApiKey.OFFSET_DELETE: self.handle_offset_delete,
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
        for tp, hosted in list(self.replica_manager.partitions.items()):
            if tp.topic == OFFSETS_TOPIC and hosted.partition.is_leader:
                self._manager_of_partition(tp.partition)
        for p in list(self.loaded):
            loaded = self._manager_of_partition(p)
            if loaded is not None:
                self._apply(p, loaded.tick(now))
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
            entries: list[tuple[bytes, bytes | None]] = [
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

    # --- partitions: load, unload ----------------------------------------------------------

    def _offsets_partitions(self) -> int:
        """How many partitions ``__consumer_offsets`` has, 0 while this broker does not know
        (no such topic, or in a cluster not yet described by UpdateMetadata: a broker that
        replicates some of its partitions knows those before it knows the count, and a group
        hashed over the wrong count would live in the wrong partition)."""
        info = self.apis.metadata.topics.get(OFFSETS_TOPIC)
        return 0 if info is None else info.num_partitions

    def _manager_of_partition(self, p: int) -> GroupManager | None:
        """The manager of partition ``p`` when this broker leads it (loading it at a new
        leader epoch), else None (after unloading what was there)."""
        hosted = self.replica_manager.partitions.get(TopicPartition(OFFSETS_TOPIC, p))
        loaded = self.loaded.get(p)
        if hosted is None or not hosted.partition.is_leader:
            if loaded is not None:
                self._unload(p)
            return None
        epoch = hosted.partition.leader_epoch
        if loaded is not None and loaded.leader_epoch == epoch:
            return loaded.manager
        if loaded is not None:
            self._unload(p)
        manager = GroupManager(self.group_config)
        replay = self._read_partition(p)
        manager.load(replay.groups, replay.committed(), self.clock(), replay.pending)
        self.loaded[p] = _Loaded(manager, epoch)
        count = len(manager.groups)
        log.info("loaded %s-%d at leader epoch %d: %d groups", OFFSETS_TOPIC, p, epoch, count)
        return manager

    def _read_partition(self, p: int) -> PartitionReplay:
        """Replay the partition from its start to its end: the last record per key wins;
        transactional batches stay pending until their producer's marker (control batch)."""
        hosted = self.replica_manager.partitions[TopicPartition(OFFSETS_TOPIC, p)]
        the_log = hosted.log
        replay = PartitionReplay()
        for header, batch, first in replay_batches(the_log):
            # A transactional batch's offsets belong to its producer until its marker.
            producer_id = header.producer_id if header.is_transactional else -1
            for rec in decode_records(batch, verify_crc=False, include_control=True):
                if rec.offset < first:
                    continue
                if header.is_control:
                    replay.marker(header.producer_id, rec.key)
                    continue
                try:
                    if rec.key is not None:
                        replay.record(header.base_offset, producer_id, rec.key, rec.value)
                except RecordFormatError as exc:
                    log.warning("%s-%d offset %d skipped: %s", OFFSETS_TOPIC, p, rec.offset, exc)
        return replay

    def _unload(self, p: int) -> None:
        loaded = self.loaded.pop(p, None)
        if loaded is not None:
            log.info("unloaded %s-%d: no longer its leader", OFFSETS_TOPIC, p)
            self._apply(p, loaded.manager.unload())

    def _lookup(self, group_id: str) -> tuple[int, GroupManager | None, ErrorCode]:
        """The partition and manager of a group here, or NOT_COORDINATOR."""
        count = self._offsets_partitions()
        if count == 0:
            return -1, None, ErrorCode.NOT_COORDINATOR
        p = partition_for(group_id, count)
        manager = self._manager_of_partition(p)
        if manager is None:
            return p, None, ErrorCode.NOT_COORDINATOR
        return p, manager, ErrorCode.NONE

    # --- effects and appends ---------------------------------------------------------------

    def _apply(self, p: int, effects: Effects) -> None:
        for member_id, join in effects.joins.items():
            join_done = self._joins.pop(member_id, None)
            if join_done is not None:
                join_done(join)
        for member_id, sync in effects.syncs.items():
            sync_done = self._syncs.pop(member_id, None)
            if sync_done is not None:
                sync_done(sync)
        if effects.group_records:
            entries: list[tuple[bytes, bytes | None]] = [
                (group_key(g), None if rec is None else group_value(rec))
                for g, rec in effects.group_records.items()
            ]
            _, future = self._append(p, entries)
            future.add_done_callback(
                lambda f: (
                    log.warning("group metadata write to partition %d failed: %s", p, f.result())
                    if not f.cancelled() and f.result() != ErrorCode.NONE
                    else None
                )
            )

    def _append(
        self,
        p: int,
        entries: list[tuple[bytes, bytes | None]],
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

    def _respond(self, header: RequestHeader, data: Mapping[str, Any]) -> Any:
        return self.apis._respond(header, data)

    # --- authorization (Kafka's KafkaApis checks; ``tidelog.server.auth.authz``) -----------------

    def _group_refused(self, header: RequestHeader, operation: AclOperation, group_id: str) -> bool:
        authorizer = self.apis.authorizer
        return authorizer is not None and not authorizer.authorize(
            operation, ResourceType.GROUP, group_id, api_key=header.api_key
        )

    def _topics_refused(
        self, header: RequestHeader, operation: AclOperation, names: list[str]
    ) -> frozenset[str]:
        return authz.denied_names(
            self.apis.authorizer, operation, ResourceType.TOPIC, names, header.api_key
        )

    def _find_refusal(
        self, header: RequestHeader, key_type: int, key: str
    ) -> dict[str, Any] | None:
        """FindCoordinator: DESCRIBE on the group, or on the transactional id (Kafka's
        getCoordinator); the message only where the version has one per answer (v0-v3)."""
        authorizer = self.apis.authorizer
        if authorizer is None:
            return None
        if key_type == COORDINATOR_GROUP:
            resource, error = ResourceType.GROUP, ErrorCode.GROUP_AUTHORIZATION_FAILED
        elif key_type == COORDINATOR_TRANSACTION:
            resource = ResourceType.TRANSACTIONAL_ID
            error = ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        else:
            return None
        if authorizer.authorize(AclOperation.DESCRIBE, resource, key, api_key=header.api_key):
            return None
        return {
            "key": key,
            "error_code": error,
            "error_message": authz.MESSAGES[error] if header.api_version < 4 else None,
            "node_id": -1,
            "host": "",
            "port": -1,
        }

    # --- FindCoordinator (10) --------------------------------------------------------------

    def handle_find_coordinator(self, header: RequestHeader, body: Any) -> Any:
        keys = list(body.coordinator_keys) if header.api_version >= 4 else [body.key]
        key_type = int(getattr(body, "key_type", 0))

        async def run() -> Any:
            answers = [
                self._find_refusal(header, key_type, str(k)) or await self._find(key_type, str(k))
                for k in keys
            ]
            if header.api_version >= 4:
                return self._respond(header, {"coordinators": answers})
            return self._respond(header, answers[0])

        return asyncio.ensure_future(run())

    async def _find(self, key_type: int, key: str) -> dict[str, Any]:
        def error(code: ErrorCode, message: str) -> dict[str, Any]:
            return {
                "key": key,
                "error_code": code,
                "error_message": message,
                "node_id": -1,
                "host": "",
                "port": -1,
            }

        if key_type == COORDINATOR_TRANSACTION and self.transactions is not None:
            code, message, found = await self.transactions.find(key)
            if found is None:
                return error(code, message or code.name)
        elif key_type != COORDINATOR_GROUP:
            # Kafka: InvalidRequestException("Unknown coordinator type ...").
            return error(ErrorCode.INVALID_REQUEST, f"unknown coordinator key type {key_type}")
        else:
            # An empty group id is Kafka's too: it has a coordinator (partition 0), and the
            # group APIs answer it INVALID_GROUP_ID (24).
            count = await self.ensure_offsets_topic()
            if count == 0:
                return error(ErrorCode.COORDINATOR_NOT_AVAILABLE, "creating __consumer_offsets")
            p = partition_for(key, count)
            found = leader_of(
                self.apis, self.node, TopicPartition(OFFSETS_TOPIC, p), for_client=True
            )
            if found is None:
                return error(ErrorCode.COORDINATOR_NOT_AVAILABLE, "no leader for its partition")
        node_id, host, port = found
        return {
            "key": key,
            "error_code": ErrorCode.NONE,
            "error_message": None,
            "node_id": node_id,
            "host": host,
            "port": port,
        }

    async def ensure_offsets_topic(self) -> int:
        """``__consumer_offsets``'s partition count, creating the topic first if needed (0
        while it is not there yet)."""
        return await self._offsets_creator.ensure()

    # --- JoinGroup (11) --------------------------------------------------------------------

    def handle_join_group(self, header: RequestHeader, body: Any) -> Any:
        version = header.api_version

        def response(r: JoinResult) -> Any:
            members = [
                {
                    "member_id": m.member_id,
                    "group_instance_id": m.group_instance_id,
                    "metadata": m.metadata,
                }
                for m in r.members
            ]
            return self._respond(
                header,
                {
                    "error_code": r.error,
                    "generation_id": r.generation_id,
                    "protocol_type": r.protocol_type,
                    "protocol_name": r.protocol_name or ("" if version < 7 else None),
                    "leader": r.leader,
                    "skip_assignment": r.skip_assignment,
                    "member_id": r.member_id,
                    "members": members,
                },
            )

        group_id = str(body.group_id)
        member_id = str(body.member_id or "")
        if self._group_refused(header, AclOperation.READ, group_id):
            return response(JoinResult(ErrorCode.GROUP_AUTHORIZATION_FAILED, member_id))
        _p, manager, error = self._lookup(group_id) if group_id else (-1, None, ErrorCode.NONE)
        if group_id and manager is None:
            return response(JoinResult(error, member_id))
        session_ms = int(body.session_timeout.total_seconds() * 1000)
        rebalance = getattr(body, "rebalance_timeout", None)
        rebalance_ms = int(rebalance.total_seconds() * 1000) if rebalance is not None else -1
        request = JoinRequest(
            group_id=group_id,
            member_id=member_id,
            group_instance_id=getattr(body, "group_instance_id", None),
            client_id=header.client_id or "",
            client_host=_host_of(client_host.get()),
            session_timeout_ms=session_ms,
            rebalance_timeout_ms=rebalance_ms if rebalance_ms > 0 else session_ms,
            protocol_type=str(body.protocol_type),
            protocols=tuple((str(p.name), bytes(p.metadata)) for p in body.protocols),
            require_known_member_id=version >= 4,
        )
        if manager is None:  # the empty group id
            return response(JoinResult(ErrorCode.INVALID_GROUP_ID, member_id))
        p = _p
        now = self.clock()
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()

        def done(r: JoinResult) -> None:
            if not future.done():
                future.set_result(response(r))

        result, parked, effects = manager.join_group(request, now)
        if result is not None:
            self._apply(p, effects)
            return response(result)
        # A member's newer join replaces one still parked: the old request is answered first.
        previous = self._joins.pop(parked, None)
        if previous is not None:
            previous(JoinResult(ErrorCode.REBALANCE_IN_PROGRESS, parked))
        self._joins[parked] = done
        self._apply(p, effects)
        return future

    # --- SyncGroup (14) --------------------------------------------------------------------

    def handle_sync_group(self, header: RequestHeader, body: Any) -> Any:
        def response(r: SyncResult) -> Any:
            return self._respond(
                header,
                {
                    "error_code": r.error,
                    "protocol_type": r.protocol_type,
                    "protocol_name": r.protocol_name,
                    "assignment": r.assignment,
                },
            )

        group_id = str(body.group_id)
        member_id = str(body.member_id)
        if self._group_refused(header, AclOperation.READ, group_id):
            return response(SyncResult(ErrorCode.GROUP_AUTHORIZATION_FAILED))
        p, manager, error = self._lookup(group_id) if group_id else (-1, None, ErrorCode.NONE)
        if manager is None:
            return response(SyncResult(error if group_id else ErrorCode.INVALID_GROUP_ID))
        result, effects = manager.sync_group(
            group_id,
            generation_id=int(body.generation_id),
            member_id=member_id,
            group_instance_id=getattr(body, "group_instance_id", None),
            protocol_type=getattr(body, "protocol_type", None),
            protocol_name=getattr(body, "protocol_name", None),
            assignments={str(a.member_id): bytes(a.assignment) for a in body.assignments},
            now_ms=self.clock(),
        )
        if result is not None:
            self._apply(p, effects)
            return response(result)
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()

        def done(r: SyncResult) -> None:
            if not future.done():
                future.set_result(response(r))

        previous = self._syncs.pop(member_id, None)
        if previous is not None:
            previous(SyncResult(ErrorCode.REBALANCE_IN_PROGRESS))
        self._syncs[member_id] = done
        self._apply(p, effects)
        return future

    # --- Heartbeat (12), LeaveGroup (13) ---------------------------------------------------

    def handle_heartbeat(self, header: RequestHeader, body: Any) -> Any:
        group_id = str(body.group_id)
        if self._group_refused(header, AclOperation.READ, group_id):
            return self._respond(header, {"error_code": ErrorCode.GROUP_AUTHORIZATION_FAILED})
        _p, manager, error = self._lookup(group_id) if group_id else (-1, None, ErrorCode.NONE)
        if manager is not None:
            error = manager.heartbeat(
                group_id,
                int(body.generation_id),
                str(body.member_id),
                getattr(body, "group_instance_id", None),
                self.clock(),
            )
        elif not group_id:
            error = ErrorCode.INVALID_GROUP_ID
        return self._respond(header, {"error_code": error})

    def handle_leave_group(self, header: RequestHeader, body: Any) -> Any:
        group_id = str(body.group_id)
        if self._group_refused(header, AclOperation.READ, group_id):
            # Kafka's handleLeaveGroupRequest: the error alone, no member answers.
            return self._respond(
                header, {"error_code": ErrorCode.GROUP_AUTHORIZATION_FAILED, "members": []}
            )
        if header.api_version >= 3:
            members = [(str(m.member_id), m.group_instance_id) for m in body.members]
        else:
            members = [(str(body.member_id), None)]
        p, manager, error = self._lookup(group_id) if group_id else (-1, None, ErrorCode.NONE)
        member_errors: list[ErrorCode] = []
        if manager is not None:
            error, member_errors, effects = manager.leave_group(group_id, members, self.clock())
            self._apply(p, effects)
        elif not group_id:
            error = ErrorCode.INVALID_GROUP_ID
        if header.api_version < 3 and error == ErrorCode.NONE and member_errors:
            error = member_errors[0]
        return self._respond(
            header,
            {
                "error_code": error,
                "members": [
                    {"member_id": m, "group_instance_id": i, "error_code": e}
                    for (m, i), e in zip(members, member_errors, strict=False)
                ],
            },
        )

    # --- OffsetCommit (8), TxnOffsetCommit (28), OffsetFetch (9) ---------------------------

    def handle_offset_commit(self, header: RequestHeader, body: Any) -> Any:
        group_id = str(body.group_id)
        generation = int(
            getattr(body, "generation_id_or_member_epoch", getattr(body, "generation_id", -1))
        )
        # Kafka's handleOffsetCommitRequest: READ on the group (every partition refused),
        # then READ on each topic; with no partition left the coordinator is not asked.
        if self._group_refused(header, AclOperation.READ, group_id):
            denied = ErrorCode.GROUP_AUTHORIZATION_FAILED
            return self._commit(header, body, -1, None, error=denied, producer=None)
        refused = self._topics_refused(
            header, AclOperation.READ, [str(t.name) for t in body.topics]
        )
        if refused and all(str(t.name) in refused for t in body.topics):
            return self._commit(
                header, body, -1, None, error=ErrorCode.NONE, producer=None, refused=refused
            )
        p, manager, error = self._lookup(group_id) if group_id else (-1, None, ErrorCode.NONE)
        if manager is not None:
            error = manager.validate_commit(
                group_id,
                generation,
                str(body.member_id or ""),
                getattr(body, "group_instance_id", None),
                self.clock(),
            )
        elif not group_id:
            error = ErrorCode.INVALID_GROUP_ID
        return self._commit(header, body, p, manager, error=error, producer=None, refused=refused)

    def handle_txn_offset_commit(self, header: RequestHeader, body: Any) -> Any:
        """KIP-98: a transaction's offsets, pending until its marker (Kafka's
        ``handleTxnCommitOffsets``: an unknown group is created Empty)."""
        group_id = str(body.group_id)
        producer = (int(body.producer_id), int(body.producer_epoch))
        # Kafka's handleTxnOffsetCommitRequest: WRITE on the transactional id, READ on the
        # group (either refuses every partition), then READ on each topic.
        refused: frozenset[str] = frozenset()
        if self.apis.authorizer is not None:
            denied: ErrorCode | None = None
            if not authz.allowed(
                self.apis.authorizer,
                AclOperation.WRITE,
                ResourceType.TRANSACTIONAL_ID,
                str(body.transactional_id),
                header.api_key,
            ):
                denied = ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
            elif self._group_refused(header, AclOperation.READ, group_id):
                denied = ErrorCode.GROUP_AUTHORIZATION_FAILED
            if denied is not None:
                return self._commit(header, body, -1, None, error=denied, producer=producer)
            refused = self._topics_refused(
                header, AclOperation.READ, [str(t.name) for t in body.topics]
            )
            if refused and all(str(t.name) in refused for t in body.topics):
                return self._commit(
                    header, body, -1, None, error=ErrorCode.NONE, producer=producer, refused=refused
                )
        p, manager, error = self._lookup(group_id) if group_id else (-1, None, ErrorCode.NONE)
        if manager is not None:
            error = manager.validate_txn_commit(
                group_id,
                int(getattr(body, "generation_id", -1)),
                str(getattr(body, "member_id", "") or ""),
                getattr(body, "group_instance_id", None),
            )
        elif not group_id:
            error = ErrorCode.INVALID_GROUP_ID
        return self._commit(
            header, body, p, manager, error=error, producer=producer, refused=refused
        )

    def _commit(
        self,
        header: RequestHeader,
        body: Any,
        p: int,
        manager: GroupManager | None,
        *,
        error: ErrorCode,
        producer: tuple[int, int] | None,
        refused: frozenset[str] = frozenset(),
    ) -> Any:
        """An (Txn)OffsetCommit past its group checks (``error``): the partitions' checks,
        then one batch with acks=all. Plain offsets become visible once replicated; a
        transaction's (``producer``: id, epoch) are pending from the leader's append
        until ``complete_txn``, and dropped again if the batch is not replicated. The
        partitions of ``refused`` topics are TOPIC_AUTHORIZATION_FAILED whatever else."""
        group_id = str(body.group_id)
        requested = [
            (str(t.name), int(part.partition_index), part)
            for t in body.topics
            for part in t.partitions
        ]

        def response(errors: Mapping[tuple[str, int], ErrorCode]) -> Any:
            topics: dict[str, list[dict[str, Any]]] = {}
            for name, index, _ in requested:
                topics.setdefault(name, []).append(
                    {"partition_index": index, "error_code": errors[(name, index)]}
                )
            return self._respond(
                header,
                {"topics": [{"name": n, "partitions": parts} for n, parts in topics.items()]},
            )

        if error != ErrorCode.NONE or manager is None:
            denied = ErrorCode.TOPIC_AUTHORIZATION_FAILED
            return response({(n, i): denied if n in refused else error for n, i, _ in requested})
        now = self.clock()
        errors: dict[tuple[str, int], ErrorCode] = {}
        values: dict[TopicPartition, OffsetAndMetadata] = {}
        # OffsetCommit v2-v4 ``retention_time_ms``: an explicit expire time (Kafka's
        # expireTimestamp = now + retention; -1, the default, is none).
        retention = getattr(body, "retention_time", None) if producer is None else None
        retention_ms = -1 if retention is None else int(retention / timedelta(milliseconds=1))
        expire_ms = now + retention_ms if retention_ms >= 0 else -1
        topics = self.apis.metadata.topics
        for name, index, part in requested:
            if refused and name in refused:
                errors[(name, index)] = ErrorCode.TOPIC_AUTHORIZATION_FAILED
                continue
            metadata = part.committed_metadata or ""
            info = topics.get(name)
            if info is None or not 0 <= index < info.num_partitions:
                # Kafka refuses commits for partitions that do not exist.
                errors[(name, index)] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                continue
            if len(metadata.encode()) > OFFSET_METADATA_MAX_BYTES:
                errors[(name, index)] = ErrorCode.OFFSET_METADATA_TOO_LARGE
                continue
            values[TopicPartition(name, index)] = OffsetAndMetadata(
                int(part.committed_offset),
                int(getattr(part, "committed_leader_epoch", -1)),
                metadata,
                now,
                expire_ms,
            )
        if not values:
            return response(errors)
        entries: list[tuple[bytes, bytes | None]] = [
            (offset_key(group_id, tp), offset_value(v)) for tp, v in values.items()
        ]
        producer_id, producer_epoch = producer if producer is not None else (-1, -1)
        log_offset, appended = self._append(p, entries, producer_id, producer_epoch)
        if producer is not None and log_offset >= 0:
            manager.add_txn_offsets(group_id, producer_id, values, log_offset)
        elif producer is None and log_offset >= 0:
            manager.prepare_offset_commit(group_id, values)  # not expired while in flight
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()

        def written(f: asyncio.Future[ErrorCode]) -> None:
            code = f.result()
            loaded = self.loaded.get(p)
            if loaded is not None and loaded.manager is manager:
                if producer is None and log_offset >= 0:
                    manager.offset_commit_done(group_id, values)
                if producer is None and code == ErrorCode.NONE:
                    manager.apply_offsets(group_id, values, log_offset)
                elif producer is not None and code != ErrorCode.NONE and log_offset >= 0:
                    manager.fail_txn_offsets(group_id, producer_id, log_offset)
            for tp in values:
                errors[(tp.topic, tp.partition)] = code
            if not future.done():
                future.set_result(response(errors))

        appended.add_done_callback(written)
        return future

    def complete_txn(self, offsets_partition: int, producer_id: int, commit: bool) -> None:
        """The broker wrote (and replicated) ``producer_id``'s COMMIT or ABORT marker to
        ``__consumer_offsets`` partition ``offsets_partition``: the producer's pending offsets
        of that partition's groups become committed or are dropped (Kafka's
        ``handleTxnCompletion``). Not loaded here: nothing to do, a load replays the marker."""
        loaded = self.loaded.get(offsets_partition)
        if loaded is not None:
            loaded.manager.complete_txn(producer_id, commit)

    def handle_offset_fetch(self, header: RequestHeader, body: Any) -> Any:
        version = header.api_version
        if version >= 8:
            requests = [(str(g.group_id), g.topics) for g in body.groups]
        else:
            requests = [(str(body.group_id), body.topics)]
        # KIP-447: a consumer asking for stable offsets waits out open transactions.
        stable = version >= 7 and bool(getattr(body, "require_stable", False))
        answers = [
            self._fetch_offsets(header, group_id, topics, stable) for group_id, topics in requests
        ]
        if version >= 8:
            return self._respond(header, {"groups": answers})
        answer = answers[0]
        return self._respond(
            header, {"topics": answer["topics"], "error_code": answer["error_code"]}
        )

    def _fetch_offsets(
        self, header: RequestHeader, group_id: str, topics: Any, require_stable: bool
    ) -> dict[str, Any]:
        """One group's OffsetFetch answer. Kafka's fetchOffsets: DESCRIBE on the group (else
        GROUP_AUTHORIZATION_FAILED, nothing looked up); all partitions: those of topics
        without DESCRIBE are left out; named ones: TOPIC_AUTHORIZATION_FAILED, offset -1."""
        version = header.api_version
        manager: GroupManager | None
        if self._group_refused(header, AclOperation.DESCRIBE, group_id):
            manager, error = None, ErrorCode.GROUP_AUTHORIZATION_FAILED
        else:
            _p, manager, error = self._lookup(group_id) if group_id else (-1, None, ErrorCode.NONE)
            if not group_id:
                error = ErrorCode.INVALID_GROUP_ID
        committed = manager.committed(group_id) if manager is not None else {}
        if topics is None:
            wanted = sorted(committed)
            if self.apis.authorizer is not None and wanted:
                hidden = self._topics_refused(
                    header, AclOperation.DESCRIBE, [tp.topic for tp in wanted]
                )
                wanted = [tp for tp in wanted if tp.topic not in hidden]
            refused: frozenset[str] = frozenset()
        else:
            wanted = [
                TopicPartition(str(t.name), int(i)) for t in topics for i in t.partition_indexes
            ]
            refused = (
                self._topics_refused(header, AclOperation.DESCRIBE, [str(t.name) for t in topics])
                if error == ErrorCode.NONE
                else frozenset()
            )
        by_topic: dict[str, list[dict[str, Any]]] = {}
        for tp in wanted:
            value = committed.get(tp)
            code = error if version < 2 else ErrorCode.NONE  # v1: no top-level error
            if refused and tp.topic in refused:
                value, code = None, ErrorCode.TOPIC_AUTHORIZATION_FAILED
            elif require_stable and manager is not None and manager.has_pending_txn(group_id, tp):
                value, code = None, ErrorCode.UNSTABLE_OFFSET_COMMIT
            by_topic.setdefault(tp.topic, []).append(
                {
                    "partition_index": tp.partition,
                    "committed_offset": value.offset if value is not None else -1,
                    "committed_leader_epoch": value.leader_epoch if value is not None else -1,
                    "metadata": value.metadata if value is not None else "",
                    "error_code": code,
                }
            )
        if error != ErrorCode.NONE and version >= 2:
            by_topic = {}
        return {
            "group_id": group_id,
            "error_code": error,
            "topics": [{"name": n, "partitions": parts} for n, parts in by_topic.items()],
        }

    # --- ListGroups (16), DescribeGroups (15), DeleteGroups (42), OffsetDelete (47) --------

    def handle_list_groups(self, header: RequestHeader, body: Any) -> Any:
        states = {s.lower() for s in (getattr(body, "states_filter", None) or ())}
        types = {t.lower() for t in (getattr(body, "types_filter", None) or ())}
        groups = []
        self.maintain(self.clock())
        for loaded in self.loaded.values():
            for group in loaded.manager.groups.values():
                if states and group.state.value.lower() not in states:
                    continue
                if types and "classic" not in types:
                    continue
                groups.append(
                    {
                        "group_id": group.group_id,
                        "protocol_type": group.protocol_type or "",
                        "group_state": group.state.value,
                        "group_type": "classic",
                    }
                )
        authorizer = self.apis.authorizer
        if authorizer is not None and not authz.cluster_allowed(
            authorizer, AclOperation.DESCRIBE, header.api_key, log_if_denied=False
        ):
            # Kafka's handleListGroupsRequest: DESCRIBE on the cluster lists every group,
            # else only those the principal may describe (a filter: denials not logged).
            groups = [
                g
                for g in groups
                if authorizer.authorize(
                    AclOperation.DESCRIBE,
                    ResourceType.GROUP,
                    g["group_id"],
                    api_key=header.api_key,
                    log_if_denied=False,
                )
            ]
        return self._respond(header, {"error_code": ErrorCode.NONE, "groups": groups})

    def handle_describe_groups(self, header: RequestHeader, body: Any) -> Any:
        results = []
        authorizer = self.apis.authorizer
        denied = authz.denied_names(
            authorizer,
            AclOperation.DESCRIBE,
            ResourceType.GROUP,
            [str(g) for g in body.groups],
            header.api_key,
        )
        with_operations = bool(getattr(body, "include_authorized_operations", False))
        for raw_id in body.groups:
            group_id = str(raw_id)
            if denied and group_id in denied:
                # Kafka's DescribeGroupsResponse.forError: empty state and protocol.
                results.append(
                    {
                        "error_code": ErrorCode.GROUP_AUTHORIZATION_FAILED,
                        "group_id": group_id,
                        "group_state": "",
                        "protocol_type": "",
                        "protocol_data": "",
                        "members": [],
                    }
                )
                continue
            _p, manager, error = self._lookup(group_id) if group_id else (-1, None, ErrorCode.NONE)
            entry: dict[str, Any] = {
                "error_code": error if group_id else ErrorCode.INVALID_GROUP_ID,
                "group_id": group_id,
                "group_state": GroupState.DEAD.value,
                "protocol_type": "",
                "protocol_data": "",
                "members": [],
            }
            group = manager.groups.get(group_id) if manager is not None else None
            if group is not None:
                stable = group.state == GroupState.STABLE
                entry.update(
                    group_state=group.state.value,
                    protocol_type=group.protocol_type or "",
                    protocol_data=(
                        group.protocol_name or ""
                        if group.state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE)
                        else ""
                    ),
                    members=[
                        {
                            "member_id": m.member_id,
                            "group_instance_id": m.group_instance_id,
                            "client_id": m.client_id,
                            "client_host": m.client_host,
                            "member_metadata": (
                                m.metadata_for(group.protocol_name or "") if stable else b""
                            ),
                            "member_assignment": m.assignment if stable else b"",
                        }
                        for m in group.members.values()
                    ],
                )
            if with_operations and entry["error_code"] == ErrorCode.NONE:
                entry["authorized_operations"] = authz.authorized_operations(
                    authorizer, ResourceType.GROUP, group_id, header.api_key
                )
            results.append(entry)
        return self._respond(header, {"groups": results})

    def handle_delete_groups(self, header: RequestHeader, body: Any) -> Any:
        # Kafka's handleDeleteGroupsRequest: DELETE on each group.
        denied = authz.denied_names(
            self.apis.authorizer,
            AclOperation.DELETE,
            ResourceType.GROUP,
            [str(g) for g in body.groups_names],
            header.api_key,
        )

        async def run() -> Any:
            results = []
            for raw_id in body.groups_names:
                group_id = str(raw_id)
                if denied and group_id in denied:
                    results.append(
                        {"group_id": group_id, "error_code": ErrorCode.GROUP_AUTHORIZATION_FAILED}
                    )
                    continue
                p, manager, error = (
                    self._lookup(group_id) if group_id else (-1, None, ErrorCode.INVALID_GROUP_ID)
                )
                if manager is not None:
                    error, tps = manager.delete_group(group_id, self.clock())
                    if error == ErrorCode.NONE:
                        entries: list[tuple[bytes, bytes | None]] = [
                            (offset_key(group_id, tp), None) for tp in tps
                        ]
                        entries.append((group_key(group_id), None))
                        error = await self._append(p, entries)[1]
                results.append({"group_id": group_id, "error_code": error})
            return self._respond(header, {"results": results})

        return asyncio.ensure_future(run())

    def handle_offset_delete(self, header: RequestHeader, body: Any) -> Any:
        group_id = str(body.group_id)
        tps = [
            TopicPartition(str(t.name), int(p.partition_index))
            for t in body.topics
            for p in t.partitions
        ]

        def response(error: ErrorCode, errors: Mapping[TopicPartition, ErrorCode]) -> Any:
            topics: dict[str, list[dict[str, Any]]] = {}
            for tp, e in errors.items():
                topics.setdefault(tp.topic, []).append(
                    {"partition_index": tp.partition, "error_code": e}
                )
            return self._respond(
                header,
                {
                    "error_code": error,
                    "topics": [{"name": n, "partitions": parts} for n, parts in topics.items()],
                },
            )

        # Kafka's handleOffsetDeleteRequest: DELETE on the group (the error alone), then
        # READ on each topic (its partitions TOPIC_AUTHORIZATION_FAILED).
        if self._group_refused(header, AclOperation.DELETE, group_id):
            return response(ErrorCode.GROUP_AUTHORIZATION_FAILED, {})
        refused = self._topics_refused(
            header, AclOperation.READ, [str(t.name) for t in body.topics]
        )
        p, manager, error = (
            self._lookup(group_id) if group_id else (-1, None, ErrorCode.INVALID_GROUP_ID)
        )
        if manager is None:
            return response(error, {})
        error, errors = manager.offset_delete_check(
            group_id, [tp for tp in tps if tp.topic not in refused] if refused else tps
        )
        if refused and error == ErrorCode.NONE:
            checked = errors
            errors = {
                tp: ErrorCode.TOPIC_AUTHORIZATION_FAILED if tp.topic in refused else checked[tp]
                for tp in tps
            }
        deletable = [tp for tp, e in errors.items() if e == ErrorCode.NONE]
        if error != ErrorCode.NONE or not deletable:
            return response(error, errors)
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        log_offset, appended = self._append(
            p, [(offset_key(group_id, tp), None) for tp in deletable]
        )

        def written(f: asyncio.Future[ErrorCode]) -> None:
            code = f.result()
            if code == ErrorCode.NONE:
                manager.apply_offsets(group_id, dict.fromkeys(deletable), log_offset)
            else:
                for tp in deletable:
                    errors[tp] = code
            if not future.done():
                future.set_result(response(ErrorCode.NONE, errors))

        appended.add_done_callback(written)
        return future


__all__ = ["OFFSETS_TOPIC", "GroupCoordinator", "client_host"]
