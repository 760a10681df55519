"""The ParDNN pipeline: slicing → (chunk splitting) → LFLAM mapping → colocation → memory heuristic →
evaluation. The public entry point.

``partition(graph, machine)`` returns the placement and a report of what each stage did and cost.
Stages are the modules of the paper's Step 1 (``slicing``, ``mapping``) and Step 2 (``overflow``,
``balance``); this module only chains them, keeps colocation groups whole, and measures.

Colocation (the paper is silent; LFLAM maps clusters, not groups, and may split a group): after
mapping, every group goes whole to one device chosen by the better, in emulated makespan, of two
rules (:func:`resolve_groups`):

- *first member*: the device of the group's topologically first member (for a variable group, the
  variable itself);
- *vote*: the device with the largest sum of the group's compute mapped to it plus the
  communication between the group and ops outside it mapped to it, so a variable joins the ops that
  read it and apply its gradients.

Neither wins everywhere on the paper's models: the vote shortens TRN's step by 11-20 % (the
attention weights' groups join their readers, and the critical path stops waiting for them) and
lengthens Word-RNN-2's at K = 16 by 13 %; taking the better costs two emulations. Under memory
limits "better" first means fewer bytes over the limits (see :func:`resolve_groups`).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any, NamedTuple

import numpy as np

from pardnn.balance import balance_residuals, split_critical_path
from pardnn.emulator import Schedule, emulate
from pardnn.errors import InfeasibleError
from pardnn.graph import CostGraph
from pardnn.machine import Machine
from pardnn.mapping import map_clusters
from pardnn.memory import MemoryProfile, track_memory
from pardnn.overflow import check_residual_capacity, handle_overflow, infeasible_message
from pardnn.simulate import Evaluation, evaluate
from pardnn.slicing import slice_graph

__all__ = ["MEMORY_HEURISTICS", "Groups", "PartitionReport", "Result", "communication_ratio", "groups_by_vote",
           "keep_groups_whole", "partition", "resolve_groups"]

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


def groups_by_vote(graph: CostGraph, placement: np.ndarray, edge_weight: np.ndarray,
                   devices: int) -> tuple[np.ndarray, int]:
    """Move every colocation group whole to the device where most of its compute and communication is.

    A group's score on device ``d``: the compute of its members mapped to ``d`` plus the weight of
    every edge between a member and a non-member mapped to ``d``. Ties go to the lower device index.
    Returns the new placement and how many ops moved. O(|V| + |E| + groups × K).
    """
    place = np.array(placement, dtype=np.int64)
    groups = len(graph.group_names)
    members = np.flatnonzero(graph.colocation >= 0)
    if members.size == 0:
        return place, 0
    group = graph.colocation
    score = np.bincount(group[members] * devices + place[members], weights=graph.comp_us[members],
                        minlength=groups * devices)
    weight = np.asarray(edge_weight, dtype=np.float64)
    src, dst = graph.edge_src, graph.edge_dst
    for inside, outside in ((src, dst), (dst, src)):
        talks = (group[inside] >= 0) & (group[inside] != group[outside])
        score += np.bincount(group[inside[talks]] * devices + place[outside[talks]], weights=weight[talks],
                             minlength=groups * devices)
    target = np.argmax(score.reshape(groups, devices), axis=1)[group[members]]
    moved = int((place[members] != target).sum())
    place[members] = target
    return place, moved


class Groups(NamedTuple):
    """:func:`resolve_groups`' answer: the placement, ops moved, the rule taken, and its emulation."""

    placement: np.ndarray
    moved: int
    rule: str  # "first member" or "vote"
    schedule: Schedule
    memory: MemoryProfile | None  # when the machine has memory limits


def resolve_groups(graph: CostGraph, machine: Machine, placement: np.ndarray, edge_weight: np.ndarray) -> Groups:
    """Keep every colocation group whole: the better of :func:`keep_groups_whole` and
    :func:`groups_by_vote`.

    Better: the shorter emulated makespan; on a machine with memory limits, first the fewer bytes
    over the limits (summed over devices), then the makespan. Ties go to the first member. A
    placement that already fits leaves the memory heuristic less to do, and near the largest batch
    the one with less overflow is the one heuristic I can still repair (TRN on 16 GPUs: batch 213
    places from the first-member rule, only 185 from the vote, which is 1 % faster where both fit).

    O((|V| + |E|) log |V|): one or two emulations and memory sweeps (the winner's are returned).
    """
    candidates = [(keep_groups_whole(graph, placement), "first member")]
    voted = groups_by_vote(graph, placement, edge_weight, machine.devices)
    if not np.array_equal(candidates[0][0][0], voted[0]):
        candidates.append((voted, "vote"))
    best: tuple[tuple[float, float], Groups] | None = None
    for (place, moved), rule in candidates:
        schedule = emulate(graph, machine, place)
        memory = track_memory(graph, machine, place, schedule) if machine.bounded else None
        over = 0.0 if memory is None else float(np.maximum(memory.peak_bytes - machine.limits_bytes, 0).sum())
        key = (over, schedule.makespan_us)
        if best is None or key < best[0]:
            best = (key, Groups(place, moved, rule, schedule, memory))
    assert best is not None
    return best[1]


MEMORY_HEURISTICS = ("overflow", "balance")


