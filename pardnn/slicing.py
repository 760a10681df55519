"""Step 1, stage I: graph slicing (the paper's Algorithm 1).

The graph is cut into K *primary* clusters — each the heaviest (critical) path of the graph that is
left once the earlier ones are removed, with weighted levels recomputed after each — and then into
*secondary* clusters (paths or single ops) found with the last levels, without recomputation, until
every op belongs to a cluster. Edge weights are communication costs as if every edge were cut
(``latency + bytes / bandwidth``), as the paper's levels count computation and communication.

How a heaviest path is found (the paper: "traversing the graph using the computed w_lvls as
priorities until reaching a dead-end"): start at the unvisited op of highest weighted level, then
extend forward through the unvisited successor ``s`` that maximises ``comm(v, s) + bl(s)`` and
backward through the unvisited predecessor ``p`` that maximises ``tl(p) + comp(p) + comm(p, v)``,
each until no unvisited neighbour is left. With fresh levels this is exactly a critical path of the
remaining graph (the path through the heaviest op, continued by the edges that realise its top and
bottom levels); with stale levels it is a heavy path. A primary can be empty when fewer than K
paths exist (an empty or tiny graph).

Ties are broken deterministically: the lowest topological rank wins (among start ops and among
neighbours).

Complexity: O(K(|V| + |E|)) for the K + 1 level computations, O(|V| log |V|) for ordering the
secondary starts once, and O(|V| + |E|) for all path walks (an op joins one path; an edge is
scanned from each end at most once per walk that reaches that end).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from numba import njit

from pardnn.graph import CostGraph
from pardnn.levels import bottom_levels_sweep, top_levels_sweep, walk_back, walk_critical_path

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
    # Algorithm 1, line 2, and line 7 after each primary: levels of the graph that is left.
    order, comp = graph.topo_order, graph.comp_us

    def levels(active: np.ndarray) -> tuple[np.ndarray, np.ndarray]:  # the predecessor weights gathered once
        return (top_levels_sweep(order, graph.pred_ptr, graph.pred, pred_weight, comp, active),
                bottom_levels_sweep(order, graph.succ_ptr, graph.succ, weight, comp, active))

    top, bottom = levels(np.ones(n, np.bool_))
    for j in range(k):  # Algorithm 1, lines 3-7: K critical paths
        start = _heaviest(top, bottom, rank, cluster_of)
        if start >= 0:
            length = _walk(start, graph.succ_ptr, graph.succ, weight, graph.pred_ptr, graph.pred, pred_weight,
                           comp, top, bottom, rank, cluster_of, j, path)
            members[pos : pos + length] = path[:length]
            pos += length
            top, bottom = levels(cluster_of < 0)
        ptr[j + 1] = pos
        if progress is not None:
            progress(j + 1, k)
    # Algorithm 1, lines 8-10: secondary clusters with the last levels (no recomputation),
    # starts in order of decreasing weighted level, ties by topological rank.
    level = top + bottom
    order = np.lexsort((rank, -level)).astype(np.int64)
    count = _secondaries(order, graph.succ_ptr, graph.succ, weight, graph.pred_ptr, graph.pred, pred_weight,
                         graph.comp_us, top, bottom, rank, cluster_of, members, ptr, k, pos)
    return Clusters(primaries=k, cluster_of=cluster_of, ptr=ptr[: count + 1].copy(), members=members)
