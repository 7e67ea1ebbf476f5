"""Replicas moving between this broker's log dirs (KIP-113; Kafka's ``ReplicaManager.
alterReplicaLogDirs`` / ``describeLogDirs`` and its ``ReplicaAlterLogDirsManager``).

Theory of operation
-------------------
``alter_replica_log_dir(tp, path)`` answers AlterReplicaLogDirs for one partition, in
Kafka's order:

  1. INVALID_TOPIC_EXCEPTION when the future log's directory name would exceed 255 bytes;
     LOG_DIR_NOT_FOUND when ``path`` (made absolute) is none of ``log.dirs``;
     KAFKA_STORAGE_ERROR when it is offline.
  2. A move of ``tp`` in progress to another dir is abandoned (its future log deleted).
  3. A partition not hosted here: the dir is remembered for when it is created here
     (Kafka's preferred log dir), and the answer is REPLICA_NOT_AVAILABLE when the cluster
     knows the partition, UNKNOWN_TOPIC_OR_PARTITION when it does not. A hosted partition
     whose log dir is offline: KAFKA_STORAGE_ERROR.
  4. ``path`` is the replica's dir already, or the target of its move in progress: NONE,
     nothing else happens.
  5. While any log dir is offline no future log is created (Kafka: a future log might exist
     in it unseen): KAFKA_STORAGE_ERROR. Otherwise the future log is created
     (``LogManager.create_future_log``) and its move starts; the answer is NONE at once,
     the move runs in the background.

A move (``_Move``) is one asyncio task on the event loop:

  a. Rounds of ``FutureLogCopier.copy`` run in a worker thread (blocking reads, appends and
     their CRC checks off the event loop), at most ``replica.alter.log.dirs.io.max.bytes.
     per.second`` on average (Kafka's quota of the same name; unlimited by default).
  b. When less than ``FINAL_CATCH_UP_BYTES`` (or a round's worth under the quota) is
     left, the future log is flushed in a worker thread, then on the event loop, without
     an await in between, ``FutureLogCopier.finish`` copies the rest (nothing can append
     meanwhile: the event loop is the only appender and truncater, which makes the copy
     exact, future_log rule 4) and ``LogManager.swap_future`` swaps the logs; the hosted
     partition serves the moved log from then on. This is the only time produce and fetch
     wait for the move: one small copy, a few fsyncs and two renames. If more arrived
     than that copy may take, the rounds go on.
  c. The move is abandoned, its future log deleted, when the partition stops being hosted
     here or gets another log, when either log dir goes offline, or when the copy fails.
     A disk error writing the future log takes the target dir offline (replica manager
     rule 5) unless it was a lack of space (ENOSPC, EDQUOT): deleting the future log gives
     that space back, so only the move fails. An error after the swap's commit point leaves
     the partition unserved in a dir taken offline; the next start finishes the swap
     (``tidelog.storage.log_manager`` R2/R3).
  d. A broker restart resumes moves in progress, as Kafka's does. A clean shutdown stops
     each move after its round (the future log is kept, flushed by ``LogManager.close``);
     a crash leaves it as it was. At start-up ``LogManager`` loads the future logs it
     finds (its rule R1, after their own crash recovery) and keeps them registered, so
     DescribeLogDirs lists them (``is_future_key`` true, with their lag) from the start.
     Once the partition is hosted again (as leader or follower: a standalone broker hosts
     its partitions before this manager starts, a cluster member when the controller's
     LeaderAndIsr arrives), its move resumes: a ``FutureLogCopier`` made with
     ``resumed=True`` first keeps of the future log only what still matches the current
     log (future_log rule 6, Kafka's epoch truncation of the future replica), then rules
     a-c go on as for a new move. A loaded future log waiting for its partition is checked
     every ``RESUME_POLL_S`` (a task that runs only while one waits); it is deleted, with
     a warning, when its partition's or its own log dir is offline then, and with the
     partition when it is deleted (StopReplica, or a topic gone at a standalone start).
     AlterReplicaLogDirs naming another dir for it replaces it (rule 2), naming its dir
     resumes it at once.

``describe_log_dirs(partitions)`` answers DescribeLogDirs: per configured log dir (absolute
path) its error (KAFKA_STORAGE_ERROR when offline, nothing else then), the volume's total
and usable bytes, and per log of the requested partitions (None: all) its size in bytes,
its offset lag (a current log: how far its log end is behind the partition's high
watermark, 0 on a leader, -1 when the partition is not hosted; a future log: how far it is
behind the current log's end) and whether it is a future log.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import Collection
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from tidelog.errors import ErrorCode
from tidelog.model import TopicPartition
from tidelog.server.config.broker_config import BrokerConfig
from tidelog.server.replica.manager import RECOVERABLE_ERRNOS, ReplicaManager, now_ms
from tidelog.server.replica.reads import HostedPartition
from tidelog.storage.errors import StorageError
from tidelog.storage.future_log import FutureLogCopier, FutureLogError
from tidelog.storage.log import Log
from tidelog.storage.log_manager import LogManager

log = logging.getLogger(__name__)

#: Bytes copied per worker-thread round (rule a): large enough to amortise the hand-off,
#: small enough that an abandoned move stops soon.
ROUND_BYTES: Final = 8 << 20
#: Left to copy when the final catch-up may run on the event loop (rule b).
FINAL_CATCH_UP_BYTES: Final = 1 << 20
#: A round that copied nothing without being caught up waits this long before the next.
IDLE_ROUND_S: Final = 0.05
#: Kafka's limit on a directory name (``UnifiedLog.logFutureDirName``, KAFKA-4893).
MAX_DIR_NAME: Final = 255
#: ``<topic>-<partition>`` + ``.<32 hex digits>-future``.
_FUTURE_NAME_EXTRA: Final = 1 + 32 + len("-future")
IO_MAX_BYTES_KEY: Final = "replica.alter.log.dirs.io.max.bytes.per.second"
#: How often a future log loaded at start-up checks whether its partition is hosted (d).
RESUME_POLL_S: Final = 0.2
#: How long a shutdown waits for a move's round to end before cancelling it (d).
STOP_WAIT_S: Final = 10.0


@dataclass(slots=True, eq=False)
class _Move:
    tp: TopicPartition
    target: Path
    current: Log
    future: Log
    copier: FutureLogCopier
    task: asyncio.Task[None] | None = None
    #: Set by ``abandon``: the task stops at its next step and deletes the future log.
    abandoned: bool = False
    #: Set by ``stop`` (a shutdown): the task stops at its next step, the future log stays.
    stopping: bool = False
    done: asyncio.Event = field(default_factory=asyncio.Event)


class ReplicaAlterLogDirsManager:
    """The moves of this broker's replicas between its log dirs (module docstring)."""

    def __init__(self, config: BrokerConfig, replica_manager: ReplicaManager) -> None:
        self.config = config
        self.replica_manager = replica_manager
        self.log_manager: LogManager = replica_manager.log_manager
        self._moves: dict[TopicPartition, _Move] = {}
        #: Moves that ended (swapped or failed) since start: what tests and logs look at.
        self.completed = 0
        self.failed = 0
        #: Moves resumed from a future log loaded at start-up (rule d).
        self.resumed = 0
        #: Rule d's task, while a loaded future log waits for its partition to be hosted.
        self._resumer: asyncio.Task[None] | None = None
        #: Deletions of future logs dropped by rule d, in worker threads.
        self._discards: set[asyncio.Task[None]] = set()
        self._stopped = False
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return  # made outside the event loop: its owner calls ``resume_hosted`` there
        self.resume_hosted()  # a broker's start: the moves of partitions hosted already

    # --- AlterReplicaLogDirs -------------------------------------------------------------

    def resolve_log_dir(self, path: str) -> Path | None:
        """The configured log dir that ``path`` names (both made absolute), or None."""
        wanted = os.path.abspath(path)
        for log_dir in self.log_manager.log_dirs:
            if os.path.abspath(log_dir) == wanted:
                return log_dir
        return None

    def alter_replica_log_dir(self, tp: TopicPartition, path: str) -> ErrorCode:
        """Rules 1-5 for one partition."""
        rm = self.replica_manager
        target = self._checked_target(tp, path)
        if isinstance(target, ErrorCode):
            return target
        hosted = rm.partitions.get(tp)
        if hosted is not None and rm.is_offline(tp):
            return ErrorCode.KAFKA_STORAGE_ERROR
        moving = self._moves.get(tp)
        if moving is not None and moving.target != target:
            log.info("%s: moving to %s instead of %s", tp, target, moving.target)
            self.abandon(tp)
            moving = None
        waiting = self._waiting_future(tp)
        if waiting is not None and waiting.directory.parent != target:
            log.info("%s: moving to %s instead of %s", tp, target, waiting.directory.parent)
            self._drop_waiting(tp, "replaced by a move to another log dir")
        elif waiting is not None and hosted is not None and self._resume(tp) is not None:
            return ErrorCode.NONE  # rule 4: the target of its (resumed) move
        if hosted is None:
            return self._not_hosted(tp, target)
        if moving is not None or rm.log_dir_of(hosted) == target:
            return ErrorCode.NONE
        return self._create_move(tp, hosted, target)

    def _checked_target(self, tp: TopicPartition, path: str) -> Path | ErrorCode:
        """Rule 1: the log dir ``path`` names, or the error that refuses it."""
        if len(str(tp)) + _FUTURE_NAME_EXTRA > MAX_DIR_NAME:
            return ErrorCode.INVALID_TOPIC_EXCEPTION
        target = self.resolve_log_dir(path)
        if target is None:
            return ErrorCode.LOG_DIR_NOT_FOUND
        if target in self.replica_manager.offline_log_dirs:
            return ErrorCode.KAFKA_STORAGE_ERROR
        return target

    def _not_hosted(self, tp: TopicPartition, target: Path) -> ErrorCode:
        """Rule 3: remember ``target`` as ``tp``'s preferred log dir, for when it is created
        here."""
        if self.log_manager.get_log(tp) is None:
            self.log_manager.set_preferred_log_dir(tp, target)
        error = self.replica_manager.not_hosted_error(tp)
        # Kafka keeps REPLICA_NOT_AVAILABLE here for compatibility.
        return (
            ErrorCode.REPLICA_NOT_AVAILABLE if error == ErrorCode.NOT_LEADER_OR_FOLLOWER else error
        )

    def _create_move(self, tp: TopicPartition, hosted: HostedPartition, target: Path) -> ErrorCode:
        """Rule 5: the future log created in ``target`` and its move started, unless a log
        dir is offline or the creation fails."""
        rm = self.replica_manager
        if rm.offline_log_dirs:
            return ErrorCode.KAFKA_STORAGE_ERROR
        try:
            future = self.log_manager.create_future_log(tp, target, now_ms=now_ms())
        except OSError as exc:
            log.error("%s: cannot create its future log in %s: %s", tp, target, exc)
            rm.mark_log_dir_offline(target, exc)
            return ErrorCode.KAFKA_STORAGE_ERROR
        except StorageError as exc:
            log.warning("%s: cannot move to %s: %s", tp, target, exc)
            return ErrorCode.KAFKA_STORAGE_ERROR
        self._start(tp, hosted.log, future, resumed=False)
        log.info("%s: moving from %s to %s", tp, rm.log_dir_of(hosted), target)
        return ErrorCode.NONE

    def _start(self, tp: TopicPartition, current: Log, future: Log, *, resumed: bool) -> _Move:
        copier = FutureLogCopier(current, future, now_ms=now_ms(), resumed=resumed)
        move = _Move(tp, future.directory.parent, current, future, copier)
        self._moves[tp] = move
        move.task = asyncio.get_running_loop().create_task(
            self._run(move), name=f"alter-log-dir {tp}"
        )
        return move

    def moving(self, tp: TopicPartition) -> bool:
        return tp in self._moves

    # --- moves resumed after a restart (rule d) ------------------------------------------

    def _waiting_future(self, tp: TopicPartition) -> Log | None:
        """``tp``'s future log loaded at start-up whose move has not resumed yet."""
        return None if tp in self._moves else self.log_manager.future_log(tp)

    def waiting(self) -> list[TopicPartition]:
        """Partitions whose loaded future log waits for them to be hosted."""
        return [tp for tp in self.log_manager.future_logs() if tp not in self._moves]

    def resume_hosted(self) -> int:
        """Resume the move of every waiting future log whose partition is hosted now, drop
        those whose log dirs are offline (rule d); returns how many resumed. Starts the
        task that checks again while some still wait. On the event loop thread."""
        if self._stopped:
            return 0
        count = sum(1 for tp in self.waiting() if self._resume(tp) is not None)
        if self.waiting() and (self._resumer is None or self._resumer.done()):
            self._resumer = asyncio.get_running_loop().create_task(
                self._resume_when_hosted(), name="alter-log-dir resumer"
            )
        return count

    async def _resume_when_hosted(self) -> None:
        while self.waiting() and not self._stopped:
            await asyncio.sleep(RESUME_POLL_S)
            for tp in self.waiting():
                self._resume(tp)

    def _resume(self, tp: TopicPartition) -> _Move | None:
        rm = self.replica_manager
        future = self._waiting_future(tp)
        hosted = rm.partitions.get(tp)
        if future is None or hosted is None or hosted.log is not self.log_manager.get_log(tp):
            return None
        target = future.directory.parent
        if rm.is_offline(tp) or target in rm.offline_log_dirs:
            self._drop_waiting(tp, "a log dir of the partition is offline")
            return None
        if target == rm.log_dir_of(hosted):
            self._drop_waiting(tp, "it is in the log dir of the current log")
            return None
        if future.config != hosted.log.config:
            future.update_config(hosted.log.config)
        move = self._start(tp, hosted.log, future, resumed=True)
        self.resumed += 1
        log.info(
            "%s: resuming its move from %s to %s after a restart (the future log ends at "
            "%d, %d offsets behind)",
            tp,
            rm.log_dir_of(hosted),
            target,
            future.log_end_offset,
            move.copier.lag,
        )
        return move

    def _drop_waiting(self, tp: TopicPartition, why: str) -> None:
        future = self.log_manager.remove_future_log(tp)
        if future is None:
            return
        log.warning(
            "%s: deleting its future log in %s, the move is abandoned: %s",
            tp,
            future.directory.parent,
            why,
        )
        task = asyncio.get_running_loop().create_task(
            self._discard(future), name=f"alter-log-dir discard {tp}"
        )
        self._discards.add(task)
        task.add_done_callback(self._discards.discard)

    @staticmethod
    async def _discard(future: Log) -> None:
        try:
            await asyncio.to_thread(LogManager.discard_future_log, future)
        except OSError as exc:  # its dir is offline: the next start-up removes it
            log.warning("cannot delete the future log %s: %s", future.directory, exc)

    async def wait(self, tp: TopicPartition) -> None:
        """Until ``tp``'s move in progress (if any) ended."""
        move = self._moves.get(tp)
        if move is not None:
            await move.done.wait()

    def abandon(self, tp: TopicPartition) -> None:
        """Rule 2 / c: stop ``tp``'s move; its future log is forgotten now and deleted by
        the move's task (after a round running in a worker thread, if any)."""
        move = self._moves.pop(tp, None)
        if move is None:
            return
        move.abandoned = True
        if self.log_manager.future_log(tp) is move.future:
            self.log_manager.remove_future_log(tp)

    async def stop(self) -> None:
        """Broker shutdown: stop every move after its round, keeping its future log for
        the next start (rule d), and wait for their tasks."""
        self._stopped = True
        if self._resumer is not None:
            self._resumer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._resumer
        moves = list(self._moves.values())
        tasks = [m.task for m in moves if m.task is not None] + list(self._discards)
        for move in moves:
            move.stopping = True
        if tasks:
            _, late = await asyncio.wait(tasks, timeout=STOP_WAIT_S)
            for task in late:
                task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task

    # --- the move (rules a-c) ------------------------------------------------------------

    def _still_wanted(self, move: _Move) -> bool:
        rm = self.replica_manager
        hosted = rm.partitions.get(move.tp)
        if move.abandoned or move.stopping or hosted is None or hosted.log is not move.current:
            return False
        if self.log_manager.future_log(move.tp) is not move.future:
            return False
        return not (rm.is_offline(move.tp) or move.target in rm.offline_log_dirs)

    async def _run(self, move: _Move) -> None:
        swapped = kept = False
        try:
            swapped = await self._copy_and_swap(move)
            kept = not swapped and move.stopping
        except asyncio.CancelledError:
            kept = move.stopping
            raise
        except ValueError:
            pass  # a log was closed under the copy: the partition went away
        except FutureLogError as exc:
            log.error("%s: move to %s failed: %s", move.tp, move.target, exc)
        except OSError as exc:
            log.error("%s: move to %s failed on a disk: %s", move.tp, move.target, exc)
            if exc.errno not in RECOVERABLE_ERRNOS and exc.errno is not None:
                self.replica_manager.mark_log_dir_offline(move.target, exc)
        except Exception:
            log.exception("%s: move to %s failed", move.tp, move.target)
        finally:
            await self._ended(move, swapped=swapped, kept=kept)

    async def _ended(self, move: _Move, *, swapped: bool, kept: bool) -> None:
        """A move's task ends: counted, and unless it swapped or stops for a shutdown (rule
        d) its future log is forgotten and deleted (rule c)."""
        if self._moves.get(move.tp) is move:
            del self._moves[move.tp]
        if swapped:
            self.completed += 1
        elif kept and not move.abandoned:
            log.info("%s: move to %s stops here, resumes at the next start", move.tp, move.target)
        else:
            self.failed += 1
            if not move.abandoned:
                log.warning("%s: move to %s abandoned", move.tp, move.target)
            if self.log_manager.future_log(move.tp) is move.future:
                self.log_manager.remove_future_log(move.tp)
            with contextlib.suppress(OSError):
                await asyncio.shield(asyncio.to_thread(LogManager.discard_future_log, move.future))
        move.done.set()

    async def _copy_and_swap(self, move: _Move) -> bool:
        copier = move.copier
        while True:
            if not self._still_wanted(move):
                return False
            limit = self.config.get_int(IO_MAX_BYTES_KEY)
            round_bytes = max(1, min(ROUND_BYTES, limit // 10))  # at least one batch
            started = time.monotonic()
            copied = await asyncio.to_thread(copier.copy, round_bytes, now_ms=now_ms())
            if not self._still_wanted(move):
                return False
            final = min(FINAL_CATCH_UP_BYTES, round_bytes)
            if copier.lag == 0 or copier.remaining_bytes() <= final:
                await asyncio.to_thread(copier.flush)
                if not self._still_wanted(move):
                    return False
                # Rule b: from here to the swap nothing awaits.
                paused = time.perf_counter()
                if copier.finish(2 * final, now_ms=now_ms()):
                    self._swap(move)
                    log.info(
                        "%s: now served from %s (the final copy and swap took %.1f ms)",
                        move.tp,
                        move.target,
                        (time.perf_counter() - paused) * 1000,
                    )
                    return True
            pause = copied / limit - (time.monotonic() - started) if copied else IDLE_ROUND_S
            if pause > 0:
                await asyncio.sleep(pause)

    def _swap(self, move: _Move) -> None:
        rm = self.replica_manager
        hosted = rm.partitions[move.tp]
        source = rm.log_dir_of(hosted)
        try:
            moved = self.log_manager.swap_future(
                move.tp, high_watermark=hosted.partition.high_watermark, now_ms=now_ms()
            )
        except OSError as exc:
            if hosted.log.closed:  # past the commit point: only a restart can finish it
                rm.mark_log_dir_offline(source, exc)
            raise
        hosted.log = moved

    # --- DescribeLogDirs -----------------------------------------------------------------

    def describe_log_dirs(self, partitions: Collection[TopicPartition] | None) -> list[Any]:
        """The DescribeLogDirs results (module docstring), one per configured log dir."""
        rm = self.replica_manager
        lm = self.log_manager
        logs: list[tuple[TopicPartition, Log, bool]] = [
            (tp, the_log, False) for tp, the_log in lm.all_logs().items()
        ]
        logs += [(tp, the_log, True) for tp, the_log in lm.future_logs().items()]
        wanted = None if partitions is None else set(partitions)
        results = []
        for log_dir in lm.log_dirs:
            absolute = os.path.abspath(log_dir)
            if log_dir in rm.offline_log_dirs:
                results.append(_dir_error(absolute, ErrorCode.KAFKA_STORAGE_ERROR))
                continue
            try:
                stat = os.statvfs(log_dir)
            except OSError as exc:
                log.warning("DescribeLogDirs: %s: %s", log_dir, exc)
                results.append(_dir_error(absolute, ErrorCode.KAFKA_STORAGE_ERROR))
                continue
            by_topic: dict[str, list[dict[str, Any]]] = {}
            for tp, the_log, is_future in sorted(logs, key=lambda e: (e[0], e[2])):
                if the_log.directory.parent != log_dir or (wanted is not None and tp not in wanted):
                    continue
                by_topic.setdefault(tp.topic, []).append(
                    {
                        "partition_index": tp.partition,
                        "partition_size": the_log.size_bytes,
                        "offset_lag": self._offset_lag(tp, the_log, is_future),
                        "is_future_key": is_future,
                    }
                )
            results.append(
                {
                    "error_code": ErrorCode.NONE,
                    "log_dir": absolute,
                    "topics": [
                        {"name": topic, "partitions": parts} for topic, parts in by_topic.items()
                    ],
                    "total_bytes": stat.f_blocks * stat.f_frsize,
                    "usable_bytes": stat.f_bavail * stat.f_frsize,
                }
            )
        return results

    def _offset_lag(self, tp: TopicPartition, the_log: Log, is_future: bool) -> int:
        """Kafka's ``getLogEndOffsetLag``."""
        current = self.log_manager.get_log(tp)
        if is_future:
            return -1 if current is None else current.log_end_offset - the_log.log_end_offset
        hosted = self.replica_manager.partitions.get(tp)
        if hosted is None:
            return -1
        return max(hosted.partition.high_watermark - the_log.log_end_offset, 0)


def _dir_error(log_dir: str, error: ErrorCode) -> dict[str, Any]:
    return {"error_code": error, "log_dir": log_dir, "topics": []}


__all__ = [
    "FINAL_CATCH_UP_BYTES",
    "IO_MAX_BYTES_KEY",
    "ReplicaAlterLogDirsManager",
]
