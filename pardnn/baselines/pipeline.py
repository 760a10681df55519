"""The layer pipeline users know (GPipe, PipeDream-Flush), at op granularity: a guard candidate.

:func:`pipeline_placement` finds layers from the weight groups (step 1, :func:`layer_positions`), cuts
them into K contiguous stages by PipeDream's dynamic program (step 2, :func:`stage_split`), sends every
micro-batch copy of an op to its op's stage and returns the shorter of a 1F1B and a GPipe run order
(step 3, :func:`run_order`). Overview: docs/algorithm.md ("The pipeline candidate"); the steps' rules:
docs/notes-partitioner.md.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numba import njit

from pardnn.costs.copies import micro_batches, single_copy
from pardnn.costs.graph import CostGraph, Kind
from pardnn.costs.machine import Machine
from pardnn.emulation.checks import check_order
from pardnn.emulation.emulated import Emulated, emulate_and_track, strictly_shorter
from pardnn.emulation.emulator import heap_pop, heap_push
from pardnn.errors import InvalidPlacementError
from pardnn.placement.placer import Placed

__all__ = ["MAX_UNITS", "layer_positions", "pipeline_placement", "run_order", "stage_split"]

MAX_UNITS = 256
_FIRST, _LAST = -1, 1 << 40  # the slots of shared ops read first and of those run last


# ------------------------------------------------------------------------------------------ layers
def _weight_groups(graph: CostGraph) -> np.ndarray:
    """Each op's layer number (module docstring, step 1), -1 for ops of no weight group."""
    n = graph.n
    unit = np.where(graph.colocation >= 0, graph.colocation, len(graph.group_names) + np.arange(n))
    heavy = np.zeros(unit.max(initial=-1) + 1, bool)
    heavy[unit[graph.kind == Kind.RESIDUAL]] = True
    in_weight = heavy[unit]
    src, dst = graph.edge_src, graph.edge_dst
    read = in_weight[src] & ~in_weight[dst]
    first = np.full(heavy.size, np.iinfo(np.int64).max)
    np.minimum.at(first, unit[src[read]], graph.topo_rank[dst[read]])
    layers = np.flatnonzero(first < np.iinfo(np.int64).max)
    number = np.full(heavy.size, -1)
    number[layers[np.argsort(first[layers], kind="stable")]] = np.arange(layers.size)
    return number[unit]


@njit(cache=True, nogil=True)
def _positions_sweep(order: np.ndarray, pred_ptr: np.ndarray, pred: np.ndarray, succ_ptr: np.ndarray,
                     succ: np.ndarray, own: np.ndarray, last: int) -> tuple[np.ndarray, np.ndarray]:  # pragma: no cover
    n = order.size
    a = own.copy()
    for v in order:
        for i in range(pred_ptr[v], pred_ptr[v + 1]):
            if a[pred[i]] > a[v]:
                a[v] = a[pred[i]]
    pos = np.full(n, -1, np.int64)
    late = np.zeros(n, np.bool_)
    feeds = np.full(n, -1, np.int64)  # an op of no weight that feeds a forward op: the earliest such op's
    for v in order:
        if a[v] < 0:
            for i in range(succ_ptr[v], succ_ptr[v + 1]):
                s = succ[i]
                t = own[s] if own[s] >= 0 else (a[s] if a[s] < last else -1)
                if t >= 0 and (feeds[v] < 0 or t < feeds[v]):
                    feeds[v] = t
    for v in order:
        if own[v] >= 0:
            pos[v] = own[v]
        elif 0 <= a[v] < last:
            pos[v] = a[v]
        elif a[v] == last:
            late[v] = True
            high, low = -1, last + 1
            for i in range(pred_ptr[v], pred_ptr[v + 1]):
                p = pred[i]
                if late[p]:
                    low = min(low, pos[p])
                elif pos[p] >= 0 or feeds[p] >= 0:
                    high = max(high, max(pos[p], feeds[p]))
            pos[v] = high if high >= 0 else (low if low <= last else last)
    for k in range(n - 1, -1, -1):  # a late op goes no earlier than its consumers (a gradient's update)
        v = order[k]
        if late[v]:
            low = last + 1
            for i in range(succ_ptr[v], succ_ptr[v + 1]):
                s = pos[succ[i]]
                if s >= 0 and s < low:
                    low = s
            if low <= last and low > pos[v]:
                pos[v] = low
    for k in range(n - 1, -1, -1):  # ops of no weight: with their earliest consumer
        v = order[k]
        if a[v] < 0:
            best = -1
            for i in range(succ_ptr[v], succ_ptr[v + 1]):
                s = pos[succ[i]]
                if s >= 0 and (best < 0 or s < best):
                    best = s
            pos[v] = max(best, 0)
    return pos, late


