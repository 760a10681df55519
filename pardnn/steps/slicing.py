"""Step 1, stage I: graph slicing (the paper's Algorithm 1).

:func:`slice_graph` cuts the graph into K primary clusters, each the heaviest path of what is left, then
into secondary clusters (paths or single ops) until every op is in one (:class:`Clusters`). Paper choice:
how a heaviest path is walked, and ties (docs/notes-partitioner.md). O(K(|V| + |E|)) worst case.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from numba import njit

from pardnn.costs.graph import CostGraph
from pardnn.costs.levels import bottom_levels_sweep, top_levels_sweep, walk_back, walk_critical_path

__all__ = ["Clusters", "slice_graph"]


@dataclass(frozen=True)
class Clusters:
    """Result of slicing: clusters ``0..K-1`` are the primaries, the rest secondaries.

    ``cluster_of[v]`` is op ``v``'s cluster; cluster ``c`` holds ``members[ptr[c]:ptr[c + 1]]`` in path
    order (topological).
    """

    primaries: int
    cluster_of: np.ndarray
    ptr: np.ndarray
    members: np.ndarray

    @property
    def count(self) -> int:
        return int(self.ptr.size - 1)

    def cluster(self, c: int) -> np.ndarray:
        return self.members[self.ptr[c] : self.ptr[c + 1]]


@njit(cache=True, nogil=True)
def _walk(start: int, succ_ptr: np.ndarray, succ: np.ndarray, succ_weight: np.ndarray,
          pred_ptr: np.ndarray, pred: np.ndarray, pred_weight: np.ndarray, comp: np.ndarray,
          top: np.ndarray, bottom: np.ndarray, rank: np.ndarray, cluster_of: np.ndarray, cluster: int,
          path: np.ndarray) -> int:
    """Write the path through ``start`` into ``path`` (in order), give it ``cluster``, return its length."""
    back = walk_back(start, pred_ptr, pred, pred_weight, comp, top, rank, cluster_of, cluster, path)
    return walk_critical_path(start, succ_ptr, succ, succ_weight, bottom, rank, cluster_of, cluster, path, back)


@njit(cache=True, nogil=True)
def _secondaries(order: np.ndarray, succ_ptr: np.ndarray, succ: np.ndarray, succ_weight: np.ndarray,
                 pred_ptr: np.ndarray, pred: np.ndarray, pred_weight: np.ndarray, comp: np.ndarray,
                 top: np.ndarray, bottom: np.ndarray, rank: np.ndarray, cluster_of: np.ndarray,
                 members: np.ndarray, ptr: np.ndarray, first_cluster: int, first_member: int) -> int:
    """Slice every op not yet in a cluster into paths, starts taken in ``order``; return the cluster count."""
    n = comp.size
    path = np.empty(n, np.int64)
    c = first_cluster
    pos = first_member
    for start in order:
        if cluster_of[start] >= 0:
            continue
        length = _walk(start, succ_ptr, succ, succ_weight, pred_ptr, pred, pred_weight, comp, top, bottom,
                       rank, cluster_of, c, path)
        for i in range(length):
            members[pos + i] = path[i]
        pos += length
        c += 1
        ptr[c] = pos
    return c


@njit(cache=True, nogil=True)
def _heaviest(top: np.ndarray, bottom: np.ndarray, rank: np.ndarray, cluster_of: np.ndarray) -> int:
    """The op not yet in a cluster of highest weighted level ``top + bottom`` (ties: lowest topological
    rank), or -1 when every op is in one."""
    start = -1
    best = -np.inf
    for v in range(top.size):
        if cluster_of[v] < 0:
            level = top[v] + bottom[v]
            if start < 0 or level > best or (level == best and rank[v] < rank[start]):
                start, best = v, level
    return start


@njit(cache=True, nogil=True)
def _update_levels(path: np.ndarray, length: int, order: np.ndarray, rank: np.ndarray, pred_ptr: np.ndarray,
                   pred: np.ndarray, pred_weight: np.ndarray, succ_ptr: np.ndarray, succ: np.ndarray,
                   succ_weight: np.ndarray, comp: np.ndarray, cluster_of: np.ndarray, top: np.ndarray,
                   bottom: np.ndarray, dirty: np.ndarray) -> None:
    """The levels of the graph left once the ops ``path[:length]`` have joined a cluster, updated in place
    from those of the graph before: bit for bit the full sweeps of :mod:`pardnn.costs.levels` over the ops
    left (``cluster_of < 0``), those ops' levels 0.

    Only a top level downstream of the path, and a bottom level upstream of it, can change; each is
    recomputed by the sweep's own formula over the same edges, in topological order for top levels
    (decreasing for bottom levels), and an op whose level did not change stops the update there. So
    the ops scanned are those between the lowest and the highest rank reached (a byte each), the
    levels recomputed those that can change. After the first primary of the 1M-op benchmark graph,
    each later one changes at most two levels: fifteen pairs of full sweeps (0.28 s) became almost
    nothing. ``dirty`` (one flag per op, all False) is scratch, left all False.
    """
    n = top.size
    low, high = n, -1
    for i in range(length):
        v = path[i]
        top[v] = 0.0
        bottom[v] = 0.0
        low, high = _mark_left(v, succ_ptr, succ, rank, cluster_of, dirty, low, high)
    r = low
    while r <= high:  # top levels, in topological order; a successor's rank is higher
        v = order[r]
        r += 1
        if not dirty[v]:
            continue
        dirty[v] = False
        best = 0.0
        for k in range(pred_ptr[v], pred_ptr[v + 1]):
            p = pred[k]
            if cluster_of[p] < 0:
                length_ = top[p] + comp[p] + pred_weight[k]
                if length_ > best:
                    best = length_
        if best != top[v]:
            top[v] = best
            low, high = _mark_left(v, succ_ptr, succ, rank, cluster_of, dirty, low, high)
    low, high = n, -1
    for i in range(length):
        low, high = _mark_left(path[i], pred_ptr, pred, rank, cluster_of, dirty, low, high)
    r = high
    while r >= low:  # bottom levels, in reverse topological order; a predecessor's rank is lower
        v = order[r]
        r -= 1
        if not dirty[v]:
            continue
        dirty[v] = False
        best = 0.0
        for k in range(succ_ptr[v], succ_ptr[v + 1]):
            s = succ[k]
            if cluster_of[s] < 0:
                length_ = succ_weight[k] + bottom[s]
                if length_ > best:
                    best = length_
        if comp[v] + best != bottom[v]:
            bottom[v] = comp[v] + best
            low, high = _mark_left(v, pred_ptr, pred, rank, cluster_of, dirty, low, high)


@njit(cache=True, nogil=True)
def _mark_left(v: int, ptr: np.ndarray, neighbour: np.ndarray, rank: np.ndarray, cluster_of: np.ndarray,
               dirty: np.ndarray, low: int, high: int) -> tuple[int, int]:
    """Flag ``v``'s neighbours (CSR ``ptr``/``neighbour``: its successors or its predecessors) still left
    in the graph for a level update; returns ``[low, high]`` widened to their ranks."""
    for k in range(ptr[v], ptr[v + 1]):
        u = neighbour[k]
        if cluster_of[u] < 0 and not dirty[u]:
            dirty[u] = True
            low, high = min(low, rank[u]), max(high, rank[u])
    return low, high

def slice_graph(graph: CostGraph, edge_weight: np.ndarray, k: int, *,
                progress: Callable[[int, int], None] | None = None) -> Clusters:
    """Algorithm 1: K primary clusters (critical paths, levels recomputed) and secondary clusters.

    Parameters
    ----------
    graph:
        The graph to slice.
    edge_weight:
        Communication cost of every edge (graph edge order), e.g. ``machine.edge_comm_us(graph.edge_bytes)``.
    k:
        Number of primary clusters (devices).
    progress:
        Called as ``progress(done, k)`` after each primary.

    Returns
    -------
    Clusters
        ``cluster_of`` every op, with primaries ``0..k-1``.
    """
    n = graph.n
    weight = np.asarray(edge_weight, dtype=np.float64)
    if weight.shape != (graph.m,):
        raise ValueError(f"edge_weight has {weight.size} values for {graph.m} edges")
    pred_weight = weight[graph.pred_edge]
    cluster_of = np.full(n, -1, np.int64)
    members = np.empty(n, np.int64)
    ptr = np.zeros(n + k + 1, np.int64)
    path = np.empty(n, np.int64)
    rank = graph.topo_rank
    pos = 0
    # Algorithm 1, line 2, and line 7 after each primary: levels of the graph that is left (updated where
    # the path changed them: _update_levels).
    order, comp = graph.topo_order, graph.comp_us
    everything = np.ones(n, np.bool_)
    top = top_levels_sweep(order, graph.pred_ptr, graph.pred, pred_weight, comp, everything)
    bottom = bottom_levels_sweep(order, graph.succ_ptr, graph.succ, weight, comp, everything)
    dirty = np.zeros(n, np.bool_)
    for j in range(k):  # Algorithm 1, lines 3-7: K critical paths
        start = _heaviest(top, bottom, rank, cluster_of)
        if start >= 0:
            length = _walk(start, graph.succ_ptr, graph.succ, weight, graph.pred_ptr, graph.pred, pred_weight,
                           comp, top, bottom, rank, cluster_of, j, path)
            members[pos : pos + length] = path[:length]
            pos += length
            _update_levels(path, length, order, rank, graph.pred_ptr, graph.pred, pred_weight, graph.succ_ptr,
                           graph.succ, weight, comp, cluster_of, top, bottom, dirty)
        ptr[j + 1] = pos
        if progress is not None:
            progress(j + 1, k)
    # Algorithm 1, lines 8-10: secondary clusters with the last levels (no recomputation),
    # starts in order of decreasing weighted level, ties by topological rank.
    # (ops in topological order, then a stable sort: np.lexsort of both keys takes longer)
    order = order[np.argsort(-(top + bottom)[order], kind="stable")]
    count = _secondaries(order, graph.succ_ptr, graph.succ, weight, graph.pred_ptr, graph.pred, pred_weight,
                         graph.comp_us, top, bottom, rank, cluster_of, members, ptr, k, pos)
    return Clusters(primaries=k, cluster_of=cluster_of, ptr=ptr[: count + 1].copy(), members=members)
