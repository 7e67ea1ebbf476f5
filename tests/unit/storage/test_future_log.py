"""Moving a replica between log dirs (KIP-113): the future log's copy (tidelog.storage.
future_log rules 1-5), the swap (log_manager steps 1-5) and the start-up rules R1-R3 after a
crash between any two steps."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
from kafka.record.default_records import DefaultRecordBatchBuilder

from tidelog.model import TopicPartition
from tidelog.storage.checkpoints import (
    LOG_START_OFFSET_CHECKPOINT,
    RECOVERY_POINT_CHECKPOINT,
    OffsetCheckpointFile,
)
from tidelog.storage.future_log import SWAP_MARKER, FutureLogCopier, FutureLogError
from tidelog.storage.log import Log, LogConfig
from tidelog.storage.log_manager import FutureSwap, LogManager

from .batches import build_batch, read_all

TP = TopicPartition("moved", 0)
TOPIC_ID = uuid.uuid4()
NOW = 1_700_000_000_000
CONFIG = LogConfig(segment_bytes=8 * 1024, index_interval_bytes=512)


def producer_batch(
    producer_id: int, sequence: int, n: int = 3, *, transactional: bool = False
) -> bytes:
    """An idempotent (or transactional) producer's batch (producer id, epoch 0)."""
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=0,
        is_transactional=transactional,
        producer_id=producer_id,
        producer_epoch=0,
        base_sequence=sequence,
        batch_size=1 << 20,
    )
    for i in range(n):
        builder.append(
            i, timestamp=NOW + i, key=None, value=b"p%d-%d" % (producer_id, i), headers=[]
        )
    return bytes(builder.build())


def dirs(tmp_path: Path) -> tuple[Path, Path]:
    return tmp_path / "a", tmp_path / "b"


def open_manager(tmp_path: Path) -> LogManager:
    return LogManager(list(dirs(tmp_path)), CONFIG, now_ms=NOW)


def filled(tmp_path: Path) -> tuple[LogManager, Log]:
    """A log in dir a over several segments: three leader epochs, two idempotent producers,
    a transaction left open by a producer whose batch is now below the log start offset
    (only the producer state knows it), a log start offset inside a batch, and a leader
    epoch recorded without data (a new leader that has not written yet)."""
    manager = open_manager(tmp_path)
    log = manager.get_or_create_log(TP, CONFIG, TOPIC_ID)
    assert log.directory.parent == dirs(tmp_path)[0]
    log.append_as_leader(producer_batch(9, 0, transactional=True), leader_epoch=0, now_ms=NOW)
    sequences = {7: 0, 8: 0}
    for i in range(1, 60):
        epoch = i // 20
        if i % 5 == 0:
            pid = 7 + i % 2
            log.append_as_leader(
                producer_batch(pid, sequences[pid]), leader_epoch=epoch, now_ms=NOW
            )
            sequences[pid] += 3
        else:
            log.append_as_leader(build_batch(4, seed=i), leader_epoch=epoch, now_ms=NOW)
    log.delete_records_before(6)  # inside the second batch
    log.leader_epoch_cache.assign(3, log.log_end_offset)
    assert 9 in log.producer_state.producers
    assert len(log.segment_base_offsets) > 3
    manager.checkpoint({})  # the broker's periodic checkpoint: the log start is on disk
    return manager, log


def state(log: Log, *, restarted: bool = False) -> tuple[object, ...]:
    """What a move must keep: every batch at its offset, the bounds, the epochs, the
    producers. ``restarted``: as a restart leaves it, which (like Kafka's load) forgets an
    epoch starting at the log end offset (a leader that had not written yet)."""
    leo = log.log_end_offset
    epochs = log.leader_epoch_cache.entries
    if restarted:
        epochs = tuple(e for e in epochs if e.start_offset < leo)
    return (
        read_all(log),
        log.log_start_offset,
        leo,
        epochs,
        dict(log.producer_state.producers),
    )


