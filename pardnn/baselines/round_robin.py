"""Round robin: the i-th op in topological order goes to device ``i mod K``.

The placement a framework gets from spreading ops blindly: perfectly balanced op counts, no regard
for compute, communication or memory. Colocation groups then follow their topologically first
member (:func:`pardnn.steps.colocation.keep_groups_whole`). Complexity: O(|V|) (plus the evaluation).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from pardnn.costs.graph import CostGraph
from pardnn.costs.machine import Machine
from pardnn.steps.colocation import keep_groups_whole

__all__ = ["round_robin_placement"]


def round_robin_placement(graph: CostGraph, machine: Machine) -> tuple[np.ndarray, dict[str, Any]]:
    """The placement of :func:`round_robin` and its details, without the evaluation (for the guard)."""
    placement = np.empty(graph.n, np.int64)
    placement[graph.topo_order] = np.arange(graph.n, dtype=np.int64) % machine.devices
    placement, moved = keep_groups_whole(graph, placement)
    details = {"colocation_moved": moved}
    return placement, details
