"""Give the C heap's free pages back to the operating system (glibc's ``malloc_trim``).

On a 1M-op graph the placer allocates and frees many arrays of 8-40 MB, in two threads
(:func:`pardnn.partitioner.partition`). glibc keeps what a thread frees in that thread's arena and
hands an arena's pages back only from its top, so once both threads have worked the resident size
stays near the sum of their high-water marks though far less is live: 1,000 MB at the last stage on
the 1M-op graph of ``benchmarks.speed_large`` with 390 MB live. ``malloc_trim(0)`` returns the free
pages of every arena (glibc >= 2.8 also inside a heap, with ``MADV_DONTNEED``), in milliseconds.

Called where a large working set has just been freed: when the guard's worker thread is done, unless
the threads share one arena (below). A no-op where the C library has no ``malloc_trim`` (musl, macOS).

The other way round, :func:`reuse_freed_memory` (the ``pardnn`` command calls it first) keeps freed
pages for reuse. By default glibc serves each block of 128 KiB or more by its own ``mmap`` (its
threshold rises only to the largest block freed so far) and returns the heap's free top beyond 128
KiB at once, so each new array of a 1M-op graph is fresh memory the kernel zeroes page by page, and a
placement spent 1.5-1.9 s of its 5.3 s in the kernel on 430,000 page faults. Arrays up to 32 MiB
(every per-op and per-edge array of a 1M-op graph) served from the heap and 256 MiB of its free top
kept halve the faults (about 230,000) and the time in the kernel (0.8 s), for 20-40 MB more peak
resident memory (``benchmarks.speed_large``). It also makes every thread allocate from one arena
(``M_ARENA_MAX`` 1), so what the guard's worker frees is reused by the main thread instead of kept
apart; the hand-off then has nothing to trim (:func:`reusing_freed_memory` tells the pipeline), and
trimming there cost 0.3 s of page faults again after it: 185,000 faults and 0.8-1.2 s in the kernel
before, 156,000 and 0.5 s after, peak resident memory within 30 MB. The arena's lock is taken per
allocation, and the placer allocates arrays, not objects: nothing measurable.
"""

from __future__ import annotations

import ctypes
import functools
from collections.abc import Callable

__all__ = ["release_free_memory", "reuse_freed_memory", "reusing_freed_memory"]


# glibc's mallopt parameters (malloc.h) and the values reuse_freed_memory sets.
_M_TOP_PAD, _M_MMAP_THRESHOLD, _M_ARENA_MAX = -2, -3, -8
MMAP_THRESHOLD_BYTES = 32 << 20  # glibc's ceiling for it on 64-bit systems (HEAP_MAX_SIZE / 2)
TOP_PAD_BYTES = 256 << 20
_reusing = False  # set by reuse_freed_memory


@functools.cache
def _malloc_trim() -> Callable[[int], int] | None:
    try:
        trim = ctypes.CDLL(None).malloc_trim  # the C library the interpreter itself runs on
    except (AttributeError, OSError, TypeError):  # TypeError: Windows' ctypes takes no CDLL(None)
        return None
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int
    return trim  # type: ignore[no-any-return]


def release_free_memory() -> bool:
    """Return the C heap's free pages to the operating system; ``True`` when some were (glibc only)."""
    trim = _malloc_trim()
    return bool(trim(0)) if trim is not None else False


def reuse_freed_memory() -> bool:
    """Serve blocks up to :data:`MMAP_THRESHOLD_BYTES` from the C heap, keep :data:`TOP_PAD_BYTES` of
    its free top and let every thread allocate from one arena (module docstring); ``True`` when set
    (glibc only). For a process of its own, called before it starts a thread: it changes how the whole
    process allocates, and a thread that already has an arena of its own keeps it."""
    global _reusing
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (AttributeError, OSError, TypeError):
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    _reusing = all([mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES), mallopt(_M_TOP_PAD, TOP_PAD_BYTES),
                    mallopt(_M_ARENA_MAX, 1)])
    return _reusing


def reusing_freed_memory() -> bool:
    """Whether :func:`reuse_freed_memory` is in effect in this process (the threads then share one
    arena, and freed pages are meant to be reused, not given back)."""
    return _reusing
