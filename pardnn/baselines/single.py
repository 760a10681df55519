"""Everything on device 0: the reference a model-parallel placement has to beat.

Its makespan is the total work (no communication, no parallelism) and its peak memory is the whole
step's; it is what TensorFlow does without a placement. Complexity: O(|V|) (plus the evaluation).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from pardnn.costs.graph import CostGraph
from pardnn.costs.machine import Machine

__all__ = ["single_placement"]


def single_placement(graph: CostGraph, machine: Machine) -> tuple[np.ndarray, dict[str, Any]]:
    """The placement of the ``single`` placer and its details, without the evaluation (for the guard)."""
    placement = np.zeros(graph.n, np.int64)
    details: dict[str, Any] = {}
    return placement, details
