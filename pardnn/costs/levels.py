"""Top, bottom and weighted levels (the paper's Table "Terminology"; Sinnen 2007, Ch. 4).

``tl(n)``, ``bl(n)`` and ``w_lvl(n) = tl(n) + bl(n)``: :func:`top_levels`, :func:`bottom_levels`,
:func:`weighted_levels`, with edge weights the caller passes; :func:`walk_critical_path` (and
:func:`walk_back`) is the one critical-path walk. O(|V| + |E|) per call.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from pardnn.costs.graph import CostGraph

__all__ = ["bottom_levels", "bottom_levels_sweep", "critical_path_us", "top_levels", "top_levels_sweep", "walk_back",
           "walk_critical_path", "weighted_levels"]


@njit(cache=True, nogil=True)
def top_levels_sweep(order: np.ndarray, pred_ptr: np.ndarray, pred: np.ndarray, pred_weight: np.ndarray,
                comp: np.ndarray, active: np.ndarray) -> np.ndarray:
    top = np.zeros(order.size)
    for v in order:
        if not active[v]:
            continue
        best = 0.0
        for k in range(pred_ptr[v], pred_ptr[v + 1]):
            p = pred[k]
            if active[p]:
                length = top[p] + comp[p] + pred_weight[k]
                if length > best:
                    best = length
        top[v] = best
    return top


@njit(cache=True, nogil=True)
def bottom_levels_sweep(order: np.ndarray, succ_ptr: np.ndarray, succ: np.ndarray, succ_weight: np.ndarray,
                   comp: np.ndarray, active: np.ndarray) -> np.ndarray:
    bottom = np.zeros(order.size)
    for i in range(order.size - 1, -1, -1):
        v = order[i]
        if not active[v]:
            continue
        best = 0.0
        for k in range(succ_ptr[v], succ_ptr[v + 1]):
            s = succ[k]
            if active[s]:
                length = succ_weight[k] + bottom[s]
                if length > best:
                    best = length
        bottom[v] = comp[v] + best
    return bottom


def _inputs(graph: CostGraph, edge_weight: np.ndarray | None, active: np.ndarray | None,
            comp_us: np.ndarray | None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    weight = np.zeros(graph.m) if edge_weight is None else np.asarray(edge_weight, dtype=np.float64)
    if weight.shape != (graph.m,):
        raise ValueError(f"edge_weight has {weight.size} values for {graph.m} edges")
    mask = np.ones(graph.n, np.bool_) if active is None else np.asarray(active, dtype=np.bool_)
    if mask.shape != (graph.n,):
        raise ValueError(f"active has {mask.size} values for {graph.n} ops")
    comp = graph.comp_us if comp_us is None else np.asarray(comp_us, dtype=np.float64)
    return weight, mask, comp


def top_levels(graph: CostGraph, edge_weight: np.ndarray | None = None, active: np.ndarray | None = None,
               *, comp_us: np.ndarray | None = None) -> np.ndarray:
    """``tl`` of every op (0 for inactive ops). ``edge_weight`` in graph edge order, default 0."""
    weight, mask, comp = _inputs(graph, edge_weight, active, comp_us)
    return top_levels_sweep(graph.topo_order, graph.pred_ptr, graph.pred, weight[graph.pred_edge], comp, mask)


def bottom_levels(graph: CostGraph, edge_weight: np.ndarray | None = None, active: np.ndarray | None = None,
                  *, comp_us: np.ndarray | None = None) -> np.ndarray:
    """``bl`` of every op (0 for inactive ops). ``edge_weight`` in graph edge order, default 0."""
    weight, mask, comp = _inputs(graph, edge_weight, active, comp_us)
    return bottom_levels_sweep(graph.topo_order, graph.succ_ptr, graph.succ, weight, comp, mask)


def weighted_levels(graph: CostGraph, edge_weight: np.ndarray | None = None,
                    active: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(tl, bl, tl + bl)`` of every op."""
    top = top_levels(graph, edge_weight, active)
    bottom = bottom_levels(graph, edge_weight, active)
    return top, bottom, top + bottom


def critical_path_us(graph: CostGraph, edge_weight: np.ndarray | None = None) -> float:
    """Length of the costliest source-to-sink path (0 for an empty graph)."""
    if graph.n == 0:
        return 0.0
    return float(bottom_levels(graph, edge_weight).max())


@njit(cache=True, nogil=True)
def walk_critical_path(start: int, succ_ptr: np.ndarray, succ: np.ndarray, succ_weight: np.ndarray,
                       bottom: np.ndarray, rank: np.ndarray, owner: np.ndarray, tag: int, path: np.ndarray,
                       length: int) -> int:
    """Claim ``start`` and the successors that realise its bottom level; return the path's new length.

    Ops with ``owner >= 0`` are taken; each op the walk claims gets ``owner = tag`` and is written to
    ``path[length:]`` in order. From ``v`` the walk goes to the free successor ``s`` that maximises
    ``succ_weight + bl(s)``, ties to the lowest topological ``rank``, until ``v`` has no free
    successor. With ``bottom`` the bottom levels of the free ops and ``start`` the free op of highest
    bottom level, the path is a critical path of the free subgraph.
    """
    v = start
    while v >= 0:
        owner[v] = tag
        path[length] = v
        length += 1
        best = -1
        best_key = 0.0
        for k in range(succ_ptr[v], succ_ptr[v + 1]):
            s = succ[k]
            if owner[s] >= 0:
                continue
            key = succ_weight[k] + bottom[s]
            if best < 0 or key > best_key or (key == best_key and rank[s] < rank[best]):
                best = s
                best_key = key
        v = best
    return length


@njit(cache=True, nogil=True)
def walk_back(start: int, pred_ptr: np.ndarray, pred: np.ndarray, pred_weight: np.ndarray, comp: np.ndarray,
              top: np.ndarray, rank: np.ndarray, owner: np.ndarray, tag: int, path: np.ndarray) -> int:
    """Claim the predecessors that realise ``tl(start)``, earliest first in ``path[:back]``; return ``back``.

    The mirror of :func:`walk_critical_path` (``start`` itself is not claimed): from ``v`` to the free
    predecessor ``p`` that maximises ``tl(p) + comp(p) + pred_weight``, ties to the lowest rank.
    ``path`` needs room for |V| ops (the walk is stored reversed at its end, then moved to the front).
    """
    n = path.size
    back = 0
    v = start
    while True:
        best = -1
        best_key = -1.0
        for k in range(pred_ptr[v], pred_ptr[v + 1]):
            p = pred[k]
            if owner[p] >= 0 or p == start:
                continue
            key = top[p] + comp[p] + pred_weight[k]
            if best < 0 or key > best_key or (key == best_key and rank[p] < rank[best]):
                best = p
                best_key = key
        if best < 0:
            break
        owner[best] = tag
        back += 1
        path[n - back] = best
        v = best
    for i in range(back):  # earliest first; ascending copy is safe even when the ranges overlap
        path[i] = path[n - back + i]
    return back
