"""Idempotent-producer state: validation table, wrap-around, Log integration (duplicates,
follower appends, truncation, retention, reopen, crash) and snapshot files."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from tidelog.client.records import Record, build_batch
from tidelog.errors import ErrorCode
from tidelog.protocol.records import stamp_batch
from tidelog.storage.log import Log, LogConfig
from tidelog.storage.producer_entry import (
    INT32_MAX,
    BatchMetadata,
    ProducerBatch,
    ProducerStateEntry,
    decrement_sequence,
    in_sequence,
    increment_sequence,
)
from tidelog.storage.producer_snapshot import (
    SNAPSHOT_SUFFIX,
    CorruptSnapshotError,
    decode_snapshot,
    encode_snapshot,
    snapshot_file_name,
)
from tidelog.storage.producer_state import ProducerStateManager

from .batches import read_all

TS = 1_700_000_000_000


def pbatch(pid: int, epoch: int, seq: int, n: int = 1, *, ts: int = TS, tag: str = "") -> bytes:
    """A v2 batch of ``n`` records from producer ``pid`` (built by the client's codec)."""
    records = [Record(value=f"{tag}{pid}-{epoch}-{seq}-{i}".encode()) for i in range(n)]
    return build_batch(
        records,
        base_timestamp_ms=ts,
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=seq,
    )


def plain(n: int = 1) -> bytes:
    return build_batch([Record(value=b"plain") for _ in range(n)], base_timestamp_ms=TS)


def stamped(raw: bytes, base: int, epoch: int) -> bytes:
    buf = bytearray(raw)
    stamp_batch(buf, 0, base, epoch)
    return bytes(buf)


def snapshots(log: Log) -> list[int]:
    return sorted(int(p.name[: -len(SNAPSHOT_SUFFIX)]) for p in log.directory.glob("*.snapshot"))


def open_log(tmp_path: Path, config: LogConfig | None = None, **kwargs: int) -> Log:
    return Log.open(tmp_path / "t-0", config or LogConfig(), now_ms=TS, **kwargs)


def state(log: Log) -> dict[int, ProducerStateEntry]:
    return dict(log.producer_state.producers)


# ---------------------------------------------------------------------------- sequences


@pytest.mark.parametrize(
    ("seq", "inc", "expected"),
    [
        (0, 0, 0),
        (5, 3, 8),
        (INT32_MAX - 1, 1, INT32_MAX),
        (INT32_MAX, 1, 0),
        (INT32_MAX - 1, 3, 1),
        (INT32_MAX, INT32_MAX, INT32_MAX - 1),
    ],
)
def test_increment_sequence_wraps_at_int32_max(seq: int, inc: int, expected: int) -> None:
    assert increment_sequence(seq, inc) == expected
    assert decrement_sequence(expected, inc) == seq


def test_in_sequence() -> None:
    assert in_sequence(4, 5)
    assert in_sequence(INT32_MAX, 0)
    assert not in_sequence(4, 4)
    assert not in_sequence(4, 6)
    assert not in_sequence(INT32_MAX - 1, 0)


# ---------------------------------------------------------------------------- validation


@dataclass(frozen=True)
class Case:
    name: str
    pid: int
    epoch: int
    seq: int
    n: int
    error: ErrorCode = ErrorCode.NONE
    #: (first, last) offsets of the original batch for a duplicate
    duplicate_of: tuple[int, int] | None = None


#: History (leader appends): producer 1, epoch 3, seven batches of two records: sequences
#: 0-1 .. 12-13 at offsets 0-1 .. 12-13; the last five (sequences 4-5 .. 12-13) are retained.
HISTORY_EPOCH = 3
CASES = [
    *[
        Case(f"duplicate of retained batch {k}", 1, 3, 2 * k, 2, duplicate_of=(2 * k, 2 * k + 1))
        for k in range(2, 7)
    ],
    Case("duplicate of the 6th-older batch", 1, 3, 2, 2, ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER),
    Case("duplicate of the first batch", 1, 3, 0, 2, ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER),
    Case("same start, other length", 1, 3, 12, 1, ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER),
    Case("overlapping the last batch", 1, 3, 13, 2, ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER),
    Case("next in sequence", 1, 3, 14, 3),
    Case("gap of one", 1, 3, 15, 1, ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER),
    Case("large gap", 1, 3, 1000, 1, ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER),
    Case("older epoch (fenced)", 1, 2, 14, 1, ErrorCode.INVALID_PRODUCER_EPOCH),
    Case("older epoch, retained range", 1, 2, 12, 2, ErrorCode.INVALID_PRODUCER_EPOCH),
    Case("older epoch, sequence 0", 1, 0, 0, 1, ErrorCode.INVALID_PRODUCER_EPOCH),
    Case("epoch bump at sequence 0", 1, 4, 0, 2),
    Case("epoch bump continuing the sequence", 1, 4, 14, 1, ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER),
    Case("epoch bump at another sequence", 1, 4, 5, 1, ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER),
    Case("unknown producer at sequence 0", 2, 0, 0, 1),
    Case("unknown producer at a later sequence (Kafka 2.5+)", 2, 0, 7, 1),
    Case("idempotent batch without a sequence", 1, 3, -1, 1, ErrorCode.INVALID_RECORD),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_leader_validation(tmp_path: Path, case: Case) -> None:
    log = open_log(tmp_path)
    for k in range(7):
        info = log.append_as_leader(pbatch(1, HISTORY_EPOCH, 2 * k, 2), leader_epoch=0, now_ms=TS)
        assert (info.first_offset, info.error, info.duplicate) == (2 * k, ErrorCode.NONE, False)
    before = read_all(log)
    state_before = state(log)
    raw = pbatch(case.pid, case.epoch, case.seq, case.n, tag="retry")
    info = log.append_as_leader(raw, leader_epoch=0, now_ms=TS + 1)
    assert info.error == case.error
    if case.duplicate_of is not None:
        assert info.duplicate
        assert (info.first_offset, info.last_offset) == case.duplicate_of
        assert (info.num_batches, info.num_records, info.size_bytes) == (0, 0, 0)
        assert info.max_timestamp == TS
    else:
        assert not info.duplicate
    if case.error is not ErrorCode.NONE or case.duplicate_of is not None:
        # Nothing written, nothing remembered.
        assert log.log_end_offset == 14
        assert read_all(log) == before
        assert state(log) == state_before
        if case.error is not ErrorCode.NONE:
            assert (info.first_offset, info.last_offset) == (-1, -1)
            assert info.error_message
    else:
        assert (info.first_offset, info.last_offset) == (14, 14 + case.n - 1)
        assert read_all(log) == before + stamped(raw, 14, 0)
        entry = log.producer_state.last_entry(case.pid)
        assert entry is not None
        assert entry.producer_epoch == case.epoch
        assert entry.batches[-1] == BatchMetadata(
            case.seq, case.seq + case.n - 1, 14, 14 + case.n - 1, TS
        )
    log.close()


def test_retained_batches_are_the_last_five_and_a_new_epoch_clears_them(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    for k in range(7):
        log.append_as_leader(pbatch(1, 0, k, ts=TS + k), leader_epoch=0, now_ms=TS)
    entry = log.producer_state.last_entry(1)
    assert entry == ProducerStateEntry(
        1, 0, tuple(BatchMetadata(k, k, k, k, TS + k) for k in range(2, 7))
    )
    log.append_as_leader(pbatch(1, 1, 0, 2), leader_epoch=0, now_ms=TS)
    assert log.producer_state.last_entry(1) == ProducerStateEntry(
        1, 1, (BatchMetadata(0, 1, 7, 8, TS),)
    )
    log.close()


def test_sequence_wrap_around(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    start = INT32_MAX - 2
    # Unknown producer, non-zero sequence: accepted.
    assert log.append_as_leader(pbatch(5, 0, start, 2), leader_epoch=0, now_ms=TS).error == 0
    wrapping = pbatch(5, 0, INT32_MAX, 3)  # sequences MAX, 0, 1
    info = log.append_as_leader(wrapping, leader_epoch=0, now_ms=TS)
    assert (info.error, info.first_offset) == (ErrorCode.NONE, 2)
    entry = log.producer_state.last_entry(5)
    assert entry is not None
    assert entry.batches[-1] == BatchMetadata(INT32_MAX, 1, 2, 4, TS)
    dup = log.append_as_leader(wrapping, leader_epoch=0, now_ms=TS)
    assert dup.duplicate
    assert (dup.first_offset, dup.last_offset) == (2, 4)
    gap = log.append_as_leader(pbatch(5, 0, 0), leader_epoch=0, now_ms=TS)
    assert gap.error == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert log.append_as_leader(pbatch(5, 0, 2), leader_epoch=0, now_ms=TS).first_offset == 5
    # A batch ending exactly at MAX is followed by sequence 0.
    log.append_as_leader(pbatch(6, 0, INT32_MAX - 1, 2), leader_epoch=0, now_ms=TS)
    assert log.append_as_leader(pbatch(6, 0, 0), leader_epoch=0, now_ms=TS).error == 0
    log.close()


def test_multi_batch_append_is_all_or_nothing(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    ok = pbatch(1, 0, 0) + pbatch(1, 0, 1, 2) + plain() + pbatch(2, 0, 0)
    info = log.append_as_leader(ok, leader_epoch=0, now_ms=TS)
    assert (info.first_offset, info.last_offset, info.num_batches) == (0, 4, 4)
    bad = pbatch(1, 0, 3) + pbatch(1, 0, 5)  # the second batch leaves a gap
    info = log.append_as_leader(bad, leader_epoch=0, now_ms=TS)
    assert info.error == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert log.log_end_offset == 5
    entry = log.producer_state.last_entry(1)
    assert entry is not None
    assert entry.last_seq == 2
    # A duplicate anywhere answers the whole append with the original offsets (Kafka).
    info = log.append_as_leader(plain() + pbatch(1, 0, 1, 2), leader_epoch=0, now_ms=TS)
    assert info.duplicate
    assert (info.first_offset, info.last_offset) == (1, 2)
    assert log.log_end_offset == 5
    log.close()


def test_plain_batches_leave_the_state_alone(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    log.append_as_leader(plain(3) + plain(), leader_epoch=0, now_ms=TS)
    log.append_as_follower(stamped(plain(2), 4, 0), now_ms=TS)
    assert state(log) == {}
    log.close()
    assert snapshots(log) == [6]


# ---------------------------------------------------------------------------- follower


def test_follower_appends_update_the_state_without_checks(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    raw = (
        stamped(pbatch(1, 5, 0, 2), 0, 0)
        + stamped(pbatch(1, 5, 7), 2, 0)  # a gap: the leader accepted it, so do we
        + stamped(pbatch(1, 4, 3), 3, 1)  # an older epoch (Kafka only warns)
        + stamped(pbatch(9, 0, 100), 4, 1)
    )
    log.append_as_follower(raw, now_ms=TS)
    assert state(log) == {
        1: ProducerStateEntry(1, 4, (BatchMetadata(3, 3, 3, 3, TS),)),
        9: ProducerStateEntry(9, 0, (BatchMetadata(100, 100, 4, 4, TS),)),
    }
    # The follower's state lets it detect duplicates once it becomes leader.
    dup = log.append_as_leader(pbatch(9, 0, 100), leader_epoch=2, now_ms=TS)
    assert dup.duplicate
    assert dup.first_offset == 4
    log.close()


# ---------------------------------------------------------------------------- truncation


def test_truncate_to_restores_the_earlier_state(tmp_path: Path) -> None:
    log = open_log(tmp_path, LogConfig(segment_bytes=400))
    for k in range(8):
        log.append_as_leader(pbatch(1, 0, 2 * k, 2) + plain(), leader_epoch=0, now_ms=TS)
    assert len(log.segment_base_offsets) > 2
    log.truncate_to(9)  # keeps batches of producer 1 at offsets 0-1, 3-4, 6-7
    assert log.log_end_offset == 9
    assert state(log) == {
        1: ProducerStateEntry(
            1, 0, tuple(BatchMetadata(2 * k, 2 * k + 1, 3 * k, 3 * k + 1, TS) for k in range(3))
        )
    }
    assert all(s <= 9 for s in snapshots(log))
    # The producer's next batch after the truncation is sequence 6 again.
    assert log.append_as_leader(pbatch(1, 0, 6, 2), leader_epoch=1, now_ms=TS).first_offset == 9
    log.truncate_fully_and_start_at(100)
    assert state(log) == {}
    assert snapshots(log) == []
    log.close()


def test_truncation_of_plain_batches_does_not_replay(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = open_log(tmp_path)
    log.append_as_leader(pbatch(1, 0, 0), leader_epoch=0, now_ms=TS)
    log.append_as_leader(plain(3), leader_epoch=0, now_ms=TS)
    replays: list[int] = []
    monkeypatch.setattr(
        log, "_rebuild_producer_state", lambda *, max_snapshot_offset: replays.append(1)
    )
    log.truncate_to(2)
    assert replays == []
    assert log.producer_state.last_entry(1) is not None
    log.close()


# ---------------------------------------------------------------------------- retention


def test_retention_trims_the_state_and_answers_unknown_producer_id(tmp_path: Path) -> None:
    log = open_log(tmp_path, LogConfig(segment_bytes=300, file_delete_delay_ms=0))
    log.append_as_leader(pbatch(7, 0, 0, 2), leader_epoch=0, now_ms=TS)  # offsets 0-1
    log.append_as_leader(pbatch(8, 0, 0), leader_epoch=0, now_ms=TS)  # offset 2
    for _ in range(6):
        log.append_as_leader(plain(2), leader_epoch=0, now_ms=TS)
    log.append_as_leader(pbatch(8, 0, 1), leader_epoch=0, now_ms=TS)  # offset 15
    assert len(log.segment_base_offsets) > 2
    log.delete_records_before(10)
    assert snapshots(log)
    assert min(snapshots(log)) >= log.segment_base_offsets[0]
    assert state(log) == {8: ProducerStateEntry(8, 0, (BatchMetadata(1, 1, 15, 15, TS),))}
    # Producer 7's state was removed by retention: its next sequence cannot be checked.
    info = log.append_as_leader(pbatch(7, 0, 2), leader_epoch=0, now_ms=TS)
    assert info.error == ErrorCode.UNKNOWN_PRODUCER_ID
    assert "retention" in (info.error_message or "")
    # A producer never seen here is accepted at any sequence (Kafka 2.5+).
    assert log.append_as_leader(pbatch(70, 0, 9), leader_epoch=0, now_ms=TS).error == 0
    # After the client bumps its epoch and restarts at 0, producer 7 is known again.
    assert log.append_as_leader(pbatch(7, 1, 0), leader_epoch=0, now_ms=TS).error == 0
    assert not log.producer_state.was_evicted(7)
    log.close()


# ---------------------------------------------------------------------------- snapshots


def test_snapshots_on_roll_and_close_and_reopen(tmp_path: Path) -> None:
    log = open_log(tmp_path, LogConfig(segment_bytes=300))
    for k in range(10):
        log.append_as_leader(pbatch(k % 3, 0, k // 3), leader_epoch=0, now_ms=TS)
    bases = log.segment_base_offsets
    assert snapshots(log) == list(bases[1:])
    expected = state(log)
    log.close()
    assert snapshots(log) == [*bases[1:], 10]
    log = open_log(tmp_path, LogConfig(segment_bytes=300), recovery_point=10)
    assert state(log) == expected
    assert log.append_as_leader(pbatch(0, 0, 3), leader_epoch=0, now_ms=TS).duplicate
    log.close()


def test_close_keeps_a_snapshot_already_at_the_log_end(tmp_path: Path) -> None:
    """A log closed again with nothing appended does not rewrite its snapshot (a broker with
    1,000 partitions spent seconds of its shutdown writing them)."""
    log = open_log(tmp_path)
    log.append_as_leader(pbatch(1, 0, 0), leader_epoch=0, now_ms=TS)
    log.close()
    path = log.directory / snapshot_file_name(1)
    written = path.stat()
    log = open_log(tmp_path, recovery_point=1)
    log.close()
    again = path.stat()
    assert (again.st_ino, again.st_mtime_ns) == (written.st_ino, written.st_mtime_ns)
    log = open_log(tmp_path, recovery_point=1)
    log.append_as_leader(pbatch(1, 0, 1), leader_epoch=0, now_ms=TS)
    log.close()
    assert snapshots(log)[-1] == 2  # a new end: a new snapshot


def test_crash_rebuilds_the_same_state(tmp_path: Path) -> None:
    config = LogConfig(segment_bytes=300)
    log = open_log(tmp_path, config)
    for k in range(12):
        log.append_as_leader(pbatch(k % 4, k // 8, k // 4 % 2), leader_epoch=0, now_ms=TS)
        log.maybe_flush(TS)
    expected = state(log)
    recovery_point = log.recovery_point
    assert recovery_point < log.log_end_offset
    log.close_without_flush()
    log = open_log(tmp_path, config, recovery_point=recovery_point)
    assert state(log) == expected
    log.close()


def corrupt_latest_snapshot(log_dir: Path, how: str) -> Path:
    path = sorted(log_dir.glob("*.snapshot"))[-1]
    data = bytearray(path.read_bytes())
    if how == "flip":
        data[len(data) // 2] ^= 0x40
    elif how == "truncate":
        del data[len(data) - 7 :]
    elif how == "version":
        data[4:6] = b"\x00\x09"
    elif how == "empty":
        data = bytearray()
    path.write_bytes(bytes(data))
    return path


@pytest.mark.parametrize("how", ["flip", "truncate", "version", "empty"])
def test_corrupt_snapshot_is_ignored_and_state_rebuilt(tmp_path: Path, how: str) -> None:
    config = LogConfig(segment_bytes=300)
    log = open_log(tmp_path, config)
    for k in range(9):
        log.append_as_leader(pbatch(k % 2, 0, k // 2), leader_epoch=0, now_ms=TS)
    expected = state(log)
    log.close()
    path = corrupt_latest_snapshot(log.directory, how)
    log = open_log(tmp_path, config, recovery_point=9)
    assert state(log) == expected
    assert not path.exists()  # the corrupt file was deleted
    log.close()


def test_snapshot_round_trip_and_defects() -> None:
    entries = [
        ProducerStateEntry(
            3, 2, (BatchMetadata(0, 4, 10, 14, TS), BatchMetadata(5, 5, 20, 20, -1))
        ),
        ProducerStateEntry(2**62, 32767, (BatchMetadata(INT32_MAX, 1, 7, 9, 0),)),
    ]
    data = encode_snapshot(21, entries)
    assert decode_snapshot(data) == (21, {e.producer_id: e for e in entries})
    with pytest.raises(CorruptSnapshotError, match="CRC"):
        decode_snapshot(data[:-1] + bytes([data[-1] ^ 1]))
    with pytest.raises(CorruptSnapshotError, match="magic"):
        decode_snapshot(b"XXXX" + data[4:])
    with pytest.raises(CorruptSnapshotError, match="short"):
        decode_snapshot(data[:5])


# ------------------------------------------------------------ other codecs, LogManager


def kafka_python_batch(pid: int, epoch: int, seq: int, n: int) -> bytes:
    """An idempotent batch from kafka-python's independent encoder."""
    from kafka.record.default_records import DefaultRecordBatchBuilder

    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=0,
        is_transactional=False,
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=seq,
        batch_size=1 << 20,
    )
    for i in range(n):
        builder.append(i, timestamp=TS + i, key=None, value=b"kp%d" % i, headers=[])
    return bytes(builder.build())


def test_batches_from_kafka_python_are_deduplicated(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    first = kafka_python_batch(42, 1, 0, 3)
    assert log.append_as_leader(first, leader_epoch=0, now_ms=TS).last_offset == 2
    retry = log.append_as_leader(first, leader_epoch=0, now_ms=TS)
    assert retry.duplicate
    assert (retry.first_offset, retry.last_offset) == (0, 2)
    assert retry.max_timestamp == TS + 2
    gap = log.append_as_leader(kafka_python_batch(42, 1, 4, 1), leader_epoch=0, now_ms=TS)
    assert gap.error == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    log.close()


def test_log_manager_restart_keeps_producer_state(tmp_path: Path) -> None:
    from tidelog.model import TopicPartition
    from tidelog.storage.log_manager import LogManager

    tp = TopicPartition("t", 0)
    manager = LogManager([tmp_path], LogConfig(), now_ms=TS)
    log = manager.get_or_create_log(tp, LogConfig())
    log.append_as_leader(pbatch(1, 0, 0, 2), leader_epoch=0, now_ms=TS)
    expected = state(log)
    manager.close()
    manager = LogManager([tmp_path], LogConfig(), now_ms=TS)
    log2 = manager.get_log(tp)
    assert log2 is not None
    assert state(log2) == expected
    retry = log2.append_as_leader(pbatch(1, 0, 0, 2), leader_epoch=0, now_ms=TS)
    assert retry.duplicate
    assert retry.first_offset == 0
    manager.close()


def test_the_state_at_close_and_after_truncations_without_a_log(tmp_path: Path) -> None:
    manager = ProducerStateManager(tmp_path)
    assert not manager.snapshot_at_close(0, nothing_to_replay=True)  # nothing at all
    assert manager.snapshot_at_close(5, nothing_to_replay=False)  # data, no producer
    assert not manager.snapshot_at_close(5, nothing_to_replay=False)  # one there already
    manager.update([ProducerBatch(1, 0, 0, 5, 6, TS)])
    assert manager.snapshot_at_close(7, nothing_to_replay=True)  # a producer to remember
    assert manager.snapshot_offsets() == [5, 7]
    # A truncation to 7 cuts nothing; to 6 it cuts the producer's batch and the snapshot.
    assert not manager.truncate_tail(7)
    assert manager.snapshot_offsets() == [5, 7]
    assert manager.truncate_tail(6)
    assert manager.snapshot_offsets() == [5]
    manager.reset()
    assert (manager.producers, manager.snapshot_offsets()) == ({}, [])