def copy_all(copier: FutureLogCopier, between: Callable[[int], None] | None = None) -> None:
    """Copy in small rounds; ``between(round)`` runs between rounds (the event loop's
    appends and truncations while the worker copies)."""
    for n in range(10_000):
        if between is not None:
            between(n)
        copier.copy(3000, now_ms=NOW)
        if copier.lag == 0 and (between is None or n > 5):
            break
    assert copier.finish(1 << 20, now_ms=NOW)


def test_move_keeps_records_bounds_epochs_producers_and_checkpoints(tmp_path: Path) -> None:
    a, b = dirs(tmp_path)
    manager, log = filled(tmp_path)
    future = manager.create_future_log(TP, b, now_ms=NOW)
    assert future.directory.name.startswith(f"{TP}.")
    assert future.directory.name.endswith("-future")
    assert manager.get_log(TP) is log  # still served from a
    copier = FutureLogCopier(log, future, now_ms=NOW)
    extra = iter(range(1000, 2000))

    def appends_continue(n: int) -> None:
        if n < 8:  # the event loop keeps appending while the copy runs
            log.append_as_leader(build_batch(3, seed=next(extra)), leader_epoch=3, now_ms=NOW)

    copy_all(copier, appends_continue)
    log.leader_epoch_cache.assign(4, log.log_end_offset)  # a new leader, nothing written yet
    before = state(log)
    moved = manager.swap_future(TP, high_watermark=log.log_end_offset - 2, now_ms=NOW)

    assert moved.directory == b / str(TP)
    assert manager.get_log(TP) is moved
    assert manager.log_dir_of(TP) == b
    assert manager.future_log(TP) is None
    assert state(moved) == before
    assert not (a / str(TP)).exists()
    assert not list(b.glob("*-future"))
    assert not (moved.directory / SWAP_MARKER).exists()
    assert log.closed  # retired: refuses calls, its files stay open for a while
    assert [p.name for p in a.iterdir() if p.name.endswith("-delete")]
    assert manager.topic_id(TP) == TOPIC_ID
    # The target dir's checkpoints carry the partition, the source's no longer.
    assert OffsetCheckpointFile(b / LOG_START_OFFSET_CHECKPOINT).read()[TP] == 6
    assert OffsetCheckpointFile(b / RECOVERY_POINT_CHECKPOINT).read()[TP] == before[2]
    assert TP not in OffsetCheckpointFile(a / RECOVERY_POINT_CHECKPOINT).read()
    assert manager.release_retired(None) == 1
    assert not [p for p in a.iterdir() if p.name.endswith("-delete")]
    # Appends go on in the new dir, and a clean restart finds everything there.
    moved.append_as_leader(build_batch(2, seed=99), leader_epoch=4, now_ms=NOW)
    after = state(moved)
    manager.close()
    again = open_manager(tmp_path)
    reopened = again.get_log(TP)
    assert reopened is not None
    assert reopened.directory.parent == b
    assert state(reopened) == after
    assert again.high_watermarks()[TP] == before[2] - 2
    again.close()


def test_copy_follows_truncations_of_the_current_log(tmp_path: Path) -> None:
    """Rule 3: a follower's tail cut and replaced under a new epoch while the copy runs, the
    new batches lining up with the copy's end (so only the truncation floor can tell)."""
    _, b = dirs(tmp_path)
    manager, log = filled(tmp_path)
    future = manager.create_future_log(TP, b, now_ms=NOW)
    copier = FutureLogCopier(log, future, now_ms=NOW)
    copier.copy(30_000, now_ms=NOW)
    copied_end = future.log_end_offset
    assert copied_end > 100
    held = log.read(copied_end - 5, 1)
    assert held is not None
    cut = held.first_offset
    log.truncate_to(cut)
    log.append_as_follower(_stamped(cut, 7, n=copied_end - cut, seed=500), now_ms=NOW)
    for i in range(4):
        log.append_as_follower(_stamped(log.log_end_offset, 7, seed=501 + i), now_ms=NOW)
    copy_all(copier)
    before = state(log)
    moved = manager.swap_future(TP, high_watermark=0, now_ms=NOW)
    assert state(moved) == before
    manager.close()


