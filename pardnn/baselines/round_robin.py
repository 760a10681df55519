"""Round robin: the i-th op in topological order goes to device ``i mod K``.

The placement a framework gets from spreading ops blindly: perfectly balanced op counts, no regard
for compute, communication or memory. Colocation groups then follow their topologically first
member (:func:`pardnn.colocation.keep_groups_whole`). Complexity: O(|V|) (plus the evaluation).
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from pardnn.baselines._common import finish, reject_memory_heuristic
from pardnn.colocation import keep_groups_whole
from pardnn.graph import CostGraph
from pardnn.machine import Machine
from pardnn.result import Progress, Result

__all__ = ["round_robin", "round_robin_placement"]


def round_robin(graph: CostGraph, machine: Machine, *, memory_heuristic: str | None = None,
                progress: Progress | None = None) -> Result:
    """Deal the ops to the devices in topological order, one each in turn.

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
        ``details["colocation_moved"]``: ops moved to keep their group whole.

    Raises
    ------
    ValueError
        ``memory_heuristic`` is not ``None``.

    Examples
    --------
    A 4-op chain on 2 devices is placed ``[0, 1, 0, 1]``.
    """
    reject_memory_heuristic("round_robin", memory_heuristic)
    t0 = time.perf_counter()
    placement, details = round_robin_placement(graph, machine)
    return finish(graph, machine, placement, algorithm="round_robin", placement_seconds=time.perf_counter() - t0,
                  details=details, progress=progress)


def round_robin_placement(graph: CostGraph, machine: Machine) -> tuple[np.ndarray, dict[str, Any]]:
    """The placement of :func:`round_robin` and its details, without the evaluation (for the guard)."""
    placement = np.empty(graph.n, np.int64)
    placement[graph.topo_order] = np.arange(graph.n, dtype=np.int64) % machine.devices
    placement, moved = keep_groups_whole(graph, placement)
    details = {"colocation_moved": moved}
    return placement, details
