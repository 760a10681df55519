"""The ParDNN pipeline: slicing → LFLAM mapping → colocation → evaluation. The public entry point.

``partition(graph, machine)`` returns the placement and a report of what each stage did and cost.
Stages are the modules of the paper's Step 1 (``slicing``, ``mapping``); this module only chains
them, keeps colocation groups whole, and measures.

Colocation: a group's members follow the group's first member in topological order (for a
variable group that is the variable itself), so a group is never split.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from pardnn.graph import CostGraph
from pardnn.machine import Machine
from pardnn.mapping import map_clusters
from pardnn.simulate import Evaluation, evaluate
from pardnn.slicing import slice_graph

__all__ = ["PartitionReport", "Result", "communication_ratio", "keep_groups_whole", "partition"]

Progress = Callable[[str, int, int], None]


@dataclass(frozen=True)
class PartitionReport:
    """What the partitioner did: per-stage wall time (s), clusters, mapping decisions, evaluation."""

    algorithm: str
    devices: int
    ops: int
    edges: int
    ccr: float
    stage_seconds: dict[str, float]
    evaluation: Evaluation
    details: dict[str, Any] = field(default_factory=dict)

    @property
    def total_seconds(self) -> float:
        return float(sum(self.stage_seconds.values()))

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["evaluation"] = self.evaluation.to_dict()
        out["total_seconds"] = self.total_seconds
        return out


@dataclass(frozen=True)
class Result:
    """A placement (device index per op) and its report."""

    placement: np.ndarray
    report: PartitionReport


def communication_ratio(graph: CostGraph, machine: Machine) -> float:
    """CCR: the cost of all edges if cut, over the total work (the paper's Table "DoP and CCR")."""
    work = graph.total_work_us
    return float(machine.edge_comm_us(graph.edge_bytes).sum()) / work if work > 0 else 0.0


def keep_groups_whole(graph: CostGraph, placement: np.ndarray) -> tuple[np.ndarray, int]:
    """Move every colocation group's members to the device of its topologically first member.

    Returns the new placement and how many ops moved. O(|V|).
    """
    place = np.array(placement, dtype=np.int64)
    members = np.flatnonzero(graph.colocation >= 0)
    if members.size == 0:
        return place, 0
    groups = graph.colocation[members]
    order = np.lexsort((graph.topo_rank[members], groups))
    leaders = np.full(len(graph.group_names), -1, np.int64)
    first = np.ones(order.size, bool)
    first[1:] = groups[order[1:]] != groups[order[:-1]]
    leaders[groups[order[first]]] = members[order[first]]
    target = place[leaders[groups]]
    moved = int((place[members] != target).sum())
    place[members] = target
    return place, moved


def partition(graph: CostGraph, machine: Machine, *, memory_heuristic: str | None = None,
              progress: Progress | None = None) -> Result:
    """Place every op of ``graph`` on one of ``machine.devices`` devices with ParDNN.

    Parameters
    ----------
    graph:
        The training step's cost graph.
    machine:
        Devices, memory, interconnect.
    memory_heuristic:
        ``None`` (Step 1 only). The memory heuristics of Step 2 plug in here.
    progress:
        Called as ``progress(stage, done, total)`` during long stages.

    Returns
    -------
    Result
        ``placement`` (int64, one device per op; colocation groups whole; byte-identical across
        runs) and a :class:`PartitionReport`.

    Notes
    -----
    Slicing O(K(|V| + |E|)), mapping O(|V| log^2 |V|), evaluation O((|V| + |E|) log |V|).
    """
    if memory_heuristic is not None:
        raise ValueError(f"memory_heuristic={memory_heuristic!r}: only None is available")
    k = machine.devices
    seconds: dict[str, float] = {}
    t0 = time.perf_counter()
    weight = machine.edge_comm_us(graph.edge_bytes)
    ccr = communication_ratio(graph, machine)
    clusters = slice_graph(graph, weight, k,
                           progress=None if progress is None else lambda done, total: progress("slicing", done, total))
    t1 = time.perf_counter()
    seconds["slicing"] = t1 - t0
    if progress is not None:
        progress("mapping", 0, 1)
    mapping = map_clusters(graph, weight, clusters, k, ccr)
    placement, colocation_moved = keep_groups_whole(graph, mapping.placement)
    t2 = time.perf_counter()
    seconds["mapping"] = t2 - t1
    if progress is not None:
        progress("evaluation", 0, 1)
    evaluation = evaluate(graph, machine, placement)
    seconds["evaluation"] = time.perf_counter() - t2
    primary_sizes = np.diff(clusters.ptr[: k + 1])
    details = {
        "primary_ops": primary_sizes.tolist(),
        "secondary_clusters": clusters.count - k,
        "mapped_by_locality": mapping.mapped_by_locality,
        "mapped_by_balance": mapping.mapped_by_balance,
        "lookahead_passes": mapping.passes,
        "colocation_moved": colocation_moved,
    }
    report = PartitionReport("pardnn", k, graph.n, graph.m, ccr, seconds, evaluation, details)
    placement.flags.writeable = False
    return Result(placement, report)
