"""Memory consumption tracker (the paper's Eq. 3) and memory potentials (``M_pot``).

:func:`track_memory` sweeps a placement's emulated :class:`~pardnn.emulation.emulator.Schedule`: per
device, residual ops for the whole step, each op's output from its start to its release, each
received tensor from the start of its transfer to its last consumer there; the sums TensorFlow does
in place are rewritten as Grappler does on a device near its limit. Usage saturates at 2^63 - 1
bytes. The result is a :class:`MemoryProfile` (peaks, their instants, the buffers). The rules and
their reasons are in docs/internals.md ("The memory tracker").
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass, field

import numpy as np
from numba import njit

from pardnn.costs.graph import CostGraph, Kind
from pardnn.costs.machine import Machine
from pardnn.emulation.emulator import Schedule
from pardnn.emulation.peaks import INT64_MAX, add_bytes, peaks, peaks_compiled, residual_bytes

__all__ = ["ACCUMULATING_TYPES", "REWRITE_FRACTION", "MemoryProfile", "accumulating_ops", "saturated_bytes",
           "track_memory", "tracked_peaks"]

# Op types TensorFlow's memory optimizer may turn into an in-place accumulation (memory_optimizer.cc,
# SchedulingPass), for at least this many inputs (it leaves two-input sums alone), when a device's
# estimated transient peak exceeds this fraction of its memory.
ACCUMULATING_TYPES = frozenset({"AddN", "AccumulateNV2"})
ACCUMULATING_MIN_INPUTS = 3
REWRITE_FRACTION = 0.8
# Bumped whenever the tracker's rules change what a placement needs: keys cached answers (max-batch probes).
MEMORY_MODEL = 2  # 2: sums done in place under pressure, as Grappler's memory optimizer does

_accumulating_cache: dict[int, tuple[weakref.ref, np.ndarray]] = {}


def accumulating_ops(graph: CostGraph) -> np.ndarray:
    """Mask of the normal ops TensorFlow can sum in place (module docstring, "In-place sums"): op type
    in :data:`ACCUMULATING_TYPES` and at least three producers feeding it data (edges of > 0 bytes).
    Read-only; cached per graph object."""
    cached = _accumulating_cache.get(id(graph))
    if cached is not None and cached[0]() is graph:
        return cached[1]
    mask = np.zeros(graph.n, dtype=bool)
    typed = [i for i, op in enumerate(graph.ops) if op in ACCUMULATING_TYPES]
    if typed:
        inputs = np.bincount(graph.edge_dst[graph.edge_bytes > 0], minlength=graph.n)
        mask[typed] = True
        mask &= (inputs >= ACCUMULATING_MIN_INPUTS) & (graph.kind == Kind.NORMAL)
    mask.flags.writeable = False
    key = id(graph)
    _accumulating_cache[key] = (weakref.ref(graph, lambda _, key=key: _accumulating_cache.pop(key, None)), mask)
    return mask


def _live(alloc: np.ndarray, free: np.ndarray, time_us: float | np.ndarray) -> np.ndarray:
    """Buffers in use at ``time_us``: allocated at or before it and released after it, or released
    at it having been allocated at it (a buffer of an op that takes no time)."""
    return (alloc <= time_us) & ((free > time_us) | ((free == alloc) & (alloc == time_us)))


@dataclass(frozen=True)
class MemoryProfile:
    """Per-device memory over one emulated step.

    Attributes
    ----------
    residual_bytes:
        Per device, the bytes held all step by residual ops.
    peak_bytes, peak_time_us:
        Per device, the highest consumption (residual + transient) and the first time it is reached.
    buffer_device, buffer_alloc_us, buffer_free_us, buffer_bytes, buffer_owner, buffer_producer:
        The transient buffers (terms 2 and 3 of Eq. 3).
    rewritten:
        Per op, whether it is a sum done in place (module docstring, "In-place sums").
    """

    residual_bytes: np.ndarray
    peak_bytes: np.ndarray
    peak_time_us: np.ndarray
    buffer_device: np.ndarray
    buffer_alloc_us: np.ndarray
    buffer_free_us: np.ndarray
    buffer_bytes: np.ndarray
    buffer_owner: np.ndarray
    buffer_producer: np.ndarray
    rewritten: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=bool))

    def live(self, device: int | None, time_us: float) -> np.ndarray:
        """Mask of the buffers in use on ``device`` (any device if None) at ``time_us``: allocated at
        or before it and released after it (or released at it, if allocated at it too)."""
        live = _live(self.buffer_alloc_us, self.buffer_free_us, time_us)
        return live if device is None else live & (self.buffer_device == device)

    def usage_all_at(self, time_us: float) -> np.ndarray:
        """Bytes in use on every device at ``time_us`` (Eq. 3)."""
        live = self.live(None, time_us)
        transient = np.bincount(self.buffer_device[live], weights=self.buffer_bytes[live],
                                minlength=self.residual_bytes.size)
        return add_bytes(self.residual_bytes, saturated_bytes(transient))

    def usage_at(self, device: int, time_us: float) -> int:
        """Bytes in use on ``device`` at ``time_us`` (Eq. 3)."""
        live = self.live(device, time_us)
        return int(self.residual_bytes[device] + self.buffer_bytes[live].sum())

    def potentials(self, graph: CostGraph, schedule: Schedule, placement: np.ndarray, device: int,
                   time_us: float) -> np.ndarray:
        """``M_pot(n, t)`` of every op for ``device`` at ``time_us`` (0 for ops elsewhere).

        Moving ``n`` off ``device`` relieves the buffers ``n`` keeps alive there at ``t`` (inputs it
        is the last local consumer of) and, while ``n`` runs, its own output.
        """
        live = self.live(device, time_us) & (self.buffer_owner != self.buffer_producer)
        pot = np.bincount(self.buffer_owner[live], weights=self.buffer_bytes[live], minlength=graph.n)
        running = ((placement == device) & (graph.kind == Kind.NORMAL)
                   & (schedule.start_us <= time_us) & (schedule.finish_us >= time_us))
        pot[running] += graph.out_bytes[running]
        return pot.astype(np.int64)


@njit(cache=True, nogil=True)
def _buffers(n: int, k: int, succ_ptr: np.ndarray, succ: np.ndarray, edge_bytes: np.ndarray,
             place: np.ndarray, kind: np.ndarray, out_bytes: np.ndarray, start: np.ndarray,
             finish: np.ndarray, arrival: np.ndarray, accumulates: np.ndarray, alloc_at: np.ndarray):
    """Terms 2 and 3 of Eq. 3 as buffers (device, alloc, free, bytes, owner, producer).

    An input of a sum done in place (``accumulates``) is released on its arrival there, not at the
    sum's finish; ``alloc_at`` is when each op allocates its output (its start, or for a sum done in
    place the arrival of its first input)."""
    m = succ.size
    size = n + m
    device = np.empty(size, np.int64)
    alloc = np.empty(size)
    free = np.empty(size)
    nbytes = np.empty(size, np.int64)
    owner = np.empty(size, np.int64)
    producer = np.empty(size, np.int64)
    slot = np.full(k, -1, np.int64)  # this producer's copy on each device, if any
    b = 0
    for v in range(n):
        d = place[v]
        # Term 2: own output until the last local consumer finishes or the last transfer lands.
        release = finish[v]
        keeper = v
        for e in range(succ_ptr[v], succ_ptr[v + 1]):
            w = succ[e]
            if place[w] == d:
                if accumulates[w] and edge_bytes[e] > 0:
                    continue  # added in place as soon as v finishes
                if finish[w] >= release:
                    release = finish[w]
                    keeper = w
            elif arrival[e] >= release:
                release = arrival[e]
                keeper = v
        if kind[v] == 0 and out_bytes[v] > 0:
            device[b] = d
            alloc[b] = alloc_at[v]
            free[b] = release
            nbytes[b] = out_bytes[v]
            owner[b] = keeper
            producer[b] = v
            b += 1
        # Term 3: one copy per remote device, from the start of its transfer (v's finish: the
        # receiver allocates the landing buffer then) to the last consumer there.
        first = b
        for e in range(succ_ptr[v], succ_ptr[v + 1]):
            w = succ[e]
            r = place[w]
            if r == d or edge_bytes[e] == 0:
                continue
            used = arrival[e] if accumulates[w] else finish[w]  # added in place when it lands
            i = slot[r]
            if i < 0:
                i = b
                slot[r] = b
                device[b] = r
                alloc[b] = finish[v]
                free[b] = used
                nbytes[b] = edge_bytes[e]
                owner[b] = w
                producer[b] = v
                b += 1
            else:
                if used >= free[i]:
                    free[i] = used
                    owner[i] = w
                if edge_bytes[e] > nbytes[i]:
                    nbytes[i] = edge_bytes[e]
        for i in range(first, b):
            slot[device[i]] = -1
    return device[:b], alloc[:b], free[:b], nbytes[:b], owner[:b], producer[:b]


def saturated_bytes(total: np.ndarray) -> np.ndarray:
    """Byte counts summed in float64 (``np.bincount`` with weights) as int64, 2^63 - 1 from 2^63 on."""
    past = total >= 2.0**63
    return np.where(past, INT64_MAX, np.where(past, 0.0, total).astype(np.int64))


@njit(cache=True, nogil=True)
def _rewritten(place: np.ndarray, candidates: np.ndarray, limits: np.ndarray, transient_peak: np.ndarray,
               peak_time: np.ndarray, device: np.ndarray, alloc: np.ndarray, free: np.ndarray, producer: np.ndarray,
               edge_src: np.ndarray, edge_dst: np.ndarray, edge_bytes: np.ndarray) -> np.ndarray:
    """Which sums are done in place: the candidates fed by an output live at the peak of a device
    whose transient peak exceeds ``REWRITE_FRACTION`` of its limit, the sum on that same device."""
    n = place.size
    rewritten = np.zeros(n, np.bool_)
    over = transient_peak > REWRITE_FRACTION * limits
    if not over.any():
        return rewritten
    live_output = np.zeros(n, np.bool_)
    for b in range(device.size):
        d, t = device[b], peak_time[device[b]]
        live = alloc[b] <= t and (free[b] > t or (free[b] == alloc[b] and alloc[b] == t))  # _live at the peak
        if over[d] and d == place[producer[b]] and live:
            live_output[producer[b]] = True
    for e in range(edge_src.size):
        src, dst = edge_src[e], edge_dst[e]
        if candidates[dst] and live_output[src] and place[src] == place[dst] and edge_bytes[e] > 0:
            rewritten[dst] = True
    return rewritten


@njit(cache=True, nogil=True)
def _accumulator_alloc(start: np.ndarray, rewritten: np.ndarray, edge_dst: np.ndarray, edge_bytes: np.ndarray,
                       arrival: np.ndarray) -> np.ndarray:
    """When each op allocates its output: its start, or for a sum done in place the arrival of its
    first input (it allocates its accumulator then)."""
    alloc_at = start.copy()
    for e in range(edge_dst.size):
        w = edge_dst[e]
        if rewritten[w] and edge_bytes[e] > 0 and arrival[e] < alloc_at[w]:
            alloc_at[w] = arrival[e]
    return alloc_at


@njit(cache=True, nogil=True)
def tracked_peaks(k: int, place: np.ndarray, succ_ptr: np.ndarray, succ: np.ndarray, edge_src: np.ndarray,
                  edge_dst: np.ndarray, edge_bytes: np.ndarray, kind: np.ndarray, out_bytes: np.ndarray,
                  candidates: np.ndarray, limits: np.ndarray, start: np.ndarray, finish: np.ndarray,
                  arrival: np.ndarray) -> np.ndarray:
    """:func:`track_memory`'s peak per device, in one compiled call (the refinement's compiled kicks,
    :mod:`pardnn.polish.kicks`, check each kept move with it). ``candidates``: :func:`accumulating_ops`."""
    n = place.size
    residual = residual_bytes(k, place, kind, out_bytes)
    device, alloc, free, nbytes, _, producer = _buffers(n, k, succ_ptr, succ, edge_bytes, place, kind, out_bytes,
                                                        start, finish, arrival, np.zeros(n, np.bool_), start)
    peak, peak_time = peaks_compiled(k, residual, device, alloc, free, nbytes)
    if not candidates.any():
        return peak
    rewritten = _rewritten(place, candidates, limits, peak - residual, peak_time, device, alloc, free, producer,
                           edge_src, edge_dst, edge_bytes)
    if not rewritten.any():
        return peak
    alloc_at = _accumulator_alloc(start, rewritten, edge_dst, edge_bytes, arrival)
    device, alloc, free, nbytes, _, producer = _buffers(n, k, succ_ptr, succ, edge_bytes, place, kind, out_bytes,
                                                        start, finish, arrival, rewritten, alloc_at)
    return peaks_compiled(k, residual, device, alloc, free, nbytes)[0]


def track_memory(graph: CostGraph, machine: Machine, placement: np.ndarray, schedule: Schedule) -> MemoryProfile:
    """Memory per device over the step (Eq. 3, with TensorFlow's in-place sums: module docstring):
    residual baseline, buffers, peak and time of peak, and the sums done in place."""
    k = machine.devices
    # Writable copies of the placement and of the schedule's read-only arrays, as the refinement's compiled
    # kicks pass theirs (tracked_peaks): the kernels below then have one signature to compile, not two.
    place = np.array(placement, dtype=np.int64)
    start, finish, arrival = (np.array(times) for times in (schedule.start_us, schedule.finish_us,
                                                            schedule.edge_arrival_us))
    residual = residual_bytes(k, place, graph.kind, graph.out_bytes)

    def sweep(accumulates: np.ndarray, alloc_at: np.ndarray):
        buffers = _buffers(graph.n, k, graph.succ_ptr, graph.succ, graph.edge_bytes, place, graph.kind,
                           graph.out_bytes, start, finish, arrival, accumulates, alloc_at)
        return buffers, peaks(k, residual, *buffers[:4])

    candidates = accumulating_ops(graph)
    buffers, (peak, peak_time) = sweep(np.zeros(graph.n, dtype=bool), start)
    if candidates.any():
        device, alloc, free, _, _, producer = buffers
        rewritten = _rewritten(place, candidates, machine.limits_bytes, peak - residual, peak_time, device, alloc,
                               free, producer, graph.edge_src, graph.edge_dst, graph.edge_bytes)
        if rewritten.any():
            # A rewritten sum allocates its accumulator when its first input arrives.
            alloc_at = _accumulator_alloc(start, rewritten, graph.edge_dst, graph.edge_bytes, arrival)
            buffers, (peak, peak_time) = sweep(rewritten, alloc_at)
            return MemoryProfile(residual, peak, peak_time, *buffers, rewritten=rewritten)
    return MemoryProfile(residual, peak, peak_time, *buffers, rewritten=np.zeros(graph.n, dtype=bool))
