"""The critical-path placer of Mayer, Mayer and Laich (DIDL '17), the paper's "CP" baseline.

:func:`critical_path_placement` puts the critical path (compute plus every edge's transfer, as if cut;
:func:`critical_path_ops`) on device 0 and every other op, in topological order, on the least-loaded
device with memory for it, colocation groups whole. Its memory model: docs/notes-partitioner.md.
O(K|V| + |E|).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numba import njit

from pardnn.costs.graph import CostGraph, Kind
from pardnn.costs.levels import bottom_levels, walk_critical_path
from pardnn.costs.machine import Machine
from pardnn.emulation.memory import saturated_bytes

__all__ = ["critical_path_ops", "critical_path_placement"]


def critical_path_ops(graph: CostGraph, edge_weight: np.ndarray) -> tuple[np.ndarray, float]:
    """A critical path of ``graph`` under ``edge_weight``: its ops in path order, and its length (µs).

    Starts at the op of highest bottom level (ties to the lowest topological rank, which makes it a
    source) and follows the edges that realise the bottom levels. O(|V| + |E|).
    """
    if graph.n == 0:
        return np.zeros(0, np.int64), 0.0
    weight = np.asarray(edge_weight, dtype=np.float64)
    bottom = bottom_levels(graph, weight)
    heaviest = np.flatnonzero(bottom == bottom.max())
    start = int(heaviest[np.argmin(graph.topo_rank[heaviest])])
    on_path = np.full(graph.n, -1, np.int64)
    path = np.empty(graph.n, np.int64)
    length = walk_critical_path(start, graph.succ_ptr, graph.succ, weight, bottom, graph.topo_rank, on_path, 0, path, 0)
    return path[:length].copy(), float(bottom[start])


@njit(cache=True, nogil=True)
def _greedy(order: np.ndarray, placement: np.ndarray, group: np.ndarray, group_device: np.ndarray,
            unit_comp: np.ndarray, unit_bytes: np.ndarray, pred_ptr: np.ndarray, pred: np.ndarray,
            pred_bytes: np.ndarray, limits: np.ndarray, load: np.ndarray, used: np.ndarray) -> int:
    """Place every op with ``placement < 0`` in ``order``; return how many ops left their device over
    its limit in the model (an op is checked once its device and its received bytes are charged)."""
    k = load.size
    incoming = np.zeros(k, np.int64)
    overflow = 0
    for v in order:
        # Bytes v would receive on each device: every edge from a producer placed elsewhere.
        incoming[:] = 0
        received = 0
        for j in range(pred_ptr[v], pred_ptr[v + 1]):
            incoming[placement[pred[j]]] += pred_bytes[j]
            received += pred_bytes[j]
        g = group[v]
        if placement[v] < 0 and g >= 0 and group_device[g] >= 0:
            placement[v] = group_device[g]
        if placement[v] < 0:
            need_comp = unit_comp[v] if g < 0 else unit_comp[order.size + g]
            need_bytes = unit_bytes[v] if g < 0 else unit_bytes[order.size + g]
            best = -1
            for d in range(k):  # the least-loaded device with room (Mayer et al.)
                if used[d] + need_bytes + received - incoming[d] <= limits[d] and (best < 0 or load[d] < load[best]):
                    best = d
            if best < 0:  # no room anywhere: the least-loaded device
                best = 0
                for d in range(1, k):
                    if load[d] < load[best]:
                        best = d
            placement[v] = best
            load[best] += need_comp
            used[best] += need_bytes
            if g >= 0:
                group_device[g] = best
        # On the critical path, following its group or just placed: its own bytes are charged.
        d = placement[v]
        used[d] += received - incoming[d]
        if used[d] > limits[d]:
            overflow += 1
    return overflow


def critical_path_placement(graph: CostGraph, machine: Machine) -> tuple[np.ndarray, dict[str, Any]]:
    """The placement of :func:`critical_path` and its details, without the evaluation (for the guard)."""
    n, k = graph.n, machine.devices
    weight = machine.edge_comm_us(graph.edge_bytes)
    path, path_us = critical_path_ops(graph, weight)
    groups = len(graph.group_names)
    own_bytes = np.where(graph.kind == Kind.REFERENCE, 0, graph.out_bytes).astype(np.int64)
    # Units 0..n-1 are the ops, n..n+groups-1 the colocation groups (their members' totals).
    in_group = graph.colocation >= 0
    unit_comp = np.concatenate((graph.comp_us, np.bincount(graph.colocation[in_group],
                                                           weights=graph.comp_us[in_group], minlength=groups)))
    group_bytes = np.bincount(graph.colocation[in_group], weights=own_bytes[in_group], minlength=groups)
    unit_bytes = np.concatenate((own_bytes, saturated_bytes(group_bytes)))
    placement = np.full(n, -1, np.int64)
    group_device = np.full(groups, -1, np.int64)
    pinned_groups = np.unique(graph.colocation[path][graph.colocation[path] >= 0])
    group_device[pinned_groups] = 0
    pinned = np.zeros(n, np.bool_)
    pinned[path] = True
    pinned |= in_group & np.isin(graph.colocation, pinned_groups)
    placement[pinned] = 0
    load = np.zeros(k)
    used = np.zeros(k, np.int64)
    load[0] = graph.comp_us[pinned].sum()
    used[0] = own_bytes[pinned].sum()
    limits = machine.limits_bytes if machine.bounded else np.full(k, np.iinfo(np.int64).max // 2, np.int64)
    overflow = _greedy(graph.topo_order, placement, graph.colocation, group_device, unit_comp, unit_bytes,
                       graph.pred_ptr, graph.pred, graph.pred_bytes, limits, load, used)
    details = {
        "critical_path_ops": int(path.size),
        "critical_path_us": path_us,
        "pinned_ops": int(pinned.sum()),
        "memory_overflow_ops": overflow,
    }
    return placement, details
