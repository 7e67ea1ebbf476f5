"""A leader append's timestamps (``tidelog.storage.log_timestamps``): LogAppendTime stamps
every batch (attribute bit, maxTimestamp, a CRC-32C that still checks), KIP-937's CreateTime
window refuses what lies outside it with INVALID_TIMESTAMP; and segment.jitter.ms brings a
time-based roll forward (``tidelog.storage.local_log.roll_jitter``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tidelog.errors import ErrorCode
from tidelog.protocol.records import CorruptRecordBatchError, TimestampType, iter_batches
from tidelog.storage import log as log_module
from tidelog.storage.compression import Compression
from tidelog.storage.errors import InvalidTimestampError
from tidelog.storage.local_log import roll_jitter
from tidelog.storage.log import Log, LogConfig
from tidelog.storage.log_timestamps import INVALID_TIMESTAMP_MESSAGE
from tidelog.storage.record_scan import record_offsets_and_timestamps

from .batches import BASE_TS, build_batch

NOW = BASE_TS + 3_600_000  # an hour after the batches' CreateTime
HOUR = 3_600_000


def open_log(tmp_path: Path, **config: object) -> Log:
    return Log.open(tmp_path / "topic-0", LogConfig(**config), now_ms=0)  # type: ignore[arg-type]


def stored(log: Log) -> list[tuple[int, TimestampType, int]]:
    """(base offset, timestamp type, max timestamp) of every stored batch; its CRC checks."""
    data = log.read_records(0, 1 << 30)
    return [(h.base_offset, h.timestamp_type, h.max_timestamp) for _, h in iter_batches(data)]


@pytest.mark.parametrize("compression", [Compression.NONE, Compression.GZIP])
def test_log_append_time_stamps_every_batch(tmp_path: Path, compression: int) -> None:
    log = open_log(tmp_path, message_timestamp_type="LogAppendTime")
    client = build_batch(3, compression=compression) + build_batch(2, compression=compression)
    sent = bytes(client)
    info = log.append_as_leader(client, leader_epoch=0, now_ms=NOW)
    assert info.max_timestamp == NOW
    assert client == sent  # the client's buffer is not written to
    assert stored(log) == [
        (0, TimestampType.LOG_APPEND_TIME, NOW),
        (3, TimestampType.LOG_APPEND_TIME, NOW),
    ]
    # Every record reads as the broker's time, as consumers see it (KIP-32).
    data = log.read_records(0, 1 << 30)
    for position, header in iter_batches(data):
        records = record_offsets_and_timestamps(data[position : position + header.size])
        assert {ts for _, ts in records} == {NOW}
    # The time index follows the stamp: the first offset at or after NOW is 0.
    assert log.offset_for_timestamp(NOW) == (0, NOW)
    log.close()


def test_log_append_time_stamps_a_large_append_checked_beside_the_write(tmp_path: Path) -> None:
    # 256 KiB or more of bytes: the CRC-32Cs are checked before the stamp, not beside it.
    log = open_log(tmp_path, message_timestamp_type="LogAppendTime")
    big = b"".join(build_batch(50, value_size=1000, seed=i) for i in range(8))
    assert len(big) >= 256 * 1024
    log.append_as_leader(big, leader_epoch=0, now_ms=NOW)
    assert {t for _, t, _ in stored(log)} == {TimestampType.LOG_APPEND_TIME}
    assert {ts for _, _, ts in stored(log)} == {NOW}
    log.close()


def test_log_append_time_refuses_a_corrupt_batch_before_stamping(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The append qualifies for the CRC-32C check beside the write (rule 1a), whatever the
    # machine's load: the stamp must not bless a batch whose CRC-32C was never checked.
    monkeypatch.setattr(log_module, "can_check_beside", lambda _records: True)
    log = open_log(tmp_path, message_timestamp_type="LogAppendTime")
    bad = bytearray(build_batch(600, value_size=500))
    assert len(bad) >= 256 * 1024
    bad[-1] ^= 0xFF
    with pytest.raises(CorruptRecordBatchError, match="CRC-32C") as raised:
        log.append_as_leader(bytes(bad), leader_epoch=0, now_ms=NOW)
    assert raised.value.code == ErrorCode.CORRUPT_MESSAGE
    assert log.log_end_offset == 0
    log.close()


def test_create_time_is_kept_without_a_window(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    log.append_as_leader(build_batch(2), leader_epoch=0, now_ms=NOW + 1000 * HOUR)
    assert stored(log) == [(0, TimestampType.CREATE_TIME, BASE_TS + 1)]
    log.close()


@pytest.mark.parametrize(
    ("before", "after", "now", "refused"),
    [
        (HOUR, HOUR, NOW, False),  # an hour old: on the edge, inside
        (HOUR - 1, 2**63 - 1, NOW, True),  # too old
        (2**63 - 1, HOUR, BASE_TS - HOUR - 1, True),  # too far in the future
        (2**63 - 1, HOUR, BASE_TS - HOUR + 1, False),
    ],
)
def test_create_time_window_kip_937(
    tmp_path: Path, before: int, after: int, now: int, refused: bool
) -> None:
    log = open_log(
        tmp_path, message_timestamp_before_max_ms=before, message_timestamp_after_max_ms=after
    )
    batch = build_batch(2, ts_step=1)  # timestamps BASE_TS, BASE_TS + 1
    if refused:
        with pytest.raises(InvalidTimestampError) as raised:
            log.append_as_leader(batch, leader_epoch=0, now_ms=now)
        assert raised.value.code == ErrorCode.INVALID_TIMESTAMP
        assert raised.value.message == INVALID_TIMESTAMP_MESSAGE
        # Java long arithmetic: no upper bound prints now + Long.MAX_VALUE wrapped.
        upper = now + after if after < 2**63 - 1 else now + after - 2**64
        window = f"The timestamp should be within [{now - before}, {upper}]"
        # KIP-467: each record outside the window, by its index in the batch.
        assert raised.value.record_errors == tuple(
            (i, f"Timestamp {ts} of message with offset {i} is out of range. {window}")
            for i, ts in enumerate((BASE_TS, BASE_TS + 1))
            if not now - before <= ts <= now + after
        )
        assert raised.value.record_errors
        assert log.log_end_offset == 0
    else:
        log.append_as_leader(batch, leader_epoch=0, now_ms=now)
        assert log.log_end_offset == 2
    log.close()


def test_create_time_window_checks_every_record_of_a_compressed_batch(tmp_path: Path) -> None:
    log = open_log(tmp_path, message_timestamp_before_max_ms=HOUR)
    # The first record is recent, the third is two hours older than the broker's time.
    batch = build_batch(3, compression=Compression.LZ4, base_ts=NOW, ts_step=-HOUR)
    with pytest.raises(InvalidTimestampError) as raised:
        log.append_as_leader(batch, leader_epoch=0, now_ms=NOW)
    ((index, message),) = raised.value.record_errors
    assert index == 2
    assert message.startswith(f"Timestamp {NOW - 2 * HOUR} of message with offset 2 ")
    log.close()


def test_create_time_window_names_the_records_of_the_first_refused_batch(
    tmp_path: Path,
) -> None:
    """KIP-467 as Kafka's LogValidator: every offending record of the first batch holding
    one, by its index in that batch; the later batches are not reported."""
    log = open_log(tmp_path, message_timestamp_before_max_ms=HOUR)
    good = build_batch(2, base_ts=NOW)
    # Timestamps NOW, NOW - 2h, NOW - 4h, NOW - 6h: records 1 to 3 are out.
    mixed = build_batch(4, base_ts=NOW, ts_step=-2 * HOUR, seed=1)
    old = build_batch(1, base_ts=NOW - 10 * HOUR, seed=2)
    with pytest.raises(InvalidTimestampError) as raised:
        log.append_as_leader(good + mixed + old, leader_epoch=0, now_ms=NOW)
    assert str(raised.value) == f"INVALID_TIMESTAMP (32): {INVALID_TIMESTAMP_MESSAGE}"
    assert [i for i, _ in raised.value.record_errors] == [1, 2, 3]
    # The offset the producer gave the record (Kafka's, before offsets are assigned).
    assert raised.value.record_errors[0][1] == (
        f"Timestamp {NOW - 2 * HOUR} of message with offset 1 is out of range. "
        f"The timestamp should be within [{NOW - HOUR}, {NOW + 2**63 - 1 - 2**64}]"
    )  # no upper bound: now + Long.MAX_VALUE, wrapped as Kafka's Java long prints it
    assert log.log_end_offset == 0
    log.close()


def test_log_append_time_is_not_held_to_the_window(tmp_path: Path) -> None:
    log = open_log(
        tmp_path,
        message_timestamp_type="LogAppendTime",
        message_timestamp_before_max_ms=0,
        message_timestamp_after_max_ms=0,
    )
    log.append_as_leader(build_batch(1), leader_epoch=0, now_ms=NOW)
    assert stored(log) == [(0, TimestampType.LOG_APPEND_TIME, NOW)]
    log.close()


def test_segment_jitter_is_below_jitter_and_segment_ms() -> None:
    assert roll_jitter(LogConfig()) == 0
    draws = {roll_jitter(LogConfig(segment_jitter_ms=1000, segment_ms=100)) for _ in range(200)}
    assert draws <= set(range(100))
    assert len(draws) > 1
    assert {roll_jitter(LogConfig(segment_jitter_ms=1)) for _ in range(20)} == {0}


def test_segment_jitter_brings_the_time_based_roll_forward(tmp_path: Path) -> None:
    log = open_log(tmp_path, segment_ms=10 * HOUR, segment_jitter_ms=10 * HOUR)
    log._local.roll_jitter_ms = 4 * HOUR  # the draw, fixed for the test
    log.append_as_leader(build_batch(1), leader_epoch=0, now_ms=NOW)
    log.append_as_leader(build_batch(1), leader_epoch=0, now_ms=NOW + 6 * HOUR)
    assert log.segment_base_offsets == (0,)  # 6 h: not yet 10 h - 4 h
    log.append_as_leader(build_batch(1), leader_epoch=0, now_ms=NOW + 6 * HOUR + 1)
    assert log.segment_base_offsets == (0, 2)
    log.close()
