"""keep_freed_memory: freed buffers stay in the process instead of being faulted in again;
HeapFreezer: when the heap is frozen again.

Each case runs in a fresh interpreter: the setting is for a process the broker owns, never
for the test runner's own.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from tidelog.server.process import REFREEZE_MIN_CHANGE, HeapFreezer

_CHURN = textwrap.dedent(
    """
    import resource, sys
    if sys.argv[1] == "keep":
        from tidelog.server.process import keep_freed_memory
        print(keep_freed_memory())
    else:
        print(None)

    def churn():
        # 32 MiB in 4 MiB buffers, every page touched, then all freed: the shape of a
        # broker's request and fetch buffers under load.
        buffers = [bytearray(4 << 20) for _ in range(8)]
        for b in buffers:
            b[::4096] = b"x" * len(range(0, len(b), 4096))
        del buffers

    churn()
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(20):
        churn()
    print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
    """
)


def _faults(mode: str) -> tuple[str, int]:
    out = subprocess.run(
        [sys.executable, "-c", _CHURN, mode], capture_output=True, text=True, check=True
    ).stdout.split()
    return out[0], int(out[1])


def test_freed_buffers_are_reused_instead_of_faulted_in_again() -> None:
    took, faults_kept = _faults("keep")
    if took != "True":
        pytest.skip("the C library here is not glibc")
    _, faults_default = _faults("default")
    # 20 rounds of 32 MiB are 163,840 pages: glibc's defaults return them to the kernel
    # every round (measured 163,230 faults); kept, they are reused (measured 0).
    assert faults_default > 100_000
    assert faults_kept < 1_000


def test_the_heap_is_frozen_again_only_after_a_large_change_of_hosted_partitions() -> None:
    freezes: list[int] = []
    freezer = HeapFreezer(100, freeze=lambda: freezes.append(1))
    assert not freezer.check(100 + REFREEZE_MIN_CHANGE - 1)
    assert freezer.check(100 + REFREEZE_MIN_CHANGE)  # a LeaderAndIsr of 500 more
    assert freezer.frozen_at == 600
    assert not freezer.check(1000)
    assert freezer.check(1100)
    # Above 5,000 hosted, a tenth of them is the step; removals count as well.
    freezer = HeapFreezer(10_000, freeze=lambda: freezes.append(1))
    assert not freezer.check(10_999)
    assert freezer.check(8_999)
    assert freezes == [1, 1, 1]
