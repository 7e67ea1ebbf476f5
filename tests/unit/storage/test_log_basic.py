"""Log: leader appends, reads of whole batches, reopen (the first slice of the API)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tidelog.errors import ErrorCode
from tidelog.protocol.records import CorruptRecordBatchError, iter_batches
from tidelog.storage import log as log_module
from tidelog.storage.errors import OffsetOutOfRangeError, RecordTooLargeError
from tidelog.storage.log import Log, LogConfig

from .batches import build_batch, read_all


def open_log(tmp_path: Path, **config: int) -> Log:
    return Log.open(tmp_path / "topic-0", LogConfig(**config), now_ms=0)


def test_leader_append_assigns_offsets_and_stamps_epoch(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    info = log.append_as_leader(build_batch(3) + build_batch(2), leader_epoch=4, now_ms=1)
    assert (info.first_offset, info.last_offset, info.num_batches, info.num_records) == (
        0,
        4,
        2,
        5,
    )
    info2 = log.append_as_leader(build_batch(1), leader_epoch=4, now_ms=2)
    assert (info2.first_offset, info2.last_offset) == (5, 5)
    assert log.log_end_offset == 6
    data = log.read_records(0, 1 << 20)
    headers = [h for _, h in iter_batches(data)]  # CRC still valid after stamping
    assert [(h.base_offset, h.partition_leader_epoch) for h in headers] == [
        (0, 4),
        (3, 4),
        (5, 4),
    ]
    assert [(e.epoch, e.start_offset) for e in log.leader_epoch_cache.entries] == [(4, 0)]
    log.close()


def test_read_starts_at_containing_batch_and_respects_limits(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    sizes = []
    for _ in range(4):
        batch = build_batch(5)
        sizes.append(len(batch))
        log.append_as_leader(batch, leader_epoch=0, now_ms=0)
    fetched = log.read(7, 1 << 20)
    assert fetched is not None
    assert fetched.first_offset == 5
    assert fetched.length == sum(sizes[1:])
    # max_bytes smaller than one batch: still one whole batch (min_one_batch)
    one = log.read(7, 10)
    assert one is not None
    assert one.length == sizes[1]
    assert log.read(7, 10, min_one_batch=False) is None
    # max_offset (exclusive): only batches whose last offset is below it
    bounded = log.read(0, 1 << 20, max_offset=10)
    assert bounded is not None
    assert bounded.length == sum(sizes[:2])
    assert log.read(10, 1 << 20, max_offset=12) is None
    assert log.read(20, 1 << 20) is None
    with pytest.raises(OffsetOutOfRangeError) as info:
        log.read(21, 100)
    assert info.value.code is ErrorCode.OFFSET_OUT_OF_RANGE
    log.close()


def test_bad_batch_writes_nothing(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    bad = bytearray(build_batch(2))
    bad[-1] ^= 0xFF
    with pytest.raises(CorruptRecordBatchError) as info:
        log.append_as_leader(build_batch(1) + bytes(bad), leader_epoch=0, now_ms=0)
    assert info.value.code is ErrorCode.CORRUPT_MESSAGE
    assert "CRC" in str(info.value)
    assert log.log_end_offset == 0
    assert log.size_bytes == 0
    log.close()


def test_batch_above_max_message_bytes_is_refused(tmp_path: Path) -> None:
    log = open_log(tmp_path, max_message_bytes=500)
    with pytest.raises(RecordTooLargeError) as info:
        log.append_as_leader(build_batch(10), leader_epoch=0, now_ms=0)
    assert info.value.code is ErrorCode.MESSAGE_TOO_LARGE
    assert log.log_end_offset == 0
    log.close()


def test_reopen_after_close_keeps_everything(tmp_path: Path) -> None:
    config = LogConfig(segment_bytes=1500, index_interval_bytes=100)
    log = Log.open(tmp_path / "t-3", config, now_ms=0)
    for i in range(20):
        log.append_as_leader(build_batch(2, seed=i), leader_epoch=i // 5, now_ms=i)
    before = read_all(log)
    bases = log.segment_base_offsets
    assert len(bases) > 1
    log.close()
    reopened = Log.open(tmp_path / "t-3", config, now_ms=100, recovery_point=log.recovery_point)
    assert reopened.log_end_offset == 40
    assert reopened.segment_base_offsets == bases
    assert read_all(reopened) == before
    assert [(e.epoch, e.start_offset) for e in reopened.leader_epoch_cache.entries] == [
        (0, 0),
        (1, 10),
        (2, 20),
        (3, 30),
    ]
    reopened.close()


def test_close_fsyncs_the_directory_only_for_a_new_snapshot(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A clean close leaves a producer snapshot at the log end of a log with something to
    replay, fsyncing the directory once for it; an empty log without producers gets
    neither, and a log whose snapshot at the log end exists already gets no second one
    (5,000 such fsyncs were most of the stop of a broker with freshly created partitions)."""
    synced: list[Path] = []
    real = log_module.fsync_directory

    def counting(path: Path) -> None:
        synced.append(Path(path))
        real(path)

    monkeypatch.setattr(log_module, "fsync_directory", counting)
    empty = Log.open(tmp_path / "empty-0", LogConfig(), now_ms=0)
    empty.close()
    assert synced == []
    assert not list((tmp_path / "empty-0").glob("*.snapshot"))
    reopened_empty = Log.open(tmp_path / "empty-0", LogConfig(), now_ms=1)
    assert reopened_empty.log_end_offset == 0
    reopened_empty.close()
    assert synced == []

    full = Log.open(tmp_path / "full-0", LogConfig(), now_ms=0)
    full.append_as_leader(build_batch(3), leader_epoch=0, now_ms=1)
    full.close()
    assert synced == [tmp_path / "full-0"]
    assert [p.name for p in (tmp_path / "full-0").glob("*.snapshot")] == [
        "00000000000000000003.snapshot"
    ]
    again = Log.open(tmp_path / "full-0", LogConfig(), now_ms=2, recovery_point=3)
    assert again.log_end_offset == 3
    again.close()  # nothing appended: the snapshot at 3 is kept, nothing to fsync
    assert synced == [tmp_path / "full-0"]
