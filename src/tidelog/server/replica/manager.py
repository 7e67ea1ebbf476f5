"""The replica manager: this broker's partitions, their logs, and the produce/fetch paths.

Each hosted partition pairs a storage ``Log`` with the replication core's ``Partition``
(leader/follower state, ISR, high watermark). The rules for appends, acks and the high
watermark live in ``tidelog.replication``; this module only sequences IO around them:

1. Produce: ``Partition.check_append(acks)`` first (NOT_LEADER_OR_FOLLOWER,
   NOT_ENOUGH_REPLICAS), then ``Log.append_as_leader`` (which validates every batch before
   writing any: CORRUPT_MESSAGE, MESSAGE_TOO_LARGE), then ``Partition.on_leader_append`` with
   the new log end offset. If the high watermark moved, parked fetches and ``acks=all``
   produces on that partition are woken (docs/design.md rule 6).
2. ``acks=all`` parks in the produce purgatory until
   ``Partition.check_enough_replicas_reach_offset(last_offset + 1)`` says done (or an error),
   or the request timeout passes (REQUEST_TIMED_OUT).
3. Consumer fetches read only below the high watermark (``max_offset``); a fetch that starts
   inside a batch gets the whole batch (storage returns whole batches). KIP-392: a consumer
   fetch with client metadata (Fetch v11+) may be served by a follower, below the
   follower's own high watermark (what it learnt from the leader; a fetch offset past its
   log end is OFFSET_OUT_OF_RANGE, one between its HW and log end reads nothing yet), and a
   leader with ``replica.selector.class`` may answer it with a preferred read replica and
   no records (``tidelog.server.replica.selector``). Other fetches need the leader
   (NOT_LEADER_OR_FOLLOWER).
4. Fetches that find fewer than ``min_bytes`` park in the fetch purgatory keyed by partition
   and are woken by appends, or answered with what there is after ``max_wait_ms``.
5. Log dir failure (Kafka's LogDirFailureChannel, KIP-112): an OSError while writing a log
   (ENOSPC, EIO) takes its whole log dir offline. Produces to partitions in it are answered
   KAFKA_STORAGE_ERROR (56) without touching the disk (before any append: nothing that
   failed was acknowledged, and nothing half-written is visible, ``tidelog.storage.log``);
   reads go on (the data is intact). ``log_dir_failure_sink`` tells the cluster side
   (stop fetching, report to the controller). A dir that went offline for lack of space
   (ENOSPC, EDQUOT) is probed (``probe_log_dir``: free space above a margin and a small
   write + fsync) and comes back through ``mark_log_dir_online``; after any other error it
   stays offline until the broker restarts, as in Kafka.
6. Replication throttles (KIP-73, ``tidelog.server.replica.quota``): a follower's fetch
   gets no data for a leader-throttled partition while that follower is out of the ISR and
   the leader rate is exceeded, and such a partition does not count towards ``min_bytes``.
"""

from __future__ import annotations

import errno
import logging
import os
import time
import uuid
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Final

from tidelog.errors import ErrorCode, KafkaError
from tidelog.model import BrokerId, TopicPartition
from tidelog.replication.partition import AlterPartitionProposal, Partition
from tidelog.server.config.broker_config import BrokerConfig
from tidelog.server.config.throttles import (
    FOLLOWER_THROTTLED_RATE,
    LEADER_THROTTLED_RATE,
    WINDOW_NUM,
    WINDOW_SIZE_SECONDS,
)
from tidelog.server.config.topic_config import log_config_for
from tidelog.server.replica.delayed_ops import (
    DelayedFetch,
    DelayedProduce,
    FetchRespond,
    WakeSource,
)
from tidelog.server.replica.fetch_session import FetchSessionCache
from tidelog.server.replica.purgatory import Purgatory
from tidelog.server.replica.quota import ReplicationQuotas
from tidelog.server.replica.reads import (
    READ_COMMITTED,
    READ_UNCOMMITTED,
    FetchResult,
    HostedPartition,
    PartitionRead,
    ProduceResult,
)
from tidelog.server.replica.selector import (
    NO_PREFERRED_REPLICA,
    REPLICA_SELECTOR_KEY,
    ClientMetadata,
    RackOf,
    preferred_read_replica,
)
from tidelog.server.replica.topic_stats import BrokerTopicStats, TopicStats
from tidelog.storage.errors import InvalidTimestampError
from tidelog.storage.log import AppendInfo, FetchSlice, Log
from tidelog.storage.log_manager import LogManager
from tidelog.storage.page_cache import Uncached
from tidelog.storage.producer_state import AppendOrigin

