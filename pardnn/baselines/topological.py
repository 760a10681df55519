"""Contiguous topological split: K consecutive stretches of the topological order, equal in compute.

:func:`topological_placement` does what pipeline balancers do (GPipe, torchgpipe's ``balance_by_time``),
block j on device j; colocation groups then follow their first member. O(|V|).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from pardnn.costs.graph import CostGraph
from pardnn.costs.machine import Machine
from pardnn.steps.colocation import keep_groups_whole

__all__ = ["topological_placement"]


def topological_placement(graph: CostGraph, machine: Machine) -> tuple[np.ndarray, dict[str, Any]]:
    """The placement of :func:`topological` and its details, without the evaluation (for the guard)."""
    k = machine.devices
    work = graph.comp_us[graph.topo_order]
    if not work.sum() > 0:
        work = np.ones(graph.n)
    total = float(work.sum()) or 1.0
    ahead = np.cumsum(work) - work
    block = np.minimum(np.floor(k * (ahead + work / 2) / total).astype(np.int64), k - 1)
    placement = np.empty(graph.n, np.int64)
    placement[graph.topo_order] = block
    block_work = np.bincount(block, weights=graph.comp_us[graph.topo_order], minlength=k).tolist()
    placement, moved = keep_groups_whole(graph, placement)
    details = {"block_work_us": block_work, "colocation_moved": moved}
    return placement, details
