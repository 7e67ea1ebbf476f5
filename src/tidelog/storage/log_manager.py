"""All partition logs of one broker, across its ``log.dirs`` (Kafka's LogManager).

Each log dir holds partition directories ``<topic>-<partition>/`` and three checkpoint files
(``tidelog.storage.checkpoints``): ``replication-offset-checkpoint`` (high watermarks, owned
by the replica manager and only stored here), ``recovery-point-offset-checkpoint`` and
``log-start-offset-checkpoint``. At start-up every partition directory is opened and
recovered from its checkpointed recovery point; a log whose flushed data is corrupt is kept
offline (``offline_logs``), never served, and reported with file and offset.

Not thread-safe by itself: the broker calls it from its event loop thread (and start-up /
shutdown / periodic checkpoints from one worker thread at a time). The checkpoint files are
the exception: a truncation (event loop thread) that lowers a log's recovery point rewrites
its dir's ``recovery-point-offset-checkpoint`` at once (``tidelog.storage.log`` rule 8, as
Kafka's ``LogManager.truncateTo`` does), possibly while the periodic ``checkpoint`` runs in a
worker thread; one lock serialises the writers, and each computes the values it writes
while holding it, so a stale, higher recovery point can never be written after the lowered
one.
"""

from __future__ import annotations

import functools
import logging
import shutil
import threading
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path

from tidelog.model import TopicPartition
from tidelog.storage.checkpoints import (
    LOG_START_OFFSET_CHECKPOINT,
    PARTITION_METADATA,
    RECOVERY_POINT_CHECKPOINT,
    REPLICATION_OFFSET_CHECKPOINT,
    OffsetCheckpointFile,
    PartitionMetadataFile,
)
from tidelog.storage.errors import CorruptLogError, InconsistentTopicIdError, StorageError
from tidelog.storage.log import Log, LogConfig, parse_topic_partition

logger = logging.getLogger(__name__)


