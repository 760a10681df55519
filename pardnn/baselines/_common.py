"""What every baseline placer shares: argument checks and the report.

A baseline only computes a placement; :func:`finish` evaluates it with the same emulator and memory
tracker as ParDNN and wraps it in the same :class:`~pardnn.result.PartitionReport`, so results are
comparable field by field.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from pardnn.graph import CostGraph
from pardnn.machine import Machine
from pardnn.result import PartitionReport, Progress, Result, communication_ratio
from pardnn.simulate import evaluate

__all__ = ["finish", "reject_memory_heuristic"]


def reject_memory_heuristic(placer: str, memory_heuristic: str | None) -> None:
    """Baselines take ``memory_heuristic`` only so that they share ``partition``'s signature."""
    if memory_heuristic is not None:
        raise ValueError(
            f"the {placer} placer has no memory heuristic: memory_heuristic={memory_heuristic!r}, expected None")


def finish(graph: CostGraph, machine: Machine, placement: np.ndarray, *, algorithm: str,
           placement_seconds: float, details: dict[str, Any], progress: Progress | None = None,
           order: np.ndarray | None = None) -> Result:
    """Evaluate ``placement`` (in its run ``order``, if any) and return it, read-only, with its report.

    ``stage_seconds`` holds ``placement`` (the placer's own time) and ``evaluation``.
    """
    if progress is not None:
        progress("evaluation", 0, 1)
    place = np.ascontiguousarray(placement, dtype=np.int64)
    t0 = time.perf_counter()
    evaluation = evaluate(graph, machine, place, order=order)
    seconds = {"placement": placement_seconds, "evaluation": time.perf_counter() - t0}
    report = PartitionReport(algorithm, machine.devices, graph.n, graph.m, communication_ratio(graph, machine),
                             seconds, evaluation, details)
    place.flags.writeable = False
    if order is not None:
        order = np.array(order, dtype=np.int64)
        order.flags.writeable = False
    return Result(place, report, order)
