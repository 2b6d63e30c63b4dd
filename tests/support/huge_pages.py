"""Huge pages asked for, as /proc/self/smaps shows them (Linux).

huge_page_ranges(): the mappings of this process with huge pages asked for (madvise
MADV_HUGEPAGE: the "hg" flag of their VmFlags), by address range.  advice_shows(): whether this platform
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


def huge_page_ranges() -> set:
    """The address ranges ("start-end") of this process's mappings flagged "hg".  A test
    looks at the ranges its own filter added and took away, not at a count: a mapping of an
    earlier test's object (freed by a gc.collect() of this one) is not its filter's."""
    ranges, current = set(), None
    with open("/proc/self/smaps") as f:
        for line in f:
            first = line.split(" ", 1)[0]
            if "-" in first and ":" not in first:
                current = first
            elif line.startswith("VmFlags:") and " hg" in line and current is not None:
                ranges.add(current)
    return ranges


def huge_page_areas() -> int:
    return len(huge_page_ranges())


@functools.lru_cache(maxsize=None)
def advice_shows() -> bool:
    libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    size = 4 << 20
    area = mmap.mmap(-1, size)
    try:
        before = huge_page_ranges()
        addr = ctypes.addressof(ctypes.c_char.from_buffer(area))
        if libc.madvise(addr, size, MADV_HUGEPAGE) != 0:
            return False
        return bool(huge_page_ranges() - before)
    finally:
        try:
            area.close()
        except BufferError:  # the ctypes view above is gone with this frame
            pass
