"""Storage benchmark (not a test): append and sequential read throughput of tidelog.storage.

    .venv/bin/python benchmarks/bench_storage.py [--mib 256] [--dir PATH] [--repeat 3]

Append: ``Log.append_as_leader`` of the same pre-built batch over and over, against a plain
``os.write`` loop of the same bytes to a file in the same directory, in one run (interleaved;
best of ``--repeat`` and the median of the per-pair ratios), for 1 MiB and 16 KiB batches;
prints MB/s and the ratio. Neither fsyncs (the log's default flush policy).
Read: ``Log.read`` + ``os.sendfile`` of every slice to a loopback TCP socket drained by a
thread.
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import tempfile
import threading
import time
from pathlib import Path

from kafka.record.default_records import DefaultRecordBatchBuilder

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


def bench_raw(directory: Path, batch: bytes, count: int) -> float:
    path = directory / "raw.bin"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.write(fd, batch)
    start = time.perf_counter()
    for _ in range(1, count):
        os.write(fd, batch)
    elapsed = time.perf_counter() - start
    os.close(fd)
    path.unlink()
    return elapsed


def bench_log(directory: Path, batch: bytes, count: int, keep: bool = False) -> tuple[float, Log]:
    log_dir = directory / "bench-0"
    shutil.rmtree(log_dir, ignore_errors=True)
    log = Log.open(log_dir, LogConfig(), now_ms=0)
    # The first append of an epoch writes leader-epoch-checkpoint (fsync); steady state
    # is what we measure, so it happens before the clock starts.
    log.append_as_leader(batch, leader_epoch=0, now_ms=0)
    start = time.perf_counter()
    for i in range(1, count):
        log.append_as_leader(batch, leader_epoch=0, now_ms=i)
    elapsed = time.perf_counter() - start
    if not keep:
        log.close_without_flush()
        shutil.rmtree(log_dir)
    return elapsed, log


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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--mib", type=int, default=128, help="MiB appended per measurement")
    parser.add_argument("--dir", type=Path, default=None, help="directory on the disk to test")
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="tidelog-bench-", dir=args.dir))
    try:
        print(f"directory: {root}; {args.mib} MiB per run, best of {args.repeat}; no fsync")
        for label, size in (("1 MiB", MIB), ("16 KiB", 16 * 1024)):
            batch = build_batch(size)
            count = args.mib * MIB // len(batch)
            total = (count - 1) * len(batch)
            # Interleaved (order alternating), best of each and the median of the per-pair
            # ratios: other processes share the machine.
            raw_times, log_times = [], []
            for rep in range(args.repeat):
                if rep % 2:
                    log_times.append(bench_log(root, batch, count)[0])
                    raw_times.append(bench_raw(root, batch, count))
                else:
                    raw_times.append(bench_raw(root, batch, count))
                    log_times.append(bench_log(root, batch, count)[0])
            raw, logged = min(raw_times), min(log_times)
            pair_ratios = sorted(r / g for r, g in zip(raw_times, log_times, strict=True))
            raw_mbs = total / raw / 1e6
            log_mbs = total / logged / 1e6
            print(
                f"append {label:>6} batches ({len(batch)} B): os.write {raw_mbs:8.1f} MB/s | "
                f"Log.append_as_leader {log_mbs:8.1f} MB/s | ratio {log_mbs / raw_mbs:.2f} "
                f"(median of pairs {pair_ratios[len(pair_ratios) // 2]:.2f})"
            )
        batch = build_batch(MIB)
        _, log = bench_log(root, batch, args.mib * MIB // len(batch), keep=True)
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
