"""Which pages of a file the page cache holds, asked with ``mincore`` (a read would bring
them back, and an ``RWF_NOWAIT`` miss starts reading the page in the background)."""

from __future__ import annotations

import ctypes
import ctypes.util
import mmap
import os


def resident(fd: int) -> list[bool]:
    """One flag per page of the file: held by the page cache."""
    size = os.fstat(fd).st_size
    if size == 0:
        return []
    libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
    pages = (size + mmap.PAGESIZE - 1) // mmap.PAGESIZE
    with mmap.mmap(fd, size, access=mmap.ACCESS_COPY) as mapped:
        address = ctypes.addressof(ctypes.c_char.from_buffer(mapped))
        vec = (ctypes.c_ubyte * pages)()
        assert libc.mincore(ctypes.c_void_p(address), ctypes.c_size_t(size), vec) == 0
        return [bool(v & 1) for v in vec]
