"""Checking the CRC-32Cs of a large append beside its write (``tidelog.storage.log`` rule
1a): one helper thread per process races the appending thread over the batches' checks
while that thread writes the stamped batches past the segment's published end; the bytes
are published only when every check passed, else cut off again.

Nothing unvalidated is ever visible: readers only see published bytes (``LogSegment.size``,
the log end offset, the indexes), and those move only after every batch passed. The helper
is used only while it can pay off (``_CrcHelper``).
"""

from __future__ import annotations

import os
import queue
import threading
import time
from typing import Final

import crc32c

from tidelog.protocol.records import CRC_START
from tidelog.storage.batch_validation import ValidatedBatch, crc_error
from tidelog.storage.segment import LogSegment

#: Appends at least this large check their CRC-32Cs beside the write (rule 1a); below it the
#: hand-off to the helper thread costs more than it saves.
_PARALLEL_CRC_MIN_BYTES: Final = 256 * 1024
#: Large appends checked without the helper after it failed to deliver (see _CrcHelper).
_HELPER_BACKOFF: Final = 4
#: CPUs' worth of idle time that makes the helper worth handing work to (see _CrcHelper).
_SPARE_CPU_IDLE: Final = 0.5
#: How long the appending thread waits for a check the helper has STARTED (it runs with the
#: GIL released on another CPU, ~70 us/MiB) before doing it itself.
_HELPER_WAIT_S: Final = 0.002


class _CrcJob:
    """The CRC-32C checks of one append, raced between the helper thread and the appending
    thread (rule 1a). The helper checks batches first to last while the appending thread
    writes; then the appending thread takes the helper's verdicts that are in and checks
    every other batch itself, last to first. It waits for the helper only on a batch the
    helper has STARTED, and at most ``_HELPER_WAIT_S`` (the helper runs with the GIL released,
    so a started check finishes within ~70 us/MiB unless the helper lost its CPU; then the
    appending thread does the check itself). A batch both check gets the same verdict twice:
    the bytes are immutable (``bytes``, see ``can_check_beside``)."""

    __slots__ = ("_checks", "_closed", "_current", "_delivered", "_progress", "_verdicts", "helped")

    def __init__(self, view: memoryview, batches: list[ValidatedBatch]) -> None:
        self._checks = [
            (view[b.position + CRC_START : b.position + b.size], b.crc) for b in batches
        ]
        #: None: not checked yet. Single list-item stores are atomic under the GIL.
        self._verdicts: list[bool | None] = [None] * len(batches)
        self._closed = False
        #: The batch the helper is checking now (-1: none), and an event set when it is done.
        self._current = -1
        self._progress = threading.Event()
        #: Verdicts the helper stored.
        self._delivered = 0
        #: Set by ``finish``: whether the helper delivered any verdict the appending thread used.
        self.helped = False

    def help(self) -> None:
        """The helper thread's part (crc32c releases the GIL above 32 KiB, so it really
        runs beside the appending thread's write)."""
        checks, verdicts, progress = self._checks, self._verdicts, self._progress
        for i, (data, expected) in enumerate(checks):
            if self._closed:
                return
            if verdicts[i] is None:
                progress.clear()
                self._current = i
                verdicts[i] = crc32c.crc32c(data) == expected
                self._delivered += 1
                self._current = -1
                progress.set()

    def finish(self) -> int | None:
        """The appending thread's part, after its write: index of the first corrupt batch."""
        checks, verdicts = self._checks, self._verdicts
        failed = None
        for i in range(len(checks) - 1, -1, -1):
            ok = verdicts[i]
            if ok is None and self._current == i:
                self._progress.wait(_HELPER_WAIT_S)
                ok = verdicts[i]
            if ok is None:
                data, expected = checks[i]
                ok = verdicts[i] = crc32c.crc32c(data) == expected
            if not ok:
                failed = i
        self._closed = True
        self.helped = self._delivered > 0
        return failed


def can_check_beside(records: bytes | bytearray | memoryview) -> bool:
    """Rule 1a applies to large appends of immutable bytes: the helper may still be reading
    them after the append returned (its verdict then unused), which must neither see them
    change nor stop the caller from resizing a bytearray."""
    if len(records) < _PARALLEL_CRC_MIN_BYTES:
        return False
    immutable = isinstance(records, bytes) or (
        isinstance(records, memoryview) and isinstance(records.obj, bytes)
    )
    return immutable and _CRC_HELPER.wanted()


