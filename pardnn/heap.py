"""Give the C heap's free pages back to the operating system (glibc's ``malloc_trim``).

On a 1M-op graph the placer allocates and frees many arrays of 8-40 MB, in two threads
(:func:`pardnn.pipeline.partition`). glibc keeps what a thread frees in that thread's arena and
hands an arena's pages back only from its top, so once both threads have worked the resident size
stays near the sum of their high-water marks though far less is live: 1,000 MB at the last stage on
the 1M-op graph of ``benchmarks.speed_large`` with 390 MB live. ``malloc_trim(0)`` returns the free
pages of every arena (glibc >= 2.8 also inside a heap, with ``MADV_DONTNEED``), in milliseconds.

Called where a large working set has just been freed: when the guard's worker thread is done. A
no-op where the C library has no ``malloc_trim`` (musl, macOS).
"""

from __future__ import annotations

import ctypes
import functools
from collections.abc import Callable

__all__ = ["release_free_memory"]


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
