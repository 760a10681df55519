"""Give the C heap's free pages back to the operating system (glibc's ``malloc_trim``), or keep them for reuse.

:func:`release_free_memory` trims where a large working set was just freed; :func:`reuse_freed_memory`
(the ``pardnn`` command calls it first) makes glibc reuse freed pages and one arena, and
:func:`reusing_freed_memory` says whether it did. No-ops without glibc. Why: docs/notes-partitioner.md.
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