def _stamped(base_offset: int, epoch: int, *, n: int = 4, seed: int) -> bytes:
    """A leader's batch as a follower receives it: base offset and partition leader epoch
    stamped (both outside the CRC-32C)."""
    batch = bytearray(build_batch(n, seed=seed))
    batch[0:8] = base_offset.to_bytes(8, "big")
    batch[12:16] = epoch.to_bytes(4, "big")
    return bytes(batch)


def test_copy_restarts_when_the_start_passes_it_and_after_a_full_truncation(
    tmp_path: Path,
) -> None:
    """Rule 2: retention past the copy's end, and truncate_fully_and_start_at."""
    _, b = dirs(tmp_path)
    manager, log = filled(tmp_path)
    future = manager.create_future_log(TP, b, now_ms=NOW)
    copier = FutureLogCopier(log, future, now_ms=NOW)
    copier.copy(2000, now_ms=NOW)
    log.delete_records_before(log.log_end_offset - 30)
    copy_all(copier)
    assert future.log_start_offset <= log.log_start_offset
    log.truncate_fully_and_start_at(log.log_end_offset + 50)
    log.append_as_follower(_stamped(log.log_end_offset, 8, seed=1), now_ms=NOW)
    copy_all(copier)
    before = state(log)
    moved = manager.swap_future(TP, high_watermark=0, now_ms=NOW)
    assert state(moved) == before
    manager.close()


def test_a_diverged_copy_is_never_swapped_in(tmp_path: Path) -> None:
    _, b = dirs(tmp_path)
    manager, log = filled(tmp_path)
    future = manager.create_future_log(TP, b, now_ms=NOW)
    copier = FutureLogCopier(log, future, now_ms=NOW)
    copy_all(copier)
    # Damage the copy's last batch behind the copier's back (its CRC would catch it on a
    # read; the tail check compares bytes).
    segment = max(future.directory.glob("*.log"))
    data = bytearray(segment.read_bytes())
    data[-1] ^= 0xFF
    segment.write_bytes(bytes(data))
    with pytest.raises(FutureLogError):
        copier.verify_tail()
    manager.close()


# --- crashes between the steps ----------------------------------------------------------------

STEPS = ("created", "copied", "prepare", "commit", "retire_current", "promote")


def crash(manager: LogManager) -> None:
    """What a SIGKILL leaves: the files as they are, nothing flushed or checkpointed."""
    for log in [*manager.all_logs().values(), *manager.future_logs().values()]:
        log.close_without_flush()
    manager.release_retired(None)


@pytest.mark.parametrize("last_step", STEPS)
def test_crash_after_each_step_restarts_with_exactly_one_replica(
    tmp_path: Path, last_step: str
) -> None:
    a, b = dirs(tmp_path)
    manager, log = filled(tmp_path)
    future = manager.create_future_log(TP, b, now_ms=NOW)
    if last_step != "created":
        copy_all(FutureLogCopier(log, future, now_ms=NOW))
    before = state(log, restarted=True)
    swap = FutureSwap(manager, TP, high_watermark=log.log_end_offset, now_ms=NOW)
    for step in STEPS[2 : STEPS.index(last_step) + 1]:
        getattr(swap, step)()
    crash(manager)

    again = open_manager(tmp_path)
    recovered = again.get_log(TP)
    assert recovered is not None
    committed = STEPS.index(last_step) >= STEPS.index("commit")
    expected_dir = b if committed else a
    assert recovered.directory == expected_dir / str(TP)
    other = a if committed else b
    assert not [p for p in other.iterdir() if p.name.startswith(str(TP))]
    assert not list(b.glob("*-future"))
    assert not (recovered.directory / SWAP_MARKER).exists()
    assert again.future_logs() == {}
    assert state(recovered) == before
    assert again.topic_id(TP) == TOPIC_ID
    # The replica takes writes where it ended up, and a second restart agrees.
    recovered.append_as_leader(build_batch(2, seed=77), leader_epoch=5, now_ms=NOW)
    after = state(recovered)
    again.close()
    third = open_manager(tmp_path)
    final = third.get_log(TP)
    assert final is not None
    assert final.directory == expected_dir / str(TP)
    assert state(final) == after
    third.close()


