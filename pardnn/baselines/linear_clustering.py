"""Linear clustering (Kim and Browne 1988) mapped by GLB (Radulescu and van Gemund 1998): the paper's "LC".

:func:`linear_clusters` cuts the graph into critical paths, levels updated incrementally (the clusters
of a full recomputation, far faster); :func:`glb_map` maps them to the least-loaded device;
:func:`linear_clustering_placement` does both, within ``time_budget_s``. Choices and cost:
docs/notes-partitioner.md.
"""

from __future__ import annotations

import math
import time
from typing import Any

import numpy as np
from numba import njit

from pardnn.costs.graph import CostGraph
from pardnn.costs.levels import bottom_levels, top_levels, walk_critical_path
from pardnn.costs.machine import Machine
from pardnn.placement.result import Progress
from pardnn.steps.colocation import keep_groups_whole

__all__ = ["DEFAULT_TIME_BUDGET_S", "glb_map", "linear_clustering_placement", "linear_clusters"]

DEFAULT_TIME_BUDGET_S = 60.0
_SWEEP_WORK = 4_000_000  # ops + edges swept per compiled call between two looks at the clock


@njit(cache=True, nogil=True)
def _sift_down(key: np.ndarray, rank_of: np.ndarray, pos: np.ndarray, order: np.ndarray, i: int, size: int) -> None:
    # Max-heap on (key, -rank) held in place (key[i], rank_of[i]: the entry's bottom level and rank,
    # its op order[rank_of[i]], pos[op] = i); move entry i down to its place.
    k, r = key[i], rank_of[i]
    while True:
        c = 2 * i + 1
        if c >= size:
            break
        if c + 1 < size and (key[c + 1] > key[c] or (key[c + 1] == key[c] and rank_of[c + 1] < rank_of[c])):
            c += 1
        if not (key[c] > k or (key[c] == k and rank_of[c] < r)):
            break
        key[i], rank_of[i] = key[c], rank_of[c]
        pos[order[rank_of[i]]] = i
        i = c
    key[i], rank_of[i] = k, r
    pos[order[r]] = i


@njit(cache=True, nogil=True)
def _sift_up(key: np.ndarray, rank_of: np.ndarray, pos: np.ndarray, order: np.ndarray, i: int) -> None:
    # The same heap; move entry i up to its place.
    k, r = key[i], rank_of[i]
    while i > 0:
        parent = (i - 1) // 2
        if not (k > key[parent] or (k == key[parent] and r < rank_of[parent])):
            break
        key[i], rank_of[i] = key[parent], rank_of[parent]
        pos[order[rank_of[i]]] = i
        i = parent
    key[i], rank_of[i] = k, r
    pos[order[r]] = i


@njit(cache=True, nogil=True)
def _latest_push(heap: np.ndarray, size: int, rank: int) -> None:
    # Max-heap of topological ranks in heap[:size]; add ``rank`` (the heap grows to size + 1).
    i = size
    while i > 0:
        parent = (i - 1) // 2
        if heap[parent] >= rank:
            break
        heap[i] = heap[parent]
        i = parent
    heap[i] = rank


@njit(cache=True, nogil=True)
def _latest_pop(heap: np.ndarray, size: int) -> int:
    # Remove and return the largest rank of heap[:size] (the heap shrinks to size - 1).
    top = heap[0]
    size -= 1
    last = heap[size]
    i = 0
    while True:
        child = 2 * i + 1
        if child >= size:
            break
        if child + 1 < size and heap[child + 1] > heap[child]:
            child += 1
        if last >= heap[child]:
            break
        heap[i] = heap[child]
        i = child
    heap[i] = last
    return top


@njit(cache=True, nogil=True)
def _bottom_level(u: int, succ_ptr: np.ndarray, succ: np.ndarray, edge_weight: np.ndarray, comp: np.ndarray,
                  cluster_of: np.ndarray, bottom: np.ndarray) -> float:
    # bl(u) over the unclustered successors, every edge costed as if cut (Kim and Browne).
    best = 0.0
    for k in range(succ_ptr[u], succ_ptr[u + 1]):
        s = succ[k]
        if cluster_of[s] < 0 and edge_weight[k] + bottom[s] > best:
            best = edge_weight[k] + bottom[s]
    return comp[u] + best


