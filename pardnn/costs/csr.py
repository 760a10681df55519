"""Array algorithms over edge lists and CSR adjacency, what a CostGraph is built from and reduced over.

The neighbours of ``v`` are ``targets[ptr[v]:ptr[v + 1]]``. :func:`merge_parallel_edges`,
:func:`pointers`, :func:`stable_buckets`, :func:`topological_order` (deterministic Kahn),
:func:`find_cycle`, :func:`segment_reduce`. O(|V| + |E|), the sort O(|E| log |E|).
"""

from __future__ import annotations

import numpy as np
from numba import njit

__all__ = ["find_cycle", "merge_parallel_edges", "pointers", "segment_reduce", "stable_buckets", "topological_order"]


def merge_parallel_edges(
    src: np.ndarray, dst: np.ndarray, nbytes: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Edges sorted by (src, dst), parallel ones merged into one carrying the sum of their bytes (new
    arrays). Edges already in that order without parallel ones (as every graph file holds them) are
    only copied: one O(|E|) check instead of the sort."""
    if src.size > 1:
        step = np.diff(src)
        if (step >= 0).all() and ((step > 0) | (np.diff(dst) > 0)).all():
            return src.copy(), dst.copy(), nbytes.copy()
    order = np.lexsort((dst, src))
    src, dst, nbytes = src[order], dst[order], nbytes[order]
    if src.size:
        first = np.ones(src.size, bool)
        first[1:] = (src[1:] != src[:-1]) | (dst[1:] != dst[:-1])
        if not first.all():
            starts = np.flatnonzero(first)
            nbytes = np.add.reduceat(nbytes, starts)
            src, dst = src[starts], dst[starts]
    return src, dst, nbytes


def pointers(ends: np.ndarray, n: int) -> np.ndarray:
    """CSR pointers of ``n`` nodes for edges sorted by ``ends`` (their source, or their destination)."""
    return np.concatenate(([0], np.cumsum(np.bincount(ends, minlength=n)))).astype(np.int64)


@njit(cache=True, nogil=True)
def stable_buckets(keys: np.ndarray, ptr: np.ndarray) -> np.ndarray:
    """The permutation that sorts ``keys`` stably, given ``ptr = pointers(keys, n)``: bucket ``v`` is
    ``ptr[v]:ptr[v + 1]``, in the keys' own order within it. O(len(keys) + n), where a stable
    comparison sort of 1.6M edges takes ten times longer."""
    fill = ptr[:-1].copy()
    out = np.empty(keys.size, np.int64)
    for e in range(keys.size):
        k = keys[e]
        out[fill[k]] = e
        fill[k] += 1
    return out


@njit(cache=True, nogil=True)
def _kahn(n: int, succ_ptr: np.ndarray, succ: np.ndarray, pred_ptr: np.ndarray) -> np.ndarray:
    indegree = np.empty(n, np.int64)
    for v in range(n):
        indegree[v] = pred_ptr[v + 1] - pred_ptr[v]
    order = np.empty(n, np.int64)
    head = 0
    tail = 0
    for v in range(n):
        if indegree[v] == 0:
            order[tail] = v
            tail += 1
    while head < tail:
        v = order[head]
        head += 1
        for k in range(succ_ptr[v], succ_ptr[v + 1]):
            w = succ[k]
            indegree[w] -= 1
            if indegree[w] == 0:
                order[tail] = w
                tail += 1
    return order[:tail]


def topological_order(succ_ptr: np.ndarray, succ: np.ndarray, pred_ptr: np.ndarray) -> np.ndarray:
    """Kahn's order (FIFO, seeded by index); shorter than the node count iff there is a cycle."""
    return _kahn(succ_ptr.size - 1, succ_ptr, succ, pred_ptr)


def find_cycle(remaining: np.ndarray, pred_ptr: np.ndarray, pred: np.ndarray) -> list[int]:
    """Nodes of one cycle among ``remaining`` (the mask of nodes Kahn's algorithm left), in edge order.

    Every node left has a predecessor that is also left: walking predecessors from any of them must
    revisit a node, which closes a cycle. The first node is repeated at the end.
    """
    start = int(np.flatnonzero(remaining)[0])
    position: dict[int, int] = {}
    walk: list[int] = []
    v = start
    while v not in position:
        position[v] = len(walk)
        walk.append(v)
        preds = pred[pred_ptr[v] : pred_ptr[v + 1]]
        v = int(preds[remaining[preds]][0])
    cycle = walk[position[v] :][::-1]
    return [*cycle, cycle[0]]


def segment_reduce(ufunc: np.ufunc, values: np.ndarray, ptr: np.ndarray, empty: float) -> np.ndarray:
    """``ufunc`` over each CSR segment ``values[ptr[i]:ptr[i + 1]]``; ``empty`` for an empty one.

    O(len(values)). ``values`` must have ``ptr[-1]`` entries (as ``pred`` has for ``pred_ptr``).
    """
    out = np.full(ptr.size - 1, empty, dtype=np.float64)
    starts = np.flatnonzero(np.diff(ptr) > 0)
    if starts.size:  # consecutive non-empty starts bound each segment: empty ones have no length
        out[starts] = ufunc.reduceat(values, ptr[starts])
    return out
