"""The scheduler emulator of the paper (Section 3.2, "Scheduler Emulator").

:func:`emulate` (or :class:`Emulator`) gives a placement's :class:`Schedule`: per device one op at a time
from a FIFO ready queue, inputs from another device arriving ``latency + bytes / bandwidth`` later; with
``order`` each device runs by upward rank or by given positions. Paper choice: FIFO ties by
topological rank, events at one instant applied together (docs/notes-partitioner.md).
O((|V| + |E|) log |V|), compiled with numba.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numba import njit

from pardnn.costs.graph import CostGraph
from pardnn.costs.levels import bottom_levels_sweep
from pardnn.costs.machine import Machine
from pardnn.emulation.checks import chain_next, check_order, check_placement

__all__ = ["UPWARD_RANK", "Emulator", "RunOrder", "Schedule", "emulate", "emulate_sweep", "heap_pop", "heap_push",
           "upward_rank", "upward_rank_sweep"]


@dataclass(frozen=True)
class Schedule:
    """Result of :func:`emulate`: per-op times (µs) under one placement."""

    start_us: np.ndarray
    finish_us: np.ndarray
    makespan_us: float
    edge_arrival_us: np.ndarray  # per edge (graph edge order): when its data is available to the consumer
    sequence: np.ndarray | None = None  # per op: how many ops started before it (on any device); the run order


@njit(cache=True, nogil=True)
def heap_push(time: np.ndarray, key: np.ndarray, item: np.ndarray, base: int, size: int,
               t: float, k: int, v: int) -> None:
    # Min-heap on (time, key) stored at [base, base + size); sift the new entry up.
    i = size
    while i > 0:
        parent = (i - 1) // 2
        pt = time[base + parent]
        if pt < t or (pt == t and key[base + parent] <= k):
            break
        time[base + i] = pt
        key[base + i] = key[base + parent]
        item[base + i] = item[base + parent]
        i = parent
    time[base + i] = t
    key[base + i] = k
    item[base + i] = v


@njit(cache=True, nogil=True)
def heap_pop(time: np.ndarray, key: np.ndarray, item: np.ndarray, base: int, size: int) -> int:
    # Removes the top of the heap of ``size`` entries and returns its item.
    top = item[base]
    size -= 1
    t = time[base + size]
    k = key[base + size]
    v = item[base + size]
    i = 0
    while True:
        child = 2 * i + 1
        if child >= size:
            break
        right = child + 1
        if right < size and (time[base + right] < time[base + child] or
                             (time[base + right] == time[base + child] and key[base + right] < key[base + child])):
            child = right
        ct = time[base + child]
        if t < ct or (t == ct and k <= key[base + child]):
            break
        time[base + i] = ct
        key[base + i] = key[base + child]
        item[base + i] = item[base + child]
        i = child
    time[base + i] = t
    key[base + i] = k
    item[base + i] = v
    return top


@njit(cache=True, nogil=True)
def emulate_sweep(n: int, devices: int, succ_ptr: np.ndarray, succ: np.ndarray, edge_comm: np.ndarray,
                  pred_ptr: np.ndarray, placement: np.ndarray, comp: np.ndarray, topo_rank: np.ndarray,
                  priority: np.ndarray, chain_next: np.ndarray, release: np.ndarray):
    """The compiled sweep of :class:`Emulator` (arguments in :class:`~pardnn.costs.graph.CostGraph`'s CSR form).

    ``release`` (empty: none): the earliest time each op may start, whatever its inputs (a variable's
    update waits for its gradient's allreduce, :mod:`pardnn.emulation.allreduce`).

    Returns ``(start, finish, makespan, edge_arrival, sequence)``.
    """
    # ``priority`` empty: each device's queue is FIFO by readiness; else ordered by it (lowest first).
    # ``chain_next`` (empty: none): the op each op's device runs next in an enforced order; that op
    # waits for this one to finish, as a control dependency makes it wait.
    fifo = priority.size == 0
    chained = chain_next.size > 0
    sequence = np.zeros(n, np.int64)
    started = 0
    start = np.zeros(n)
    finish = np.zeros(n)
    ready = release.copy() if release.size > 0 else np.zeros(n)
    arrival = np.zeros(succ.size)
    indegree = _indegrees(n, pred_ptr, chain_next)
    qbase, qsize, qtime, qkey, qitem = _device_queues(n, devices, placement)
    etime, ekey, eitem, esize = _event_heap(n, devices, indegree, ready)
    busy = np.zeros(devices, np.bool_)
    # The devices that went idle or got a ready op in this instant: the only ones that may start an op
    # (a scan of every device at each of the 1.2M instants of a 1M-op step took a sixth of the sweep).
    waiting, listed, count = np.empty(devices, np.int64), np.zeros(devices, np.bool_), 0
    makespan = 0.0
    while esize > 0:
        now = etime[0]
        while esize > 0 and etime[0] <= now:
            kind = ekey[0]
            v = heap_pop(etime, ekey, eitem, 0, esize)
            esize -= 1
            d = placement[v]
            if kind == 0:
                busy[d] = False
                if not listed[d]:
                    listed[d], waiting[count], count = True, d, count + 1
                if finish[v] > makespan:
                    makespan = finish[v]
                for k in range(succ_ptr[v], succ_ptr[v + 1]):
                    w = succ[k]
                    at = finish[v] if placement[w] == d else finish[v] + edge_comm[k]
                    arrival[k] = at
                    if at > ready[w]:
                        ready[w] = at
                    indegree[w] -= 1
                    if indegree[w] == 0:
                        heap_push(etime, ekey, eitem, 0, esize, ready[w], 1, w)
                        esize += 1
                if chained and chain_next[v] >= 0:
                    esize = _chain_wait(v, chain_next[v], finish, ready, indegree, etime, ekey, eitem, esize)
            else:
                heap_push(qtime, qkey, qitem, qbase[d], qsize[d], ready[v] if fifo else priority[v], topo_rank[v], v)
                qsize[d] += 1
                if not busy[d] and not listed[d]:
                    listed[d], waiting[count], count = True, d, count + 1
        # Every idle device with queued work starts its oldest ready op (or its first by priority) now, in
        # device order (the order of ``sequence``); an idle device not listed got no work.
        _sort_few(waiting, count)
        for i in range(count):
            d = waiting[i]
            listed[d] = False
            if not busy[d] and qsize[d] > 0:
                v = heap_pop(qtime, qkey, qitem, qbase[d], qsize[d])
                qsize[d] -= 1
                busy[d] = True
                start[v] = now
                sequence[v] = started
                started += 1
                finish[v] = now + comp[v]
                heap_push(etime, ekey, eitem, 0, esize, finish[v], 0, v)
                esize += 1
        count = 0
    return start, finish, makespan, arrival, sequence


@njit(cache=True, nogil=True)
def _event_heap(n: int, devices: int, indegree: np.ndarray,
                ready: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """The emulator's event heap ``(time, key, item)`` and its size, holding the ops without inputs, each
    ready at its release time (0 without one).

    Key 0: an op finishes; key 1: an op becomes ready (its inputs have arrived). An op is pushed
    ready once and finishing while it runs, one at a time per device: n + devices entries.
    """
    etime, ekey, eitem = np.zeros(n + devices), np.zeros(n + devices, np.int64), np.zeros(n + devices, np.int64)
    esize = 0
    for v in range(n):
        if indegree[v] == 0:
            heap_push(etime, ekey, eitem, 0, esize, ready[v], 1, v)
            esize += 1
    return etime, ekey, eitem, esize


@njit(cache=True, nogil=True)
def _chain_wait(v: int, w: int, finish: np.ndarray, ready: np.ndarray, indegree: np.ndarray, etime: np.ndarray,
                ekey: np.ndarray, eitem: np.ndarray, esize: int) -> int:
    """``w``, next after ``v`` on its device in an enforced order, waits for ``v`` to finish; it is pushed
    ready once nothing else holds it. Returns the event count."""
    if finish[v] > ready[w]:
        ready[w] = finish[v]
    indegree[w] -= 1
    if indegree[w] == 0:
        heap_push(etime, ekey, eitem, 0, esize, ready[w], 1, w)
        esize += 1
    return esize


@njit(cache=True, nogil=True, inline="always")
def _sort_few(values: np.ndarray, count: int) -> None:
    """Sort ``values[:count]`` in place (a few devices at most: insertion sort)."""
    for i in range(1, count):
        value = values[i]
        j = i
        while j > 0 and values[j - 1] > value:
            values[j] = values[j - 1]
            j -= 1
        values[j] = value


@njit(cache=True, nogil=True)
def _indegrees(n: int, pred_ptr: np.ndarray, chain_next: np.ndarray) -> np.ndarray:
    """Each op's count of inputs, plus one when an enforced order (``chain_next``) chains it after an op."""
    indegree = np.empty(n, np.int64)
    for v in range(n):
        indegree[v] = pred_ptr[v + 1] - pred_ptr[v]
    if chain_next.size > 0:
        for v in range(n):
            if chain_next[v] >= 0:
                indegree[chain_next[v]] += 1
    return indegree


@njit(cache=True, nogil=True)
def _device_queues(n: int, devices: int,
                   placement: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Empty device ready queues: one heap per device in a shared buffer, sized by the ops it holds.

    Returns each device's ``(base, size)`` in the buffer and the buffer's ``(time, key, item)``
    columns (for :func:`heap_push` and :func:`heap_pop`).
    """
    per_device = np.zeros(devices, np.int64)
    for v in range(n):
        per_device[placement[v]] += 1
    qbase = np.zeros(devices, np.int64)
    for d in range(1, devices):
        qbase[d] = qbase[d - 1] + per_device[d - 1]
    return qbase, np.zeros(devices, np.int64), np.zeros(n), np.zeros(n, np.int64), np.zeros(n, np.int64)


# How each device picks its next op (one parameter, ``order``, everywhere):
# ``None``: in order of readiness (FIFO, TensorFlow's executor); UPWARD_RANK: its ready op of highest
# upward rank under the placement emulated (the list schedule :mod:`pardnn.polish.order` enforces); an int
# array: each op's position in its device's sequence, enforced (each op also waits for the one before
# it on its device, as the control dependencies of :func:`pardnn.tf.apply` make it wait).
UPWARD_RANK = "upward_rank"
RunOrder = None | str | np.ndarray


def emulate(graph: CostGraph, machine: Machine, placement: np.ndarray, order: RunOrder = None,
            release: np.ndarray | None = None) -> Schedule:
    """Emulate one training step of ``graph`` placed by ``placement`` on ``machine``.

    Parameters
    ----------
    graph, machine:
        What runs and where.
    placement:
        Device index (0..K-1) of every op; validated by :func:`pardnn.emulation.checks.check_placement`.
    order:
        How each device picks its next op (:data:`RunOrder`): ``None`` in order of readiness,
        :data:`UPWARD_RANK`, or each op's position in its device's sequence, enforced (validated by
        :func:`pardnn.emulation.checks.check_order`).
    release:
        Each op's earliest start in µs (``None``: as soon as its inputs arrive); the allreduce model
        (:mod:`pardnn.emulation.allreduce`) holds each variable's update until its gradient is averaged.

    Returns
    -------
    Schedule
        Start and finish time of every op, per-edge arrival time, and the makespan (µs).
    """
    place = check_placement(graph, machine, placement)
    if isinstance(order, np.ndarray) or (order is not None and not isinstance(order, str)):
        order = check_order(graph, place, order)
    if release is not None:
        release = np.asarray(release, dtype=np.float64)
        if release.shape != (graph.n,) or not np.all(np.isfinite(release)) or (release < 0).any():
            raise ValueError(f"release: expected {graph.n} finite times >= 0 (one per op of {graph.name!r})")
    return Emulator(graph, machine, order=order)(place, release)


class Emulator:
    """:func:`emulate` for many placements of one graph on one machine, as a local search needs.

    The per-edge transfer costs are computed once, and a placement is *not* validated: the caller
    passes an int64 array of |V| devices in 0..K-1 that it derived from a checked one (an
    out-of-range device would index out of bounds in the compiled sweep). On a 30-op graph this
    takes an emulation from about 9 µs to 4 µs (the rest is the compiled sweep and the call).

    ``order`` is :func:`emulate`'s (:data:`RunOrder`), the same for every placement emulated: with
    :data:`UPWARD_RANK` each placement's own upward rank (:func:`upward_rank`, an O(|V| + |E|) sweep
    per call) orders the queues; positions (dense per device, as :func:`pardnn.emulation.checks.check_order`
    returns them) are enforced under each placement emulated.
    """

    def __init__(self, graph: CostGraph, machine: Machine, order: RunOrder = None) -> None:
        self._graph, self._devices = graph, machine.devices
        self._edge_comm = machine.edge_comm_us(graph.succ_bytes)
        self._ranked = isinstance(order, str)
        if self._ranked and order != UPWARD_RANK:
            raise ValueError(f"order={order!r}: expected None (order of readiness), {UPWARD_RANK!r} or positions")
        self._positions = None if order is None or self._ranked else np.asarray(order, dtype=np.int64)
        if self._positions is not None and self._positions.shape != (graph.n,):
            raise ValueError(f"order has {self._positions.size} positions for the {graph.n} ops of {graph.name!r}")

    def __call__(self, placement: np.ndarray, release: np.ndarray | None = None) -> Schedule:
        """Emulate ``placement``; ``release``: each op's earliest start (µs), or ``None``."""
        graph = self._graph
        placement = writable_int64(placement)  # one compiled signature, whether the caller's array is frozen or not
        priority = _READINESS
        if self._ranked:
            priority = -upward_rank_sweep(placement, graph.succ_ptr, graph.succ, self._edge_comm, graph.comp_us,
                                          graph.topo_order)
        chain = _NO_CHAIN if self._positions is None else chain_next(placement, self._positions)
        start, finish, makespan, arrival, sequence = emulate_sweep(
            graph.n, self._devices, graph.succ_ptr, graph.succ, self._edge_comm, graph.pred_ptr, placement,
            graph.comp_us, graph.topo_rank, priority, chain,
            _NO_RELEASE if release is None else np.ascontiguousarray(release, dtype=np.float64))
        for array in (start, finish, arrival, sequence):
            array.flags.writeable = False
        return Schedule(start, finish, float(makespan), arrival, sequence)


def writable_int64(array: np.ndarray) -> np.ndarray:
    """``array`` as a writable C-contiguous int64 array (itself when it is one, else a copy): numba compiles a
    kernel once per argument type, and a read-only array is another type than a writable one, so the
    kernels take placements in one form whether a caller froze them or not (and the compiled refinement,
    whose arrays are writable, reuses the same compilation)."""
    array = np.asarray(array)
    if array.dtype == np.int64 and array.flags.writeable and array.flags.c_contiguous:
        return array
    return np.array(array, dtype=np.int64)


_NO_CHAIN = np.zeros(0, np.int64)
_NO_RELEASE = np.zeros(0)  # no release times: every op may start once its inputs have arrived
_READINESS = np.zeros(0)  # no priority: each device's queue in order of readiness


def upward_rank(graph: CostGraph, machine: Machine, placement: np.ndarray) -> np.ndarray:
    """Each op's upward rank under ``placement``: its compute plus the longest path after it, counting
    the transfer time of cut edges only (HEFT's rank, with the placement known). O(|V| + |E|)."""
    return upward_rank_sweep(writable_int64(placement), graph.succ_ptr, graph.succ,
                             machine.edge_comm_us(graph.succ_bytes), graph.comp_us, graph.topo_order)


@njit(cache=True, nogil=True)
def upward_rank_sweep(placement: np.ndarray, succ_ptr: np.ndarray, succ: np.ndarray, succ_comm: np.ndarray,
                      comp: np.ndarray, topo_order: np.ndarray) -> np.ndarray:
    """The compiled sweep of :func:`upward_rank` (``succ_comm``: each successor edge's transfer time)."""
    cut_comm = np.zeros(succ_comm.size)
    for v in range(placement.size):
        for k in range(succ_ptr[v], succ_ptr[v + 1]):
            if placement[succ[k]] != placement[v]:
                cut_comm[k] = succ_comm[k]
    return bottom_levels_sweep(topo_order, succ_ptr, succ, cut_comm, comp, np.ones(placement.size, np.bool_))
