"""The machine's limits, measured beside the systems: disk writes and loopback sendfile.

``triple_write``: a plain loop writes the same 1 MiB buffer to three files in turn (what
three replicas on one disk do: every byte written three times), buffered, no fsync (the
brokers do not fsync either). Its payload rate is the ceiling for RF=3 here.

``parallel_triple_write``: the same from three processes, as the kernel caches pages or
keeping each file's page cache to its tail as the brokers do (``keep``).

``loopback_sendfile``: ``os.sendfile`` of one file, over and over, to a loopback socket
whose reader thread discards what it gets (what a Kafka fetch of a log segment costs).
"""

from __future__ import annotations

import os
import shutil
import socket
import threading
import time
from pathlib import Path

from tidelog.bench.common import MB, Row, note_freed, settle
from tidelog.storage import page_cache

CHUNK = 1 << 20


def triple_write(directory: Path, seconds: float) -> Row:
    """Write the same 1 MiB three times (three files, interleaved) for ``seconds``.

    Timed, not sized: for as long as one produce run lasts, so the page cache fills and
    write-back throttles the loop exactly as it throttles the brokers in those runs (a
    fixed 1 GiB takes about 7 s, a different regime from a 15 s produce run)."""
    directory.mkdir(parents=True, exist_ok=True)
    settled = settle()
    # Never more than half the free space (the three copies together).
    max_payload = shutil.disk_usage(directory).free // 6
    chunk = os.urandom(CHUNK)
    paths = [directory / f"replica-{i}.bin" for i in range(3)]
    files = [open(p, "wb") for p in paths]  # noqa: SIM115 - closed below, timed together
    try:
        written = 0
        start = time.perf_counter()
        while time.perf_counter() - start < seconds and written < max_payload:
            for f in files:
                f.write(chunk)
            written += CHUNK
        for f in files:
            f.flush()
        elapsed = time.perf_counter() - start
    finally:
        for f in files:
            f.close()
        for p in paths:
            p.unlink(missing_ok=True)
        note_freed()
    return Row(
        "limits",
        "machine",
        "same bytes written 3x to one disk for one produce run's time (buffered 1 MiB, no fsync)",
        {
            "payload_mb_s": written / elapsed / MB,
            "disk_mb_s": 3 * written / elapsed / MB,
            "payload_bytes": written,
            "seconds": elapsed,
            "settled": settled,
        },
    )


def _write_one_copy(path: str, seconds: float, max_bytes: int, keep: int) -> tuple[int, float]:
    """One replica's writer: 1 MiB ``pwritev`` calls for ``seconds``; (bytes, seconds).
    ``keep`` >= 0: keep the file's page cache to its last ``keep`` bytes as a broker does
    (``tidelog.storage.page_cache``, the same code)."""
    chunk = os.urandom(CHUNK)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    window = page_cache.CacheWindow(0)
    try:
        written = 0
        start = time.perf_counter()
        while time.perf_counter() - start < seconds and written < max_bytes:
            os.pwritev(fd, [chunk], written)
            written += CHUNK
            if keep >= 0:
                window.after_append(fd, written, keep)
        return written, time.perf_counter() - start
    finally:
        os.close(fd)
        os.unlink(path)


def parallel_triple_write(directory: Path, seconds: float, *, keep: int = -1) -> Row:
    """Three processes, each writing its own copy for ``seconds`` (three replicas on one
    host, each on its own CPU when there is one). On the 2-vCPU VM, writing into a page
    cache that is full costs kernel CPU (reclaim and write-back: a single writer spent 8.7 s
    of system time in 10 s for 540 MB/s), so one writer cannot show the ceiling: three
    together reached 336 MB/s of payload in a trial.

    ``keep`` >= 0: each writer keeps its page cache to its last ``keep`` bytes, as the
    brokers do by default (``tidelog.log.page.cache.keep.bytes``); -1: the kernel's way."""
    import multiprocessing  # noqa: PLC0415 - only this row needs it

    directory.mkdir(parents=True, exist_ok=True)
    max_bytes = shutil.disk_usage(directory).free // 6
    paths = [str(directory / f"copy-{i}.bin") for i in range(3)]
    settled = settle()
    try:
        with multiprocessing.get_context("spawn").Pool(3) as pool:
            results = pool.starmap(_write_one_copy, [(p, seconds, max_bytes, keep) for p in paths])
    finally:
        note_freed()
    total = sum(written for written, _ in results)
    elapsed = max(took for _, took in results)
    return Row(
        "limits",
        "machine",
        "same bytes written 3x to one disk by three processes in parallel, one produce run's "
        "time (1 MiB pwritev, no fsync"
        + (
            f", page cache kept to the last {keep >> 20} MiB as a broker does)"
            if keep >= 0
            else ")"
        ),
        {
            "payload_mb_s": total / 3 / elapsed / MB,
            "disk_mb_s": total / elapsed / MB,
            "payload_bytes": total // 3,
            "seconds": elapsed,
            "settled": settled,
        },
    )


def loopback_sendfile(directory: Path, file_bytes: int, seconds: float) -> Row:
    """``os.sendfile`` a ``file_bytes`` file repeatedly to a loopback reader for ``seconds``."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "sendfile.bin"
    with open(path, "wb") as out:
        chunk = os.urandom(CHUNK)
        for _ in range(max(1, file_bytes // CHUNK)):
            out.write(chunk)
    size = path.stat().st_size
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    received = [0]

    def reader() -> None:
        conn, _ = listener.accept()
        buf = bytearray(4 << 20)
        view = memoryview(buf)
        with conn:
            while True:
                n = conn.recv_into(view)
                if n == 0:
                    return
                received[0] += n

    thread = threading.Thread(target=reader, daemon=True)
    thread.start()
    sent = 0
    try:
        with socket.create_connection(("127.0.0.1", port)) as sock, open(path, "rb") as f:
            start = time.perf_counter()
            stop = start + seconds
            while time.perf_counter() < stop:
                offset = 0
                while offset < size:
                    n = os.sendfile(sock.fileno(), f.fileno(), offset, size - offset)
                    offset += n
                sent += size
            sock.shutdown(socket.SHUT_WR)
            thread.join(30)
            elapsed = time.perf_counter() - start
    finally:
        listener.close()
        path.unlink(missing_ok=True)
        note_freed()
    return Row(
        "limits",
        "machine",
        "loopback TCP os.sendfile (one connection)",
        {"mb_s": received[0] / elapsed / MB, "bytes": received[0], "seconds": elapsed},
    )
