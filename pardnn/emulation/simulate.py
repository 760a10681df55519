"""Evaluation of a placement: makespan, lower bound, memory, load, cut, colocation.

``evaluate`` chains the placement check (:mod:`pardnn.emulation.checks`), the scheduler emulator and the
memory tracker.

The lower bound is ``max(critical path without communication, total work / K)``: no schedule on K
devices can beat either.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from pardnn.costs.graph import CostGraph
from pardnn.costs.levels import critical_path_us
from pardnn.costs.machine import Machine
from pardnn.emulation.checks import check_placement, colocation_violations
from pardnn.emulation.emulated import emulate_and_track
from pardnn.emulation.emulator import Schedule, emulate
from pardnn.emulation.memory import MemoryProfile

__all__ = ["Evaluation", "evaluate", "evaluate_step", "lower_bound_us"]


@dataclass(frozen=True)
class Evaluation:
    """What a placement costs. Times in µs, memory in bytes, per-device lists indexed by device."""

    makespan_us: float
    lower_bound_us: float
    critical_path_us: float
    total_work_us: float
    load_us: list[float]
    peak_memory_bytes: list[int]
    peak_time_us: list[float]
    residual_bytes: list[int]
    limit_bytes: list[int] | None
    memory_fits: bool
    cut_edges: int
    cut_bytes: int
    comm_us: float
    colocation_violations: int
    ops_per_device: list[int]

    @property
    def ratio(self) -> float | None:
        """Makespan over lower bound (1.0 is optimal). A bound of 0 (no op costs anything) gives 1.0 for
        a makespan of 0 and ``None`` for a longer one (transfers only: no finite ratio)."""
        if self.lower_bound_us > 0:
            return self.makespan_us / self.lower_bound_us
        return 1.0 if self.makespan_us <= 0 else None

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["makespan_over_lower_bound"] = self.ratio
        return out


def lower_bound_us(graph: CostGraph, devices: int) -> tuple[float, float]:
    """``(lower bound, critical path without communication)`` in µs."""
    critical = critical_path_us(graph)
    return max(critical, graph.total_work_us / devices), critical


def evaluate(graph: CostGraph, machine: Machine, placement: np.ndarray, *,
             schedule: Schedule | None = None, memory: MemoryProfile | None = None,
             order: np.ndarray | None = None) -> Evaluation:
    """Emulate ``placement`` and report its makespan, memory and communication.

    Parameters
    ----------
    graph, machine, placement:
        What runs, on what, where.
    schedule, memory:
        Reuse an emulation / memory profile already computed for this placement.
    order:
        The placement's run order, if it has one (:mod:`pardnn.polish.order`): emulated as enforced.

    Notes
    -----
    O((|V| + |E|) log |V|): one emulation, one memory sweep, one critical-path sweep.

    Examples
    --------
    Two independent 5 µs ops on one device, then on two:

    >>> import numpy as np
    >>> from pardnn import CostGraph, Machine
    >>> g = CostGraph(["a", "b"], [5.0, 5.0], [0, 0], src=[], dst=[])
    >>> evaluate(g, Machine(2), np.array([0, 0])).makespan_us
    10.0
    >>> evaluate(g, Machine(2), np.array([0, 1])).makespan_us
    5.0
    """
    return evaluate_step(graph, machine, placement, schedule=schedule, memory=memory, order=order)[0]


def evaluate_step(graph: CostGraph, machine: Machine, placement: np.ndarray, *,
                  schedule: Schedule | None = None, memory: MemoryProfile | None = None,
                  order: np.ndarray | None = None) -> tuple[Evaluation, Schedule, MemoryProfile]:
    """:func:`evaluate`, and the schedule and memory profile it read the figures from (a caller that
    draws the step, as the launcher's ``emulated-step.json`` does, need not emulate it again)."""
    place = check_placement(graph, machine, placement)
    if memory is None:
        answer = emulate_and_track(graph, machine, place, order=order, schedule=schedule, track=True)
        schedule, memory = answer.schedule, answer.memory
        assert memory is not None  # track=True
    elif schedule is None:
        schedule = emulate(graph, machine, place, order=order)
    bound, critical = lower_bound_us(graph, machine.devices)
    cut = place[graph.edge_src] != place[graph.edge_dst]
    limits = machine.limits_bytes if machine.bounded else None
    evaluation = Evaluation(
        makespan_us=schedule.makespan_us,
        lower_bound_us=bound,
        critical_path_us=critical,
        total_work_us=graph.total_work_us,
        load_us=np.bincount(place, weights=graph.comp_us, minlength=machine.devices).tolist(),
        peak_memory_bytes=memory.peak_bytes.tolist(),
        peak_time_us=memory.peak_time_us.tolist(),
        residual_bytes=memory.residual_bytes.tolist(),
        limit_bytes=None if limits is None else limits.tolist(),
        memory_fits=True if limits is None else bool((memory.peak_bytes <= limits).all()),
        cut_edges=int(cut.sum()),
        cut_bytes=int(graph.edge_bytes[cut].sum()),
        comm_us=float(machine.edge_comm_us(graph.edge_bytes[cut]).sum()),
        colocation_violations=len(colocation_violations(graph, place)),
        ops_per_device=np.bincount(place, minlength=machine.devices).tolist(),
    )
    return evaluation, schedule, memory
