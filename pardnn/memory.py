"""Memory consumption tracker (the paper's Eq. 3) and memory potentials (``M_pot``).

Given a placement and its emulated :class:`~pardnn.emulator.Schedule`, memory in use on device
``pe`` at time ``t`` is the sum of:

1. every residual op on ``pe`` (variables, optimizer slots): its ``out_bytes`` for the whole step;
2. every normal op on ``pe``: its ``out_bytes`` from its start until its output is released — when
   its last consumer on ``pe`` has finished and its last transfer to another device has completed
   (the sender keeps the buffer until the copy lands; with neither, at its own finish);
3. every tensor received on ``pe`` from a producer on another device (any kind): from the *start*
   of its transfer — the producer's finish, when the receiver allocates the buffer the copy lands
   in — until its last consumer on ``pe`` finishes, so the bytes in flight count on both ends. A
   producer sends one copy per destination device (TensorFlow's Send/Recv pair), sized by the
   largest edge from that producer to that device.

Reference ops hold nothing of their own. Each transient term is a *buffer* ``(device, alloc, free,
bytes, owner)``. ``owner`` is the op whose finish releases the buffer — the last consumer on that
device, or the producer itself when the buffer is released by its own finish or by an outgoing
transfer landing — which is what moving an op can relieve, so ``M_pot(n, t)`` = n's own output
while n runs + every buffer owned by n live at ``t``
(the paper's Table "Terminology").

Complexity: O(|V| + |E|) to build the buffers and O(B log B) to sweep their B <= |V| + |E| events in
time order (both compiled with numba); potentials at one instant are O(B) with NumPy.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numba import njit

from pardnn.emulator import Schedule
from pardnn.graph import CostGraph, Kind
from pardnn.machine import Machine

__all__ = ["MemoryProfile", "track_memory"]


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

    def live(self, device: int | None, time_us: float) -> np.ndarray:
        """Mask of the buffers in use on ``device`` (any device if None) at ``time_us``: allocated at
        or before it and released after it (or released at it, if allocated at it too)."""
        alloc, free = self.buffer_alloc_us, self.buffer_free_us
        live = (alloc <= time_us) & ((free > time_us) | (free == alloc))
        return live if device is None else live & (self.buffer_device == device)

    def usage_all_at(self, time_us: float) -> np.ndarray:
        """Bytes in use on every device at ``time_us`` (Eq. 3)."""
        live = self.live(None, time_us)
        transient = np.bincount(self.buffer_device[live], weights=self.buffer_bytes[live],
                                minlength=self.residual_bytes.size)
        return self.residual_bytes + transient.astype(np.int64)

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


@njit(cache=True)
def _buffers(n: int, k: int, succ_ptr: np.ndarray, succ: np.ndarray, edge_bytes: np.ndarray,
             place: np.ndarray, kind: np.ndarray, out_bytes: np.ndarray, start: np.ndarray,
             finish: np.ndarray, arrival: np.ndarray):
    """Terms 2 and 3 of Eq. 3 as buffers (device, alloc, free, bytes, owner, producer)."""
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
                if finish[w] >= release:
                    release = finish[w]
                    keeper = w
            elif arrival[e] >= release:
                release = arrival[e]
                keeper = v
        if kind[v] == 0 and out_bytes[v] > 0:
            device[b] = d
            alloc[b] = start[v]
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
            i = slot[r]
            if i < 0:
                i = b
                slot[r] = b
                device[b] = r
                alloc[b] = finish[v]
                free[b] = finish[w]
                nbytes[b] = edge_bytes[e]
                owner[b] = w
                producer[b] = v
                b += 1
            else:
                if finish[w] >= free[i]:
                    free[i] = finish[w]
                    owner[i] = w
                if edge_bytes[e] > nbytes[i]:
                    nbytes[i] = edge_bytes[e]
        for i in range(first, b):
            slot[device[i]] = -1
    return device[:b], alloc[:b], free[:b], nbytes[:b], owner[:b], producer[:b]


def _peaks(k: int, residual: np.ndarray, device: np.ndarray, alloc: np.ndarray, free: np.ndarray,
           nbytes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per device, the peak of residual + live buffers and the first instant it is reached.

    At one instant: releases of buffers that lived a while (their consumer finished), then
    allocations (ops starting), then releases of buffers allocated at that same instant. Events are
    laid out in that phase order and sorted stably by time (NumPy's sort: a sort compiled by numba
    would add seconds to the first run's compile), then swept in order.
    """
    index = np.arange(device.size, dtype=np.int64)
    lived = free > alloc
    time = np.concatenate([free[lived], alloc, free[~lived]])
    event = np.concatenate([-index[lived] - 1, index, -index[~lived] - 1])  # negated-minus-one: a release
    order = np.argsort(time, kind="stable")
    peak, peak_time = _sweep_peaks(k, order, time, event, device, nbytes)
    return peak + residual, peak_time


@njit(cache=True)
def _sweep_peaks(k: int, order: np.ndarray, time: np.ndarray, event: np.ndarray, device: np.ndarray,
                 nbytes: np.ndarray):
    in_use = np.zeros(k, np.int64)
    peak = np.zeros(k, np.int64)
    peak_time = np.zeros(k)
    for j in order:
        x = event[j]
        if x >= 0:
            d = device[x]
            in_use[d] += nbytes[x]
            if in_use[d] > peak[d]:
                peak[d] = in_use[d]
                peak_time[d] = time[j]
        else:
            x = -x - 1
            in_use[device[x]] -= nbytes[x]
    return peak, peak_time


def track_memory(graph: CostGraph, machine: Machine, placement: np.ndarray, schedule: Schedule) -> MemoryProfile:
    """Memory per device over the step (Eq. 3): residual baseline, buffers, peak and time of peak."""
    k = machine.devices
    place = np.asarray(placement, dtype=np.int64)
    residual = np.bincount(place, weights=np.where(graph.kind == Kind.RESIDUAL, graph.out_bytes, 0),
                           minlength=k).astype(np.int64)
    device, alloc, free, nbytes, owner, producer = _buffers(
        graph.n, k, graph.succ_ptr, graph.succ, graph.edge_bytes, place, graph.kind, graph.out_bytes,
        schedule.start_us, schedule.finish_us, schedule.edge_arrival_us)
    peak, peak_time = _peaks(k, residual, device, alloc, free, nbytes)
    return MemoryProfile(residual, peak, peak_time, device, alloc, free, nbytes, owner, producer)
