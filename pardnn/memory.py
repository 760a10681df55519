"""Memory consumption tracker (the paper's Eq. 3) and memory potentials (``M_pot``).

Given a placement and its emulated :class:`~pardnn.emulator.Schedule`, memory in use on device
``pe`` at time ``t`` is the sum of:

1. every residual op on ``pe`` (variables, optimizer slots): its ``out_bytes`` for the whole step;
2. every normal op on ``pe``: its ``out_bytes`` from its start until its output is released — when
   its last consumer on ``pe`` has finished and its last transfer to another device has completed
   (the sender keeps the buffer until the copy lands; with neither, at its own finish);
3. every tensor received on ``pe`` from a producer on another device (any kind): from its arrival
   until its last consumer on ``pe`` finishes. A producer sends one copy per destination device
   (TensorFlow's Send/Recv pair), sized by the largest edge from that producer to that device.

Reference ops hold nothing of their own. Each transient term is a *buffer* ``(device, alloc, free,
bytes, owner)``. ``owner`` is the op whose finish releases the buffer — the last consumer on that
device, or the producer itself when the buffer is released by its own finish or by an outgoing
transfer landing — which is what moving an op can relieve, so ``M_pot(n, t)`` = n's own output
while n runs + every buffer owned by n live at ``t``
(the paper's Table "Terminology").

Complexity: O(|V| + |E| log |E|) with NumPy (one sort of the buffers); potentials at one instant
are O(|V| + |E|).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

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

    def live(self, device: int, time_us: float) -> np.ndarray:
        """Mask of the buffers in use on ``device`` at ``time_us``: allocated at or before it and
        released after it (or released at it, if allocated at it too)."""
        alloc, free = self.buffer_alloc_us, self.buffer_free_us
        return (self.buffer_device == device) & (alloc <= time_us) & ((free > time_us) | (free == alloc))

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


def _segment_max(values: np.ndarray, keys: np.ndarray, size: int, initial: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per key, the max of ``values`` (or ``initial``) and the index of the entry that attains it."""
    best = initial.astype(np.float64).copy()
    arg = np.full(size, -1, np.int64)
    if values.size:
        order = np.lexsort((values, keys))  # by key, then value: the last of each key is its max
        last = np.ones(order.size, bool)
        last[:-1] = keys[order[1:]] != keys[order[:-1]]
        top = order[last]
        better = values[top] >= best[keys[top]]
        best[keys[top[better]]] = values[top[better]]
        arg[keys[top[better]]] = top[better]
    return best, arg


def track_memory(graph: CostGraph, machine: Machine, placement: np.ndarray, schedule: Schedule) -> MemoryProfile:
    """Memory per device over the step (Eq. 3): residual baseline, buffers, peak and time of peak."""
    k = machine.devices
    place = np.asarray(placement, dtype=np.int64)
    start, finish = schedule.start_us, schedule.finish_us
    src, dst = graph.edge_src, graph.edge_dst
    src_dev, dst_dev = place[src], place[dst]
    local = src_dev == dst_dev

    residual = np.bincount(place, weights=np.where(graph.kind == Kind.RESIDUAL, graph.out_bytes, 0),
                           minlength=k).astype(np.int64)

    # Term 2: a normal op's own output, held until its last local consumer finishes or its last
    # outgoing transfer lands, whichever is later.
    release = np.where(local, finish[dst], schedule.edge_arrival_us)
    own_free, own_arg = _segment_max(release, src, graph.n, finish)
    own_owner = np.arange(graph.n)
    consumed = np.flatnonzero(own_arg >= 0)
    last_edge = own_arg[consumed]
    own_owner[consumed] = np.where(local[last_edge], dst[last_edge], consumed)
    normal = np.flatnonzero((graph.kind == Kind.NORMAL) & (graph.out_bytes > 0))

    # Term 3: one received copy per (producer, remote device), from arrival to its last consumer there.
    remote = np.flatnonzero(~local & (graph.edge_bytes > 0))
    pair = src[remote] * k + dst_dev[remote]
    pairs, inverse = np.unique(pair, return_inverse=True)
    npairs = pairs.size
    copy_free, copy_arg = _segment_max(finish[dst[remote]], inverse, npairs, np.zeros(npairs))
    copy_bytes = np.zeros(npairs, np.int64)
    np.maximum.at(copy_bytes, inverse, graph.edge_bytes[remote])
    copy_alloc = np.full(npairs, np.inf)
    np.minimum.at(copy_alloc, inverse, schedule.edge_arrival_us[remote])

    device = np.concatenate((place[normal], pairs % k))
    alloc = np.concatenate((start[normal], copy_alloc))
    free = np.concatenate((own_free[normal], copy_free))
    nbytes = np.concatenate((graph.out_bytes[normal], copy_bytes))
    owner = np.concatenate((own_owner[normal], dst[remote][copy_arg]))
    producer = np.concatenate((normal, pairs // k))

    peak, peak_time = _peaks(k, residual, device, alloc, free, nbytes)
    return MemoryProfile(residual, peak, peak_time, device, alloc, free, nbytes, owner, producer)


def _peaks(k: int, residual: np.ndarray, device: np.ndarray, alloc: np.ndarray, free: np.ndarray,
           nbytes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    b = device.size
    ev_device = np.concatenate((device, device))
    ev_time = np.concatenate((alloc, free))
    ev_delta = np.concatenate((nbytes, -nbytes))
    # At one instant: releases of buffers that lived a while (their consumer finished), then
    # allocations (ops starting), then releases of buffers allocated at that same instant.
    ev_phase = np.concatenate((np.ones(b, np.int8), np.where(free > alloc, 0, 2).astype(np.int8)))
    order = np.lexsort((ev_phase, ev_time, ev_device))
    ev_device, ev_time, ev_delta = ev_device[order], ev_time[order], ev_delta[order]
    running = np.cumsum(ev_delta)
    bounds = np.searchsorted(ev_device, np.arange(k + 1))
    peak = residual.astype(np.int64).copy()
    peak_time = np.zeros(k)
    for d in range(k):
        lo, hi = bounds[d], bounds[d + 1]
        if lo == hi:
            continue
        in_use = running[lo:hi] - (running[lo - 1] if lo else 0)
        i = int(np.argmax(in_use))
        if in_use[i] > 0:
            peak[d] += int(in_use[i])
            peak_time[d] = ev_time[lo + i]
    return peak, peak_time
