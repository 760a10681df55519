"""pardnn.heap: the C heap's free pages go back to the operating system (glibc), a no-op elsewhere."""

from __future__ import annotations

import ctypes

import numpy as np
import pytest

from pardnn.heap import release_free_memory


def _resident_bytes() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * 4096


@pytest.mark.skipif(not hasattr(ctypes.CDLL(None), "malloc_trim"), reason="needs glibc's malloc_trim")
def test_freed_heap_memory_goes_back_to_the_system():
    # 4,000 arrays of 40 kB: below glibc's mmap threshold, so they live in the heap, where free()
    # alone returns nothing from below its top; the last one stays, pinning the top.
    arrays = [np.ones(5000) for _ in range(4000)]
    keep = arrays[-1]
    del arrays[:-1]
    before = _resident_bytes()
    assert release_free_memory()
    assert _resident_bytes() < before - 100 * 2**20  # of the 160 MB freed
    assert keep.sum() == 5000


def test_without_malloc_trim_it_does_nothing(monkeypatch):
    import pardnn.heap as heap

    monkeypatch.setattr(heap, "_malloc_trim", lambda: None)
    assert release_free_memory() is False
