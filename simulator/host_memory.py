"""Keep the memory one forward frees for the next forward, rather than handing it back to
the OS and page-faulting it in again.

Why: every kernel allocates its output.  glibc serves a block above its mmap threshold
(128 KB at start, raised as blocks are freed) with fresh mmap'd pages, and trims the heap
top once more than twice that is free; either way the next forward touches new pages and
the kernel zeroes each one in a page fault.  A full-size ResNet-50 forward took 2,700 minor
faults and ~9 ms of system time that way (of ~125 ms); with the two thresholds raised once
per process it takes none after the first forward (bench/RESULTS.md, "Simulator speed").

How: glibc's documented `mallopt` (M_MMAP_THRESHOLD, M_TRIM_THRESHOLD), per process, no
environment variable.  The heap then keeps what a forward needed at its peak -- resident
memory stays at the peak it reached anyway instead of dropping between forwards.  Blocks
larger than MMAP_THRESHOLD_BYTES (glibc's maximum) are still mapped and unmapped each time.
Where there is no glibc `mallopt` (macOS, musl ignores it) nothing changes.
"""
from __future__ import annotations

import ctypes
from functools import lru_cache

M_TRIM_THRESHOLD = -1            # glibc <malloc.h>
M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD_BYTES = 32 << 20  # glibc refuses more (HEAP_MAX_SIZE / 2 on 64-bit)
TRIM_THRESHOLD_BYTES = 1 << 30   # free heap top kept before glibc gives it back


@lru_cache(maxsize=1)
def keep_freed_memory() -> bool:
    """Raise glibc's mmap and trim thresholds (once per process); True if glibc took both."""
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    return bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES)) and bool(mallopt(M_TRIM_THRESHOLD,
                                                                                  TRIM_THRESHOLD_BYTES))