class _CpuIdleSampler:
    """Whether a CPU is idle, from ``/proc/stat``'s idle time since the previous sample.

    Idle time over the last second sees what the other CPUs are doing now; the 1-minute
    load average counts the appending thread itself and lags by a minute, so an append-heavy
    process would refuse itself the helper. Without ``/proc/stat`` (not Linux) it falls
    back to the load average."""

    def __init__(self, path: str = "/proc/stat") -> None:
        self._path = path
        self._last: tuple[int, int] | None = None

    def _read(self) -> tuple[int, int] | None:
        try:
            with open(self._path, "rb") as f:
                fields = f.readline().split()
        except OSError:
            return None
        if len(fields) < 6 or fields[0] != b"cpu":
            return None
        ticks = [int(v) for v in fields[1:]]
        # user nice system idle iowait irq softirq steal (guest time is inside user)
        return ticks[3] + ticks[4], sum(ticks[:8])

    def spare_cpu(self) -> bool:
        cpus = os.cpu_count() or 1
        sample = self._read()
        last, self._last = self._last, sample
        if sample is not None and last is not None and sample[1] > last[1]:
            idle_cpus = cpus * (sample[0] - last[0]) / (sample[1] - last[1])
            return idle_cpus >= _SPARE_CPU_IDLE
        try:
            return os.getloadavg()[0] <= cpus - 1
        except OSError:
            return False


_CPU_IDLE: Final = _CpuIdleSampler()


def _spare_cpu() -> bool:
    """Whether at least ``_SPARE_CPU_IDLE`` of a CPU was idle over the last sample."""
    return _CPU_IDLE.spare_cpu()


class _CrcHelper:
    """One daemon thread, shared by every log of the process, running ``_CrcJob.help``.

    Used only when it can pay off. It needs a CPU nothing else wants: with none, handing it
    work only costs (a queue put, a wake-up, GIL hand-overs, and preempting the appending
    thread on its own CPU): on a busy 2-CPU machine (load average 8-17) that makes 1 MiB
    appends 5-15 % slower. So it is used only while at least half a CPU was idle
    over the last sample (``_CpuIdleSampler``, sampled at most once a second), and only while
    it delivers: after an append where it delivered no verdict by the time the appending
    thread needed it, the next ``_HELPER_BACKOFF`` large appends check their CRCs in the
    appending thread.
    """

    def __init__(self) -> None:
        self._jobs: queue.SimpleQueue[_CrcJob] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._start_lock = threading.Lock()
        #: Large appends still to check without the helper (benign races between threads).
        self._skip = 0
        self._spare_cpu = False
        self._load_sampled_until = 0.0

    def wanted(self) -> bool:
        now = time.monotonic()
        if now >= self._load_sampled_until:
            self._load_sampled_until = now + 1.0
            self._spare_cpu = _spare_cpu()
        if not self._spare_cpu:
            return False
        if self._skip > 0:
            self._skip -= 1
            return False
        return True

    def report(self, job: _CrcJob) -> None:
        if not job.helped:
            self._skip = _HELPER_BACKOFF

    def submit(self, job: _CrcJob) -> None:
        if self._thread is None or not self._thread.is_alive():
            with self._start_lock:
                if self._thread is None or not self._thread.is_alive():
                    self._thread = threading.Thread(
                        target=self._run, name="tidelog-crc32c", daemon=True
                    )
                    self._thread.start()
        self._jobs.put(job)

    def _run(self) -> None:
        # An ordinary thread, NOT SCHED_IDLE: it holds the GIL between CRCs, and a thread
        # that the scheduler starves while holding it would stall the appending thread
        # (priority inversion; measured as longer rounds at load average 8-10).
        while True:
            self._jobs.get().help()


_CRC_HELPER: Final = _CrcHelper()


def write_checking_crcs(
    segment: LogSegment,
    pieces: list[bytes | memoryview],
    size: int,
    meta: list[tuple[int, int, int]],
    *,
    now_ms: int,
    unchecked: tuple[memoryview, list[ValidatedBatch]],
) -> None:
    """Rule 1a: the helper thread checks the CRC-32Cs while this thread writes the bytes
    past the segment's published end; they are published only if every check passed,
    else cut off again and the append fails as if validated first."""
    job = _CrcJob(*unchecked)
    _CRC_HELPER.submit(job)
    try:
        segment.write_unpublished(pieces, size)
    except BaseException:
        job.finish()
        segment.discard_unpublished()
        raise
    failed = job.finish()
    _CRC_HELPER.report(job)
    if failed is not None:
        segment.discard_unpublished()
        raise crc_error(unchecked[1][failed].position)
    segment.publish(size, meta, now_ms)


__all__ = ["can_check_beside", "write_checking_crcs"]