log = logging.getLogger(__name__)

#: Errors after which a log dir may come back by itself once it has room (rule 5).
RECOVERABLE_ERRNOS: Final = frozenset({errno.ENOSPC, errno.EDQUOT})
#: Free space an offline log dir needs before its replicas come back: room for a follower's
#: first fetches (replica.fetch.max.bytes is 1 MiB by default), so a dir that is still all
#: but full does not flap between offline and online.
LOG_DIR_RECOVERY_FREE_BYTES: Final = 2 << 20
#: How often an offline log dir is probed.
LOG_DIR_PROBE_INTERVAL_S: Final = 1.0
#: The probe's file in the log dir (not a partition directory: the log manager ignores it).
LOG_DIR_PROBE_FILE: Final = ".tidelog-log-dir-probe"
#: Append errors whose bytes count as rejected (Kafka's BytesRejectedPerSec).
_TOO_LARGE: Final = frozenset({ErrorCode.MESSAGE_TOO_LARGE, ErrorCode.RECORD_LIST_TOO_LARGE})


def probe_log_dir(log_dir: Path, free_bytes: int = LOG_DIR_RECOVERY_FREE_BYTES) -> bool:
    """Whether ``log_dir`` can take writes again: ``free_bytes`` available to us and a small
    write + fsync + unlink that succeeds. Blocking (fsync): run it in a worker thread."""
    try:
        stat = os.statvfs(log_dir)
        if stat.f_bavail * stat.f_frsize < free_bytes:
            return False
        probe = log_dir / LOG_DIR_PROBE_FILE
        fd = os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            data = memoryview(b"\0" * 4096)
            while data:
                data = data[os.write(fd, data) :]
            os.fsync(fd)
        finally:
            os.close(fd)
            probe.unlink(missing_ok=True)
    except OSError as exc:
        log.debug("log dir %s still unwritable: %s", log_dir, exc)
        return False
    return True


def _count_read(
    stats: TopicStats, error: ErrorCode, records: FetchSlice | None, replica_id: int
) -> None:
    """One partition's read in its topic's BrokerTopicMetrics."""
    if error != ErrorCode.NONE:
        stats.failed_fetch += 1
    elif records is not None:
        if replica_id >= 0:
            stats.replication_bytes_out += records.length
        else:
            stats.bytes_out += records.length


def now_ms() -> int:
    return time.time_ns() // 1_000_000


