"""Moving a replica between log dirs (KIP-113): the future log's copy (tidelog.storage.
future_log rules 1-5), the swap (log_manager steps 1-5), the start-up rules R1-R3 after a
crash between any two steps, and a move resumed after a restart (R1, rule 6), crashed again
between any two steps."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
from kafka.record.default_records import DefaultRecordBatchBuilder

from tidelog.model import TopicPartition
from tidelog.protocol.records import iter_batches
from tidelog.storage import future_log
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
    assert not (recovered.directory / SWAP_MARKER).exists()
    assert state(recovered) == before
    if not committed:
        # R1: the future log is loaded, and its move resumes and completes (rule 6).
        [future_dir] = b.glob(f"{TP}.*-future")
        resumed = again.future_log(TP)
        assert resumed is not None
        assert resumed.directory == future_dir
        copy_all(FutureLogCopier(recovered, resumed, now_ms=NOW, resumed=True))
        recovered = again.swap_future(TP, high_watermark=0, now_ms=NOW)
        expected_dir = b
        assert recovered.directory == b / str(TP)
        assert state(recovered, restarted=True) == before
        assert again.release_retired(None) == 1
    other = a if expected_dir == b else b
    assert not [p for p in other.iterdir() if p.name.startswith(str(TP))]
    assert not list(b.glob("*-future"))
    assert again.future_logs() == {}
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


# --- a move resumed after a restart (R1, future_log rule 6) -----------------------------------


def is_prefix(future: Log, current: Log) -> bool:
    """Rule 1: the future log's batches are the current log's, byte for byte."""
    start = max(future.log_start_offset, current.log_start_offset)
    kept = read_all(future, start)
    return kept == read_all(current, start)[: len(kept)]


def half_copied(tmp_path: Path, *, torn: int = 0) -> tuple[LogManager, Log, int]:
    """A move that copied part of ``filled``'s log, then a crash; ``torn`` bytes of the future
    log's last segment lost with it (an unflushed tail). Returns the restarted manager, its
    current log and the offset the copy had reached."""
    _, b = dirs(tmp_path)
    manager, log = filled(tmp_path)
    future = manager.create_future_log(TP, b, now_ms=NOW)
    FutureLogCopier(log, future, now_ms=NOW).copy(12_000, now_ms=NOW)
    reached = future.log_end_offset
    assert 0 < reached < log.log_end_offset
    last = max(future.directory.glob("*.log"))
    crash(manager)
    if torn:
        with last.open("r+b") as f:
            f.truncate(last.stat().st_size - torn)
    again = open_manager(tmp_path)
    current = again.get_log(TP)
    assert current is not None
    return again, current, reached


def test_half_copied_future_log_is_loaded_and_its_move_completes_after_a_restart(
    tmp_path: Path,
) -> None:
    a, b = dirs(tmp_path)
    manager, current, reached = half_copied(tmp_path, torn=7)
    future = manager.future_log(TP)
    assert future is not None
    assert future.directory.parent == b
    assert current.directory.parent == a
    # The torn batch was dropped by the future log's own recovery; the rest was kept.
    assert 0 < future.log_end_offset < reached
    assert is_prefix(future, current)
    # The restarted broker appends before the copy resumes (the partition is served).
    current.append_as_leader(build_batch(3, seed=4000), leader_epoch=3, now_ms=NOW)
    copier = FutureLogCopier(current, future, now_ms=NOW, resumed=True)
    copier.copy(1, now_ms=NOW)  # the rule 6 check, then one batch
    assert future.log_end_offset > reached - 10  # resumed where it was, not from the start
    copy_all(copier)
    before = state(current)
    moved = manager.swap_future(TP, high_watermark=0, now_ms=NOW)
    assert moved.directory == b / str(TP)
    assert state(moved) == before
    manager.close()


@pytest.mark.parametrize("new_epoch", [True, False])
def test_a_resumed_copy_keeps_only_what_the_current_log_still_holds(
    tmp_path: Path, new_epoch: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Rule 6: while the broker was down the current log lost the tail the future log had
    copied and took other batches at those offsets, under a new leader epoch (a follower
    refilled by its new leader: the epochs find the cut, no batch-by-batch step needed) or
    the same one (a standalone leader that lost an unflushed tail and took new produces:
    only the bytes differ, found stepping back one batch at a time)."""
    if new_epoch:
        monkeypatch.setattr(future_log, "MAX_RESUME_STEPS", 1)
    manager, current, reached = half_copied(tmp_path)
    future = manager.future_log(TP)
    assert future is not None
    assert future.log_end_offset == reached
    held = current.read(reached - 20, 1)
    assert held is not None
    cut = held.first_offset
    current.truncate_to(cut)
    epoch = 7 if new_epoch else current.leader_epoch_cache.latest_epoch()
    assert epoch is not None
    while current.log_end_offset < reached + 8:
        seed = 600 + current.log_end_offset
        current.append_as_follower(_stamped(current.log_end_offset, epoch, seed=seed), now_ms=NOW)
    copier = FutureLogCopier(current, future, now_ms=NOW, resumed=True)
    copier.copy(1, now_ms=NOW)
    # Everything from the cut was dropped (then one batch copied again), nothing below it.
    assert cut <= future.log_end_offset <= cut + 4
    assert is_prefix(future, current)
    copy_all(copier)
    before = state(current)
    assert state(manager.swap_future(TP, high_watermark=0, now_ms=NOW)) == before
    manager.close()


