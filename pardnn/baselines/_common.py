"""What every baseline placer shares: argument checks, the critical-path walk, and the report.

A baseline only computes a placement; :func:`finish` evaluates it with the same emulator and memory
tracker as ParDNN and wraps it in the same :class:`~pardnn.partition.PartitionReport`, so results are
comparable field by field.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np
from numba import njit

from pardnn.graph import CostGraph
from pardnn.machine import Machine
from pardnn.partition import PartitionReport, Progress, Result, communication_ratio
from pardnn.simulate import evaluate

__all__ = ["finish", "reject_memory_heuristic", "walk_critical_path"]


def reject_memory_heuristic(placer: str, memory_heuristic: str | None) -> None:
    """Baselines take ``memory_heuristic`` only so that they share ``partition``'s signature."""
    if memory_heuristic is not None:
        raise ValueError(
            f"the {placer} placer has no memory heuristic: memory_heuristic={memory_heuristic!r}, expected None")


@njit(cache=True)
def walk_critical_path(start: int, succ_ptr: np.ndarray, succ: np.ndarray, edge_weight: np.ndarray,
                       bottom: np.ndarray, rank: np.ndarray, cluster_of: np.ndarray, cluster: int,
                       path: np.ndarray) -> int:
    """Follow the edges that realise the bottom levels from ``start``; return the path's length.

    Only ops with ``cluster_of < 0`` are visited; each visited op gets ``cluster`` and is written to
    ``path`` in order. The next op is the free successor ``s`` that maximises ``edge_weight + bl(s)``,
    ties to the lowest topological rank. With ``bottom`` the bottom levels of the free ops and
    ``start`` the free op of highest bottom level, the path is a critical path of the free subgraph.
    O(sum of the out-degrees of the path's ops).
    """
    length = 0
    v = start
    while v >= 0:
        cluster_of[v] = cluster
        path[length] = v
        length += 1
        best = -1
        best_key = 0.0
        for k in range(succ_ptr[v], succ_ptr[v + 1]):
            s = succ[k]
            if cluster_of[s] >= 0:
                continue
            key = edge_weight[k] + bottom[s]
            if best < 0 or key > best_key or (key == best_key and rank[s] < rank[best]):
                best = s
                best_key = key
        v = best
    return length


def finish(graph: CostGraph, machine: Machine, placement: np.ndarray, *, algorithm: str,
           placement_seconds: float, details: dict[str, Any], progress: Progress | None = None) -> Result:
    """Evaluate ``placement`` and return it, read-only, with its report.

    ``stage_seconds`` holds ``placement`` (the placer's own time) and ``evaluation``.
    """
    if progress is not None:
        progress("evaluation", 0, 1)
    place = np.ascontiguousarray(placement, dtype=np.int64)
    t0 = time.perf_counter()
    evaluation = evaluate(graph, machine, place)
    seconds = {"placement": placement_seconds, "evaluation": time.perf_counter() - t0}
    report = PartitionReport(algorithm, machine.devices, graph.n, graph.m, communication_ratio(graph, machine),
                             seconds, evaluation, details)
    place.flags.writeable = False
    return Result(place, report)