class LogManager:
    """Opens, creates, checkpoints and deletes the logs of every log dir."""

    def __init__(self, log_dirs: Sequence[Path], default_config: LogConfig, *, now_ms: int) -> None:
        """Load and recover every partition directory (blocking; may take a while)."""
        if not log_dirs:
            raise ValueError("at least one log dir is needed")
        self.log_dirs = [Path(d) for d in log_dirs]
        self.default_config = default_config
        self._now_ms = now_ms
        self._logs: dict[TopicPartition, Log] = {}
        self._dir_of: dict[TopicPartition, Path] = {}
        self._topic_ids: dict[TopicPartition, uuid.UUID] = {}
        self._high_watermarks: dict[TopicPartition, int] = {}
        #: Logs refused at load because flushed data failed validation.
        self.offline_logs: dict[TopicPartition, CorruptLogError] = {}
        self._offline_checkpoints: dict[TopicPartition, tuple[int, int, int | None]] = {}
        #: Serialises checkpoint writers (periodic checkpoint vs. a truncation's rewrite).
        self._checkpoint_lock = threading.Lock()
        #: What each checkpoint file was last written with (under _checkpoint_lock).
        self._checkpointed: dict[Path, dict[TopicPartition, int]] = {}
        for log_dir in self.log_dirs:
            log_dir.mkdir(parents=True, exist_ok=True)
            self._load_dir(log_dir, now_ms)

    def _load_dir(self, log_dir: Path, now_ms: int) -> None:
        recovery_points = OffsetCheckpointFile(log_dir / RECOVERY_POINT_CHECKPOINT).read()
        log_starts = OffsetCheckpointFile(log_dir / LOG_START_OFFSET_CHECKPOINT).read()
        self._high_watermarks.update(
            OffsetCheckpointFile(log_dir / REPLICATION_OFFSET_CHECKPOINT).read()
        )
        for child in sorted(log_dir.iterdir()):
            if not child.is_dir():
                continue
            if child.name.endswith("-delete"):
                shutil.rmtree(child, ignore_errors=True)  # a deletion interrupted by a crash
                continue
            try:
                tp = parse_topic_partition(child)
            except ValueError:
                continue  # not a partition directory (Kafka ignores these too)
            if tp in self._dir_of:
                raise StorageError(f"{tp} has directories in both {self._dir_of[tp]} and {log_dir}")
            try:
                log = Log.open(
                    child,
                    self.default_config,
                    now_ms=now_ms,
                    recovery_point=recovery_points.get(tp, 0),
                    log_start_offset=log_starts.get(tp),
                )
            except CorruptLogError as exc:
                logger.error("log %s is offline: %s", tp, exc)
                self.offline_logs[tp] = exc
                self._dir_of[tp] = log_dir
                # Keep its checkpoint entries: losing the recovery point would make the next
                # start-up treat the damaged flushed data as an unflushed tail and truncate it.
                self._offline_checkpoints[tp] = (
                    recovery_points.get(tp, 0),
                    log_starts.get(tp, 0),
                    self._high_watermarks.get(tp),
                )
                continue
            self._adopt(tp, log, log_dir)
            topic_id = PartitionMetadataFile(child / PARTITION_METADATA).read()
            if topic_id is not None:
                self._topic_ids[tp] = topic_id
        if any(
            log.recovery_point < recovery_points.get(tp, 0)
            for tp, log in self._logs.items()
            if self._dir_of[tp] == log_dir
        ):
            # A log came back shorter than its checkpointed recovery point (files lost or
            # truncated while the broker was down): the lower value must be on disk before
            # anything is appended past it (log rule 8).
            self._checkpoint_recovery_points(log_dir)

    def _adopt(self, tp: TopicPartition, log: Log, log_dir: Path) -> None:
        self._logs[tp] = log
        self._dir_of[tp] = log_dir
        log.set_recovery_point_listener(
            functools.partial(self._checkpoint_recovery_points, log_dir)
        )

    # ------------------------------------------------------------------ lookup / create

    def get_log(self, tp: TopicPartition) -> Log | None:
        return self._logs.get(tp)

    def all_logs(self) -> Mapping[TopicPartition, Log]:
        return dict(self._logs)

    def topic_id(self, tp: TopicPartition) -> uuid.UUID | None:
        return self._topic_ids.get(tp)

    def get_or_create_log(
        self,
        tp: TopicPartition,
        config: LogConfig,
        topic_id: uuid.UUID | None = None,
        *,
        now_ms: int | None = None,
    ) -> Log:
        """The log of ``tp`` (its config replaced by ``config``), created if absent in the
        log dir holding the fewest logs. Raises the stored CorruptLogError for an offline
        log and InconsistentTopicIdError if the directory belongs to another topic id."""
        if tp in self.offline_logs:
            raise self.offline_logs[tp]
        log = self._logs.get(tp)
        if log is not None:
            known = self._topic_ids.get(tp)
            if topic_id is not None and known is not None and known != topic_id:
                raise InconsistentTopicIdError(
                    f"{tp} on disk belongs to topic id {known}, not {topic_id}"
                )
            if config != log.config:
                log.update_config(config)
            if topic_id is not None and known is None:
                self._write_topic_id(tp, log.directory, topic_id)
            return log
        log_dir = min(
            self.log_dirs,
            key=lambda d: sum(1 for owner in self._dir_of.values() if owner == d),
        )
        if now_ms is not None:
            self._now_ms = now_ms
        log = Log.open(log_dir / str(tp), config, now_ms=self._now_ms)
        self._adopt(tp, log, log_dir)
        if topic_id is not None:
            self._write_topic_id(tp, log.directory, topic_id)
        return log

    def _write_topic_id(self, tp: TopicPartition, directory: Path, topic_id: uuid.UUID) -> None:
        PartitionMetadataFile(directory / PARTITION_METADATA).write(topic_id)
        self._topic_ids[tp] = topic_id

    def delete_log(self, tp: TopicPartition) -> None:
        """Remove the partition's directory and forget its checkpoint entries."""
        log = self._logs.pop(tp, None)
        if log is not None:
            log.set_recovery_point_listener(None)
        log_dir = self._dir_of.pop(tp, None)
        self._topic_ids.pop(tp, None)
        self._high_watermarks.pop(tp, None)
        self.offline_logs.pop(tp, None)
        self._offline_checkpoints.pop(tp, None)
        if log is not None:
            log.delete()
        elif log_dir is not None:
            Log.remove_directory(log_dir / str(tp))

    # ------------------------------------------------------------------ checkpoints

    def high_watermarks(self) -> dict[TopicPartition, int]:
        """High watermarks as loaded from / last written to replication-offset-checkpoint."""
        return dict(self._high_watermarks)

    def checkpoint(self, high_watermarks: Mapping[TopicPartition, int]) -> None:
        """Write the three checkpoint files of every log dir (temp + fsync + rename).

        High watermarks of partitions not in ``high_watermarks`` keep their last value.
        """
        for tp, hw in high_watermarks.items():
            if tp in self._logs:
                self._high_watermarks[tp] = hw
        for log_dir in self.log_dirs:
            with self._checkpoint_lock:
                tps, offline = self._members(log_dir)
                hws = {tp: self._high_watermarks[tp] for tp in tps if tp in self._high_watermarks}
                hws.update({tp: hw for tp, (_, _, hw) in offline.items() if hw is not None})
                starts = {tp: self._logs[tp].log_start_offset for tp in tps}
                starts.update({tp: start for tp, (_, start, _) in offline.items()})
                self._write_checkpoint(log_dir / REPLICATION_OFFSET_CHECKPOINT, hws)
                self._write_recovery_points(log_dir, tps, offline)
                self._write_checkpoint(log_dir / LOG_START_OFFSET_CHECKPOINT, starts)

    def _members(
        self, log_dir: Path
    ) -> tuple[list[TopicPartition], dict[TopicPartition, tuple[int, int, int | None]]]:
        """The online logs of ``log_dir`` and the saved checkpoint entries of its offline ones."""
        tps = [tp for tp, d in list(self._dir_of.items()) if d == log_dir and tp in self._logs]
        offline = {
            tp: saved
            for tp, saved in list(self._offline_checkpoints.items())
            if self._dir_of.get(tp) == log_dir
        }
        return tps, offline

    def _write_recovery_points(
        self,
        log_dir: Path,
        tps: list[TopicPartition],
        offline: Mapping[TopicPartition, tuple[int, int, int | None]],
    ) -> None:
        # Read under _checkpoint_lock, so the values are at least as fresh as any lowering
        # that happened before this writer took the lock.
        logs = [(tp, self._logs.get(tp)) for tp in tps]
        recovery = {tp: log.recovery_point for tp, log in logs if log is not None}
        recovery.update({tp: rp for tp, (rp, _, _) in offline.items()})
        self._write_checkpoint(log_dir / RECOVERY_POINT_CHECKPOINT, recovery)

    def _write_checkpoint(self, path: Path, values: dict[TopicPartition, int]) -> None:
        """Write ``values`` unless ``path`` already holds exactly them (written by us). With
        1,000 partitions rewriting three unchanged files every interval (temp + fsync +
        rename each) was the largest share of an idle broker's CPU."""
        if self._checkpointed.get(path) == values:
            return
        OffsetCheckpointFile(path).write(values)
        self._checkpointed[path] = dict(values)

    def _checkpoint_recovery_points(self, log_dir: Path) -> None:
        """Rewrite ``log_dir``'s recovery-point-offset-checkpoint now (log rule 8; Kafka's
        checkpointRecoveryOffsetsInDir after a truncation)."""
        with self._checkpoint_lock:
            tps, offline = self._members(log_dir)
            self._write_recovery_points(log_dir, tps, offline)

    # ------------------------------------------------------------------ periodic work

    def maybe_flush_all(self, now_ms: int) -> int:
        """``Log.maybe_flush`` on every log (may fsync: call from a worker thread)."""
        self._now_ms = now_ms
        return sum(1 for log in list(self._logs.values()) if log.maybe_flush(now_ms))

    def apply_retention(
        self, now_ms: int, high_watermarks: Mapping[TopicPartition, int] | None = None
    ) -> int:
        """``Log.apply_retention`` on every log; returns the segments deleted."""
        self._now_ms = now_ms
        hws = high_watermarks or {}
        return sum(
            log.apply_retention(now_ms, high_watermark=hws.get(tp))
            for tp, log in list(self._logs.items())
        )

    def close(self) -> None:
        """Flush and close every log, then write the checkpoints (a clean shutdown)."""
        for log in self._logs.values():
            log.close()
        self.checkpoint({})
