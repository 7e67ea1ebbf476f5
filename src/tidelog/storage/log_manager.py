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

Moving a replica to another log dir (KIP-113; ``tidelog.storage.future_log`` copies it):
``create_future_log`` makes ``<target>/<topic>-<partition>.<uuid>-future``; once the copy
is exact, ``swap_future`` replaces the current log by it in the steps of ``FutureSwap``:

  1. prepare: the future log gets the current log's start offset and producer snapshot,
     is flushed and closed; the target dir's three checkpoint files are written with the
     partition's entries (recovery point = log end offset, log start, HW). Its epoch cache
     already matches: epochs are recorded from the batches on both sides, except one that
     starts at the log end (a leader that has not written yet), which step 5 copies.
  2. commit: ``swap-committed`` is written into the future dir (temp + fsync + rename +
     directory fsync). This is the commit point: before it the current log is the replica,
     from it on the future log is.
  3. retire: the current log stops serving (its files stay open for FetchSlices already
     handed out) and its directory is renamed ``<topic>-<partition>.<uuid>-delete``.
  4. promote: the future dir is renamed ``<topic>-<partition>`` and the marker removed.
  5. reopen: the log is opened from its new place and adopted; the source dir's
     checkpoint files are rewritten without the partition; the old log's files are closed
     and removed ``file.delete.delay.ms`` later.

Start-up resolves what a crash left (``_resolve_moves``, before any log is loaded):

  R1. A future dir without the marker (stopped or crashed before step 2): the current log
      is the replica; the future log is loaded after the current logs (recovered from
      offset 0: it has no checkpoint entries) and registered as ``tp``'s future log, and
      the move resumes once the partition is hosted (``tidelog.server.replica.alter_log_dirs``,
      future_log rule 6), as Kafka's LogManager loads ``-future`` dirs as future replicas.
      It is deleted, with a warning, when there is nothing to move it for: no online
      current log of ``tp`` in another log dir, another future dir of ``tp`` (a move
      replaced by another one just before the stop: which was wanted last is unknown),
      a topic id other than the current log's, or a log that cannot be opened.
  R2. A future dir with the marker (crashed after step 2, before 4): every
      ``<topic>-<partition>`` of that partition in the other log dirs is deleted, then the
      future dir is renamed and its marker removed (steps 3-4 redone).
  R3. A ``<topic>-<partition>`` holding the marker (crashed between 4 and its removal): the
      same partition's directories in the other log dirs are deleted, the marker removed.
  ``*-delete`` dirs are removed as always. The checkpoint entries written in step 1 make
  the promoted log load with its own recovery point and log start offset.
