"""The peaks of the memory tracker (:mod:`pardnn.emulation.memory`): per device, the highest sum of
residual bytes and live buffers over the step, and its first instant; byte sums that saturate at
2^63 - 1 instead of wrapping (that module's docstring, "Exabytes")."""

from __future__ import annotations

import numpy as np
from numba import njit

INT64_MAX = 2**63 - 1  # where usage saturates

SMALL_BUFFERS = 4096  # up to this many buffers, the peaks are found in one compiled call


def peaks(k: int, residual: np.ndarray, device: np.ndarray, alloc: np.ndarray, free: np.ndarray,
          nbytes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per device, the peak of residual + live buffers and the first instant it is reached.

    At one instant: releases of buffers that lived a while (their consumer finished), then
    allocations (ops starting), then releases of buffers allocated at that same instant. Events are
    laid out in that phase order and sorted stably by time, then swept in order. Few buffers (a local
    search on a small graph): all in one compiled call; many: NumPy's stable sort (timsort, fast on
    the nearly sorted times of a schedule).
    """
    if device.size <= SMALL_BUFFERS:
        return peaks_compiled(k, residual, device, alloc, free, nbytes)
    index = np.arange(device.size, dtype=np.int64)
    lived = free > alloc
    time = np.concatenate([free[lived], alloc, free[~lived]])
    event = np.concatenate([-index[lived] - 1, index, -index[~lived] - 1])  # negated-minus-one: a release
    order = np.argsort(time, kind="stable")
    peak, peak_time = sweep_peaks(k, order, time, event, device, nbytes)
    return add_bytes(peak, residual), peak_time


@njit(cache=True, nogil=True)
def peaks_compiled(k: int, residual: np.ndarray, device: np.ndarray, alloc: np.ndarray, free: np.ndarray,
                   nbytes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """:func:`peaks` in one compiled call (events laid out alike, :func:`stable_order`)."""
    b = device.size
    time = np.empty(2 * b)
    event = np.empty(2 * b, np.int64)  # negated-minus-one: a release
    j = 0
    for x in range(b):
        if free[x] > alloc[x]:
            time[j] = free[x]
            event[j] = -x - 1
            j += 1
    for x in range(b):
        time[j] = alloc[x]
        event[j] = x
        j += 1
    for x in range(b):
        if not free[x] > alloc[x]:
            time[j] = free[x]
            event[j] = -x - 1
            j += 1
    order = stable_order(time)
    peak, peak_time = sweep_peaks(k, order, time, event, device, nbytes)
    for d in range(k):  # + residual, 2^63 - 1 where it would pass int64
        peak[d] = INT64_MAX if peak[d] > INT64_MAX - residual[d] else peak[d] + residual[d]
    return peak, peak_time


@njit(cache=True, nogil=True)
def stable_order(key: np.ndarray) -> np.ndarray:
    """The indices that sort ``key`` stably, as ``np.argsort(key, kind="stable")``: insertion-sorted runs
    of 32, then bottom-up merges that carry the keys along (numba's own argsort would add seconds to
    the first run's compile)."""
    n = key.size
    order = np.arange(n)
    keys = key.copy()
    for lo in range(0, n, 32):
        for i in range(lo + 1, min(lo + 32, n)):
            k, o, j = keys[i], order[i], i - 1
            while j >= lo and keys[j] > k:  # equal keys keep their order
                keys[j + 1] = keys[j]
                order[j + 1] = order[j]
                j -= 1
            keys[j + 1] = k
            order[j + 1] = o
    spare, spare_keys = np.empty(n, np.int64), np.empty(n)
    width = 32
    while width < n:
        for lo in range(0, n, 2 * width):
            mid, hi = min(lo + width, n), min(lo + 2 * width, n)
            i, j, o = lo, mid, lo
            while i < mid and j < hi:
                if keys[j] < keys[i]:  # equal keys: the left run's first
                    spare[o], spare_keys[o] = order[j], keys[j]
                    j += 1
                else:
                    spare[o], spare_keys[o] = order[i], keys[i]
                    i += 1
                o += 1
            while i < mid:
                spare[o], spare_keys[o] = order[i], keys[i]
                i += 1
                o += 1
            while j < hi:
                spare[o], spare_keys[o] = order[j], keys[j]
                j += 1
                o += 1
        order, spare = spare, order
        keys, spare_keys = spare_keys, keys
        width *= 2
    return order


@njit(cache=True, nogil=True)
def residual_bytes(k: int, place: np.ndarray, kind: np.ndarray, out_bytes: np.ndarray) -> np.ndarray:
    """Per device, the bytes of its residual ops, summed in float64 in op order (as ``np.bincount``
    with weights) and saturated at 2^63 - 1 (:func:`pardnn.emulation.memory.saturated_bytes`)."""
    total = np.zeros(k)
    for v in range(place.size):
        total[place[v]] += out_bytes[v] if kind[v] == 1 else 0  # Kind.RESIDUAL
    exact = np.empty(k, np.int64)
    for d in range(k):
        exact[d] = INT64_MAX if total[d] >= 2.0**63 else np.int64(total[d])
    return exact


def add_bytes(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``a + b`` of non-negative int64 byte counts, 2^63 - 1 where it would pass int64."""
    return np.where(a > INT64_MAX - b, INT64_MAX, a + b)


@njit(cache=True, nogil=True)
def sweep_peaks(k: int, order: np.ndarray, time: np.ndarray, event: np.ndarray, device: np.ndarray,
                 nbytes: np.ndarray):
    # in_use is exact modulo 2^64 (int64 wraps): negative once past 2^63; about, its float shadow, tells
    # when it has passed 2^64 (and wrapped back to positive).
    in_use = np.zeros(k, np.int64)
    about = np.zeros(k)
    peak = np.zeros(k, np.int64)
    peak_time = np.zeros(k)
    for j in order:
        x = event[j]
        if x >= 0:
            d = device[x]
            in_use[d] += nbytes[x]
            about[d] += nbytes[x]
            now = in_use[d] if in_use[d] >= 0 and about[d] < 1.5e19 else INT64_MAX  # past 2^64: about says
            if now > peak[d]:
                peak[d] = now
                peak_time[d] = time[j]
        else:
            x = -x - 1
            in_use[device[x]] -= nbytes[x]
            about[device[x]] -= nbytes[x]
    return peak, peak_time
