"""Log rule 1a: large appends check their CRC-32Cs in a helper thread while the bytes are
written past the published end of the segment. Nothing unvalidated may ever be readable, a
corrupt batch anywhere in the append must leave the log exactly as it was, and a crash in
the window is repaired by recovery."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest

from tidelog.errors import ErrorCode
from tidelog.protocol.records import CRC_START, CorruptRecordBatchError, iter_batches, stamp_batch
from tidelog.storage import crc_helper
from tidelog.storage.batch_validation import validate_batches
from tidelog.storage.log import Log, LogConfig
from tidelog.storage.segment import LogSegment

from .batches import build_batch, read_all

#: Records per batch and value size: each batch is ~100 KiB, so 3+ batches pass the threshold.
RECORDS, VALUE = 100, 1000


def big_batch(seed: int) -> bytes:
    return build_batch(RECORDS, value_size=VALUE, seed=seed)


def corrupt(batch: bytes) -> bytes:
    """Flip one byte inside the records: framing stays sound, only the CRC-32C fails."""
    buf = bytearray(batch)
    buf[len(buf) - 10] ^= 0x5A
    return bytes(buf)


@pytest.fixture
def submitted(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Counts jobs handed to the helper thread, so each test knows it exercised rule 1a."""
    jobs: list[int] = []
    real = crc_helper._CRC_HELPER.submit

    def spy(job: crc_helper._CrcJob) -> None:
        jobs.append(1)
        real(job)

    monkeypatch.setattr(crc_helper._CRC_HELPER, "submit", spy)
    # Whatever the machine's load and the helper's luck (it may not get a CPU): every
    # large append of these tests must take the rule 1a path.
    monkeypatch.setattr(crc_helper._CRC_HELPER, "wanted", lambda: True)
    return jobs


def open_log(tmp_path: Path) -> Log:
    log = Log.open(tmp_path / "t-0", LogConfig(), now_ms=0)
    log.append_as_leader(build_batch(2), leader_epoch=0, now_ms=0)  # epoch recorded
    return log


def file_size(log: Log) -> int:
    return os.path.getsize(log.directory / "00000000000000000000.log")


@pytest.mark.parametrize("bad", [0, 2, 4])
def test_corrupt_batch_in_large_leader_append_leaves_log_unchanged(
    tmp_path: Path, submitted: list[int], bad: int
) -> None:
    log = open_log(tmp_path)
    before = read_all(log)
    end, size = log.log_end_offset, log.size_bytes
    batches = [big_batch(i) for i in range(5)]
    batches[bad] = corrupt(batches[bad])
    records = b"".join(batches)
    assert len(records) >= crc_helper._PARALLEL_CRC_MIN_BYTES
    with pytest.raises(CorruptRecordBatchError) as info:
        log.append_as_leader(records, leader_epoch=0, now_ms=1)
    assert submitted  # the helper-thread path ran
    assert info.value.code is ErrorCode.CORRUPT_MESSAGE
    position = sum(len(b) for b in batches[:bad])
    assert str(info.value).endswith(f": batch at byte {position} fails its CRC-32C check")
    assert (log.log_end_offset, log.size_bytes, file_size(log)) == (end, size, size)
    assert read_all(log) == before
    assert log.read(end, 1 << 30) is None  # nothing past the old end
    good = b"".join(big_batch(10 + i) for i in range(3))
    info_ok = log.append_as_leader(good, leader_epoch=0, now_ms=2)
    assert (info_ok.first_offset, info_ok.num_batches) == (end, 3)
    assert read_all(log, end) != b""
    assert file_size(log) == log.size_bytes == size + len(good)
    log.close()


def test_corrupt_batch_in_large_follower_append_leaves_log_unchanged(
    tmp_path: Path, submitted: list[int]
) -> None:
    log = open_log(tmp_path)
    end, size = log.log_end_offset, log.size_bytes
    batches = []
    base = end
    for i in range(4):
        buf = bytearray(big_batch(i))
        stamp_batch(buf, 0, base, 0)
        batches.append(bytes(buf))
        base += RECORDS
    batches[3] = corrupt(batches[3])
    with pytest.raises(CorruptRecordBatchError, match="fails its CRC-32C check"):
        log.append_as_follower(b"".join(batches), now_ms=1)
    assert submitted
    assert (log.log_end_offset, log.size_bytes, file_size(log)) == (end, size, size)
    info = log.append_as_follower(b"".join(batches[:3]), now_ms=1)
    assert info.last_offset == end + 3 * RECORDS - 1
    log.close()