def _resolve_heuristic(memory_heuristic: str | None, machine: Machine) -> str | None:
    if memory_heuristic == "auto":
        return "overflow" if machine.bounded else None
    if memory_heuristic in (None, "none"):
        return None
    if memory_heuristic not in MEMORY_HEURISTICS:
        raise ValueError(f"memory_heuristic={memory_heuristic!r}; expected 'overflow', 'balance', None or 'auto'")
    return memory_heuristic


def partition(graph: CostGraph, machine: Machine, *, memory_heuristic: str | None = "auto",
              progress: Progress | None = None) -> Result:
    """Place every op of ``graph`` on one of ``machine.devices`` devices with ParDNN.

    Parameters
    ----------
    graph:
        The training step's cost graph.
    machine:
        Devices, memory, interconnect.
    memory_heuristic:
        ``"overflow"`` (heuristic I: emulate and move ops off overflowing devices; guarantees the
        limits or raises), ``"balance"`` (heuristic II: critical-path chunk splitting before mapping
        and residual balancing after it; no emulation, no guarantee), ``None`` (Step 1 only), or
        ``"auto"`` (the default: ``"overflow"`` when the machine has a memory size, else ``None``).
    progress:
        Called as ``progress(stage, done, total)`` during long stages.

    Returns
    -------
    Result
        ``placement`` (int64, one device per op; colocation groups whole; byte-identical across
        runs) and a :class:`PartitionReport`.

    Raises
    ------
    InfeasibleError
        With a memory heuristic, when no placement meeting every device's limit was found.

    Notes
    -----
    Slicing O(K(|V| + |E|)), mapping O(|V| log^2 |V|), evaluation O((|V| + |E|) log |V|); heuristic I
    adds one evaluation per round, heuristic II O(|V| + |E|).
    """
    heuristic = _resolve_heuristic(memory_heuristic, machine)
    k = machine.devices
    seconds: dict[str, float] = {}
    details: dict[str, Any] = {"memory_heuristic": heuristic}

    def report_progress(stage: str) -> Callable[[int, int], None] | None:
        return None if progress is None else lambda done, total: progress(stage, done, total)

    t0 = time.perf_counter()
    if heuristic is not None:
        check_residual_capacity(graph, machine)
    weight = machine.edge_comm_us(graph.edge_bytes)
    ccr = communication_ratio(graph, machine)
    clusters = slice_graph(graph, weight, k, progress=report_progress("slicing"))
    details["primary_ops"] = np.diff(clusters.ptr[: k + 1]).tolist()
    if heuristic == "balance":
        clusters, details["chunk_split_ops"] = split_critical_path(graph, clusters)
    seconds["slicing"] = time.perf_counter() - t0

    t1 = time.perf_counter()
    if progress is not None:
        progress("mapping", 0, 1)
    mapping = map_clusters(graph, weight, clusters, k, ccr)
    groups = resolve_groups(graph, machine, mapping.placement, weight)
    placement, schedule = groups.placement, groups.schedule
    details.update(colocation_moved=groups.moved, colocation_rule=groups.rule)
    details.update(secondary_clusters=clusters.count - k, mapped_by_locality=mapping.mapped_by_locality,
                   mapped_by_balance=mapping.mapped_by_balance, lookahead_passes=mapping.passes)
    seconds["mapping"] = time.perf_counter() - t1

    if heuristic is not None:
        t2 = time.perf_counter()
        before = evaluate(graph, machine, placement, schedule=schedule, memory=groups.memory)
        details.update(peak_before_bytes=before.peak_memory_bytes, makespan_before_us=before.makespan_us,
                       fits_before=before.memory_fits)
        seconds["evaluation_before"] = time.perf_counter() - t2
        t3 = time.perf_counter()
        if heuristic == "overflow":
            handled = handle_overflow(graph, machine, placement, progress=report_progress("memory"))
            placement, moved = handled.placement, handled.moved_ops
            details["overflow_rounds"] = handled.rounds
        else:
            balanced = balance_residuals(graph, machine, placement)
            placement, moved = balanced.placement, balanced.moved_ops
            details["residual_units_moved"] = balanced.moved_units
        details.update(moved_ops=moved, moved_share=moved / graph.n if graph.n else 0.0)
        seconds["memory"] = time.perf_counter() - t3

    t4 = time.perf_counter()
    if progress is not None:
        progress("evaluation", 0, 1)
    unchanged = heuristic is None  # the placement resolve_groups emulated is the final one
    evaluation = evaluate(graph, machine, placement, schedule=schedule if unchanged else None,
                          memory=groups.memory if unchanged else None)
    seconds["evaluation"] = time.perf_counter() - t4
    if heuristic is not None:
        details.update(peak_after_bytes=evaluation.peak_memory_bytes, makespan_after_us=evaluation.makespan_us)
        if not evaluation.memory_fits:
            limits = machine.limits_bytes
            peaks = np.array(evaluation.peak_memory_bytes)
            worst = int(np.argmax(peaks - limits))
            raise InfeasibleError(infeasible_message(
                worst, int(peaks[worst]), int(limits[worst]), machine,
                " after memory heuristic II (it balances memory but cannot guarantee the limits; "
                "--memory-heuristic overflow can)"))
    report = PartitionReport("pardnn", k, graph.n, graph.m, ccr, seconds, evaluation, details)
    placement.flags.writeable = False
    return Result(placement, report)
