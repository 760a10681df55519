"""METIS K-way partitioning (Karypis and Kumar 1998) via ``pymetis``: balanced compute, little communication cut.

:func:`metis_placement` contracts each colocation group to one vertex (:func:`contract_groups`), weights
vertices by compute and edges by their transfer cost, and partitions the undirected graph; it is blind to
run order and memory. Needs ``pip install pymetis`` (else :class:`MissingDependencyError`). Weights and
why memory is no constraint: docs/notes-partitioner.md.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable
from typing import Any

import numpy as np
from numba import njit

from pardnn.costs.graph import CostGraph
from pardnn.costs.machine import Machine
from pardnn.errors import MissingDependencyError

__all__ = ["MissingDependencyError", "contract_groups", "metis_placement"]

_WEIGHT_TOTAL = 1 << 28
_METIS_OK = 1  # metis.h: rstatus_et
DEFAULT_SEED = 0


def _pymetis() -> Any:
    try:
        import pymetis
    except ImportError as exc:
        raise MissingDependencyError("the metis placer needs pymetis: pip install pymetis") from exc
    if not hasattr(pymetis, "CSRAdjacency"):
        raise MissingDependencyError(
            f"the metis placer needs pymetis >= 2025.2 (found {getattr(pymetis, 'version', '?')}): "
            "pip install -U pymetis")
    return pymetis


def _kway_without_the_gil(pymetis: Any) -> Callable[..., tuple[int, np.ndarray]] | None:
    """METIS_PartGraphKway of the METIS that pymetis carries, called through ctypes, or ``None`` when its
    extension does not export it (then ``pymetis.part_graph``).

    The same function on the same arrays and options as ``pymetis.part_graph(..., recursive=False)``
    (one balance constraint, no target weights, no imbalance vector), so the same partition; but a
    ctypes call releases the GIL, and pymetis's own call holds it for the whole partition (0.35 s on
    the 800,000 vertices of the 1M-op benchmark graph), stalling the pipeline's main thread, whose
    LFLAM mapping then waited for it to end (1.1 s alone, 1.5 s beside it).
    """
    try:
        library = ctypes.CDLL(pymetis._internal.__file__)
        function = library.METIS_PartGraphKway
    except (AttributeError, OSError, TypeError):
        return None
    index = {4: ctypes.c_int32, 8: ctypes.c_int64}.get(np.dtype(pymetis.zero_copy_dtype()).itemsize)
    if index is None:
        return None
    function.restype = ctypes.c_int
    pointer = ctypes.POINTER(index)

    def kway(k: int, xadj: np.ndarray, adjncy: np.ndarray, vweights: np.ndarray, eweights: np.ndarray,
             options: Any) -> tuple[int, np.ndarray]:
        settings = np.array([options._get(i) for i in range(pymetis._internal.Options._len())], dtype=xadj.dtype)
        part = np.empty(xadj.size - 1, dtype=xadj.dtype)
        vertices, constraints, parts, cut = index(part.size), index(1), index(k), index(0)
        status = function(ctypes.byref(vertices), ctypes.byref(constraints), *(
            array.ctypes.data_as(pointer) for array in (xadj, adjncy, vweights)), None,
            eweights.ctypes.data_as(pointer), ctypes.byref(parts), None, None, settings.ctypes.data_as(pointer),
            ctypes.byref(cut), part.ctypes.data_as(pointer))
        if status != _METIS_OK:
            raise RuntimeError(f"METIS_PartGraphKway failed (status {status}) on {part.size} vertices, K = {k}")
        return int(cut.value), part.astype(np.int64, copy=False)

    return kway


def contract_groups(graph: CostGraph, edge_weight: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray,
                                                                          np.ndarray, np.ndarray]:
    """The undirected graph with every colocation group contracted to one vertex.

    Vertices are the groups (by group id) then the ungrouped ops (by index). Returns
    ``(vertex_of, vertex_comp, xadj, adjncy, adjwgt)``: each op's vertex, each vertex's compute, and
    CSR adjacency (both directions, sorted, no self-loops) with the summed ``edge_weight`` of the
    edges merged into each arc. O(|V| + |E|).
    """
    groups = len(graph.group_names)
    key = np.where(graph.colocation >= 0, graph.colocation, groups + np.arange(graph.n))
    present = np.zeros(groups + graph.n, np.bool_)
    present[key] = True
    vertex_of = (np.cumsum(present, dtype=np.int64) - 1)[key]  # np.unique's inverse without its sort: O(|V|)
    count = int(np.count_nonzero(present))
    vertex_comp = np.bincount(vertex_of, weights=graph.comp_us, minlength=count)
    edges, starts, adjncy, xadj = _arcs(vertex_of, graph.edge_src, graph.edge_dst, count)
    # The arcs come in the order np.argsort(tail * count + head, kind="stable") gives both directions
    # of every cut edge (the edges one way in edge order, then the other way), so the weights of
    # parallel arcs are summed in that order, as before this was compiled.
    weight = np.asarray(edge_weight, dtype=np.float64)[edges]
    if starts.size:  # parallel arcs: merged
        weight = np.add.reduceat(weight, starts)
    return vertex_of, vertex_comp, xadj, adjncy, weight


@njit(cache=True, nogil=True)
def _arcs(vertex_of: np.ndarray, src: np.ndarray, dst: np.ndarray, count: int):
    """Both directions of every edge cut by ``vertex_of`` (arc ``j < C``: cut edge ``j`` forwards,
    ``C + j``: backwards), sorted by (tail, head) and stable: the edge of each arc, where each run
    of parallel arcs starts (empty when there is none), and the merged arcs' heads and CSR pointers.

    Two counting sorts (by head, then by tail: least significant key first), O(|V| + |E|), in five
    arrays of ``2C`` or fewer entries (the sort's buffers hold the answers once read)."""
    cut = 0
    for e in range(src.size):
        if vertex_of[src[e]] != vertex_of[dst[e]]:
            cut += 1
    edge = np.empty(cut, np.int64)
    j = 0
    for e in range(src.size):
        if vertex_of[src[e]] != vertex_of[dst[e]]:
            edge[j] = e
            j += 1
    ptr = np.zeros(count + 1, np.int64)  # per vertex, its arcs as head, and as tail: the same counts
    for j in range(cut):
        ptr[vertex_of[src[edge[j]]] + 1] += 1
        ptr[vertex_of[dst[edge[j]]] + 1] += 1
    for v in range(count):
        ptr[v + 1] += ptr[v]
    fill = ptr[:-1].copy()
    by_head = np.empty(2 * cut, np.int64)
    for i in range(2 * cut):
        e = edge[i % cut]
        h = vertex_of[dst[e]] if i < cut else vertex_of[src[e]]
        by_head[fill[h]] = i
        fill[h] += 1
    for v in range(count):  # fill[:] = ptr[:-1], without the compiled shape check's error message
        fill[v] = ptr[v]
    order = np.empty(2 * cut, np.int64)
    for i in by_head:
        e = edge[i % cut]
        t = vertex_of[src[e]] if i < cut else vertex_of[dst[e]]
        order[fill[t]] = i
        fill[t] += 1
    edges = by_head  # by_head is read no more: it holds each arc's edge from here on
    adjncy = order  # adjncy[runs] is written after order[r >= runs] is read
    xadj = np.zeros(count + 1, np.int64)
    runs = 0
    last_tail, last_head = -1, -1
    first = np.empty(0, np.int64)
    for r in range(2 * cut):
        i = order[r]
        e = edge[i % cut]
        edges[r] = e
        t, h = (vertex_of[src[e]], vertex_of[dst[e]]) if i < cut else (vertex_of[dst[e]], vertex_of[src[e]])
        if t != last_tail or h != last_head:
            # The first run after a parallel arc: runs started at runs 0.. so far. (Parallel arcs come
            # in both directions, so one never ends the last run alone.)
            if runs < r and first.size == 0:
                first = np.arange(2 * cut)
            if first.size:
                first[runs] = r
            adjncy[runs] = h
            xadj[t + 1] += 1
            runs += 1
            last_tail, last_head = t, h
    for v in range(count):
        xadj[v + 1] += xadj[v]
    return edges, first[:runs], adjncy[:runs], xadj


def _integer_weights(values: np.ndarray, offset: int) -> np.ndarray:
    """``offset + floor(2^28 value / total)``, at least 1 (METIS wants positive edge weights)."""
    total = float(values.sum())
    scaled = np.floor(values * (_WEIGHT_TOTAL / total)) if total > 0 else np.zeros(values.size)
    return np.maximum(scaled.astype(np.int64) + offset, 1)


def metis_placement(graph: CostGraph, machine: Machine, seed: int = DEFAULT_SEED) -> tuple[np.ndarray, dict[str, Any]]:
    """The placement of :func:`metis` and its details, without the evaluation (for the guard)."""
    k = machine.devices
    vertex_of, vertex_comp, xadj, adjncy, arc_weight = contract_groups(graph, machine.edge_comm_us(graph.edge_bytes))
    vertices = vertex_comp.size
    edge_cut = 0
    if k == 1 or vertices <= 1:
        part = np.zeros(vertices, np.int64)
    elif vertices <= k:
        part = np.arange(vertices, dtype=np.int64)
    else:
        pymetis = _pymetis()
        dtype = pymetis.zero_copy_dtype()
        vweights = np.asarray(_integer_weights(vertex_comp, 1), dtype=dtype)  # no copy when already dtype
        eweights = np.asarray(_integer_weights(arc_weight, 0), dtype=dtype)
        del arc_weight
        xadj, adjncy = np.asarray(xadj, dtype=dtype), np.asarray(adjncy, dtype=dtype)
        options = pymetis.Options(seed=int(seed))
        kway = _kway_without_the_gil(pymetis)
        if kway is not None:
            edge_cut, part = kway(k, xadj, adjncy, vweights, eweights, options)
        else:
            edge_cut, membership = pymetis.part_graph(k, adjacency=pymetis.CSRAdjacency(xadj, adjncy),
                                                      vweights=vweights, eweights=eweights, recursive=False,
                                                      options=options)
            part = np.asarray(membership, dtype=np.int64)
    placement = part[vertex_of]
    details = {"vertices": int(vertices), "arcs": int(adjncy.size), "edge_cut": int(edge_cut),
               "memory_constraint": False, "seed": int(seed)}
    return placement, details
