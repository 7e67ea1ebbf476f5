"""Run every benchmark in one go (``make bench``), each as its own process, in a fixed order.

Each benchmark prints its own figures side by side with its reference (raw writes, kio, the
machine), so ratios hold on a noisy machine. Timing lives here, never in tests.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
BENCHMARKS = ("bench_storage.py", "bench_protocol.py", "bench_broker.py")


def main() -> int:
    failed = []
    for name in BENCHMARKS:
        print(f"\n=== {name}", flush=True)
        if subprocess.call([sys.executable, str(HERE / name)]) != 0:
            failed.append(name)
    if failed:
        print(f"\nfailed: {', '.join(failed)}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
