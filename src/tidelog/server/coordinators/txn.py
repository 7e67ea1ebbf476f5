"""The transaction coordinator's asyncio shell: ``__transaction_state``, markers, timers and
the transactional APIs (Kafka's TransactionCoordinator + TransactionStateManager).

Theory of operation (KIP-98; the rules of each transition are in ``tidelog.coordinator.txn``):

1. Placement. Transactional id ``t`` belongs to partition ``partition_for(t, N)`` of
   ``__transaction_state`` (``transaction.state.log.num.partitions`` N, default 50), created
   on the first FindCoordinator with key type 1 (replication factor
   ``min(transaction.state.log.replication.factor, live brokers)``, min.insync.replicas
   ``transaction.state.log.min.isr``). The partition's leader is the coordinator; its
   leader epoch is the coordinator epoch every marker carries.
2. Ownership follows leadership (``tidelog.server.coordinators.internal_topics`` rule 1):
   a ``TxnManager`` per led partition, loaded by replaying the partition at each new
   leader epoch and dropped when leadership goes. A loaded partition's PREPARE_COMMIT /
   PREPARE_ABORT transactions get their markers sent again (coordinator failover resumes
   them).
3. Write-ahead. Every transition is a pending change first (other requests for that id get
   CONCURRENT_TRANSACTIONS); it takes effect only once its record is replicated (acks=all),
   and is dropped if the write fails. A client is answered after that, so an acknowledged
   InitProducerId / AddPartitionsToTxn / EndTxn survives any coordinator failover.
4. Ending. EndTxn writes PREPARE_COMMIT or PREPARE_ABORT (the outcome is decided once that
   is replicated); then the markers go to every partition of the transaction
   (``tidelog.server.coordinators.txn_markers``), and once all are written COMPLETE_COMMIT /
   COMPLETE_ABORT is recorded. Until then the producer's next AddPartitionsToTxn answers
   CONCURRENT_TRANSACTIONS, which clients retry after a backoff; so, unlike Kafka, the
   EndTxn answer waits up to ``END_TXN_WAIT_S`` for the completion (the answer is NONE
   either way).
5. Fencing. InitProducerId for a transactional id bumps its epoch, so an older producer
   instance (a zombie) is refused with PRODUCER_FENCED by the coordinator and, through the
   markers' epoch, with INVALID_PRODUCER_EPOCH by every partition it wrote to. Finding an
   open transaction there, it first aborts that one with the bumped epoch and answers
   CONCURRENT_TRANSACTIONS until the abort is complete.
6. Timeouts. Every ``transaction.abort.timed.out.transaction.cleanup.interval.ms`` a
   transaction open for longer than its ``transaction.timeout.ms`` is aborted with the
   epoch bumped (KIP-98's proactive abort): its records never become visible to
   read_committed consumers and the producer that left it is fenced.
7. Expiry (Kafka's ``removeExpiredTransactionalIds``). Every
   ``transaction.remove.expired.transaction.cleanup.interval.ms`` (first one interval after
   start-up) each led partition's ids idle (Empty, CompleteCommit, CompleteAbort) and not
   updated for ``transactional.id.expiration.ms`` are removed: their tombstones are written
   in one replicated batch per partition (up to ``_TOMBSTONES_PER_BATCH``), then the ids
   leave memory. Compaction later drops their records; a reload replays the tombstones and
   does not bring them back. Requests for an id meanwhile get CONCURRENT_TRANSACTIONS; an
   InitProducerId afterwards gets a new producer id (never a reused one).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from tidelog.aio import wait_for
from tidelog.client.records import Record, build_batch, decode_records
from tidelog.coordinator import partition_for
from tidelog.coordinator.txn import (
    Transition,
    TransitionKind,
    TxnConfig,
    TxnManager,
    TxnMetadata,
    TxnState,
)
from tidelog.coordinator.txn_records import (
    TxnRecordFormatError,
    apply_txn_record,
    encode_txn_key,
    txn_record_value,
)
from tidelog.errors import ErrorCode
from tidelog.model import TopicPartition
from tidelog.protocol.apis import ApiKey
from tidelog.protocol.codec import RequestHeader
from tidelog.security.acls import AclOperation, ResourceType
from tidelog.server.auth import authz
from tidelog.server.config.broker_config import BrokerConfig
from tidelog.server.coordinators.group_common import AuthorizerOf, Respond
from tidelog.server.coordinators.internal_topics import (
    OFFSETS_TOPIC,
    InternalTopicCreator,
    append_replicated,
    partition_count,
    replay_batches,
)
from tidelog.server.coordinators.txn_markers import Marker, MarkerSender, MarkerWriter
from tidelog.server.metadata.backend import MetadataBackend
from tidelog.server.replica.hosted_of_topic import HostedOfTopic
from tidelog.server.replica.manager import ReplicaManager, now_ms

log = logging.getLogger(__name__)

TXN_TOPIC = "__transaction_state"
#: Kafka's transaction.state.log.segment.bytes.
TXN_SEGMENT_BYTES = 104857600
#: How often leadership is re-checked and marker work resumed.
TICK_S = 0.1
#: How long an EndTxn answer waits for its markers and COMPLETE_* record (rule 4). Kafka
#: answers at PREPARE_*; the producer's next AddPartitionsToTxn then meets
#: CONCURRENT_TRANSACTIONS and clients back off 20 ms (librdkafka, the Java client): waiting
#: for the markers, a few ms, is cheaper. The outcome is decided either way: past this bound
#: the answer is NONE while the markers are still being written.
END_TXN_WAIT_S = 1.0
#: Expiry tombstones per appended batch (rule 7; each well under ``max.message.bytes``).
_TOMBSTONES_PER_BATCH = 1000
#: The write of one transition waits this long for its replication (Kafka's
#: TransactionStateManager uses the broker's request.timeout.ms, 30 s): long enough to ride
#: out an ISR shrink that needs a new controller first.
WRITE_TIMEOUT_MS = 30_000
#: KIP-588: PRODUCER_FENCED (90) exists from these request versions; older ones get
#: INVALID_PRODUCER_EPOCH (47), as Kafka answers them.
_PRODUCER_FENCED_SINCE = {
    ApiKey.INIT_PRODUCER_ID: 4,
    ApiKey.ADD_PARTITIONS_TO_TXN: 2,
    ApiKey.ADD_OFFSETS_TO_TXN: 2,
    ApiKey.END_TXN: 2,
    ApiKey.TXN_OFFSET_COMMIT: 3,
}


@dataclass(slots=True)
class _Loaded:
    manager: TxnManager
    coordinator_epoch: int


class GroupOffsets(Protocol):
    """What transactions need of the group coordinator: ``__consumer_offsets`` created on
    first use (AddOffsetsToTxn) and a transaction's offsets completed by its marker."""

    async def ensure_offsets_topic(self) -> int: ...

    def complete_txn(self, offsets_partition: int, producer_id: int, commit: bool) -> None: ...