"""

from __future__ import annotations

import functools
import logging
import os
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
    fsync_directory,
    write_atomically,
)
from tidelog.storage.errors import CorruptLogError, InconsistentTopicIdError, StorageError
from tidelog.storage.future_log import (
    SWAP_MARKER,
    future_dir_name,
    is_future_dir,
    unique_of,
    write_producer_snapshot,
)
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
        #: Future logs (KIP-113): replicas being copied into another log dir.
        self._futures: dict[TopicPartition, Log] = {}
        #: Logs replaced by their future log: (release time ms, log, its renamed directory).
        self._retired: list[tuple[int, Log, Path]] = []
        self._retired_lock = threading.Lock()
        #: Where a partition not hosted yet is created (AlterReplicaLogDirs before hosting).
        self._preferred_dirs: dict[TopicPartition, Path] = {}
        for log_dir in self.log_dirs:
            log_dir.mkdir(parents=True, exist_ok=True)
        self._resolve_moves()
        for log_dir in self.log_dirs:
            self._load_dir(log_dir, now_ms)
        self._load_future_logs(now_ms)

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
            if is_future_dir(child):
                continue  # _resolve_moves left none it could not place
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
        log_dir = self._preferred_dirs.pop(tp, None) or min(
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
        """Remove the partition's directory and forget its checkpoint entries (its future
        log first: a crash in between leaves the current log, never a future alone)."""
        self._preferred_dirs.pop(tp, None)
        future = self.remove_future_log(tp)
        if future is not None:
            self.discard_future_log(future)
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
        logs = self._logs
        self._high_watermarks.update({tp: hw for tp, hw in high_watermarks.items() if tp in logs})
        for log_dir in self.log_dirs:
            self._write_dir_checkpoints(log_dir)

    def _members(
        self, log_dir: Path
    ) -> tuple[list[TopicPartition], dict[TopicPartition, tuple[int, int, int | None]]]:
        """The online logs of ``log_dir`` and the saved checkpoint entries of its offline ones."""
        if len(self.log_dirs) == 1:
            # Every log is in the one dir: no walk comparing paths (a checkpoint pass runs
            # every replica.high.watermark.checkpoint.interval.ms over every log).
            return list(self._logs), dict(self._offline_checkpoints)
        tps = [tp for tp, d in list(self._dir_of.items()) if d == log_dir and tp in self._logs]
        offline = {
            tp: saved
            for tp, saved in list(self._offline_checkpoints.items())
            if self._dir_of.get(tp) == log_dir
        }
        return tps, offline

    def _dir_values(
        self,
        log_dir: Path,
        extra: Mapping[TopicPartition, tuple[int, int, int | None]] | None = None,
    ) -> tuple[dict[TopicPartition, int], dict[TopicPartition, int], dict[TopicPartition, int]]:
        """``log_dir``'s (high watermarks, recovery points, log starts), in one walk over its
        logs, with ``extra`` partitions' (recovery point, log start, HW) added. Call under
        ``_checkpoint_lock``, so the values are at least as fresh as any lowering that
        happened before this writer took the lock."""
        tps, offline = self._members(log_dir)
        hws: dict[TopicPartition, int] = {}
        recovery: dict[TopicPartition, int] = {}
        starts: dict[TopicPartition, int] = {}
        known_hws = self._high_watermarks
        logs = self._logs
        for tp in tps:
            hw = known_hws.get(tp)
            if hw is not None:
                hws[tp] = hw
            log = logs.get(tp)
            if log is not None:
                recovery[tp] = log.recovery_point
                starts[tp] = log.log_start_offset
        for tp, (rp, start, hw) in (*offline.items(), *(extra or {}).items()):
            recovery[tp] = rp
            starts[tp] = start
            if hw is not None:
                hws[tp] = hw
        return hws, recovery, starts

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
            _hws, recovery, _starts = self._dir_values(log_dir)
            self._write_checkpoint(log_dir / RECOVERY_POINT_CHECKPOINT, recovery)

    # ------------------------------------------------------------------ periodic work

    def maybe_flush_all(self, now_ms: int) -> int:
        """``Log.maybe_flush`` on every log (may fsync: call from a worker thread); also
        removes the logs replaced by a future log ``file.delete.delay.ms`` ago."""
        self._now_ms = now_ms
        self.release_retired(now_ms)
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
        """Flush and close every log, then write the checkpoints (a clean shutdown). Future
        logs are flushed and closed too: the next start resumes their moves (R1)."""
        for future in self._futures.values():
            future.close()
        self._futures.clear()
        self.release_retired(None)
        for log in self._logs.values():
            log.close()
        self.checkpoint({})

    # ------------------------------------------------------------------ log dirs (KIP-113)

    def log_dir_of(self, tp: TopicPartition) -> Path | None:
        """The log dir holding ``tp``'s current log (offline ones included)."""
        return self._dir_of.get(tp)

    def future_log(self, tp: TopicPartition) -> Log | None:
        return self._futures.get(tp)

    def future_logs(self) -> Mapping[TopicPartition, Log]:
        return dict(self._futures)

    def set_preferred_log_dir(self, tp: TopicPartition, log_dir: Path) -> None:
        """Create ``tp`` in ``log_dir`` when it is created here (Kafka's
        ``maybeUpdatePreferredLogDir``: AlterReplicaLogDirs for a replica not hosted yet)."""
        if log_dir not in self.log_dirs:
            raise StorageError(f"{log_dir} is not one of the log dirs")
        self._preferred_dirs[tp] = log_dir

    def create_future_log(self, tp: TopicPartition, log_dir: Path, *, now_ms: int) -> Log:
        """An empty future log for ``tp`` in ``log_dir`` (another dir than its current log's),
        starting at the current log's start offset, with its topic id."""
        current = self._logs.get(tp)
        if current is None:
            raise StorageError(f"{tp} has no online log to copy")
        if log_dir not in self.log_dirs or log_dir == self._dir_of.get(tp):
            raise StorageError(f"{log_dir} is not another log dir of {tp}")
        if tp in self._futures:
            raise StorageError(f"{tp} already has a future log")
        directory = log_dir / future_dir_name(tp, uuid.uuid4())
        future = Log.open(
            directory, current.config, now_ms=now_ms, log_start_offset=current.log_start_offset
        )
        try:
            topic_id = self._topic_ids.get(tp)
            if topic_id is not None:
                PartitionMetadataFile(directory / PARTITION_METADATA).write(topic_id)
        except BaseException:
            self.discard_future_log(future)
            raise
        self._futures[tp] = future
        return future

    def remove_future_log(self, tp: TopicPartition) -> Log | None:
        """Forget ``tp``'s future log and retire it (a copy still running in a worker
        thread fails at its next call); the caller removes it with ``discard_future_log``.
        Its directory is renamed ``*-delete`` at once, so that a restart before the removal
        does not resume a move that was abandoned (R1)."""
        future = self._futures.pop(tp, None)
        if future is not None:
            future.retire()  # waits for a round's append in progress: nothing writes after
            try:
                os.rename(future.directory, _abandoned(future.directory))
                fsync_directory(future.directory.parent)
            except OSError as exc:
                logger.warning("%s: cannot rename its future log away: %s", tp, exc)
        return future

    @staticmethod
    def discard_future_log(future: Log) -> None:
        """Close and delete a removed future log (blocking: rmtree)."""
        future.release_files()
        Log.remove_directory(future.directory)
        shutil.rmtree(_abandoned(future.directory), ignore_errors=True)

    def swap_future(self, tp: TopicPartition, *, high_watermark: int, now_ms: int) -> Log:
        """Replace ``tp``'s current log by its future log (all steps of ``FutureSwap``);
        returns the log now serving ``tp``. Call only once the copy is exact
        (``FutureLogCopier.finish``), on the thread that appends to the current log."""
        swap = FutureSwap(self, tp, high_watermark=high_watermark, now_ms=now_ms)
        try:
            swap.prepare()
            swap.commit()
        except BaseException:
            swap.abort()
            raise
        swap.retire_current()
        swap.promote()
        return swap.reopen()

    def release_retired(self, now_ms: int | None) -> int:
        """Close and delete the logs replaced by future logs whose delay passed (all of them
        when ``now_ms`` is None); returns how many. Blocking (rmtree)."""
        with self._retired_lock:
            due = [r for r in self._retired if now_ms is None or r[0] <= now_ms]
            self._retired = [r for r in self._retired if r not in due]
        for _, log, directory in due:
            log.release_files()
            shutil.rmtree(directory, ignore_errors=True)
        return len(due)

    def _retire_later(self, log: Log, directory: Path, now_ms: int) -> None:
        with self._retired_lock:
            self._retired.append((now_ms + log.config.file_delete_delay_ms, log, directory))

    def _write_dir_checkpoints(
        self,
        log_dir: Path,
        extra: Mapping[TopicPartition, tuple[int, int, int | None]] | None = None,
    ) -> None:
        """Write ``log_dir``'s three checkpoint files now, with ``extra`` partitions'
        (recovery point, log start, HW) added (a future log about to become current)."""
        with self._checkpoint_lock:
            hws, recovery, starts = self._dir_values(log_dir, extra)
            self._write_checkpoint(log_dir / REPLICATION_OFFSET_CHECKPOINT, hws)
            self._write_checkpoint(log_dir / RECOVERY_POINT_CHECKPOINT, recovery)
            self._write_checkpoint(log_dir / LOG_START_OFFSET_CHECKPOINT, starts)

    def _resolve_moves(self) -> None:
        """R1-R3 of the module docstring, before anything is loaded."""
        for log_dir in self.log_dirs:
            for child in sorted(log_dir.iterdir()):
                if not child.is_dir() or child.name.endswith("-delete"):
                    continue
                try:
                    tp = parse_topic_partition(child)
                except ValueError:
                    continue
                if (child / SWAP_MARKER).exists():
                    self._finish_swap_at_start(tp, child, log_dir)
                # A future dir without the marker waits for _load_future_logs (R1).

    def _load_future_logs(self, now_ms: int) -> None:
        """R1: the future logs of moves that did not finish, once the current logs are
        loaded."""
        found: dict[TopicPartition, list[Path]] = {}
        for log_dir in self.log_dirs:
            for child in sorted(log_dir.iterdir()):
                if child.is_dir() and is_future_dir(child):
                    try:
                        found.setdefault(parse_topic_partition(child), []).append(child)
                    except ValueError:
                        continue  # not named as Kafka names future logs: not ours
        for tp, directories in found.items():
            why = self._future_unwanted(tp, directories)
            if why is None:
                try:
                    future = Log.open(directories[0], self._logs[tp].config, now_ms=now_ms)
                except (StorageError, OSError) as exc:
                    why = f"it cannot be loaded: {exc}"
                else:
                    self._futures[tp] = future
                    logger.info(
                        "%s: loaded its future log in %s (log end offset %d); the move "
                        "resumes when the partition is hosted",
                        tp,
                        directories[0].parent,
                        future.log_end_offset,
                    )
                    continue
            for directory in directories:
                logger.warning(
                    "%s: deleting its future log %s, the move to %s is abandoned: %s",
                    tp,
                    directory.name,
                    directory.parent,
                    why,
                )
                try:
                    Log.remove_directory(directory)
                except OSError as exc:  # a failing disk: ignored now, removed at a later start
                    logger.error("%s: cannot delete %s: %s", tp, directory, exc)

    def _future_unwanted(self, tp: TopicPartition, directories: list[Path]) -> str | None:
        """Why R1 deletes ``tp``'s future dirs instead of loading one, or None."""
        if len(directories) > 1:
            return "the partition has more than one future log"
        if tp not in self._logs:
            return "the partition has no online log here to move"
        if self._dir_of[tp] == directories[0].parent:
            return "it is in the log dir of the current log"
        try:
            future_id = PartitionMetadataFile(directories[0] / PARTITION_METADATA).read()
        except (StorageError, OSError) as exc:
            return f"its partition.metadata cannot be read: {exc}"
        current_id = self._topic_ids.get(tp)
        if future_id is not None and current_id is not None and future_id != current_id:
            return f"it belongs to topic id {future_id}, the current log to {current_id}"
        return None

    def _finish_swap_at_start(self, tp: TopicPartition, directory: Path, log_dir: Path) -> None:
        """R2 / R3: ``directory`` (future or already renamed) holds the committed replica."""
        for other in self.log_dirs:
            stale = other / str(tp)
            if other != log_dir and stale.exists():
                logger.warning("%s moved to %s: deleting its old log %s", tp, log_dir, stale)
                Log.remove_directory(stale)
        target = log_dir / str(tp)
        if directory != target:
            if target.exists():
                raise StorageError(f"{tp}: both {directory} and {target} exist in {log_dir}")
            os.rename(directory, target)
            fsync_directory(log_dir)
        (target / SWAP_MARKER).unlink()
        fsync_directory(target)
        logger.info("%s: finished its move to %s after a restart", tp, log_dir)


