"""Values and small helpers shared by the benchmark rows: latency summaries, the publishers'
in-flight window, the load generators' CPU, /proc readings."""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

MB = 1_000_000

#: Every publisher's in-flight window: payload bytes handed to the client and not yet
#: acknowledged to the application. librdkafka's ``queue.buffering.max.kbytes`` as the Kafka
#: producers here set it (the Java producer's ``buffer.memory`` default); librdkafka counts a
#: record against it from ``produce()`` until its delivery report has been served.
WINDOW_BYTES: Final = 32 << 20
#: librdkafka's ``queue.buffering.max.messages`` as the Kafka producers here set it: the
#: window's second bound, in records (it binds only for records under 34 bytes).
WINDOW_RECORDS_MAX: Final = 1_000_000

#: A row whose busiest load-generating process used at least this share of one core over
#: the row is marked client-bound: it measures its client as much as the system.
CLIENT_BOUND_CPU: Final = 0.9


def window(record_bytes: int) -> dict[str, int]:
    """The in-flight window of a publisher of ``record_bytes``-byte records, as recorded in
    a row: ``WINDOW_BYTES`` of payload, at most ``WINDOW_RECORDS_MAX`` records (librdkafka's
    two queue bounds), and at least one record."""
    records = max(1, min(WINDOW_RECORDS_MAX, WINDOW_BYTES // max(1, record_bytes)))
    return {"bytes": WINDOW_BYTES, "records": records}


class ProcessCpu:
    """CPU seconds (user + system) this process used since it was made, every thread
    included: ``time.process_time`` reads CLOCK_PROCESS_CPUTIME_ID, so librdkafka's broker
    threads and an event loop's resolver threads count as the calling thread does."""

    def __init__(self) -> None:
        self._start = time.process_time()

    def seconds(self) -> float:
        return time.process_time() - self._start


def client_cpu(results: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The load generators' CPU over a row: each process's CPU seconds over its wall
    seconds (``cpu_s`` / ``elapsed`` of a worker's result), and the busiest one's share as
    ``client_cpu``. Empty when no result carries ``cpu_s`` (a results file without it)."""
    shares = [r["cpu_s"] / r["elapsed"] for r in results if "cpu_s" in r and r["elapsed"] > 0]
    if not shares:
        return {}
    return {
        "client_cpu": round(max(shares), 3),
        "client_cpu_per_process": [round(s, 3) for s in shares],
    }


def client_bound(values: dict[str, Any]) -> bool:
    """Whether a row's busiest load generator used ``CLIENT_BOUND_CPU`` of a core or more."""
    share = values.get("client_cpu")
    return share is not None and share >= CLIENT_BOUND_CPU


def load_average() -> tuple[float, float, float]:
    """The 1, 5 and 15 minute load averages (what ``uptime`` prints)."""
    return os.getloadavg()


def percentile(sorted_values: Sequence[float], fraction: float) -> float:
    """Nearest-rank percentile of already sorted values (0.0 when empty)."""
    if not sorted_values:
        return 0.0
    index = min(len(sorted_values) - 1, max(0, int(fraction * len(sorted_values) + 0.5) - 1))
    return sorted_values[index]


@dataclass(frozen=True, slots=True)
class Latency:
    """Latency summary in milliseconds."""

    count: int
    avg_ms: float
    p50_ms: float
    p95_ms: float
    p99_ms: float
    p999_ms: float
    max_ms: float

    @classmethod
    def of_seconds(cls, values: Sequence[float]) -> Latency:
        ordered = sorted(values)
        if not ordered:
            return cls(0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0)
        ms = 1000.0
        return cls(
            count=len(ordered),
            avg_ms=sum(ordered) / len(ordered) * ms,
            p50_ms=percentile(ordered, 0.50) * ms,
            p95_ms=percentile(ordered, 0.95) * ms,
            p99_ms=percentile(ordered, 0.99) * ms,
            p999_ms=percentile(ordered, 0.999) * ms,
            max_ms=ordered[-1] * ms,
        )

    def tail_ms(self) -> dict[str, float]:
        """The percentiles an end-to-end row shows: p50, p99, p99.9 and the maximum."""
        return {"p50": self.p50_ms, "p99": self.p99_ms, "p99.9": self.p999_ms, "max": self.max_ms}

    def all_ms(self) -> dict[str, float]:
        """Every figure of the summary but the count, as a produce row shows them."""
        return {"avg": self.avg_ms, "p50": self.p50_ms, "p95": self.p95_ms, **self.tail_ms()}


@dataclass(slots=True)
class Row:
    """One measured figure set; ``values`` holds the numbers, ``note`` what to know."""

    section: str
    system: str
    workload: str
    values: dict[str, Any] = field(default_factory=dict)
    note: str = ""
    load: tuple[float, float, float] = field(default_factory=load_average)

    def to_json(self) -> dict[str, Any]:
        return {
            "section": self.section,
            "system": self.system,
            "workload": self.workload,
            "values": self.values,
            "note": self.note,
            "load_average": list(self.load),
        }


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a process so far (Linux /proc); 0.0 when gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def rss_bytes(pid: int) -> int:
    """Resident set size of a process (VmRSS), bytes; 0 when gone."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except OSError:
        return 0
    return 0


def code_version() -> dict[str, Any]:
    """The code measured: the commit of the tree ``tidelog`` is imported from and whether
    it had uncommitted changes (``commit`` None when it is not a git checkout, e.g. an
    installed wheel), and the Kafka client library the load generators use."""
    root = Path(__file__).resolve().parents[3]
    commit: str | None = None
    dirty: bool | None = None
    try:
        head = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "HEAD"],
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        )
        if head.returncode == 0:
            commit = head.stdout.strip()
            status = subprocess.run(
                ["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
                capture_output=True,
                text=True,
                timeout=10,
                check=False,
            )
            dirty = bool(status.stdout.strip())
    except OSError:
        pass
    clients: dict[str, Any] = {}
    try:
        import confluent_kafka  # noqa: PLC0415 - the bench extra, optional

        clients = {
            "confluent_kafka": str(getattr(confluent_kafka, "__version__", "")),
            "librdkafka": confluent_kafka.libversion()[0],
        }
    except ImportError:
        pass
    return {"commit": commit, "uncommitted_changes": dirty, "code_tree": str(root), **clients}


def machine() -> dict[str, Any]:
    """What the figures were measured on."""
    cpu_model = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu_model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem_total = 0
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                mem_total = int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        disk = subprocess.run(
            ["df", "-hT", "/tmp"], capture_output=True, text=True, timeout=5, check=False
        ).stdout.strip()
    except OSError:
        disk = ""
    return {
        **code_version(),
        "cpu_model": cpu_model,
        "cpus": os.cpu_count(),
        "memory_bytes": mem_total,
        "kernel": platform.release(),
        "python": platform.python_version(),
        "tmp_filesystem": disk,
        "started_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }


# --- Every row that writes at full speed starts from the same page-cache state ---------
#
# On the VM the figures come from (Firecracker, 6.18 kernel), what a buffered write costs
# depends on how recently the guest freed the memory it lands in: memory freed in the last
# few seconds is still backed by the host and cheap to write into (0.16-0.4 s of system
# CPU per GB), memory freed 20 s or more before has gone back to the host and costs
# 1.1-2.0 s per GB (a plain pwritev loop, measured). A row that runs right after the
# benchmark deletes GBs (the limits' files, a stopped cluster's data) is measured in a
# cheaper regime than the rest: the same tidelog 64 KiB RF=3 run makes 269/283 MB/s right
# after 14 GB are freed and 206/233 MB/s 45 s later. And a row after a fast one inherits
# its write-back debt. So before every such row, for every
# system alike: ``os.sync()``, then wait until SETTLE_AFTER_FREE_S have passed since the
# benchmark last freed data on disk. Steady state on this VM is the slow regime.

#: Seconds after the benchmark deleted data before a row that writes may start.
SETTLE_AFTER_FREE_S = 30.0

_last_freed = 0.0  # time.monotonic() of the last note_freed(); 0.0: nothing freed yet


def note_freed() -> None:
    """Record that the benchmark just deleted data (files, a stopped cluster's logs)."""
    global _last_freed  # noqa: PLW0603 - one benchmark run per process
    _last_freed = time.monotonic()


def remove_data(directory: Path) -> None:
    """Delete a stopped system's data directory and record it (``note_freed``)."""
    shutil.rmtree(directory, ignore_errors=True)
    note_freed()


def settle() -> dict[str, float]:
    """Write back dirty pages and let recently freed memory go (see above); returns the
    seconds each took, which go into the row's values."""
    start = time.monotonic()
    os.sync()
    synced = time.monotonic()
    wait = 0.0
    if _last_freed:
        wait = max(0.0, _last_freed + SETTLE_AFTER_FREE_S - synced)
        time.sleep(wait)
    return {"sync_s": round(synced - start, 2), "waited_s": round(wait, 2)}
