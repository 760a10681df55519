"""Linear clustering (Kim and Browne 1988, "A General Approach to Mapping of Parallel Computations
upon Multiprocessor Architectures", ICPP) with GLB cluster mapping (Radulescu and van Gemund 1998,
"GLB: A Low-Cost Scheduling Algorithm for Distributed-Memory Architectures", HiPC): the "LC"
baseline of the ParDNN paper (Section 5, "Graph-based methods"), which ParDNN's slicing shortcuts.

1. **Clustering.** Take the critical path of the ops not yet clustered — compute plus
   communication (``machine.edge_comm_us`` on every edge, as if cut), bottom levels recomputed on
   that subgraph after every path — make it a cluster, remove it, repeat until no op is left.
2. **Mapping (GLB).** Each cluster starts when its first op does in the clustered schedule on
   unbounded processors: that op's top level with the edges inside clusters costing nothing. In
   order of increasing start (ties to the earlier cluster), each cluster goes to the device with
   the least work so far (ties to the lowest index). Colocation groups then follow their
   topologically first member (:func:`pardnn.colocation.keep_groups_whole`).

Recomputing levels after every path is what makes LC slow — the ParDNN paper reports ~12 hours on
a 205K-op graph — so the clustering runs under ``time_budget_s``. Past the budget it stops between
paths, every op left becomes a cluster of its own, GLB maps all clusters as usual, and
``details["timeout"]`` is ``True``. The placement is then valid but depends on how far the
clustering got, so it is deterministic only without a timeout (and with ``time_budget_s=0``, which
clusters nothing).

Complexity: O(|V| (|V| + |E|)) for the clustering (one level sweep over the remaining ops per path),
O(|V| + |E| + C log C + CK) for the mapping of C clusters.
"""

from __future__ import annotations

import time

import numpy as np
from numba import njit

from pardnn.baselines._common import finish, reject_memory_heuristic
from pardnn.colocation import keep_groups_whole
from pardnn.graph import CostGraph
from pardnn.levels import top_levels, walk_critical_path
from pardnn.machine import Machine
from pardnn.result import Progress, Result

__all__ = ["DEFAULT_TIME_BUDGET_S", "glb_map", "linear_clustering", "linear_clusters"]

DEFAULT_TIME_BUDGET_S = 60.0
_SWEEP_WORK = 4_000_000  # ops + edges swept per compiled call between two looks at the clock


@njit(cache=True)
def _extract_paths(order: np.ndarray, count: int, succ_ptr: np.ndarray, succ: np.ndarray, edge_weight: np.ndarray,
                   comp: np.ndarray, rank: np.ndarray, cluster_of: np.ndarray, members: np.ndarray,
                   ptr: np.ndarray, clusters: int, bottom: np.ndarray, work_budget: int) -> tuple[int, int]:
    """Cut critical paths off the ops ``order[:count]`` (topological; the unclustered ones) until none
    is left or ``work_budget`` ops + edges have been swept; return the new ``count`` and ``clusters``.
    """
    work = 0
    while count > 0 and work < work_budget:
        # Bottom levels of the remaining subgraph (Kim and Browne: the critical path is recomputed
        # after every cluster).
        for i in range(count - 1, -1, -1):
            v = order[i]
            best = 0.0
            for k in range(succ_ptr[v], succ_ptr[v + 1]):
                s = succ[k]
                if cluster_of[s] < 0 and edge_weight[k] + bottom[s] > best:
                    best = edge_weight[k] + bottom[s]
            bottom[v] = comp[v] + best
            work += 1 + succ_ptr[v + 1] - succ_ptr[v]
        start = order[0]
        for i in range(1, count):  # the first of the highest bottom level: a source
            if bottom[order[i]] > bottom[start]:
                start = order[i]
        first = ptr[clusters]
        length = walk_critical_path(start, succ_ptr, succ, edge_weight, bottom, rank, cluster_of, clusters,
                                    members[first:], 0)
        clusters += 1
        ptr[clusters] = first + length
        kept = 0
        for i in range(count):
            if cluster_of[order[i]] < 0:
                order[kept] = order[i]
                kept += 1
        count = kept
    return count, clusters