def _abandoned(future_dir: Path) -> Path:
    """Where ``remove_future_log`` renames a future log (removed at start-up if left)."""
    return future_dir.with_name(f"{future_dir.name}.abandoned-delete")


class FutureSwap:
    """The steps of ``LogManager.swap_future`` (module docstring, steps 1-5), one method
    each so that tests can stop between any two and restart from what is on disk."""

    def __init__(
        self, manager: LogManager, tp: TopicPartition, *, high_watermark: int, now_ms: int
    ) -> None:
        current = manager.get_log(tp)
        future = manager.future_log(tp)
        source = manager.log_dir_of(tp)
        if current is None or future is None or source is None:
            raise StorageError(f"{tp} has no current and future log to swap")
        self.manager = manager
        self.tp = tp
        self.current = current
        self.future = future
        self.source_dir = source
        self.target_dir = future.directory.parent
        self.future_dir = future.directory
        self.high_watermark = high_watermark
        self.now_ms = now_ms
        self.log_end_offset = current.log_end_offset
        self.log_start_offset = current.log_start_offset
        self._prepared = False
        self._doomed: Path | None = None

    def prepare(self) -> None:
        """Step 1 (nothing is committed: a crash or an error leaves the current log)."""
        current, future = self.current, self.future
        if future.log_end_offset != self.log_end_offset:
            raise StorageError(
                f"{self.tp}: the future log ends at {future.log_end_offset}, the current "
                f"one at {self.log_end_offset}"
            )
        if future.log_start_offset < self.log_start_offset:
            future.delete_records_before(self.log_start_offset)
        write_producer_snapshot(current, self.future_dir)
        future.close()  # flushes; the snapshot at the log end is already there
        self._prepared = True
        self.manager._write_dir_checkpoints(
            self.target_dir,
            {self.tp: (self.log_end_offset, self.log_start_offset, self.high_watermark)},
        )

    def commit(self) -> None:
        """Step 2: the commit point."""
        write_atomically(
            self.future_dir / SWAP_MARKER,
            f"{self.tp} moved from {self.source_dir} at offset {self.log_end_offset}\n",
        )

    def abort(self) -> None:
        """Before the commit point only: drop the future log, keep the current one."""
        manager = self.manager
        if manager.future_log(self.tp) is self.future:
            manager.remove_future_log(self.tp)
        manager.discard_future_log(self.future)
        if self._prepared:
            manager._write_dir_checkpoints(self.target_dir)

    def retire_current(self) -> None:
        """Step 3."""
        self.current.retire()
        self.manager._logs.pop(self.tp, None)
        doomed = self.source_dir / f"{self.tp}.{unique_of(self.future_dir)}-delete"
        os.rename(self.source_dir / str(self.tp), doomed)
        fsync_directory(self.source_dir)
        self._doomed = doomed

    def promote(self) -> None:
        """Step 4."""
        target = self.target_dir / str(self.tp)
        os.rename(self.future_dir, target)
        fsync_directory(self.target_dir)
        (target / SWAP_MARKER).unlink()
        fsync_directory(target)

    def reopen(self) -> Log:
        """Step 5: the moved log, serving."""
        manager = self.manager
        log = Log.open(
            self.target_dir / str(self.tp),
            self.current.config,
            now_ms=self.now_ms,
            recovery_point=self.log_end_offset,
            log_start_offset=self.log_start_offset,
        )
        # Log.open forgets epochs starting at the log end (as Kafka's load does); a leader
        # that has not written in its epoch yet keeps it here, as the current log had it.
        for entry in self.current.leader_epoch_cache.entries:
            if entry.start_offset >= log.log_end_offset:
                log.leader_epoch_cache.assign(entry.epoch, entry.start_offset)
        manager._futures.pop(self.tp, None)
        manager._adopt(self.tp, log, self.target_dir)
        manager._high_watermarks[self.tp] = self.high_watermark
        manager._write_dir_checkpoints(self.source_dir)
        assert self._doomed is not None, "retire_current runs before reopen"
        manager._retire_later(self.current, self._doomed, self.now_ms)
        logger.info(
            "%s moved from %s to %s (log end offset %d)",
            self.tp,
            self.source_dir,
            self.target_dir,
            self.log_end_offset,
        )
        return log
