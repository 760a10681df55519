"""pardnn.heap: the C heap's free pages go back to the operating system (glibc), a no-op elsewhere."""

from __future__ import annotations

import ctypes
import resource
import subprocess
import sys

import numpy as np
import pytest

from pardnn.heap import release_free_memory, reuse_freed_memory


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


_FAULTS = """
import ctypes, resource, sys
if sys.argv[1] == "reuse":
    from pardnn.heap import reuse_freed_memory
    assert reuse_freed_memory()
libc = ctypes.CDLL(None)
libc.malloc.restype = ctypes.c_void_p
libc.free.argtypes = [ctypes.c_void_p]
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for mib in range(1, 31):  # blocks of 1, 2, ... 30 MiB, each written, then freed before the next
    block = libc.malloc(mib << 20)
    ctypes.memset(block, 1, mib << 20)
    libc.free(block)
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


def _huge_pages_always() -> bool:
    try:
        with open("/sys/kernel/mm/transparent_hugepage/enabled") as mode:
            return "[always]" in mode.read()
    except OSError:
        return False


@pytest.mark.skipif(not hasattr(ctypes.CDLL(None), "mallopt"), reason="needs glibc's mallopt")
@pytest.mark.skipif(_huge_pages_always(), reason="transparent huge pages for all memory: faults per 2 MiB")
def test_reused_memory_saves_the_page_faults_of_fresh_blocks():
    """Blocks of 1, 2, ... 30 MiB, each freed before the next (as numba's kernels allocate a graph's
    arrays: with malloc, without NumPy's huge-page advice): by default each is a fresh mmap, larger
    than glibc's threshold so far, zeroed page by page (a fault per 4 KiB page: 465 MiB in all); with
    reuse_freed_memory the heap serves each from what the last one freed, and only its growth to
    30 MiB faults."""
    faults = {how: int(subprocess.run([sys.executable, "-c", _FAULTS, how], check=True, capture_output=True,
                                      text=True).stdout) for how in ("default", "reuse")}
    page = resource.getpagesize()
    assert faults["default"] > (400 << 20) // page, faults
    assert faults["reuse"] < (40 << 20) // page, faults


def test_without_mallopt_reuse_does_nothing(monkeypatch):
    class NoMallopt:  # a C library without mallopt (musl, macOS): ctypes raises AttributeError
        def __getattr__(self, name):
            raise AttributeError(name)

    monkeypatch.setattr(ctypes, "CDLL", lambda *args, **kwargs: NoMallopt())
    assert reuse_freed_memory() is False


_ACROSS_THREADS = """
import ctypes, resource, sys, threading
from pardnn.heap import reuse_freed_memory, reusing_freed_memory
libc = ctypes.CDLL(None)
if sys.argv[1] == "reuse":
    assert reuse_freed_memory() and reusing_freed_memory()
else:  # the same thresholds, each thread in its own arena (glibc's default)
    assert libc.mallopt(-3, 32 << 20) and libc.mallopt(-2, 256 << 20) and not reusing_freed_memory()
libc.malloc.restype = ctypes.c_void_p
libc.free.argtypes = [ctypes.c_void_p]

def work():  # 8 blocks of 16 MiB, written, then freed
    blocks = [libc.malloc(16 << 20) for _ in range(8)]
    for block in blocks:
        ctypes.memset(block, 1, 16 << 20)
    for block in blocks:
        libc.free(block)

worker = threading.Thread(target=work)
worker.start()
worker.join()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
work()  # the same in the main thread, after the worker freed its blocks
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


@pytest.mark.skipif(not hasattr(ctypes.CDLL(None), "mallopt"), reason="needs glibc's mallopt")
@pytest.mark.skipif(_huge_pages_always(), reason="transparent huge pages for all memory: faults per 2 MiB")
def test_the_main_thread_reuses_what_a_worker_thread_freed():
    """128 MiB written and freed by a worker thread (the guard's), then the same by the main thread:
    each thread in its own arena, the main thread's blocks are fresh memory (a fault per page); with
    reuse_freed_memory they share one arena, and the main thread's blocks are the worker's."""
    faults = {how: int(subprocess.run([sys.executable, "-c", _ACROSS_THREADS, how], check=True,
                                      capture_output=True, text=True).stdout) for how in ("apart", "reuse")}
    page = resource.getpagesize()
    assert faults["apart"] > (100 << 20) // page, faults
    assert faults["reuse"] < (10 << 20) // page, faults