def layer_positions(graph: CostGraph) -> tuple[np.ndarray, np.ndarray, int]:
    """Each op's position ``0..L`` (module docstring, step 1), whether it is late, and ``L + 1``.

    Colocation groups take their smallest position, and every copy its original's. O(|V| + |E|).
    """
    own = _weight_groups(graph)
    last = int(own.max(initial=-1))
    pos, late = _positions_sweep(graph.topo_order, graph.pred_ptr, graph.pred, graph.succ_ptr, graph.succ, own,
                                 max(last, 0))
    if last < 0:  # no layer at all: one position
        pos[:] = 0
        late[:] = False
    for _ in range(2):  # groups whole, copies with their originals (twice: a group may hold copies)
        grouped = graph.colocation >= 0
        smallest = np.full(len(graph.group_names), np.iinfo(np.int64).max)
        np.minimum.at(smallest, graph.colocation[grouped], pos[grouped])
        pos[grouped] = smallest[graph.colocation[grouped]]
        if graph.copy_of is not None:
            pos = pos[graph.copy_of]
            late = late[graph.copy_of]
    return pos, late, max(last, 0) + 1


# ------------------------------------------------------------------------------------------ stages
def _coarsen(work: np.ndarray) -> np.ndarray:
    """Unit of each position: at most MAX_UNITS runs of consecutive positions, equal in work."""
    if work.size <= MAX_UNITS:
        return np.arange(work.size)
    total = float(work.sum())
    if total <= 0:
        return (np.arange(work.size) * MAX_UNITS) // work.size
    before = np.cumsum(work) - work
    return np.minimum((before / total * MAX_UNITS).astype(np.int64), MAX_UNITS - 1)


def stage_split(work: np.ndarray, comm: np.ndarray, memory: np.ndarray, limits: np.ndarray | None
                ) -> np.ndarray:
    """PipeDream's dynamic program: the first unit of each stage (``cuts[0] == 0``), at most K stages.

    ``work[u]``: unit u's compute; ``comm[b]``: the time of the boundary after unit b; ``memory[s, u]``:
    unit u's bytes if on stage s (K rows); ``limits[s]``: stage s's limit (``None``: none). Minimises
    the slowest stage's compute or boundary; an empty array when no split fits the limits. O(U² K).
    """
    k, u = memory.shape
    prefix = np.concatenate(([0.0], np.cumsum(work)))
    mem_prefix = np.concatenate((np.zeros((k, 1)), np.cumsum(memory, axis=1)), axis=1)
    best = np.full((k, u), np.inf)
    back = np.zeros((k, u), np.int64)
    for s in range(k):
        for j in range(u):
            i = np.arange(j + 1)
            cost = prefix[j + 1] - prefix[i]
            if limits is not None:
                cost = np.where(mem_prefix[s, j + 1] - mem_prefix[s, i] <= limits[s], cost, np.inf)
            if s == 0:
                cost = np.where(i == 0, cost, np.inf)
            else:
                before = np.concatenate(([np.inf], best[s - 1, : j]))  # units 0..i-1 on stages < s
                edge = np.concatenate(([0.0], comm[: j]))
                cost = np.maximum(cost, np.maximum(before, edge))
            choice = int(np.argmin(cost))
            best[s, j], back[s, j] = cost[choice], choice
    stages = int(np.argmin(best[:, u - 1]))
    if not np.isfinite(best[stages, u - 1]):
        return np.array([], np.int64)
    cuts, j = [], u - 1
    for s in range(stages, -1, -1):
        cuts.append(int(back[s, j]))
        j = cuts[-1] - 1
    return np.array(cuts[::-1], np.int64)


