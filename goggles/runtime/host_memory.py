"""The process's C allocator, tuned for streams of large frames (glibc; elsewhere nothing changes).

A 640x480 depth image is a 1.2 MB buffer, made anew for every frame on both sides of a bus (the
frame the engine sends, the ``data`` a client decodes). glibc serves allocations that large with a
fresh ``mmap``, so every frame paid for its pages again: a page fault per 4 kB on first write (about
0.8 ms per 1.2 MB on the development VM) and an ``munmap`` when freed. Served from the heap, with
freed memory kept there, the next frame reuses warm pages: a 640x480 stereo depth pair from the
engine's outputs to a client's arrays went from p50 5.0 ms to 1.6 ms (``tools/bench_frames.py``).
Every ``goggles`` command tunes its own process; a client process may call ``keep_large_allocations``.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging

log = logging.getLogger(__name__)

#: Bytes from which glibc maps an allocation on its own instead of serving it from the heap.
MMAP_THRESHOLD = 64 << 20
#: Free bytes at the top of the heap that glibc keeps instead of returning them to the system.
TRIM_THRESHOLD = 256 << 20
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3  # glibc's mallopt parameters (malloc.h)


def keep_large_allocations() -> bool:
    """Serve allocations up to ``MMAP_THRESHOLD`` from the heap and keep up to ``TRIM_THRESHOLD`` of
    freed heap memory; True where the C library is glibc and took both settings."""
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name)
        mallopt = libc.mallopt
    except (OSError, AttributeError, TypeError):  # not glibc (macOS, musl without mallopt, Windows)
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    tuned = mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD) == 1 and mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD) == 1
    if not tuned:
        log.info("the C library refused mallopt: large buffers keep their default allocation")
    return tuned
