"""Log behaviour beyond the first slice: follower appends, epochs, truncation, rolling,
retention, DeleteRecords, delayed file deletion, flush policy, timestamps."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest

from tidelog.errors import ErrorCode
from tidelog.protocol.records import (
    Compression,
    CorruptRecordBatchError,
    iter_batches,
    parse_header,
    stamp_batch,
)
from tidelog.storage.errors import (
    OffsetOutOfRangeError,
    RecordTooLargeError,
    UnexpectedAppendOffsetError,
)
from tidelog.storage.local_log import settle_removals
from tidelog.storage.log import Log, LogConfig

from .batches import BASE_TS, build_batch, read_all


def stamped(raw: bytes, base: int, epoch: int) -> bytes:
    buf = bytearray(raw)
    stamp_batch(buf, 0, base, epoch)
    return bytes(buf)


def epochs(log: Log) -> list[tuple[int, int]]:
    return [(e.epoch, e.start_offset) for e in log.leader_epoch_cache.entries]


def new_log(tmp_path: Path, **config: int) -> Log:
    return Log.open(tmp_path / "t-0", LogConfig(**config), now_ms=0)


# ---------------------------------------------------------------------- appends


def test_follower_keeps_leader_offsets_and_epochs(tmp_path: Path) -> None:
    log = new_log(tmp_path)
    records = stamped(build_batch(3), 0, 2) + stamped(build_batch(2), 3, 5)
    info = log.append_as_follower(records, now_ms=1)
    assert (info.first_offset, info.last_offset, info.num_batches) == (0, 4, 2)
    assert read_all(log) == records
    assert epochs(log) == [(2, 0), (5, 3)]
    assert log.leader_epoch_cache.end_offset_for(2) == (2, 3)
    assert log.leader_epoch_cache.end_offset_for(5) == (5, 5)


def test_follower_append_must_continue_at_log_end(tmp_path: Path) -> None:
    log = new_log(tmp_path)
    log.append_as_follower(stamped(build_batch(2), 0, 0), now_ms=0)
    with pytest.raises(UnexpectedAppendOffsetError) as info:
        log.append_as_follower(stamped(build_batch(1), 5, 0), now_ms=0)
    assert info.value.code is ErrorCode.OFFSET_OUT_OF_RANGE
    assert "starts at offset 5, expected 2" in str(info.value)
    gap = stamped(build_batch(1), 2, 0) + stamped(build_batch(1), 4, 0)
    with pytest.raises(UnexpectedAppendOffsetError, match="starts at offset 4, expected 3"):
        log.append_as_follower(gap, now_ms=0)
    assert log.log_end_offset == 2  # nothing of a refused append is written


def test_follower_ignores_a_trailing_partial_batch(tmp_path: Path) -> None:
    log = new_log(tmp_path)
    whole = stamped(build_batch(2), 0, 0)
    partial = stamped(build_batch(3), 2, 0)[:40]
    info = log.append_as_follower(whole + partial, now_ms=0)
    assert info.num_batches == 1
    assert log.log_end_offset == 2
    assert log.size_bytes == len(whole)


def test_new_leader_epoch_is_recorded_and_stale_epoch_is_a_bug(tmp_path: Path) -> None:
    log = new_log(tmp_path)
    log.append_as_leader(build_batch(2), leader_epoch=1, now_ms=0)
    log.append_as_leader(build_batch(2), leader_epoch=1, now_ms=0)
    log.append_as_leader(build_batch(1), leader_epoch=3, now_ms=0)
    assert epochs(log) == [(1, 0), (3, 4)]
    with pytest.raises(ValueError, match="below the latest epoch 3"):
        log.append_as_leader(build_batch(1), leader_epoch=2, now_ms=0)
    assert log.log_end_offset == 5


def test_invalid_batches_are_refused_with_kafkas_codes(tmp_path: Path) -> None:
    log = new_log(tmp_path, segment_bytes=2000)
    old_magic = bytearray(build_batch(1))
    old_magic[16] = 1
    with pytest.raises(CorruptRecordBatchError) as info:
        log.append_as_leader(bytes(old_magic), leader_epoch=0, now_ms=0)
    assert info.value.code is ErrorCode.UNSUPPORTED_FOR_MESSAGE_FORMAT
    wrong_count = bytearray(build_batch(3))
    wrong_count[57:61] = (2).to_bytes(4, "big")  # recordsCount (outside nothing: CRC covers it)
    with pytest.raises(CorruptRecordBatchError) as info:
        log.append_as_leader(bytes(wrong_count), leader_epoch=0, now_ms=0)
    assert info.value.code is ErrorCode.CORRUPT_MESSAGE
    assert "declares 2 records but last offset delta 2" in str(info.value)
    with pytest.raises(CorruptRecordBatchError, match="truncated"):
        log.append_as_leader(build_batch(1)[:30], leader_epoch=0, now_ms=0)
    too_many = b"".join(build_batch(5, seed=i) for i in range(6))
    with pytest.raises(RecordTooLargeError) as too_large:
        log.append_as_leader(too_many, leader_epoch=0, now_ms=0)
    assert too_large.value.code is ErrorCode.RECORD_LIST_TOO_LARGE
    assert log.log_end_offset == 0
    assert log.size_bytes == 0


def test_empty_append_changes_nothing(tmp_path: Path) -> None:
    log = new_log(tmp_path)
    log.append_as_leader(build_batch(2), leader_epoch=0, now_ms=0)
    info = log.append_as_leader(b"", leader_epoch=0, now_ms=0)
    assert (info.first_offset, info.last_offset, info.num_batches) == (2, 1, 0)
    assert log.log_end_offset == 2


@pytest.mark.parametrize(
    "codec", [Compression.GZIP, Compression.SNAPPY, Compression.LZ4, Compression.ZSTD]
)
def test_compressed_batches_are_stored_as_sent(tmp_path: Path, codec: Compression) -> None:
    raw = build_batch(20, compression=int(codec), value_size=300)
    assert parse_header(raw).compression == codec  # kafka-python did compress it
    log = new_log(tmp_path)
    log.append_as_leader(raw, leader_epoch=0, now_ms=0)
    stored = read_all(log)
    assert stored[12:] == raw[12:]  # only baseOffset (already 0) could differ
    assert stored == raw


# ---------------------------------------------------------------------- reads


def test_fetch_slice_is_sendfile_ready(tmp_path: Path) -> None:
    log = new_log(tmp_path)
    log.append_as_leader(build_batch(3) + build_batch(4), leader_epoch=0, now_ms=0)
    fetched = log.read(4, 1 << 20)
    assert fetched is not None
    left, right = socket.socketpair()
    with left, right:
        sent = os.sendfile(left.fileno(), fetched.fileno, fetched.position, fetched.length)
        assert sent == fetched.length
        received = right.recv(1 << 20)
    assert received == fetched.read_bytes()
    assert [h.base_offset for _, h in iter_batches(received)] == [3]


def test_read_never_spans_segments(tmp_path: Path) -> None:
    log = new_log(tmp_path, segment_bytes=1000)
    for i in range(10):
        log.append_as_leader(build_batch(2, seed=i), leader_epoch=0, now_ms=0)
    assert len(log.segment_base_offsets) > 2
    second = log.segment_base_offsets[1]
    fetched = log.read(0, 1 << 20)
    assert fetched is not None
    batches = [h for _, h in iter_batches(fetched.read_bytes())]
    assert batches[-1].next_offset == second
    after = log.read(second, 1 << 20)
    assert after is not None
    assert after.first_offset == second


def test_read_below_log_start_is_out_of_range(tmp_path: Path) -> None:
    log = new_log(tmp_path)
    log.append_as_leader(build_batch(5), leader_epoch=0, now_ms=0)
    log.delete_records_before(3)
    assert log.log_start_offset == 3
    with pytest.raises(OffsetOutOfRangeError, match=r"offset 2 is outside \[3, 5\]"):
        log.read(2, 100)
    fetched = log.read(3, 100)
    assert fetched is not None
    assert fetched.first_offset == 0  # the batch containing offset 3
    with pytest.raises(OffsetOutOfRangeError, match="beyond the log end offset 5"):
        log.delete_records_before(6)


# ---------------------------------------------------------------------- truncation


def test_truncate_to_drops_whole_batches_and_epochs(tmp_path: Path) -> None:
    log = new_log(tmp_path, segment_bytes=1200)
    for i in range(8):
        log.append_as_leader(build_batch(3, seed=i), leader_epoch=i // 3, now_ms=0)
    assert epochs(log) == [(0, 0), (1, 9), (2, 18)]
    before = read_all(log)
    log.truncate_to(10)  # inside batch 9..11: the whole batch goes
    assert log.log_end_offset == 9
    assert epochs(log) == [(0, 0)]
    assert read_all(log) == before[: len(read_all(log))]
    assert [h.next_offset for _, h in iter_batches(read_all(log))][-1] == 9
    info = log.append_as_leader(build_batch(1), leader_epoch=4, now_ms=0)
    assert info.first_offset == 9
    assert epochs(log) == [(0, 0), (4, 9)]
    log.truncate_to(100)  # beyond the end: nothing to drop
    assert log.log_end_offset == 10


def test_truncate_fully_and_start_at(tmp_path: Path) -> None:
    log = new_log(tmp_path)
    log.append_as_leader(build_batch(5), leader_epoch=2, now_ms=0)
    log.truncate_fully_and_start_at(1000)
    assert (log.log_start_offset, log.log_end_offset, log.recovery_point) == (1000, 1000, 1000)
    assert epochs(log) == []
    assert log.read(1000, 100) is None
    info = log.append_as_leader(build_batch(2), leader_epoch=3, now_ms=0)
    assert info.first_offset == 1000
    log.close()
    reopened = Log.open(tmp_path / "t-0", LogConfig(), now_ms=0, recovery_point=log.recovery_point)
    assert (reopened.log_start_offset, reopened.log_end_offset) == (1000, 1002)
    assert reopened.segment_base_offsets == (1000,)
    assert sorted(p.name for p in (tmp_path / "t-0").glob("*.log")) == ["00000000000000001000.log"]


# ---------------------------------------------------------------------- rolling


def test_roll_on_segment_bytes_ms_and_full_index(tmp_path: Path) -> None:
    by_size = Log.open(tmp_path / "s-0", LogConfig(segment_bytes=1000), now_ms=0)
    batch = build_batch(3)
    for _ in range(5):
        by_size.append_as_leader(batch, leader_epoch=0, now_ms=0)
    per_segment = 1000 // len(batch)
    assert by_size.segment_base_offsets[:2] == (0, 3 * per_segment)

    by_time = Log.open(tmp_path / "m-0", LogConfig(segment_ms=100), now_ms=0)
    by_time.append_as_leader(batch, leader_epoch=0, now_ms=1000)
    by_time.append_as_leader(batch, leader_epoch=0, now_ms=1100)
    assert list(by_time.segment_base_offsets) == [0]
    by_time.append_as_leader(batch, leader_epoch=0, now_ms=1101)
    assert list(by_time.segment_base_offsets) == [0, 6]

    full_index = Log.open(
        tmp_path / "i-0", LogConfig(index_interval_bytes=1, segment_index_bytes=16), now_ms=0
    )
    for _ in range(4):
        full_index.append_as_leader(batch, leader_epoch=0, now_ms=0)
    # Two entries fit (16 bytes); an entry is added for every batch after the first.
    assert full_index.segment_base_offsets == (0, 9)


# ---------------------------------------------------------------------- retention


def fill(log: Log, batches: int, *, ts_step: int = 1000) -> None:
    for i in range(batches):
        log.append_as_leader(
            build_batch(2, seed=i, base_ts=BASE_TS + i * ts_step), leader_epoch=i // 4, now_ms=0
        )


def test_retention_by_time_removes_whole_old_segments(tmp_path: Path) -> None:
    log = new_log(tmp_path, segment_bytes=700, retention_ms=10_000, file_delete_delay_ms=0)
    fill(log, 12)
    bases = log.segment_base_offsets
    assert len(bases) >= 4
    now = BASE_TS + 12_500  # batches older than BASE_TS + 2_500 are expired
    deleted = log.apply_retention(now)
    assert deleted >= 1
    assert log.log_start_offset == log.segment_base_offsets[0] == bases[deleted]
    for seg_base in log.segment_base_offsets[:-1]:
        assert seg_base >= 0
    assert epochs(log)[0] == (log.log_start_offset // 8, log.log_start_offset)
    assert not any(p.name.endswith(".deleted") for p in (tmp_path / "t-0").iterdir())
    with pytest.raises(OffsetOutOfRangeError):
        log.read(0, 100)


def test_retention_only_below_high_watermark_and_rolls_when_everything_expires(
    tmp_path: Path,
) -> None:
    log = new_log(tmp_path, segment_bytes=700, retention_ms=0, file_delete_delay_ms=0)
    fill(log, 6)
    bases = log.segment_base_offsets
    now = BASE_TS + 10**9
    assert log.apply_retention(now, high_watermark=bases[1]) == 1
    assert log.log_start_offset == bases[1]
    assert log.apply_retention(now) == len(bases) - 1
    assert log.log_start_offset == log.log_end_offset == 12
    assert log.segment_base_offsets == (12,)
    assert log.apply_retention(now) == 0  # the empty active segment stays
    assert log.append_as_leader(build_batch(1), leader_epoch=9, now_ms=0).first_offset == 12


def test_retention_by_size(tmp_path: Path) -> None:
    log = new_log(tmp_path, segment_bytes=700, retention_bytes=1500, retention_ms=-1)
    fill(log, 12)
    before = log.size_bytes
    deleted = log.apply_retention(BASE_TS + 10**12)
    assert deleted >= 1
    assert log.size_bytes < before
    # Kafka's rule: a segment goes only if the log stays at or above retention.bytes
    # without it, so what is left exceeds the limit by less than the oldest segment.
    first = log.read(log.log_start_offset, 1 << 20)
    assert first is not None
    oldest_segment_size = (tmp_path / "t-0" / f"{log.log_start_offset:020d}.log").stat().st_size
    assert log.size_bytes - oldest_segment_size < 1500 <= log.size_bytes
    assert log.apply_retention(BASE_TS + 10**12) == 0


def test_deleted_segment_stays_readable_until_the_delay_passes(tmp_path: Path) -> None:
    log = new_log(tmp_path, segment_bytes=700, retention_ms=0, file_delete_delay_ms=60_000)
    fill(log, 6)
    fetched = log.read(0, 1 << 20)
    assert fetched is not None
    expected = fetched.read_bytes()
    assert log.apply_retention(BASE_TS + 10**9, high_watermark=log.segment_base_offsets[1]) == 1
    deleted = [p.name for p in (tmp_path / "t-0").iterdir() if p.name.endswith(".deleted")]
    assert "00000000000000000000.log.deleted" in deleted
    assert fetched.read_bytes() == expected  # the fd handed out is still good
    log.maybe_flush(BASE_TS + 10**9 + 60_000)
    assert not any(p.name.endswith(".deleted") for p in (tmp_path / "t-0").iterdir())


# ---------------------------------------------------------------------- flush policy


def test_no_fsync_by_default_recovery_point_moves_on_flush(tmp_path: Path) -> None:
    log = new_log(tmp_path)
    fill(log, 3)
    assert log.recovery_point == 0
    assert log.unflushed_messages == 6
    assert not log.maybe_flush(10**12)
    log.flush()
    assert log.recovery_point == 6
    assert log.unflushed_messages == 0


def test_flush_interval_messages_and_ms(tmp_path: Path) -> None:
    by_count = Log.open(tmp_path / "c-0", LogConfig(flush_interval_messages=4), now_ms=0)
    fill(by_count, 1)
    assert by_count.recovery_point == 0
    fill(by_count, 1)
    assert by_count.recovery_point == 4
    by_time = Log.open(tmp_path / "m-0", LogConfig(flush_interval_ms=1000), now_ms=0)
    by_time.append_as_leader(build_batch(2), leader_epoch=0, now_ms=10)
    assert not by_time.maybe_flush(999)
    assert by_time.maybe_flush(1000)
    assert by_time.recovery_point == 2


def test_maybe_flush_makes_rolled_segments_durable(tmp_path: Path) -> None:
    log = new_log(tmp_path, segment_bytes=700)
    fill(log, 6)
    active_base = log.segment_base_offsets[-1]
    assert log.maybe_flush(0)
    assert log.recovery_point == active_base
    assert not log.maybe_flush(0)


def test_a_roll_snapshots_at_once_and_the_next_flush_fsyncs_the_snapshot(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    synced: list[Path] = []
    monkeypatch.setattr("tidelog.storage.log.fsync_files", synced.extend)
    log = new_log(tmp_path, segment_bytes=700)
    fill(log, 6)
    rolled_at = log.segment_base_offsets[1:]
    snapshots = [log.producer_state.snapshot_path(offset) for offset in rolled_at]
    assert rolled_at
    assert all(path.exists() for path in snapshots)
    assert synced == []  # not on the append path
    assert log.maybe_flush(0)
    assert synced == snapshots
    log.flush()
    assert synced == snapshots  # each once


# ---------------------------------------------------------------------- timestamps


@pytest.mark.parametrize(
    "codec",
    [Compression.NONE, Compression.GZIP, Compression.SNAPPY, Compression.LZ4, Compression.ZSTD],
)
def test_offset_for_timestamp_is_record_level(tmp_path: Path, codec: Compression) -> None:
    log = new_log(tmp_path, segment_bytes=4000, index_interval_bytes=100)
    for i in range(10):
        raw = build_batch(
            10, compression=int(codec), value_size=200, base_ts=BASE_TS + 1000 * i, ts_step=10
        )
        assert parse_header(raw).compression == codec
        log.append_as_leader(raw, leader_epoch=0, now_ms=0)
    # Record j of batch i has offset 10 i + j and timestamp BASE_TS + 1000 i + 10 j.
    assert log.offset_for_timestamp(0) == (0, BASE_TS)
    assert log.offset_for_timestamp(BASE_TS + 3045) == (35, BASE_TS + 3050)
    assert log.offset_for_timestamp(BASE_TS + 7090) == (79, BASE_TS + 7090)
    assert log.offset_for_timestamp(BASE_TS + 7091) == (80, BASE_TS + 8000)
    assert log.offset_for_timestamp(BASE_TS + 9091) is None
    assert log.latest_timestamp() == (99, BASE_TS + 9090)
    # A batch whose newest record is not its last one: the record's own offset counts.
    unordered = build_batch(
        3, compression=int(codec), value_size=200, base_ts=BASE_TS + 10**6, ts_step=-5
    )
    log.append_as_leader(unordered, leader_epoch=0, now_ms=0)
    assert log.latest_timestamp() == (100, BASE_TS + 10**6)
    log.delete_records_before(35)
    assert log.offset_for_timestamp(0) == (35, BASE_TS + 3050)


def test_log_delete_removes_the_directory(tmp_path: Path) -> None:
    log = new_log(tmp_path)
    fill(log, 2)
    log.delete()
    assert not (tmp_path / "t-0").exists()
    settle_removals()
    assert list(tmp_path.iterdir()) == []


def test_flush_in_a_worker_thread_while_appending(tmp_path: Path) -> None:
    import threading

    log = new_log(tmp_path, segment_bytes=3000, index_interval_bytes=200)
    stop = threading.Event()
    flushed_once = threading.Event()
    flushes = 0

    def flusher() -> None:
        # At least one flush always runs: on a loaded machine the appends below may all finish
        # before this thread is first scheduled.
        nonlocal flushes
        while True:
            log.flush()
            flushes += 1
            flushed_once.set()
            if stop.is_set():
                return

    thread = threading.Thread(target=flusher)
    thread.start()
    try:
        for i in range(150):
            log.append_as_leader(build_batch(2, seed=i % 7), leader_epoch=i // 50, now_ms=i)
            assert log.recovery_point <= log.log_end_offset
        assert flushed_once.wait(timeout=60)
    finally:
        stop.set()
        thread.join()
    assert flushes > 0
    expected = read_all(log)
    log.close_without_flush()
    reopened = Log.open(
        tmp_path / "t-0",
        LogConfig(segment_bytes=3000, index_interval_bytes=200),
        now_ms=0,
        recovery_point=0,
    )
    assert read_all(reopened) == expected
    assert reopened.log_end_offset == 300
    reopened.close()


def test_truncation_forgets_timestamps_of_removed_batches(tmp_path: Path) -> None:
    # Found by the stateful test: the segment kept the max timestamp of a truncated batch.
    log = new_log(tmp_path)
    log.append_as_leader(build_batch(1, base_ts=100), leader_epoch=0, now_ms=0)
    log.append_as_leader(build_batch(1, base_ts=9000), leader_epoch=0, now_ms=0)
    log.truncate_to(1)
    log.append_as_leader(build_batch(1, base_ts=50), leader_epoch=0, now_ms=0)
    assert log.latest_timestamp() == (0, 100)
    assert log.offset_for_timestamp(101) is None