def fenced_error(header: RequestHeader, error: ErrorCode) -> ErrorCode:
    """PRODUCER_FENCED as the request's version knows it (KIP-588)."""
    since = _PRODUCER_FENCED_SINCE.get(ApiKey(header.api_key))
    if error == ErrorCode.PRODUCER_FENCED and since is not None and header.api_version < since:
        return ErrorCode.INVALID_PRODUCER_EPOCH
    return error


class TransactionCoordinator:
    """Transactional APIs of one broker over its metadata backend (alone or in a cluster).

    Besides the backend and the replica manager it receives what its answers need:
    ``authorizer`` (the broker's ACL authorizer now), ``respond`` (a response of the
    request's version), ``own_address`` (this broker's address on the current request's
    listener, for FindCoordinator), the producer id allocator and the InitProducerId of
    idempotent producers."""

    def __init__(
        self,
        config: BrokerConfig,
        backend: MetadataBackend,
        replica_manager: ReplicaManager,
        *,
        groups: GroupOffsets,
        allocate_producer_id: Callable[[], Awaitable[int]],
        non_transactional_init: Callable[[RequestHeader, Any], Any],
        authorizer: AuthorizerOf,
        respond: Respond,
        own_address: Callable[[], tuple[str, int]],
    ) -> None:
        self.backend = backend
        self.groups = groups
        self.replica_manager = replica_manager
        self._state_partitions = HostedOfTopic(replica_manager, TXN_TOPIC)
        self.config = config
        self._authorizer = authorizer
        self._respond = respond
        self._own_address = own_address
        self.txn_config = TxnConfig(
            max_timeout_ms=self.config.get_int("transaction.max.timeout.ms"),
            transactional_id_expiration_ms=self.config.get_int("transactional.id.expiration.ms"),
        )
        self.abort_interval_ms = self.config.get_int(
            "transaction.abort.timed.out.transaction.cleanup.interval.ms"
        )
        self.expiry_interval_ms = self.config.get_int(
            "transaction.remove.expired.transaction.cleanup.interval.ms"
        )
        self._next_expiry_check_ms = -1
        self._allocate = allocate_producer_id
        self._non_transactional_init = non_transactional_init
        self.loaded: dict[int, _Loaded] = {}
        self.writer = MarkerWriter(
            replica_manager, groups.complete_txn, authorizer=authorizer, respond=respond
        )
        self.sender = MarkerSender(config, backend, self.writer)
        self.creator = InternalTopicCreator(
            config,
            backend,
            TXN_TOPIC,
            partitions_key="transaction.state.log.num.partitions",
            replication_key="transaction.state.log.replication.factor",
            config={
                "segment.bytes": str(TXN_SEGMENT_BYTES),
                "retention.ms": "-1",
                "min.insync.replicas": str(self.config.get_int("transaction.state.log.min.isr")),
                # Kafka's TransactionLog.EnforcedCompressionType, whatever the broker default.
                "compression.type": "uncompressed",
            },
        )
        self._completing: dict[str, asyncio.Task[None]] = {}
        self._task: asyncio.Task[None] | None = None
        self._last_abort_check = 0

    def handlers(self) -> dict[int, Callable[[RequestHeader, Any], Any]]:
        return {
            ApiKey.INIT_PRODUCER_ID: self.handle_init_producer_id,
            ApiKey.ADD_PARTITIONS_TO_TXN: self.handle_add_partitions_to_txn,
            ApiKey.ADD_OFFSETS_TO_TXN: self.handle_add_offsets_to_txn,
            ApiKey.END_TXN: self.handle_end_txn,
            ApiKey.WRITE_TXN_MARKERS: self.writer.handle_write_txn_markers,
        }

    # --- lifecycle -------------------------------------------------------------------------

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._maintenance_loop())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
        for task in list(self._completing.values()):
            task.cancel()
        self.loaded.clear()
        await self.sender.close()

    async def _maintenance_loop(self) -> None:
        while True:
            await asyncio.sleep(TICK_S)
            try:
                self.maintain(now_ms())
            except Exception:  # a bug here must not stop every transaction's timers
                log.exception("transaction coordinator maintenance failed")

    def maintain(self, now: int) -> None:
        """Load newly led partitions, unload lost ones, resume markers, abort timed-out
        transactions, remove expired transactional ids (rules 2, 6 and 7)."""
        partitions = self.replica_manager.partitions
        for tp in self._state_partitions.hosted():
            hosted = partitions.get(tp)
            if hosted is not None and hosted.partition.is_leader:
                self._loaded(tp.partition)
        check_timeouts = now - self._last_abort_check >= self.abort_interval_ms
        if check_timeouts:
            self._last_abort_check = now
        for p in list(self.loaded):
            loaded = self._loaded(p)
            if loaded is None:
                continue
            for meta in loaded.manager.needs_markers():
                self._complete_later(p, loaded, meta)
            if check_timeouts:
                for transition in loaded.manager.expired(now):
                    log.info(
                        "aborting transaction %s of producer %d: open past its timeout of %d ms",
                        transition.transactional_id,
                        transition.after.producer_id,
                        transition.after.timeout_ms,
                    )
                    self._spawn(self._write_then_complete(p, loaded, transition))
        if self._next_expiry_check_ms < 0:
            self._next_expiry_check_ms = now + self.expiry_interval_ms
        elif now >= self._next_expiry_check_ms:
            self._next_expiry_check_ms = now + self.expiry_interval_ms
            self.remove_expired_transactional_ids(now)

    def remove_expired_transactional_ids(self, now: int) -> int:
        """One expiry round over every led partition (rule 7): the expired ids' tombstones
        are written (in the background), each id leaving memory once its batch is replicated.
        Returns how many ids expire."""
        count = 0
        for p, loaded in list(self.loaded.items()):
            expired = loaded.manager.expire_transactional_ids(now)
            count += len(expired)
            for start in range(0, len(expired), _TOMBSTONES_PER_BATCH):
                self._spawn(
                    self._write_all(p, loaded, expired[start : start + _TOMBSTONES_PER_BATCH])
                )
        if count:
            log.info("removing %d expired transactional ids", count)
        return count

    def _spawn(self, work: Awaitable[Any]) -> None:
        task = asyncio.ensure_future(work)
        task.add_done_callback(_log_failure)

    # --- partitions: load, unload ----------------------------------------------------------

    def _loaded(self, p: int) -> _Loaded | None:
        """The manager of partition ``p`` when this broker leads it (loading it at a new
        leader epoch), else None."""
        hosted = self.replica_manager.partitions.get(TopicPartition(TXN_TOPIC, p))
        loaded = self.loaded.get(p)
        if hosted is None or not hosted.partition.is_leader:
            if loaded is not None:
                del self.loaded[p]
                log.info("unloaded %s-%d: no longer its leader", TXN_TOPIC, p)
            return None
        epoch = hosted.partition.leader_epoch
        if loaded is not None and loaded.coordinator_epoch == epoch:
            return loaded
        manager = TxnManager(self.txn_config)
        manager.load(self._read_partition(p))
        loaded = _Loaded(manager, epoch)
        self.loaded[p] = loaded
        log.info(
            "loaded %s-%d at coordinator epoch %d: %d transactional ids",
            TXN_TOPIC,
            p,
            epoch,
            len(manager.all()),
        )
        return loaded

    def _read_partition(self, p: int) -> dict[str, TxnMetadata]:
        """Replay the partition from its start to its end: the last record per id wins."""
        the_log = self.replica_manager.partitions[TopicPartition(TXN_TOPIC, p)].log
        state: dict[str, TxnMetadata] = {}
        for _header, batch, first in replay_batches(the_log):
            for rec in decode_records(batch, verify_crc=False):
                if rec.offset < first or rec.key is None:
                    continue
                try:
                    apply_txn_record(state, rec.key, rec.value)
                except TxnRecordFormatError as exc:
                    log.warning("%s-%d offset %d skipped: %s", TXN_TOPIC, p, rec.offset, exc)
        return state

    def _lookup(self, txn_id: str) -> tuple[int, _Loaded | None, ErrorCode]:
        count = partition_count(self.backend, TXN_TOPIC)
        if count == 0:
            return -1, None, ErrorCode.NOT_COORDINATOR
        p = partition_for(txn_id, count)
        loaded = self._loaded(p)
        if loaded is None:
            return p, None, ErrorCode.NOT_COORDINATOR
        return p, loaded, ErrorCode.NONE

    def owns(self, p: int, loaded: _Loaded) -> bool:
        return self.loaded.get(p) is loaded and self._loaded(p) is loaded

    # --- writes ----------------------------------------------------------------------------

    async def _write(self, p: int, loaded: _Loaded, transition: Transition) -> ErrorCode:
        """Rule 3: the transition's record, replicated, then the state; NOT_COORDINATOR when
        this broker stopped owning the partition meanwhile."""
        return await self._write_all(p, loaded, [transition])

    async def _write_all(self, p: int, loaded: _Loaded, transitions: list[Transition]) -> ErrorCode:
        """``_write`` of several transitions in one batch: all take effect or none."""
        batch = build_batch(
            [
                Record(key=encode_txn_key(t.transactional_id), value=txn_record_value(t.after))
                for t in transitions
            ],
            base_timestamp_ms=now_ms(),
        )
        _, pending = append_replicated(
            self.replica_manager, TopicPartition(TXN_TOPIC, p), batch, WRITE_TIMEOUT_MS
        )
        error = await pending
        if not self.owns(p, loaded):
            return ErrorCode.NOT_COORDINATOR
        for transition in transitions:
            if error == ErrorCode.NONE:
                loaded.manager.complete(transition)
            else:
                loaded.manager.fail(transition)
                log.info(
                    "transaction %s: writing %s failed: %s",
                    transition.transactional_id,
                    transition.after.state.name,
                    error.name,
                )
        return error

    async def _write_then_complete(self, p: int, loaded: _Loaded, transition: Transition) -> None:
        if await self._write(p, loaded, transition) == ErrorCode.NONE:
            self._complete_later(p, loaded, transition.after)

    def _complete_later(self, p: int, loaded: _Loaded, meta: TxnMetadata) -> asyncio.Task[None]:
        """Rule 4: markers for a PREPARE_* transaction, then its COMPLETE_* record (once per
        transactional id at a time: the task already running is returned)."""
        txn_id = meta.transactional_id
        running = self._completing.get(txn_id)
        if running is not None:
            return running
        task = asyncio.ensure_future(self._complete(p, loaded, meta))
        self._completing[txn_id] = task

        def done(t: asyncio.Task[None]) -> None:
            if self._completing.get(txn_id) is t:
                del self._completing[txn_id]
            _log_failure(t)

        task.add_done_callback(done)
        return task

    async def _complete(self, p: int, loaded: _Loaded, meta: TxnMetadata) -> None:
        commit = meta.state == TxnState.PREPARE_COMMIT
        marker = Marker(meta.producer_id, meta.producer_epoch, commit, loaded.coordinator_epoch)
        sent = await self.sender.send(meta.partitions, marker, lambda: self.owns(p, loaded))
        if not sent or not self.owns(p, loaded):
            return
        while True:
            transition = loaded.manager.complete_markers(meta.transactional_id, now_ms())
            if transition is None:
                return
            error = await self._write(p, loaded, transition)
            if error in (ErrorCode.NONE, ErrorCode.NOT_COORDINATOR):
                return
            await asyncio.sleep(0.5)  # not enough replicas now: the record must get there

    # --- authorization (Kafka's KafkaApis checks; ``tidelog.server.auth.authz``) -----------------

    def _txn_id_refused(self, header: RequestHeader, txn_id: str) -> bool:
        """WRITE on the transactional id (InitProducerId, AddPartitionsToTxn,
        AddOffsetsToTxn, EndTxn): else TRANSACTIONAL_ID_AUTHORIZATION_FAILED."""
        authorizer = self._authorizer()
        return authorizer is not None and not authorizer.authorize(
            AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, txn_id, api_key=header.api_key
        )

    # --- FindCoordinator (10), key type 1 ----------------------------------------------------

    async def find(self, key: str) -> tuple[ErrorCode, str | None, tuple[int, str, int] | None]:
        """The coordinator of transactional id ``key`` (creating the topic on first use)."""
        count = await self.creator.ensure()
        if count == 0:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE, f"creating {TXN_TOPIC}", None
        found = self.backend.partition_leader(
            TopicPartition(TXN_TOPIC, partition_for(key, count)), self._own_address()
        )
        if found is None:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE, "no leader for its partition", None
        return ErrorCode.NONE, None, found

    # --- InitProducerId (22) -----------------------------------------------------------------

    def handle_init_producer_id(self, header: RequestHeader, body: Any) -> Any:
        txn_id = getattr(body, "transactional_id", None)
        if not txn_id:
            return self._non_transactional_init(header, body)
        txn_id = str(txn_id)
        timeout = body.transaction_timeout
        timeout_ms = (
            int(timeout.total_seconds() * 1000)
            if hasattr(timeout, "total_seconds")
            else int(timeout)
        )
        expected_pid = int(getattr(body, "producer_id", -1))
        expected_epoch = int(getattr(body, "producer_epoch", -1))

        def answer(error: ErrorCode, pid: int = -1, epoch: int = -1) -> Any:
            return self._respond(
                header,
                {
                    "error_code": fenced_error(header, error),
                    "producer_id": pid,
                    "producer_epoch": epoch,
                },
            )

        if self._txn_id_refused(header, txn_id):
            return answer(ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)

        async def run() -> Any:
            p, loaded, error = self._lookup(txn_id)
            if loaded is None:
                return answer(error)
            new_pid: int | None = None
            if loaded.manager.needs_new_producer_id(txn_id):
                try:
                    new_pid = await self._allocate()
                except Exception as exc:  # ZooKeeper unreachable: retriable, as Kafka
                    log.warning("InitProducerId: no producer id: %s", exc)
                    return answer(ErrorCode.COORDINATOR_LOAD_IN_PROGRESS)
                if not self.owns(p, loaded):
                    return answer(ErrorCode.NOT_COORDINATOR)
            result = loaded.manager.init_producer_id(
                txn_id,
                timeout_ms,
                now_ms(),
                new_producer_id=new_pid,
                expected_producer_id=expected_pid,
                expected_epoch=expected_epoch,
            )
            if isinstance(result, ErrorCode):
                return answer(result)
            error = await self._write(p, loaded, result)
            if error != ErrorCode.NONE:
                return answer(error)
            if result.kind == TransitionKind.FENCE_ABORT:
                # Rule 5: the open transaction is aborted first; the client retries.
                self._complete_later(p, loaded, result.after)
                return answer(ErrorCode.CONCURRENT_TRANSACTIONS)
            return answer(ErrorCode.NONE, result.after.producer_id, result.after.producer_epoch)

        return asyncio.ensure_future(run())

    # --- AddPartitionsToTxn (24) -------------------------------------------------------------

    def handle_add_partitions_to_txn(self, header: RequestHeader, body: Any) -> Any:
        txn_id = str(_field(body, "transactional_id"))
        pid = int(_field(body, "producer_id"))
        epoch = int(_field(body, "producer_epoch"))
        requested = [
            TopicPartition(str(t.name), int(p))
            for t in _field(body, "topics")
            for p in t.partitions
        ]

        def answer(errors: Mapping[TopicPartition, ErrorCode]) -> Any:
            by_topic: dict[str, list[dict[str, Any]]] = {}
            for tp in requested:
                by_topic.setdefault(tp.topic, []).append(
                    {
                        "partition_index": tp.partition,
                        "partition_error_code": fenced_error(header, errors[tp]),
                    }
                )
            results = [
                {"name": name, "results_by_partition": parts} for name, parts in by_topic.items()
            ]
            return self._respond(header, {"results_by_topic_v3_and_below": results})

        # Kafka's handleAddPartitionsToTxnRequest: WRITE on the transactional id (every
        # partition refused), then WRITE on each topic; an internal topic is always refused.
        if self._txn_id_refused(header, txn_id):
            return answer(dict.fromkeys(requested, ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED))
        refused: frozenset[str] = frozenset()
        authorizer = self._authorizer()
        if authorizer is not None:
            names = [tp.topic for tp in requested]
            refused = authz.INTERNAL_TOPICS.intersection(names) | authz.denied_names(
                authorizer,
                AclOperation.WRITE,
                ResourceType.TOPIC,
                [n for n in names if n not in authz.INTERNAL_TOPICS],
                header.api_key,
            )

        async def run() -> Any:
            unknown = {
                tp for tp in requested if tp.topic not in refused and not self._partition_exists(tp)
            }
            if unknown or refused:
                # Any failed partition fails the request; the others were not attempted.
                return answer(
                    {
                        tp: ErrorCode.TOPIC_AUTHORIZATION_FAILED
                        if tp.topic in refused
                        else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                        if tp in unknown
                        else ErrorCode.OPERATION_NOT_ATTEMPTED
                        for tp in requested
                    }
                )
            error = await self._add(txn_id, pid, epoch, requested)
            return answer(dict.fromkeys(requested, error))

        return asyncio.ensure_future(run())

    def _partition_exists(self, tp: TopicPartition) -> bool:
        info = self.backend.topics.get(tp.topic)
        return info is not None and 0 <= tp.partition < info.num_partitions

    async def _add(
        self, txn_id: str, pid: int, epoch: int, partitions: list[TopicPartition]
    ) -> ErrorCode:
        p, loaded, error = self._lookup(txn_id)
        if loaded is None:
            return error
        result = loaded.manager.add_partitions(txn_id, pid, epoch, partitions, now_ms())
        if isinstance(result, ErrorCode):
            return result
        return await self._write(p, loaded, result)

    # --- AddOffsetsToTxn (25) ----------------------------------------------------------------

    def handle_add_offsets_to_txn(self, header: RequestHeader, body: Any) -> Any:
        # Kafka's handleAddOffsetsToTxnRequest: WRITE on the transactional id, READ on the group.
        denied: ErrorCode | None = None
        if self._txn_id_refused(header, str(body.transactional_id)):
            denied = ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        elif not authz.allowed(
            self._authorizer(),
            AclOperation.READ,
            ResourceType.GROUP,
            str(body.group_id),
            header.api_key,
        ):
            denied = ErrorCode.GROUP_AUTHORIZATION_FAILED
        if denied is not None:
            return self._respond(header, {"error_code": denied})

        async def run() -> Any:
            group_id = str(body.group_id)
            count = partition_count(self.backend, OFFSETS_TOPIC)
            if count == 0:
                count = await self.groups.ensure_offsets_topic()
            if count == 0:
                error = ErrorCode.COORDINATOR_NOT_AVAILABLE
            else:
                tp = TopicPartition(OFFSETS_TOPIC, partition_for(group_id, count))
                error = await self._add(
                    str(body.transactional_id),
                    int(body.producer_id),
                    int(body.producer_epoch),
                    [tp],
                )
            return self._respond(header, {"error_code": fenced_error(header, error)})

        return asyncio.ensure_future(run())

    # --- EndTxn (26) -------------------------------------------------------------------------

    def handle_end_txn(self, header: RequestHeader, body: Any) -> Any:
        txn_id = str(body.transactional_id)
        pid, epoch, commit = int(body.producer_id), int(body.producer_epoch), bool(body.committed)
        if self._txn_id_refused(header, txn_id):
            return self._respond(
                header,
                {
                    "error_code": ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
                    "producer_id": -1,
                    "producer_epoch": -1,
                },
            )

        async def run() -> Any:
            p, loaded, error = self._lookup(txn_id)
            if loaded is not None:
                result = loaded.manager.end_txn(txn_id, pid, epoch, commit, now_ms())
                if isinstance(result, ErrorCode):
                    error = result
                else:
                    error = await self._write(p, loaded, result)
                    if error == ErrorCode.NONE:
                        # Rule 4: decided once PREPARE_* is replicated; the answer waits a
                        # little for the markers too, so the producer's next transaction is
                        # not refused (CONCURRENT_TRANSACTIONS, then a client backoff).
                        completing = self._complete_later(p, loaded, result.after)
                        with contextlib.suppress(TimeoutError):
                            await wait_for(asyncio.shield(completing), END_TXN_WAIT_S)
            return self._respond(
                header,
                {
                    "error_code": fenced_error(header, error),
                    "producer_id": pid,
                    "producer_epoch": epoch,
                },
            )

        return asyncio.ensure_future(run())

    # --- views for DescribeTransactions / ListTransactions / the CLI ----------------------

    def transactions(self) -> list[tuple[int, TxnMetadata]]:
        """Every transactional id this broker coordinates now, with its partition. Each
        ``__transaction_state`` partition led here is loaded at its current leader epoch
        first, and one no longer led dropped (rule 2, as a lookup does), so the list is
        never partial or stale: Kafka answers ListTransactions COORDINATOR_LOAD_IN_PROGRESS
        while a partition loads in the background; here a load runs in place, so no request
        sees one in progress."""
        led = {tp.partition for tp in self._state_partitions.hosted()}
        for p in sorted(led | set(self.loaded)):
            self._loaded(p)
        return [
            (p, meta) for p, loaded in sorted(self.loaded.items()) for meta in loaded.manager.all()
        ]


def _field(body: Any, name: str) -> Any:
    """AddPartitionsToTxn v0-v3 (the clients' versions; v4+ is broker-to-broker, KIP-890)
    name its fields ``v3_and_below_*``."""
    return getattr(body, f"v3_and_below_{name}")


def _log_failure(task: asyncio.Future[Any]) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.error("transaction coordinator task failed", exc_info=task.exception())


__all__ = ["TXN_TOPIC", "TransactionCoordinator", "fenced_error"]