def linear_clusters(graph: CostGraph, edge_weight: np.ndarray, *, time_budget_s: float = DEFAULT_TIME_BUDGET_S,
                    progress: Progress | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """Kim and Browne's linear clustering, under a time budget.

    Returns ``(cluster_of, ptr, members, paths)``: cluster ``c`` holds ``members[ptr[c]:ptr[c + 1]]``
    in path order. The first ``paths`` clusters are critical paths; when the budget ran out
    (``paths`` clusters do not cover the graph) each op left is a cluster of its own, in topological
    order. O(|V| (|V| + |E|)).
    """
    n = graph.n
    weight = np.asarray(edge_weight, dtype=np.float64)
    order = graph.topo_order.copy()
    cluster_of = np.full(n, -1, np.int64)
    members = np.empty(n, np.int64)
    ptr = np.zeros(n + 1, np.int64)
    bottom = np.zeros(n)
    count, clusters = n, 0
    deadline = time.perf_counter() + time_budget_s
    while count > 0 and time.perf_counter() < deadline:
        count, clusters = _extract_paths(order, count, graph.succ_ptr, graph.succ, weight, graph.comp_us,
                                         graph.topo_rank, cluster_of, members, ptr, clusters, bottom, _SWEEP_WORK)
        if progress is not None:
            progress("clustering", n - count, n)
    paths = clusters
    if count:  # timeout: the ops left, singly
        left = order[:count]
        cluster_of[left] = np.arange(clusters, clusters + count)
        members[ptr[clusters] :] = left
        ptr[clusters + 1 : clusters + count + 1] = ptr[clusters] + np.arange(1, count + 1)
        clusters += count
    return cluster_of, ptr[: clusters + 1].copy(), members, paths


@njit(cache=True)
def _least_loaded(order: np.ndarray, work: np.ndarray, k: int) -> np.ndarray:
    device = np.empty(order.size, np.int64)
    load = np.zeros(k)
    for c in order:
        best = 0
        for d in range(1, k):
            if load[d] < load[best]:
                best = d
        device[c] = best
        load[best] += work[c]
    return device


def glb_map(graph: CostGraph, edge_weight: np.ndarray, cluster_of: np.ndarray, ptr: np.ndarray,
            members: np.ndarray, k: int) -> np.ndarray:
    """GLB (Radulescu and van Gemund 1998): clusters by increasing start, each to the least-loaded device.

    A cluster's start is its first op's top level with intra-cluster edges free. Returns the device
    of every cluster. O(|V| + |E| + C log C + CK).
    """
    count = ptr.size - 1
    if count == 0:
        return np.zeros(0, np.int64)
    weight = np.where(cluster_of[graph.edge_src] == cluster_of[graph.edge_dst], 0.0, edge_weight)
    top = top_levels(graph, weight)
    start = top[members[ptr[:-1]]]
    work = np.bincount(cluster_of, weights=graph.comp_us, minlength=count)
    order = np.lexsort((np.arange(count), start)).astype(np.int64)
    return _least_loaded(order, work, k)


def linear_clustering(graph: CostGraph, machine: Machine, *, memory_heuristic: str | None = None,
                      progress: Progress | None = None, time_budget_s: float = DEFAULT_TIME_BUDGET_S) -> Result:
    """Linear clustering with recomputed critical paths, then GLB mapping.

    Parameters
    ----------
    graph, machine:
        What to place, and on what.
    memory_heuristic:
        Must be ``None`` (the signature is :func:`pardnn.partition`'s); LC ignores memory.
    progress:
        Called as ``progress(stage, done, total)``; ``clustering`` reports ops clustered.
    time_budget_s:
        Wall-time budget of the clustering, seconds (default 60). Past it the ops left become
        single-op clusters (module docstring).

    Returns
    -------
    Result
        Colocation groups whole. ``details``: ``timeout``, ``time_budget_s``, ``paths`` (critical
        paths extracted), ``singletons`` (single-op clusters left by a timeout), ``clusters``,
        ``clustering_seconds``, ``mapping_seconds``, ``colocation_moved``.

    Raises
    ------
    ValueError
        ``memory_heuristic`` is not ``None``, or ``time_budget_s`` is negative or NaN.

    Notes
    -----
    O(|V| (|V| + |E|)) without a timeout.
    """
    reject_memory_heuristic("linear_clustering", memory_heuristic)
    if not time_budget_s >= 0:
        raise ValueError(f"linear_clustering: time_budget_s = {time_budget_s!r} must be >= 0 seconds")
    t0 = time.perf_counter()
    weight = machine.edge_comm_us(graph.edge_bytes)
    cluster_of, ptr, members, paths = linear_clusters(graph, weight, time_budget_s=time_budget_s, progress=progress)
    t1 = time.perf_counter()
    if progress is not None:
        progress("mapping", 0, 1)
    device = glb_map(graph, weight, cluster_of, ptr, members, machine.devices)
    placement, moved = keep_groups_whole(graph, device[cluster_of])
    t2 = time.perf_counter()
    clusters = ptr.size - 1
    details = {
        "timeout": paths < clusters,
        "time_budget_s": float(time_budget_s),
        "paths": paths,
        "singletons": clusters - paths,
        "clusters": clusters,
        "clustering_seconds": t1 - t0,
        "mapping_seconds": t2 - t1,
        "colocation_moved": moved,
    }
    return finish(graph, machine, placement, algorithm="linear_clustering", placement_seconds=t2 - t0,
                  details=details, progress=progress)