def test_a_future_log_left_beyond_the_current_log_end_is_cut_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The current log lost more than the future log did: the future log's batches past the
    current end when the copy resumed are not the current log's, whatever their epochs say
    (cut at once: no batch-by-batch step needed)."""
    monkeypatch.setattr(future_log, "MAX_RESUME_STEPS", 1)
    manager, current, reached = half_copied(tmp_path)
    future = manager.future_log(TP)
    assert future is not None
    held = current.read(reached - 30, 1)
    assert held is not None
    current.truncate_to(held.first_offset)
    limit = current.log_end_offset
    copier = FutureLogCopier(current, future, now_ms=NOW, resumed=True)
    # Appended after the copier was made, in the same epoch and with the same batch
    # boundaries as the future log's stale batches: neither epochs nor boundaries differ.
    stale = [h for _, h in iter_batches(read_all(future, limit))]
    assert len(stale) > 3
    assert {h.partition_leader_epoch for h in stale} == {current.leader_epoch_cache.latest_epoch()}
    for i, header in enumerate(stale):
        n = header.next_offset - header.base_offset
        epoch = header.partition_leader_epoch
        current.append_as_leader(build_batch(n, seed=3000 + i), leader_epoch=epoch, now_ms=NOW)
    assert current.log_end_offset == reached
    copier.copy(1, now_ms=NOW)
    assert limit <= future.log_end_offset <= stale[0].next_offset
    copy_all(copier)
    before = state(current)
    assert state(manager.swap_future(TP, high_watermark=0, now_ms=NOW)) == before
    manager.close()


@pytest.mark.parametrize("last_step", STEPS[1:])
def test_crash_during_a_resumed_move_after_each_step(tmp_path: Path, last_step: str) -> None:
    """A crash mid-copy, a restart that resumes the move, and a second crash after each
    step of the resumed move: one replica, every record at its offset, and (before the
    commit point) the move resumes again and completes."""
    a, b = dirs(tmp_path)
    manager, current, _ = half_copied(tmp_path, torn=3)
    future = manager.future_log(TP)
    assert future is not None
    current.append_as_leader(build_batch(5, seed=5000), leader_epoch=3, now_ms=NOW)
    copy_all(FutureLogCopier(current, future, now_ms=NOW, resumed=True))
    before = state(current, restarted=True)
    swap = FutureSwap(manager, TP, high_watermark=current.log_end_offset, now_ms=NOW)
    for step in STEPS[2 : STEPS.index(last_step) + 1]:
        getattr(swap, step)()
    crash(manager)

    third = open_manager(tmp_path)
    recovered = third.get_log(TP)
    assert recovered is not None
    committed = STEPS.index(last_step) >= STEPS.index("commit")
    assert recovered.directory == (b if committed else a) / str(TP)
    assert state(recovered) == before
    if committed:
        assert third.future_logs() == {}
    else:
        again = third.future_log(TP)
        assert again is not None
        copy_all(FutureLogCopier(recovered, again, now_ms=NOW, resumed=True))
        recovered = third.swap_future(TP, high_watermark=0, now_ms=NOW)
        assert state(recovered, restarted=True) == before
        third.release_retired(None)
    assert recovered.directory == b / str(TP)
    assert not [p for p in a.iterdir() if p.name.startswith(str(TP))]
    assert not list(b.glob("*-future"))
    third.close()


def test_future_logs_with_nothing_to_move_are_deleted_at_start(tmp_path: Path) -> None:
    """R1's exceptions: a second future log of the same partition (both go: which move was
    wanted last is unknown), and a future log whose partition has no log here."""
    a, b = dirs(tmp_path)
    manager, log = filled(tmp_path)
    future = manager.create_future_log(TP, b, now_ms=NOW)
    FutureLogCopier(log, future, now_ms=NOW).copy(5000, now_ms=NOW)
    orphan_tp = TopicPartition("gone", 3)
    orphan = Log.open(b / f"{orphan_tp}.{uuid.uuid4().hex}-future", CONFIG, now_ms=NOW)
    orphan.append_as_leader(build_batch(2, seed=1), leader_epoch=0, now_ms=NOW)
    crash(manager)
    orphan.close()
    (a / f"{TP}.{uuid.uuid4().hex}-future").mkdir()
    again = open_manager(tmp_path)
    assert again.future_logs() == {}
    assert not list(a.glob("*-future"))
    assert not list(b.glob("*-future"))
    kept = again.get_log(TP)
    assert kept is not None
    assert kept.directory.parent == a
    again.close()


def test_an_abandoned_future_log_is_not_resumed_after_a_crash(tmp_path: Path) -> None:
    """``remove_future_log`` renames the directory away at once: a crash before the
    deletion does not bring back a move that was given up."""
    _, b = dirs(tmp_path)
    manager, log = filled(tmp_path)
    future = manager.create_future_log(TP, b, now_ms=NOW)
    FutureLogCopier(log, future, now_ms=NOW).copy(5000, now_ms=NOW)
    assert manager.remove_future_log(TP) is future
    assert not list(b.glob("*-future"))
    crash(manager)
    future.release_files()
    again = open_manager(tmp_path)
    assert again.future_logs() == {}
    assert not [p for p in b.iterdir() if p.name.startswith(str(TP))]
    again.close()


def test_a_clean_close_keeps_the_future_log_for_the_next_start(tmp_path: Path) -> None:
    _, b = dirs(tmp_path)
    manager, log = filled(tmp_path)
    future = manager.create_future_log(TP, b, now_ms=NOW)
    FutureLogCopier(log, future, now_ms=NOW).copy(5000, now_ms=NOW)
    reached = future.log_end_offset
    manager.close()
    again = open_manager(tmp_path)
    reloaded = again.future_log(TP)
    assert reloaded is not None
    assert reloaded.log_end_offset == reached
    again.close()
