"""Huge pages asked for, as /proc/self/smaps shows them (Linux).

huge_page_areas(): the mappings of this process with huge pages asked for (madvise
MADV_HUGEPAGE: the "hg" flag of their VmFlags).  advice_shows(): whether this platform
shows such advice there at all: a probe maps 4 MiB, asks, and looks.  Under qemu-user
(make aarch64-check) the emulator takes a guest's madvise(MADV_HUGEPAGE) and does
nothing with it, so no mapping of the guest ever gets the flag; a test then checks what
the filters do with their arrays, not the flag.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import functools
import mmap

MADV_HUGEPAGE = 14


def huge_page_areas() -> int:
    with open("/proc/self/smaps") as f:
        return sum(1 for line in f if line.startswith("VmFlags:") and " hg" in line)


@functools.lru_cache(maxsize=None)
def advice_shows() -> bool:
    libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    size = 4 << 20
    area = mmap.mmap(-1, size)
    try:
        before = huge_page_areas()
        addr = ctypes.addressof(ctypes.c_char.from_buffer(area))
        if libc.madvise(addr, size, MADV_HUGEPAGE) != 0:
            return False
        return huge_page_areas() > before
    finally:
        try:
            area.close()
        except BufferError:  # the ctypes view above is gone with this frame
            pass
