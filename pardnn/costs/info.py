"""Graph statistics: size, work, critical path, degree of parallelism (DoP) and CCR.

The figures of the paper's Table "DoP and CCR" for one graph on one machine's interconnect;
``pardnn info`` prints them and ``jobs.paper`` tabulates them for the paper's models.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from pardnn.costs.graph import CostGraph
from pardnn.costs.levels import critical_path_us
from pardnn.costs.machine import Machine

__all__ = ["graph_info"]


def graph_info(graph: CostGraph, machine: Machine) -> dict[str, Any]:
    """The paper's Table "DoP and CCR" figures for one graph.

    Work and critical path are in µs; ``dop`` is work / critical path; ``ccr`` is the
    communication cost of every edge on ``machine`` (latency + bytes / bandwidth) over the work.
    Both are ``None`` when no op costs anything (work 0: neither ratio has a value). O(|V| + |E|).
    """
    work = graph.total_work_us
    critical = critical_path_us(graph)
    edge_comm = machine.edge_comm_us(graph.edge_bytes)
    comm = float(edge_comm.sum()) if graph.m else 0.0
    kinds = np.bincount(graph.kind, minlength=3)
    return {
        "name": graph.name,
        "ops": graph.n,
        "edges": graph.m,
        "normal_ops": int(kinds[0]),
        "residual_ops": int(kinds[1]),
        "reference_ops": int(kinds[2]),
        "colocation_groups": len(graph.group_names),
        "total_work_us": work,
        "critical_path_us": critical,
        "critical_path_with_comm_us": critical_path_us(graph, edge_comm),
        "dop": work / critical if critical > 0 else None,
        "total_comm_us": comm,
        "ccr": comm / work if work > 0 else None,
        "residual_bytes": int(graph.out_bytes[graph.kind == 1].sum()),
        "normal_bytes": int(graph.out_bytes[graph.kind == 0].sum()),
    }
