"""Storage benchmark (not a test): append and sequential read throughput of tidelog.storage.

    .venv/bin/python benchmarks/bench_storage.py [--mib 128] [--dir PATH] [--repeat 9]

Append: ``Log.append_as_leader`` of the same pre-built batch over and over, against a plain
``os.write`` loop of the same bytes from the same buffer, in one run, for 1 MiB and 16 KiB
batches. Fair by construction: both open a new file with the same flags in a new directory on
the same disk, write the same number of bytes (the first, untimed write included), do not
fsync (the log's default flush policy) and unlink their files after each round, so every
round starts from the same page-cache state. Rounds are interleaved with the order rotating
(the machine is shared), and the figure that counts is the MEDIAN over rounds of the
per-round ratio, with its spread (min-max); best-of throughputs and the load average are
printed beside it. For 1 MiB batches a third contender, "validate first", is the log with
rule 1a switched off (CRC-32Cs checked in the appending thread before the write), to show
what the helper thread buys in the same run.
Read: ``Log.read`` + ``os.sendfile`` of every slice to a loopback TCP socket drained by a
thread.
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import statistics
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from kafka.record.default_records import DefaultRecordBatchBuilder

import tidelog.storage.log as log_module

try:  # where the CRC helper lives (older trees kept it in tidelog.storage.log)
    import tidelog.storage.crc_helper as crc_module
except ImportError:  # pragma: no cover - a before figure from an older tree
    crc_module = log_module  # type: ignore[no-redef]
from tidelog.protocol.records import parse_header
from tidelog.storage.log import Log, LogConfig

MIB = 1 << 20


def build_batch(target_bytes: int, record_bytes: int = 1000) -> bytes:
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=0,
        is_transactional=False,
        producer_id=-1,
        producer_epoch=-1,
        base_sequence=-1,
        batch_size=target_bytes * 2,
    )
    value = os.urandom(record_bytes)
    i = 0
    while builder.size() + record_bytes + 30 <= target_bytes:
        builder.append(i, timestamp=1_700_000_000_000 + i, key=None, value=value, headers=[])
        i += 1
    return bytes(builder.build())


def bench_raw(directory: Path, batch: bytes, count: int, calls: list[float]) -> float:
    """``count`` writes of ``batch`` to a new file opened like a segment file; the first is
    untimed, as the log's first append (which writes its epoch checkpoint) is. Each call's
    duration goes to ``calls``."""
    raw_dir = directory / "raw-0"
    raw_dir.mkdir()
    path = raw_dir / "00000000000000000000.log"
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)  # LogSegment's flags
    os.write(fd, batch)
    clock = time.perf_counter
    start = clock()
    for _ in range(1, count):
        t = clock()
        os.write(fd, batch)
        calls.append(clock() - t)
    elapsed = clock() - start
    os.close(fd)
    shutil.rmtree(raw_dir)
    return elapsed


def bench_log(
    directory: Path, batch: bytes, count: int, calls: list[float], keep: bool = False
) -> tuple[float, Log]:
    log_dir = directory / "bench-0"
    shutil.rmtree(log_dir, ignore_errors=True)
    log = Log.open(log_dir, LogConfig(), now_ms=0)
    # The first append of an epoch writes leader-epoch-checkpoint (fsync); steady state
    # is what we measure, so it happens before the clock starts.
    log.append_as_leader(batch, leader_epoch=0, now_ms=0)
    clock = time.perf_counter
    start = clock()
    for i in range(1, count):
        t = clock()
        log.append_as_leader(batch, leader_epoch=0, now_ms=i)
        calls.append(clock() - t)
    elapsed = clock() - start
    if not keep:
        log.close_without_flush()
        shutil.rmtree(log_dir)
    return elapsed, log


@contextmanager
def validate_first() -> Iterator[None]:
    """The log without rule 1a: every CRC-32C checked before the write, in this thread."""
    saved = crc_module._PARALLEL_CRC_MIN_BYTES
    crc_module._PARALLEL_CRC_MIN_BYTES = 1 << 62  # type: ignore[misc]
    try:
        yield
    finally:
        crc_module._PARALLEL_CRC_MIN_BYTES = saved  # type: ignore[misc]


def bench_log_validate_first(
    directory: Path, batch: bytes, count: int, calls: list[float]
) -> float:
    with validate_first():
        return bench_log(directory, batch, count, calls)[0]


def bench_log_time(directory: Path, batch: bytes, count: int, calls: list[float]) -> float:
    return bench_log(directory, batch, count, calls)[0]


#: Rule 1a diagnostics: appends the helper thread was tried on, and how many it had
#: checked something for by the time the write returned (it backs off otherwise).
helper_tries = [0, 0]


def count_helper_deliveries() -> None:
    if not hasattr(crc_module, "_CRC_HELPER"):
        return  # an older tidelog without rule 1a (PYTHONPATH=<old tree>/src: a before figure)
    helper = crc_module._CRC_HELPER
    report = helper.report

    def counting(job: crc_module._CrcJob) -> None:
        helper_tries[0] += 1
        helper_tries[1] += job.helped
        report(job)

    helper.report = counting  # type: ignore[method-assign]


Contender = Callable[[Path, bytes, int, list[float]], float]


def interleaved(
    contenders: dict[str, Contender],
    directory: Path,
    batch: bytes,
    count: int,
    rounds: int,
) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    """Seconds per round, and per call, of each contender; the order rotates every round."""
    names = list(contenders)
    times: dict[str, list[float]] = {name: [] for name in names}
    calls: dict[str, list[float]] = {name: [] for name in names}
    for rnd in range(rounds):
        shift = rnd % len(names)
        for name in names[shift:] + names[:shift]:
            times[name].append(contenders[name](directory, batch, count, calls[name]))
    return times, calls


def bench_read(
    log: Log, fetch_bytes: int, batch_size: int, records_per_batch: int
) -> tuple[float, int]:
    server = socket.create_server(("127.0.0.1", 0))
    client = socket.create_connection(server.getsockname())
    conn, _ = server.accept()
    server.close()
    received = 0

    def drain() -> None:
        nonlocal received
        buf = bytearray(4 * MIB)
        while True:
            n = conn.recv_into(buf)
            if not n:
                return
            received += n

    thread = threading.Thread(target=drain)
    thread.start()
    out = client.fileno()
    sent = 0
    offset = log.log_start_offset
    start = time.perf_counter()
    while offset < log.log_end_offset:
        fetched = log.read(offset, fetch_bytes)
        assert fetched is not None
        position, remaining = fetched.position, fetched.length
        while remaining:
            n = os.sendfile(out, fetched.fileno, position, remaining)
            position += n
            remaining -= n
        sent += fetched.length
        # The next fetch offset, as a consumer knows it from the batches it got (all
        # batches here are the same size and record count).
        offset = fetched.first_offset + fetched.length // batch_size * records_per_batch
    client.shutdown(socket.SHUT_WR)
    thread.join()
    elapsed = time.perf_counter() - start
    client.close()
    conn.close()
    assert received == sent
    return elapsed, sent


def load_average() -> str:
    return "/".join(f"{x:.1f}" for x in os.getloadavg())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--mib", type=int, default=128, help="MiB appended per measurement")
    parser.add_argument("--dir", type=Path, default=None, help="directory on the disk to test")
    parser.add_argument("--repeat", type=int, default=9, help="interleaved rounds")
    args = parser.parse_args()
    count_helper_deliveries()
    root = Path(tempfile.mkdtemp(prefix="tidelog-bench-", dir=args.dir))
    try:
        print(
            f"directory: {root}; {args.mib} MiB per round, {args.repeat} interleaved rounds; "
            f"no fsync; load average {load_average()} (1/5/15 min), {os.cpu_count()} CPUs; "
            f"tidelog from {Path(log_module.__file__).parent.parent.parent}"
        )
        for label, size in (("1 MiB", MIB), ("16 KiB", 16 * 1024)):
            batch = build_batch(size)
            count = args.mib * MIB // len(batch)
            total = (count - 1) * len(batch)
            contenders: dict[str, Contender] = {
                "os.write": bench_raw,
                "Log.append_as_leader": bench_log_time,
            }
            if len(batch) >= getattr(crc_module, "_PARALLEL_CRC_MIN_BYTES", 1 << 62):
                contenders["validate first"] = bench_log_validate_first
            helper_tries[:] = [0, 0]
            times, calls = interleaved(contenders, root, batch, count, args.repeat)
            raw = times["os.write"]
            print(
                f"append {label:>6} batches ({len(batch)} B), load now {load_average()}: "
                f"os.write best {total / min(raw) / 1e6:7.1f} MB/s"
            )
            for name, log_times in times.items():
                if name == "os.write":
                    continue
                ratios = sorted(r / t for r, t in zip(raw, log_times, strict=True))
                per_call = statistics.median(calls[name])
                raw_per_call = statistics.median(calls["os.write"])
                print(
                    f"    {name:>20}: best {total / min(log_times) / 1e6:7.1f} MB/s | ratio to "
                    f"os.write: median {statistics.median(ratios):.2f}, spread "
                    f"{ratios[0]:.2f}-{ratios[-1]:.2f} over {len(ratios)} rounds | per call "
                    f"(less sensitive to preemption): median {per_call * 1e6:.0f} µs vs "
                    f"{raw_per_call * 1e6:.0f} µs, ratio {raw_per_call / per_call:.2f}"
                )
            if helper_tries[0]:
                print(
                    f"    rule 1a helper: tried on {helper_tries[0]} of "
                    f"{(count - 1) * args.repeat} appends, had checked the batch before the "
                    f"write returned in {helper_tries[1]}"
                )
        batch = build_batch(MIB)
        _, log = bench_log(root, batch, args.mib * MIB // len(batch), [], keep=True)
        records = parse_header(batch).records_count
        for fetch in (MIB, 8 * MIB):
            elapsed, sent = min(
                bench_read(log, fetch, len(batch), records) for _ in range(args.repeat)
            )
            print(
                f"read   sendfile, {fetch // MIB} MiB fetches: {sent / elapsed / 1e6:8.1f} MB/s "
                f"({sent // MIB} MiB)"
            )
        log.close_without_flush()
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
