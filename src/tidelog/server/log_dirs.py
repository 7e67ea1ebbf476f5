"""Every partition log of this broker across ``log.dirs`` (the subset of storage's planned
``LogManager`` the broker uses), built on ``tidelog.storage`` files and formats.

Per log dir, Kafka's three checkpoint files: ``replication-offset-checkpoint`` (high
watermarks), ``recovery-point-offset-checkpoint`` (everything below is fsynced; recovery
re-validates from there) and ``log-start-offset-checkpoint``. A partition directory holds
``partition.metadata`` with its topic id. New partitions go to the log dir holding the
fewest partitions (Kafka's rule).

TODO(integration): replace with ``tidelog.storage.log_manager.LogManager`` once the storage
branch ships it; this class keeps the same method names so the swap is one import.
"""

from __future__ import annotations

import logging
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
from tidelog.storage.log import Log, LogConfig, parse_topic_partition

log = logging.getLogger(__name__)


class LogDirs:
    """Opens (and so recovers) every log at start-up; creates, deletes, checkpoints."""

    def __init__(self, log_dirs: Sequence[Path], default_config: LogConfig, *, now_ms: int) -> None:
        self.log_dirs = [Path(d) for d in log_dirs]
        self.default_config = default_config
        self._now_ms = now_ms
        self._logs: dict[TopicPartition, Log] = {}
        self._dir_of: dict[TopicPartition, Path] = {}
        self._high_watermarks: dict[TopicPartition, int] = {}
        for d in self.log_dirs:
            d.mkdir(parents=True, exist_ok=True)
            recovery = OffsetCheckpointFile(d / RECOVERY_POINT_CHECKPOINT).read()
            starts = OffsetCheckpointFile(d / LOG_START_OFFSET_CHECKPOINT).read()
            self._high_watermarks.update(
                OffsetCheckpointFile(d / REPLICATION_OFFSET_CHECKPOINT).read()
            )
            for child in sorted(d.iterdir()):
                if not child.is_dir():
                    continue
                try:
                    tp = parse_topic_partition(child)
                except ValueError:
                    continue
                if child.name.endswith("-delete"):
                    continue
                the_log = Log.open(
                    child,
                    default_config,
                    now_ms=now_ms,
                    recovery_point=recovery.get(tp, 0),
                    log_start_offset=starts.get(tp),
                )
                self._logs[tp] = the_log
                self._dir_of[tp] = d

    def get_log(self, tp: TopicPartition) -> Log | None:
        return self._logs.get(tp)

    def all_logs(self) -> Mapping[TopicPartition, Log]:
        return dict(self._logs)

    def topic_id(self, tp: TopicPartition) -> uuid.UUID | None:
        d = self._dir_of.get(tp)
        if d is None:
            return None
        return PartitionMetadataFile(d / str(tp) / PARTITION_METADATA).read()

    def get_or_create_log(
        self, tp: TopicPartition, config: LogConfig, topic_id: uuid.UUID | None = None
    ) -> Log:
        existing = self._logs.get(tp)
        if existing is not None:
            existing.update_config(config)
            return existing
        counts = dict.fromkeys(self.log_dirs, 0)
        for d in self._dir_of.values():
            counts[d] += 1
        d = min(self.log_dirs, key=lambda x: counts[x])
        the_log = Log.open(d / str(tp), config, now_ms=self._now_ms)
        if topic_id is not None:
            PartitionMetadataFile(d / str(tp) / PARTITION_METADATA).write(topic_id)
        self._logs[tp] = the_log
        self._dir_of[tp] = d
        return the_log

    def delete_log(self, tp: TopicPartition) -> None:
        the_log = self._logs.pop(tp, None)
        self._dir_of.pop(tp, None)
        self._high_watermarks.pop(tp, None)
        if the_log is not None:
            the_log.delete()

    def high_watermarks(self) -> dict[TopicPartition, int]:
        """As loaded from ``replication-offset-checkpoint`` at start-up."""
        return dict(self._high_watermarks)

    def checkpoint(self, high_watermarks: Mapping[TopicPartition, int]) -> None:
        for d in self.log_dirs:
            tps = [tp for tp, owner in self._dir_of.items() if owner == d]
            OffsetCheckpointFile(d / REPLICATION_OFFSET_CHECKPOINT).write(
                {tp: high_watermarks[tp] for tp in tps if tp in high_watermarks}
            )
            OffsetCheckpointFile(d / RECOVERY_POINT_CHECKPOINT).write(
                {tp: self._logs[tp].recovery_point for tp in tps}
            )
            OffsetCheckpointFile(d / LOG_START_OFFSET_CHECKPOINT).write(
                {tp: self._logs[tp].log_start_offset for tp in tps}
            )

    def close(self) -> None:
        for the_log in self._logs.values():
            the_log.close()