def test_crash_after_the_marker_is_renamed_with_the_log_keeps_the_moved_one(
    tmp_path: Path,
) -> None:
    """R3: the promoted dir still holds the marker and a stale copy survives elsewhere."""
    a, b = dirs(tmp_path)
    manager, log = filled(tmp_path)
    future = manager.create_future_log(TP, b, now_ms=NOW)
    copy_all(FutureLogCopier(log, future, now_ms=NOW))
    before = state(log, restarted=True)
    swap = FutureSwap(manager, TP, high_watermark=0, now_ms=NOW)
    swap.prepare()
    swap.commit()
    crash(manager)
    # As if step 4's rename happened but neither step 3 nor the marker's removal did.
    (b / future.directory.name).rename(b / str(TP))
    assert (a / str(TP)).exists()
    assert (b / str(TP) / SWAP_MARKER).exists()
    again = open_manager(tmp_path)
    recovered = again.get_log(TP)
    assert recovered is not None
    assert recovered.directory == b / str(TP)
    assert not (a / str(TP)).exists()
    assert state(recovered) == before
    again.close()


def test_swap_refused_before_the_copy_is_complete_keeps_the_current_log(
    tmp_path: Path,
) -> None:
    _, b = dirs(tmp_path)
    manager, log = filled(tmp_path)
    future = manager.create_future_log(TP, b, now_ms=NOW)
    FutureLogCopier(log, future, now_ms=NOW).copy(2000, now_ms=NOW)
    with pytest.raises(Exception, match="future log ends at"):
        manager.swap_future(TP, high_watermark=0, now_ms=NOW)
    assert manager.get_log(TP) is log
    assert not log.closed
    assert manager.future_log(TP) is None
    assert not list(b.glob("*-future"))
    manager.close()


def test_delete_log_removes_the_future_log_and_the_copy_stops(tmp_path: Path) -> None:
    _, b = dirs(tmp_path)
    manager, log = filled(tmp_path)
    future = manager.create_future_log(TP, b, now_ms=NOW)
    copier = FutureLogCopier(log, future, now_ms=NOW)
    copier.copy(2000, now_ms=NOW)
    manager.delete_log(TP)
    assert not list(b.glob(f"{TP}*"))
    with pytest.raises(ValueError, match="closed"):
        copier.copy(2000, now_ms=NOW)
    manager.close()


def test_removed_future_log_fails_the_running_copy_and_is_deleted(tmp_path: Path) -> None:
    _, b = dirs(tmp_path)
    manager, log = filled(tmp_path)
    future = manager.create_future_log(TP, b, now_ms=NOW)
    copier = FutureLogCopier(log, future, now_ms=NOW)
    removed = manager.remove_future_log(TP)
    assert removed is future
    with pytest.raises(ValueError, match="closed"):
        copier.copy(2000, now_ms=NOW)
    LogManager.discard_future_log(future)
    assert not list(b.glob("*-future"))
    assert manager.get_log(TP) is log
    manager.close()


def test_preferred_log_dir_places_a_new_partition(tmp_path: Path) -> None:
    a, _ = dirs(tmp_path)
    manager = open_manager(tmp_path)
    manager.get_or_create_log(TopicPartition("other", 0), CONFIG)  # a has one log now
    manager.set_preferred_log_dir(TopicPartition("other", 1), a)
    assert manager.get_or_create_log(TopicPartition("other", 1), CONFIG).directory.parent == a
    manager.close()
