"""Settings a broker applies to the process it owns (``run_broker``), never to a host process.

``keep_freed_memory``: glibc's allocator, by default, serves every allocation above a
*dynamic* threshold (128 KiB at first) with its own ``mmap`` and gives it back with
``munmap`` when freed, and it returns the top of the heap to the kernel (``brk``) whenever
more than twice that threshold is free there. A broker allocates and frees a buffer of
about the batch size for every produce request and every follower fetch response (1 MiB
frames at 64 KiB records), so under load it kept giving memory back and faulting it in
again: 85,000-272,000 minor page faults per GB produced at RF=3, 64 KiB records, on the
2-CPU VM. Faulting a page in is dear on a virtual machine that returns freed guest memory
to its host (it must be backed again). With the thresholds fixed, freed buffers are reused
inside the process: 2,100-2,600 faults per GB, and about 10 % less broker CPU per GB on
average over seven runs, with much noise (one pair of runs showed no difference; figures
in docs/performance.md). The cost: the process keeps up
to ``TRIM_THRESHOLD_BYTES`` of freed memory at the top of its heap instead of returning
it, as a JVM keeps its heap.

``HeapFreezer``: the collector's full (gen-2) pass walks every tracked object not frozen,
and holds the event loop while it does. The broker freezes what exists once its codecs are
built (``gc.freeze``), but replicas hosted later (a LeaderAndIsr of thousands of
partitions: their logs, segments, indexes and partition state) are walked by every full
pass: 67-149 ms each with 5,000 partitions on the 2-CPU VM, triggered every few scrapes.
So when the number of hosted partitions has moved by ``REFREEZE_MIN_CHANGE`` (or a tenth)
since the last freeze, the freezer unfreezes, collects once (garbage frozen with the old
partitions, such as a deleted log's reference cycles, is freed then) and freezes again:
one pause at a change of that size, instead of one at every full pass after it.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
import logging
from collections.abc import Callable
from typing import Final

log = logging.getLogger(__name__)

#: glibc's mallopt parameters (malloc.h).
M_TRIM_THRESHOLD: Final = -1
M_MMAP_THRESHOLD: Final = -3

#: Allocations below this come from the heap and are reused once freed. 32 MiB is the
#: largest value glibc accepts on 64-bit (HEAP_MAX_SIZE / 2) and well above the largest
#: frame a broker handles routinely (replica.fetch.response.max.bytes is 10 MiB).
MMAP_THRESHOLD_BYTES: Final = 32 << 20
#: Free memory at the top of the heap kept before any is given back to the kernel.
TRIM_THRESHOLD_BYTES: Final = 256 << 20


def keep_freed_memory() -> bool:
    """Fix glibc's mmap and trim thresholds (see the module docstring).

    Returns whether both settings took; False when the C library is not glibc (nothing
    changed) or refuses a value (a setting made before the refused one stays).
    """
    name = ctypes.util.find_library("c")
    if name is None:
        return False
    try:
        libc = ctypes.CDLL(name)
        mallopt = libc.mallopt
    except (OSError, AttributeError):  # not glibc (musl has no mallopt)
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    if not mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES):
        log.info(
            "glibc refused M_MMAP_THRESHOLD=%d; allocator left as it was", MMAP_THRESHOLD_BYTES
        )
        return False
    if not mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD_BYTES):
        log.info("glibc refused M_TRIM_THRESHOLD=%d", TRIM_THRESHOLD_BYTES)
        return False
    return True


#: Hosted partitions added or removed since the last freeze that make the next one due (or a
#: tenth of those hosted then, when that is more).
REFREEZE_MIN_CHANGE: Final = 500


class HeapFreezer:
    """Freezes the heap again after a large change of the hosted partitions (module
    docstring). ``check`` is called periodically with the count hosted now."""

    def __init__(self, hosted: int, freeze: Callable[[], None] | None = None) -> None:
        self.frozen_at = hosted
        self._freeze = freeze or _refreeze

    def check(self, hosted: int) -> bool:
        """Freeze again if due; True when it did."""
        if abs(hosted - self.frozen_at) < max(REFREEZE_MIN_CHANGE, self.frozen_at // 10):
            return False
        self._freeze()
        self.frozen_at = hosted
        return True


def _refreeze() -> None:
    gc.unfreeze()
    gc.collect()
    gc.freeze()