def test_bytes_written_before_validation_are_invisible(
    tmp_path: Path, submitted: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Inside the window (bytes on disk, CRCs not yet all checked) the log end and size are
    the old ones, and a reader in another thread waits and then sees only the old log."""
    log = open_log(tmp_path)
    before = read_all(log)
    end, size = log.log_end_offset, log.size_bytes
    seen_in_window: list[tuple[int, int, int]] = []
    reader_result: list[bytes] = []
    real_write = LogSegment.write_unpublished

    def write_then_look(self: LogSegment, pieces: list[bytes | memoryview], n: int) -> None:
        real_write(self, pieces, n)
        seen_in_window.append((log.log_end_offset, log.size_bytes, file_size(log)))
        reader = threading.Thread(target=lambda: reader_result.append(read_all(log)))
        reader.start()
        readers.append(reader)

    readers: list[threading.Thread] = []
    monkeypatch.setattr(LogSegment, "write_unpublished", write_then_look)
    records = b"".join(big_batch(i) for i in range(2)) + corrupt(big_batch(2))
    with pytest.raises(CorruptRecordBatchError):
        log.append_as_leader(records, leader_epoch=0, now_ms=1)
    for reader in readers:
        reader.join()
    # The window was real: the bytes were in the file, yet nothing published.
    assert seen_in_window == [(end, size, size + len(records))]
    assert reader_result == [before]
    assert file_size(log) == size
    log.close()


def test_concurrent_reads_never_see_unvalidated_bytes(tmp_path: Path, submitted: list[int]) -> None:
    log = open_log(tmp_path)
    stop = threading.Event()
    problems: list[str] = []

    def reader() -> None:
        while not stop.is_set():
            data = read_all(log)
            for pos, header in iter_batches(data):
                body = data[pos + CRC_START : pos + header.size]
                if crc_helper.crc32c.crc32c(body) != header.crc:
                    problems.append(f"corrupt batch readable at byte {pos}")

    thread = threading.Thread(target=reader)
    thread.start()
    expected_end = log.log_end_offset
    try:
        for i in range(12):
            batches = [big_batch(3 * i + j) for j in range(3)]
            if i % 2:
                batches[i % 3] = corrupt(batches[i % 3])
                with pytest.raises(CorruptRecordBatchError):
                    log.append_as_leader(b"".join(batches), leader_epoch=0, now_ms=i)
            else:
                log.append_as_leader(b"".join(batches), leader_epoch=0, now_ms=i)
                expected_end += 3 * RECORDS
            assert log.log_end_offset == expected_end
    finally:
        stop.set()
        thread.join()
    assert submitted
    assert problems == []
    assert file_size(log) == log.size_bytes
    log.close()


def test_crash_between_write_and_validation_is_repaired_by_recovery(tmp_path: Path) -> None:
    """The process dies with unvalidated bytes past the published end: they lie above the
    recovery point (which never passes the published log end), so recovery checks them."""
    log = open_log(tmp_path)
    log.flush()
    end, size = log.log_end_offset, log.size_bytes
    assert log.recovery_point == end
    segment = log._local.segments[-1]
    tail = bytearray(corrupt(big_batch(0)))
    stamp_batch(tail, 0, end, 0)
    segment.write_unpublished([bytes(tail)], len(tail))  # then the crash, before the verdict
    log.close_without_flush()
    reopened = Log.open(tmp_path / "t-0", LogConfig(), now_ms=1, recovery_point=end)
    assert (reopened.log_end_offset, reopened.size_bytes) == (end, size)
    assert file_size(reopened) == size
    reopened.close()


def test_bytearray_and_small_appends_check_before_writing(
    tmp_path: Path, submitted: list[int]
) -> None:
    """Rule 1a only for immutable bytes: a bytearray could change under the helper."""
    log = open_log(tmp_path)
    records = bytearray(b"".join(big_batch(i) for i in range(3)))
    log.append_as_leader(records, leader_epoch=0, now_ms=1)
    log.append_as_leader(build_batch(3), leader_epoch=0, now_ms=1)
    assert submitted == []
    log.append_as_leader(memoryview(bytes(records)), leader_epoch=0, now_ms=1)
    assert submitted == [1]
    log.close()


def test_helper_is_used_only_with_a_spare_cpu_and_while_it_delivers(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    helper = crc_helper._CrcHelper()  # a fresh one: no thread is started by these calls
    spare = [False]
    monkeypatch.setattr(crc_helper, "_spare_cpu", lambda: spare[0])
    assert not helper.wanted()  # the machine is busy
    spare[0] = True
    assert not helper.wanted()  # still the sample of the last second
    monkeypatch.setattr(helper, "_load_sampled_until", 0.0)
    assert helper.wanted()
    view = memoryview(big_batch(0))
    batches, _ = validate_batches(
        view, max_message_bytes=None, allow_partial_tail=False, check_crc=False
    )
    job = crc_helper._CrcJob(view, batches)
    assert job.finish() is None
    assert not job.helped  # the appending thread did it all
    helper.report(job)
    assert [helper.wanted() for _ in range(crc_helper._HELPER_BACKOFF + 1)] == [False] * (
        crc_helper._HELPER_BACKOFF
    ) + [True]
    delivered = crc_helper._CrcJob(view, batches)
    delivered.help()  # as the helper thread would, before the write returned
    assert delivered.finish() is None
    assert delivered.helped
    helper.report(delivered)
    assert helper.wanted()


def _proc_stat(path: Path, idle: int, busy: int) -> None:
    # user nice system idle iowait irq softirq steal guest guest_nice
    path.write_text(f"cpu  {busy} 0 0 {idle} 0 0 0 0 0 0\ncpu0 0 0 0 0 0 0 0 0 0 0\n")


def test_spare_cpu_is_idle_time_since_the_last_sample(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    stat = tmp_path / "stat"
    monkeypatch.setattr(crc_helper.os, "cpu_count", lambda: 2)
    monkeypatch.setattr(crc_helper.os, "getloadavg", lambda: (5.0, 5.0, 5.0))
    sampler = crc_helper._CpuIdleSampler(str(stat))
    _proc_stat(stat, idle=1000, busy=1000)
    assert not sampler.spare_cpu()  # no previous sample: the load average (5 on 2 CPUs)
    _proc_stat(stat, idle=1060, busy=1140)  # 60 of 200 ticks idle: 0.6 of 2 CPUs
    assert sampler.spare_cpu()
    _proc_stat(stat, idle=1100, busy=1300)  # 40 of 200 ticks idle: 0.4 of 2 CPUs
    assert not sampler.spare_cpu()
    stat.unlink()  # unreadable: back to the load average
    monkeypatch.setattr(crc_helper.os, "getloadavg", lambda: (0.5, 0.5, 0.5))
    assert sampler.spare_cpu()


def test_appending_thread_waits_briefly_for_a_check_the_helper_started(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A check the helper has started is waited for (it runs with the GIL released), so
    the CRC is not computed twice; one it has not started is done by the appending
    thread at once. The wait is widened to 5 s here so that a loaded machine's thread
    scheduling cannot outlast it: what is tested is that the wait happens, not its length."""
    bounded_wait_s = crc_helper._HELPER_WAIT_S
    monkeypatch.setattr(crc_helper, "_HELPER_WAIT_S", 5.0)
    view = memoryview(big_batch(0))
    batches, _ = validate_batches(
        view, max_message_bytes=None, allow_partial_tail=False, check_crc=False
    )
    job = crc_helper._CrcJob(view, batches)
    job._current = 0  # the helper is "inside" crc32c for batch 0 ...
    job._progress.clear()

    def deliver() -> None:  # ... and stores its verdict shortly
        time.sleep(0.0005)
        job._verdicts[0] = True
        job._delivered += 1
        job._current = -1
        job._progress.set()

    thread = threading.Thread(target=deliver)
    thread.start()
    assert job.finish() is None
    thread.join()
    assert job.helped
    # A corrupt batch is still caught when the helper never gets to it.
    corrupt = bytearray(big_batch(1))
    corrupt[-1] ^= 0xFF
    cview = memoryview(bytes(corrupt))
    cbatches, _ = validate_batches(
        cview, max_message_bytes=None, allow_partial_tail=False, check_crc=False
    )
    stalled = crc_helper._CrcJob(cview, cbatches)
    stalled._current = 0  # started, never finishes: the wait is bounded
    monkeypatch.setattr(crc_helper, "_HELPER_WAIT_S", bounded_wait_s)
    stalled._progress.clear()
    assert stalled.finish() == 0
    assert not stalled.helped