@njit(cache=True, nogil=True)
def _extract_paths(state: np.ndarray, order: np.ndarray, succ_ptr: np.ndarray, succ: np.ndarray,
                   edge_weight: np.ndarray, pred_ptr: np.ndarray, pred: np.ndarray, comp: np.ndarray,
                   rank: np.ndarray, cluster_of: np.ndarray, members: np.ndarray, ptr: np.ndarray,
                   bottom: np.ndarray, indegree: np.ndarray, heap_key: np.ndarray, heap_rank: np.ndarray,
                   pos: np.ndarray, dirty: np.ndarray, is_dirty: np.ndarray, work_budget: int) -> None:
    """Cut critical paths off the unclustered ops until none is left or ``work_budget`` ops + edges
    have been swept; ``state = [ops left, clusters, heap size]`` carries the search between calls.
    The heap holds the sources of the unclustered subgraph (``indegree``: unclustered inputs left;
    ``pos`` -1 off the heap).
    """
    left, clusters, size = state[0], state[1], state[2]
    work = 0
    while left > 0 and work < work_budget:
        start = order[heap_rank[0]]  # the top source: a path's start, and the only one of its ops on the heap
        pos[start] = -1
        size -= 1
        if size > 0:
            heap_key[0], heap_rank[0] = heap_key[size], heap_rank[size]
            _sift_down(heap_key, heap_rank, pos, order, 0, size)
        first = ptr[clusters]
        length = walk_critical_path(start, succ_ptr, succ, edge_weight, bottom, rank, cluster_of, clusters,
                                    members[first:], 0)
        clusters += 1
        ptr[clusters] = first + length
        left -= length
        count = 0
        for j in range(first, first + length):
            v = members[j]
            work += 1 + succ_ptr[v + 1] - succ_ptr[v] + pred_ptr[v + 1] - pred_ptr[v]
            for k in range(succ_ptr[v], succ_ptr[v + 1]):  # successors left without inputs: new sources
                s = succ[k]
                if cluster_of[s] < 0:
                    indegree[s] -= 1
                    if indegree[s] == 0:
                        heap_key[size], heap_rank[size] = bottom[s], rank[s]
                        _sift_up(heap_key, heap_rank, pos, order, size)
                        size += 1
            for q in range(pred_ptr[v], pred_ptr[v + 1]):
                u = pred[q]
                if cluster_of[u] < 0 and not is_dirty[u]:
                    is_dirty[u] = True
                    _latest_push(dirty, count, rank[u])
                    count += 1
        while count > 0:  # the levels that can change, each after its successors
            u = order[_latest_pop(dirty, count)]
            count -= 1
            is_dirty[u] = False
            level = _bottom_level(u, succ_ptr, succ, edge_weight, comp, cluster_of, bottom)
            work += 1 + succ_ptr[u + 1] - succ_ptr[u]
            if level != bottom[u]:  # lower: a level only loses successors
                bottom[u] = level
                if pos[u] >= 0:
                    heap_key[pos[u]] = level
                    _sift_down(heap_key, heap_rank, pos, order, pos[u], size)
                for q in range(pred_ptr[u], pred_ptr[u + 1]):
                    p = pred[q]
                    if cluster_of[p] < 0 and not is_dirty[p]:
                        is_dirty[p] = True
                        _latest_push(dirty, count, rank[p])
                        count += 1
    state[0], state[1], state[2] = left, clusters, size


def linear_clusters(graph: CostGraph, edge_weight: np.ndarray, *, time_budget_s: float = DEFAULT_TIME_BUDGET_S,
                    progress: Progress | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """Kim and Browne's linear clustering, under a time budget.

    Returns ``(cluster_of, ptr, members, paths)``: cluster ``c`` holds ``members[ptr[c]:ptr[c + 1]]``
    in path order. The first ``paths`` clusters are critical paths; when the budget ran out
    (``paths`` clusters do not cover the graph) each op left is a cluster of its own, in topological
    order. Levels recomputed incrementally (module notes).
    """
    n = graph.n
    weight = np.asarray(edge_weight, dtype=np.float64)
    order = graph.topo_order
    cluster_of = np.full(n, -1, np.int64)
    members = np.empty(n, np.int64)
    ptr = np.zeros(n + 1, np.int64)
    bottom = bottom_levels(graph, weight)  # the same formula as _bottom_level, every op unclustered
    indegree = np.diff(graph.pred_ptr).astype(np.int64)
    sources = order[indegree[order] == 0]
    heap = sources[np.lexsort((graph.topo_rank[sources], -bottom[sources]))]  # sorted, so a heap already
    heap_key, heap_rank = np.empty(n), np.empty(n, np.int64)
    heap_key[: heap.size], heap_rank[: heap.size] = bottom[heap], graph.topo_rank[heap]
    pos = np.full(n, -1, np.int64)
    pos[heap] = np.arange(heap.size, dtype=np.int64)
    # The ops whose level may change, by topological rank: a max-heap of ranks (an op is order[rank]).
    dirty = np.empty(n, np.int64)
    is_dirty = np.zeros(n, np.bool_)
    state = np.array([n, 0, heap.size], np.int64)
    deadline = time.perf_counter() + time_budget_s
    while state[0] > 0 and time.perf_counter() < deadline:
        _extract_paths(state, order, graph.succ_ptr, graph.succ, weight, graph.pred_ptr, graph.pred,
                       graph.comp_us, graph.topo_rank, cluster_of, members, ptr, bottom, indegree, heap_key,
                       heap_rank, pos, dirty, is_dirty, _SWEEP_WORK)
        if progress is not None:
            progress("clustering", n - int(state[0]), n)
    count, clusters = int(state[0]), int(state[1])
    paths = clusters
    if count:  # timeout: the ops left, singly, in topological order
        left = order[cluster_of[order] < 0]
        cluster_of[left] = np.arange(clusters, clusters + count)
        members[ptr[clusters] :] = left
        ptr[clusters + 1 : clusters + count + 1] = ptr[clusters] + np.arange(1, count + 1)
        clusters += count
    return cluster_of, ptr[: clusters + 1].copy(), members, paths


@njit(cache=True, nogil=True)
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


def linear_clustering_placement(graph: CostGraph, machine: Machine, *, time_budget_s: float = math.inf,
                                progress: Progress | None = None) -> tuple[np.ndarray, dict[str, Any]]:
    """The placement of :func:`linear_clustering` and its ``details``, not evaluated (the guard's
    candidate: it emulates what it keeps). No time budget by default, so it is deterministic."""
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
    return placement, details