def _split(graph: CostGraph, machine: Machine, pos: np.ndarray, late: np.ndarray, positions: int
           ) -> tuple[np.ndarray, bool]:
    """Each op's stage, and whether the split respected the memory limits (module docstring, step 2)."""
    k, m = machine.devices, micro_batches(graph.micro_batch)
    unit_of = _coarsen(np.bincount(pos, weights=graph.comp_us, minlength=positions))
    unit = unit_of[pos]
    units = int(unit_of.max(initial=0)) + 1
    work = np.bincount(unit, weights=graph.comp_us, minlength=units)
    low, high = np.minimum(unit[graph.edge_src], unit[graph.edge_dst]), np.maximum(unit[graph.edge_src],
                                                                                   unit[graph.edge_dst])
    crossing = low < high
    step = np.zeros(units + 1)
    one = single_copy(graph.micro_batch, graph.n)
    crossing &= one[graph.edge_src] & one[graph.edge_dst]  # per micro-batch (the emulator's links never contend)
    np.add.at(step, low[crossing], graph.edge_bytes[crossing] / machine.bandwidth_Bps * 1e6)
    np.add.at(step, high[crossing], -graph.edge_bytes[crossing] / machine.bandwidth_Bps * 1e6)
    comm = np.cumsum(step)[:units] + machine.latency_us
    residual = np.where(graph.kind == Kind.RESIDUAL, graph.out_bytes, 0).astype(np.float64)
    activation = np.where((graph.kind == Kind.NORMAL) & one & ~late, graph.out_bytes, 0).astype(np.float64)
    res_u = np.bincount(unit, weights=residual, minlength=units)
    act_u = np.bincount(unit, weights=activation, minlength=units)
    memory = np.array([res_u + act_u * min(m, k - s) for s in range(k)])
    limits = machine.limits_bytes.astype(np.float64) if machine.bounded else None
    cuts = stage_split(work, comm, memory, limits)
    fitted = cuts.size > 0
    if not fitted:
        cuts = stage_split(work, comm, memory, None)
    stage_of_unit = np.searchsorted(cuts, np.arange(units), side="right") - 1
    return stage_of_unit[unit].astype(np.int64), fitted or limits is None


# ------------------------------------------------------------------------------------------ orders
def _slots(stage: int, stages: int, micro: int, schedule: str) -> np.ndarray:
    """``[forward, backward]`` slot of each micro-batch on ``stage`` under ``schedule`` (1f1b or gpipe)."""
    slots = np.empty((2, micro), np.int64)
    if schedule == "gpipe":
        slots[0], slots[1] = np.arange(micro), micro + np.arange(micro)
        return slots
    warm = min(micro, stages - 1 - stage)
    sequence = [(0, f) for f in range(warm)]
    f, b = warm, 0
    while f < micro or b < micro:
        if f < micro:
            sequence.append((0, f))
            f += 1
        if b < micro:
            sequence.append((1, b))
            b += 1
    for slot, (phase, m) in enumerate(sequence):
        slots[phase, m] = slot
    return slots


