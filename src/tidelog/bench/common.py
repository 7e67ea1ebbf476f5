"""Values and small helpers shared by the benchmark rows: latency summaries, /proc readings."""

from __future__ import annotations

import os
import platform
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

MB = 1_000_000


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
        "cpu_model": cpu_model,
        "cpus": os.cpu_count(),
        "memory_bytes": mem_total,
        "kernel": platform.release(),
        "python": platform.python_version(),
        "tmp_filesystem": disk,
        "started_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