class ReplicaManager:
    """Hosted partitions of this broker (leader of all of them when alone)."""

    def __init__(self, config: BrokerConfig, log_manager: LogManager) -> None:
        self.config = config
        self.broker_id = BrokerId(config.broker_id)
        self.log_manager = log_manager
        self.partitions: dict[TopicPartition, HostedPartition] = {}
        #: Bumped whenever a partition is hosted or dropped (``HostedOfTopic``).
        self.hosting_generation = 0
        self.produce_purgatory = Purgatory("Produce")
        self.fetch_purgatory = Purgatory("Fetch")
        #: KIP-227 incremental fetch sessions of the clients and followers fetching here.
        self.fetch_sessions = FetchSessionCache(
            config.get_int("max.incremental.fetch.session.cache.slots"),
            config.get_int("min.incremental.fetch.session.eviction.ms"),
        )
        self.fetch_purgatory.key_listener = self._wake_parked
        #: Where ISR change proposals go (the cluster's AlterPartition sender); None alone.
        self.alter_partition_sink: Callable[[AlterPartitionProposal], None] | None = None
        #: Offline log dirs and the error that took each offline (rule 5).
        self.offline_log_dirs: dict[Path, OSError] = {}
        #: Told of a log dir that went offline / came back (the cluster side); None alone.
        self.log_dir_failure_sink: Callable[[Path], None] | None = None
        self.log_dir_recovery_sink: Callable[[Path], None] | None = None
        #: In a cluster: whether the metadata cache knows ``tp`` (``not_hosted_error``).
        self.partition_known: Callable[[TopicPartition], bool] | None = None
        #: KIP-392 (rule 3): whether a leader selects a read replica for consumers, and, in
        #: a cluster, a live broker's rack (None alone: no follower to select).
        self.selects_read_replica = bool(config.get_str(REPLICA_SELECTOR_KEY))
        self.broker_rack: RackOf | None = None
        #: Committed ISR changes of partitions led here, and AlterPartition answers that were
        #: errors (Kafka's IsrShrinksPerSec, IsrExpandsPerSec, FailedIsrUpdatesPerSec; read
        #: by tidelog.server.observability.metrics).
        self.isr_shrinks = 0
        self.isr_expands = 0
        self.failed_isr_updates = 0
        #: Per-topic bytes/records in and out (Kafka's BrokerTopicMetrics; read by
        #: tidelog.server.observability.metrics): plain ints bumped by ``append_records``
        #: and ``read``.
        self.topic_stats = BrokerTopicStats()
        #: KIP-73 replication throttles (``tidelog.server.replica.quota``): the leader
        #: side is applied in ``read``, the follower side by the cluster's fetchers.
        self.replication_quotas = ReplicationQuotas(
            config.broker_id,
            window_num=config.get_int(WINDOW_NUM),
            window_size_s=config.get_int(WINDOW_SIZE_SECONDS),
        )

    def not_hosted_error(self, tp: TopicPartition) -> ErrorCode:
        """The answer for a partition this broker does not host (Kafka's
        ``ReplicaManager.getPartitionOrError``): NOT_LEADER_OR_FOLLOWER (retriable; the
        client refreshes its metadata) when the cluster has it, and UNKNOWN_TOPIC_OR_PARTITION
        only when it does not. A broker that just started has the controller's metadata
        before the LeaderAndIsr that makes it host anything: UNKNOWN_TOPIC_OR_PARTITION would
        tell a consumer whose old metadata sent it there that the partition does not exist."""
        known = self.partition_known
        if known is not None and known(tp):
            return ErrorCode.NOT_LEADER_OR_FOLLOWER
        return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION

    # --- log dirs (rule 5) -------------------------------------------------------------

    @staticmethod
    def log_dir_of(hosted: HostedPartition) -> Path:
        return hosted.log.directory.parent

    def is_offline(self, tp: TopicPartition) -> bool:
        """Whether ``tp``'s log is in an offline log dir (it can be read, not written)."""
        hosted = self.partitions.get(tp)
        return (
            hosted is not None
            and bool(self.offline_log_dirs)
            and self.log_dir_of(hosted) in self.offline_log_dirs
        )

    def on_storage_error(self, tp: TopicPartition, exc: OSError) -> None:
        """Writing ``tp``'s log failed: its log dir goes offline (one without a log yet:
        the only log dir, if there is one)."""
        hosted = self.partitions.get(tp)
        if hosted is not None:
            self.mark_log_dir_offline(self.log_dir_of(hosted), exc)
        elif len(self.log_manager.log_dirs) == 1:
            self.mark_log_dir_offline(self.log_manager.log_dirs[0], exc)

    def mark_log_dir_offline(self, log_dir: Path, exc: OSError) -> None:
        if log_dir in self.offline_log_dirs:
            return
        self.offline_log_dirs[log_dir] = exc
        recoverable = exc.errno in RECOVERABLE_ERRNOS
        log.error(
            "log dir %s is offline: %s; its partitions refuse writes (KAFKA_STORAGE_ERROR)%s",
            log_dir,
            exc,
            " until it has room again" if recoverable else " until the broker restarts",
        )
        if self.log_dir_failure_sink is not None:
            self.log_dir_failure_sink(log_dir)

    def recoverable_offline_log_dirs(self) -> list[Path]:
        return [d for d, exc in self.offline_log_dirs.items() if exc.errno in RECOVERABLE_ERRNOS]

    def mark_log_dir_online(self, log_dir: Path) -> None:
        if self.offline_log_dirs.pop(log_dir, None) is None:
            return
        log.info("log dir %s has room again: its partitions take writes", log_dir)
        if self.log_dir_recovery_sink is not None:
            self.log_dir_recovery_sink(log_dir)

    # --- partition lifecycle ---------------------------------------------------------

    def _hosting(
        self, tp: TopicPartition, topic_id: uuid.UUID, topic_config: Mapping[str, object]
    ) -> tuple[HostedPartition | None, Log, Partition]:
        """What becoming leader or follower of ``tp`` starts from: the hosted partition if
        any, its log (created if absent) and its replication state (new if not hosted), with
        the topic's ``min.insync.replicas`` and throttles applied."""
        existing = self.partitions.get(tp)
        the_log = self.log_manager.get_or_create_log(
            tp, log_config_for(topic_config, self.config), topic_id
        )
        min_isr = topic_config["min.insync.replicas"]
        assert isinstance(min_isr, int)
        self.replication_quotas.apply_topic_config(tp.topic, topic_config)
        if existing is not None:
            partition = existing.partition
            partition.min_insync_replicas = min_isr
        else:
            partition = Partition(
                tp,
                self.broker_id,
                replica_lag_time_max_ms=self.config.get_int("replica.lag.time.max.ms"),
                min_insync_replicas=min_isr,
            )
        return existing, the_log, partition

    def make_leader(
        self,
        tp: TopicPartition,
        topic_id: uuid.UUID,
        topic_config: Mapping[str, object],
        high_watermark: int | None = None,
        *,
        leader_epoch: int | None = None,
        partition_epoch: int = 0,
        replicas: Sequence[BrokerId] | None = None,
        isr: Sequence[BrokerId] | None = None,
    ) -> HostedPartition:
        """Host ``tp`` as leader. Alone (the defaults) this broker is the only replica and the
        ISR, and the leader epoch is the latest in the log's epoch cache (0 for a new log);
        a controller passes the epochs, replicas and ISR it decided."""
        _existing, the_log, partition = self._hosting(tp, topic_id, topic_config)
        cache = the_log.leader_epoch_cache
        if leader_epoch is None:
            latest = cache.latest_epoch()
            leader_epoch = latest if latest is not None and latest >= 0 else 0
        now = now_ms()
        partition.make_leader(
            leader_epoch=leader_epoch,
            partition_epoch=partition_epoch,
            replicas=list(replicas) if replicas is not None else [self.broker_id],
            isr=list(isr) if isr is not None else [self.broker_id],
            log_end_offset=the_log.log_end_offset,
            high_watermark=the_log.log_end_offset if high_watermark is None else high_watermark,
            now_ms=now,
            epoch_cache=cache,
        )
        # Kafka's leader moves the HW at once when it can (alone: to the log end offset, so
        # records past a stale checkpointed HW are readable right after a restart).
        partition.maybe_increment_high_watermark(now)
        hosted = HostedPartition(the_log, partition, topic_id)
        self.partitions[tp] = hosted
        self.hosting_generation += 1
        return hosted

    def make_follower(
        self,
        tp: TopicPartition,
        topic_id: uuid.UUID,
        topic_config: Mapping[str, object],
        *,
        leader: BrokerId,
        leader_epoch: int,
        partition_epoch: int,
        replicas: Sequence[BrokerId],
        isr: Sequence[BrokerId],
        high_watermark: int = 0,
    ) -> bool:
        """Host ``tp`` as a follower of ``leader`` (-1: the partition is offline); return
        whether the leader or leader epoch changed (the fetcher must truncate again, rule 7).
        Parked produces and fetches on ``tp`` answer now (NOT_LEADER_OR_FOLLOWER)."""
        existing, the_log, partition = self._hosting(tp, topic_id, topic_config)
        if existing is None:
            partition.high_watermark = min(high_watermark, the_log.log_end_offset)
        changed = partition.make_follower(
            leader_id=leader,
            leader_epoch=leader_epoch,
            partition_epoch=partition_epoch,
            replicas=list(replicas),
            isr=list(isr),
            log_end_offset=the_log.log_end_offset,
        )
        self.partitions[tp] = HostedPartition(the_log, partition, topic_id)
        self.hosting_generation += 1
        self.produce_purgatory.check_and_complete(tp)
        self.fetch_purgatory.check_and_complete(tp)
        return changed

    def update_topic_config(self, topic: str, topic_config: Mapping[str, object]) -> None:
        new_config = log_config_for(topic_config, self.config)
        min_isr = topic_config["min.insync.replicas"]
        assert isinstance(min_isr, int)
        self.replication_quotas.apply_topic_config(topic, topic_config)
        for tp, hosted in self.partitions.items():
            if tp.topic == topic:
                hosted.log.update_config(new_config)
                hosted.partition.min_insync_replicas = min_isr

    def delete_partitions(self, tps: Sequence[TopicPartition]) -> None:
        for tp in tps:
            self.partitions.pop(tp, None)
            self.log_manager.delete_log(tp)
        self.hosting_generation += 1
        # Parked requests on deleted partitions answer now (they will see the error).
        for tp in tps:
            self.fetch_purgatory.check_and_complete(tp)
            self.produce_purgatory.check_and_complete(tp)

    def high_watermarks(self) -> dict[TopicPartition, int]:
        return {tp: h.partition.high_watermark for tp, h in self.partitions.items()}

    def checkpoint(self) -> None:
        self.log_manager.checkpoint(self.high_watermarks())

    # --- produce ---------------------------------------------------------------------

    def append_records(
        self,
        entries: Mapping[TopicPartition, bytes],
        acks: int,
        *,
        origin: AppendOrigin = AppendOrigin.CLIENT,
    ) -> dict[TopicPartition, tuple[ProduceResult, int]]:
        """Rule 1. Returns per partition (result, required offset for acks=all or -1).
        ``origin`` COORDINATOR: the broker's own write (a coordinator's batch, a transaction
        marker); a client's Produce may not carry control batches."""
        now = now_ms()
        return {
            tp: self._append_one(tp, records, acks, now, origin) for tp, records in entries.items()
        }

    def _append_one(
        self, tp: TopicPartition, records: bytes, acks: int, now: int, origin: AppendOrigin
    ) -> tuple[ProduceResult, int]:
        """``append_records`` for one partition: (result, required offset or -1)."""
        hosted = self.partitions.get(tp)
        if hosted is None:
            return ProduceResult(self.not_hosted_error(tp)), -1
        stats = self.topic_stats[tp.topic]
        stats.produced += 1
        error = hosted.partition.check_append(acks)
        if error != ErrorCode.NONE:
            return ProduceResult(error), -1
        if self.is_offline(tp):
            return (
                ProduceResult(
                    ErrorCode.KAFKA_STORAGE_ERROR,
                    message=f"log dir {self.log_dir_of(hosted)} is offline",
                ),
                -1,
            )
        info = self._leader_append(tp, hosted, records, now, origin)
        if isinstance(info, ProduceResult):
            return info, -1
        if info.error != ErrorCode.NONE:
            # An idempotent producer's batch refused by its sequence/epoch checks: nothing
            # was written, so the answer must be the error (never a success with offsets).
            log.info("produce to %s refused: %s", tp, info.error_message or info.error.name)
            return ProduceResult(info.error, message=info.error_message), -1
        if info.duplicate:
            # A retry of a batch this log already holds (maybe written under a previous
            # leader): answered with its original offsets, nothing written (issue #9).
            log.info(
                "duplicate batch to %s answered with its original offsets %d..%d",
                tp,
                info.first_offset,
                info.last_offset,
            )
        stats.appended += 1
        stats.bytes_in += len(records)
        stats.messages_in += info.num_records
        if hosted.partition.on_leader_append(hosted.log.log_end_offset, now):
            self.produce_purgatory.check_and_complete(tp)
        self.fetch_purgatory.check_and_complete(tp)
        append_time = -1
        if hosted.log.config.log_append_time:
            # A duplicate is answered with its original batch's stamp, as Kafka's.
            append_time = info.max_timestamp if info.duplicate else now
        return (
            ProduceResult(
                ErrorCode.NONE,
                info.first_offset,
                hosted.log.log_start_offset,
                log_append_time_ms=append_time,
            ),
            info.last_offset + 1,
        )

    def _leader_append(
        self,
        tp: TopicPartition,
        hosted: HostedPartition,
        records: bytes,
        now: int,
        origin: AppendOrigin,
    ) -> AppendInfo | ProduceResult:
        """The leader's append of ``records`` to ``tp``'s log, or the refusal's answer."""
        try:
            return hosted.log.append_as_leader(
                records, leader_epoch=hosted.partition.leader_epoch, now_ms=now, origin=origin
            )
        except InvalidTimestampError as exc:
            # Kafka's RecordValidationException: its message, the record errors and the
            # log start offset (ReplicaManager.appendToLocalLog).
            log.info("produce to %s refused: %s %s", tp, exc, list(exc.record_errors))
            return ProduceResult(
                exc.code,
                log_start_offset=hosted.log.log_start_offset,
                message=exc.message,
                record_errors=exc.record_errors,
            )
        except KafkaError as exc:
            log.info("produce to %s refused: %s", tp, exc)
            if exc.code in _TOO_LARGE:
                self.topic_stats[tp.topic].bytes_rejected += len(records)
            return ProduceResult(exc.code, message=str(exc))
        except OSError as exc:
            # A full or failing log dir (ENOSPC, EIO): Kafka answers KAFKA_STORAGE_ERROR
            # (56, retriable) for this partition, not a dropped connection. Nothing of
            # the batch is published or left in the file (``tidelog.storage.log``), and
            # the dir goes offline (rule 5).
            log.warning("produce to %s failed on its log dir: %s", tp, exc)
            self.mark_log_dir_offline(self.log_dir_of(hosted), exc)
            return ProduceResult(ErrorCode.KAFKA_STORAGE_ERROR, message=f"log dir: {exc}")

    def wait_for_acks(
        self,
        results: dict[TopicPartition, tuple[ProduceResult, int]],
        timeout_ms: int,
        respond: Callable[[dict[TopicPartition, ProduceResult]], None],
    ) -> None:
        """Rule 2: park an acks=all produce until every appended partition is replicated."""
        op = DelayedProduce(self, results, timeout_ms, respond)
        waiting = [tp for tp, (result, required) in results.items() if required >= 0]
        self.produce_purgatory.try_complete_else_watch(op, waiting)

    # --- fetch -----------------------------------------------------------------------

    def read(
        self,
        requests: Sequence[PartitionRead],
        max_bytes: int,
        replica_id: int = -1,
        isolation_level: int = READ_UNCOMMITTED,
        client: ClientMetadata | None = None,
    ) -> list[FetchResult]:
        """Rule 3: consumers read up to the high watermark (read_committed: up to the last
        stable offset, with the aborted transactions in that range), follower replicas
        (``replica_id`` >= 0) up to the log end offset; the first non-empty read may exceed
        the limits. A consumer with ``client`` metadata may read from a follower, or be
        sent to one by the leader (KIP-392)."""
        results = []
        budget = max_bytes
        got_any = False
        committed = isolation_level == READ_COMMITTED and replica_id < 0
        quota = self.replication_throttles().leader if replica_id >= 0 else None
        throttled_bytes = 0
        topic_stats = self.topic_stats
        leader_only = replica_id >= 0 or client is None
        for request in requests:
            hosted = self.partitions.get(request.tp)
            if hosted is None:
                results.append(FetchResult(self.not_hosted_error(request.tp)))
                continue
            stats = topic_stats[request.tp.topic]
            stats.fetched += 1
            hw = hosted.partition.high_watermark
            the_log = hosted.log
            # Followers read to the log end and need no LSO (replication's hot path).
            lso = -1 if replica_id >= 0 else the_log.last_stable_offset(hw)
            upper = None if replica_id >= 0 else lso if committed else hw
            records = None
            aborted = None
            error = hosted.partition.validate_leader_epoch(
                request.current_leader_epoch, require_leader=leader_only
            )
            if error == ErrorCode.NONE and client is not None:
                redirect = self._redirect(hosted, request.fetch_offset, client, lso)
                if redirect is not None:
                    results.append(redirect)
                    continue
            held = quota is not None and quota.should_throttle(
                request.tp, in_sync=replica_id in hosted.partition.isr
            )
            if error == ErrorCode.NONE and (budget > 0 or not got_any) and not held:
                try:
                    records = the_log.read(
                        request.fetch_offset,
                        max(0, min(request.max_bytes, budget)),
                        max_offset=upper,
                        min_one_batch=not got_any,
                    )
                except KafkaError as exc:
                    error = exc.code
            _count_read(stats, error, records, replica_id)
            if records is not None:
                got_any = True
                budget -= records.length
                if quota is not None and quota.is_throttled(request.tp):
                    throttled_bytes += records.length
                if committed:
                    aborted = the_log.collect_aborted_transactions(request.fetch_offset, lso)
            results.append(FetchResult(error, hw, the_log.log_start_offset, records, lso, aborted))
        if quota is not None:
            quota.record(throttled_bytes)
        return results

    def uncached_reads(self, requests: Sequence[PartitionRead], max_bytes: int) -> list[Uncached]:
        """What a fetch of ``requests`` will read that may be on the disk only
        (``Log.uncached_range``), ``max_bytes`` in all: for a worker thread to load before
        the fetch reads on the event loop. Memory only."""
        ranges: list[Uncached] = []
        budget = max_bytes
        for request in requests:
            hosted = self.partitions.get(request.tp)
            if budget <= 0 or hosted is None:
                continue
            found = hosted.log.uncached_range(request.fetch_offset, min(request.max_bytes, budget))
            if found is not None:
                ranges.append(found)
                budget -= found.length
        return ranges

    def _redirect(
        self, hosted: HostedPartition, fetch_offset: int, client: ClientMetadata, lso: int
    ) -> FetchResult | None:
        """KIP-392: the answer sending a consumer to its preferred read replica, without
        records (Kafka skips the read), or None to read here."""
        preferred = self.preferred_read_replica(hosted, fetch_offset, client)
        if preferred == NO_PREFERRED_REPLICA:
            return None
        return FetchResult(
            ErrorCode.NONE,
            hosted.partition.high_watermark,
            hosted.log.log_start_offset,
            last_stable_offset=lso,
            preferred_read_replica=preferred,
        )

    def preferred_read_replica(
        self, hosted: HostedPartition, fetch_offset: int, client: ClientMetadata
    ) -> int:
        """KIP-392: the follower a consumer's fetch at ``fetch_offset`` should go to, or
        ``NO_PREFERRED_REPLICA`` (no selector, not the leader, or the leader is best)."""
        rack_of = self.broker_rack
        if not self.selects_read_replica or rack_of is None or not hosted.partition.is_leader:
            return NO_PREFERRED_REPLICA
        return preferred_read_replica(
            hosted.partition,
            leader_log_end_offset=hosted.log.log_end_offset,
            fetch_offset=fetch_offset,
            client=client,
            rack_of=rack_of,
            now_ms=now_ms(),
        )

    def replication_throttles(self) -> ReplicationQuotas:
        """The replication quotas at the live broker rates: a dynamic config replaces
        ``config.values`` (``dynamic_config`` rule 2), so a changed rate applies at the next
        fetch without a restart."""
        quotas = self.replication_quotas
        quotas.update_rates(
            leader=self.config.get_int(LEADER_THROTTLED_RATE),
            follower=self.config.get_int(FOLLOWER_THROTTLED_RATE),
        )
        return quotas

    def fetch(
        self,
        requests: Sequence[PartitionRead],
        *,
        max_bytes: int,
        min_bytes: int,
        max_wait_ms: int,
        respond: FetchRespond,
        replica_id: int = -1,
        isolation_level: int = READ_UNCOMMITTED,
        client: ClientMetadata | None = None,
        woken: WakeSource | None = None,
    ) -> None:
        """Rule 4: answer now if enough is there (or on any error), else park.

        A follower's fetch (``replica_id`` >= 0) first records its fetch offset as its log
        end offset (rule 2) - before any wait, so the HW can move and release acks=all
        produces at once (Kafka's fetchMessages -> updateFollowerFetchState). A follower's
        session fetch also wakes on ``woken.key``, and then reads ``woken.take()`` too (its
        session's parked partitions that changed, ``delayed_ops``).
        """
        if replica_id >= 0:
            self.update_follower_fetch_state(BrokerId(replica_id), requests)
        op = DelayedFetch(
            self,
            requests,
            max_bytes,
            min_bytes,
            max_wait_ms,
            respond,
            replica_id,
            isolation_level,
            client,
            woken,
        )
        self.fetch_purgatory.try_complete_else_watch(op, op.keys())

    def _wake_parked(self, key: Hashable) -> Iterable[Hashable]:
        """The fetch purgatory's key listener (``fetch_session`` rule 7): a change to
        partition ``key`` wakes it in the sessions it is parked in. Each such follower
        fetched it last at its session's last fetch, standing at the log end then; that
        fetch is recorded now (``Partition.note_parked_fetch``), as a full fetch would
        have recorded it, so the follower keeps its ISR time. Returns the sessions' keys."""
        if not isinstance(key, TopicPartition):
            return ()
        woken = self.fetch_sessions.changed(key)
        if not woken:
            return ()
        hosted = self.partitions.get(key)
        if hosted is not None:
            for session, part in woken:
                hosted.partition.note_parked_fetch(
                    BrokerId(session.replica_id), part.fetch_offset, session.last_used_ms
                )
        return list(dict.fromkeys(session.wake_key for session, _part in woken))

    def quiet_for_follower(  # noqa: PLR0917
        self,
        replica_id: BrokerId,
        tp: TopicPartition,
        fetch_offset: int,
        current_leader_epoch: int,
        answered_high_watermark: int,
        answered_log_start_offset: int,
        now: int,
    ) -> bool:
        """Whether a follower's session fetch has nothing to read or learn of ``tp`` (it
        stands at the log end, in the ISR, with the HW there, and was last answered this HW
        and log start), recording the fetch as caught up if so
        (``Partition.note_quiet_follower_fetch``). False sends it down the full path."""
        hosted = self.partitions.get(tp)
        if hosted is None:
            return False
        partition = hosted.partition
        the_log = hosted.log
        return (
            partition.high_watermark == answered_high_watermark == fetch_offset
            and (current_leader_epoch in (-1, partition.leader_epoch))
            and the_log.log_start_offset == answered_log_start_offset
            and partition.note_quiet_follower_fetch(
                replica_id,
                fetch_offset=fetch_offset,
                leader_log_end_offset=the_log.log_end_offset,
                now_ms=now,
            )
        )

    def update_follower_fetch_state(
        self, replica_id: BrokerId, requests: Sequence[PartitionRead]
    ) -> None:
        now = now_ms()
        for request in requests:
            hosted = self.partitions.get(request.tp)
            if hosted is None or not hosted.partition.is_leader:
                continue
            result = hosted.partition.update_follower_fetch_state(
                replica_id,
                fetch_offset=request.fetch_offset,
                leader_log_end_offset=hosted.log.log_end_offset,
                now_ms=now,
                log_start_offset=request.log_start_offset,
            )
            if result.high_watermark_moved:
                self.produce_purgatory.check_and_complete(request.tp)
                self.fetch_purgatory.check_and_complete(request.tp)
            if result.proposal is not None:
                self.on_alter_partition(result.proposal)

    def count_isr_change(self, before: frozenset[BrokerId], after: frozenset[BrokerId]) -> None:
        """The committed ISR of a partition led here went from ``before`` to ``after``."""
        if after - before:
            self.isr_expands += 1
        if before - after:
            self.isr_shrinks += 1

    def on_alter_partition(self, proposal: AlterPartitionProposal) -> None:
        """An ISR change for the controller (AlterPartition, rule 5). A broker running with a
        controller sets ``alter_partition_sink``; alone, the ISR never changes."""
        if self.alter_partition_sink is not None:
            self.alter_partition_sink(proposal)
            return
        log.warning("ISR change %s proposed but no controller is attached", proposal)

    def shutdown(self) -> None:
        self.produce_purgatory.complete_all()
        self.fetch_purgatory.complete_all()