@njit(cache=True, nogil=True)
def _kahn(key: np.ndarray, rank: np.ndarray, pred_ptr: np.ndarray, succ_ptr: np.ndarray, succ: np.ndarray,
          placement: np.ndarray, devices: int) -> np.ndarray:  # pragma: no cover
    n = key.size
    indegree = pred_ptr[1:] - pred_ptr[:-1]
    time = np.empty(n, np.float64)
    tie = np.empty(n, np.int64)
    item = np.empty(n, np.int64)
    size = 0
    for v in range(n):
        if indegree[v] == 0:
            heap_push(time, tie, item, 0, size, float(key[v]), rank[v], v)
            size += 1
    count = np.zeros(devices, np.int64)
    order = np.empty(n, np.int64)
    while size > 0:
        v = heap_pop(time, tie, item, 0, size)
        size -= 1
        d = placement[v]
        order[v] = count[d]
        count[d] += 1
        for i in range(succ_ptr[v], succ_ptr[v + 1]):
            w = succ[i]
            indegree[w] -= 1
            if indegree[w] == 0:
                heap_push(time, tie, item, 0, size, float(key[w]), rank[w], w)
                size += 1
    return order


def run_order(graph: CostGraph, placement: np.ndarray, late: np.ndarray, schedule: str) -> np.ndarray:
    """Each op's position on its device under ``schedule`` (module docstring, step 3): a Kahn sweep
    taking the ready op of the smallest slot (ties by topological rank). O((|V| + |E|) log |V|)."""
    stages = int(placement.max(initial=0)) + 1
    micro = micro_batches(graph.micro_batch)
    batch = graph.micro_batch if graph.micro_batch is not None else np.zeros(graph.n, np.int64)
    table = np.stack([_slots(s, stages, micro, schedule) for s in range(stages)])
    backward = (late & (placement < stages - 1)).astype(np.int64)
    key = np.where(late, _LAST, _FIRST)
    mine = batch >= 0
    key[mine] = table[placement[mine], backward[mine], batch[mine]]
    by_device = np.lexsort((graph.topo_rank, key, placement))  # each device strictly by (slot, rank)
    order = np.empty(graph.n, np.int64)
    first = np.searchsorted(placement[by_device], np.arange(stages))
    order[by_device] = np.arange(graph.n) - first[placement[by_device]]
    try:
        return check_order(graph, placement, order)
    except InvalidPlacementError:  # a cycle through the devices: the sweep's order, valid by construction
        return _kahn(key, graph.topo_rank, graph.pred_ptr, graph.succ_ptr, graph.succ, placement, stages)


def _better(a: Emulated, b: Emulated | None, machine: Machine) -> bool:
    if b is None:
        return True
    if a.fits(machine) != b.fits(machine):
        return a.fits(machine)
    return strictly_shorter(a.makespan_us, b.makespan_us)


def pipeline_placement(graph: CostGraph, machine: Machine) -> Placed:
    """The pipeline placement and its run order (module docstring).

    Returns :class:`~pardnn.placement.placer.Placed`: the placement, ``details`` (``stages`` used,
    ``micro_batches``, ``layers`` (positions), ``schedule``: ``1f1b``, ``gpipe`` or ``readiness``
    (TensorFlow's order, kept when neither pipeline order is shorter: then no order is returned),
    each one's emulated makespan, ``memory_respected``: the split met the memory model of step 2)
    and the order.
    """
    if graph.n == 0 or machine.devices < 2:
        return Placed(np.zeros(graph.n, np.int64), {"stages": 1, "schedule": None}, None)
    pos, late, positions = layer_positions(graph)
    placement, fitted = _split(graph, machine, pos, late, positions)
    micro = micro_batches(graph.micro_batch)
    details: dict[str, Any] = {"stages": int(placement.max()) + 1, "micro_batches": micro, "layers": positions,
                               "schedule": "readiness", "makespans_us": {}, "memory_respected": fitted}
    if micro == 1:  # one micro-batch: nothing to interleave, each stage runs its ops as they come
        return Placed(placement, details, None)
    best, name, makespans = None, None, {}
    for schedule in ("1f1b", "gpipe", "readiness"):
        order = None if schedule == "readiness" else run_order(graph, placement, late, schedule)
        answer = emulate_and_track(graph, machine, placement, order=order)
        makespans[schedule] = answer.makespan_us
        if _better(answer, best, machine):
            best, name = answer, schedule
    assert best is not None
    details.update(schedule=name, makespans_us=makespans)
    return Placed(placement, details, best.order)
