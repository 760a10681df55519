"""Everything on device 0: the reference a model-parallel placement has to beat.

Its makespan is the total work (no communication, no parallelism) and its peak memory is the whole
step's; it is what TensorFlow does without a placement. Complexity: O(|V|) (plus the evaluation).
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from pardnn.baselines._common import finish, reject_memory_heuristic
from pardnn.graph import CostGraph
from pardnn.machine import Machine
from pardnn.result import Progress, Result

__all__ = ["single_device", "single_device_placement"]


def single_device(graph: CostGraph, machine: Machine, *, memory_heuristic: str | None = None,
                  progress: Progress | None = None) -> Result:
    """Place every op on device 0.

    Parameters
    ----------
    graph, machine:
        What to place, and on what.
    memory_heuristic:
        Must be ``None`` (the signature is :func:`pardnn.partition`'s).
    progress:
        Called as ``progress(stage, done, total)``.

    Returns
    -------
    Result
        All zeros; colocation groups are trivially whole.

    Raises
    ------
    ValueError
        ``memory_heuristic`` is not ``None``.
    """
    reject_memory_heuristic("single", memory_heuristic)
    t0 = time.perf_counter()
    placement, details = single_device_placement(graph, machine)
    return finish(graph, machine, placement, algorithm="single", placement_seconds=time.perf_counter() - t0,
                  details=details, progress=progress)


def single_device_placement(graph: CostGraph, machine: Machine) -> tuple[np.ndarray, dict[str, Any]]:
    """The placement of :func:`single_device` and its details, without the evaluation (for the guard)."""
    placement = np.zeros(graph.n, np.int64)
    details: dict[str, Any] = {}
    return placement, details
