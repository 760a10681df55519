"""What every placer returns: a :class:`Result` (placement + :class:`PartitionReport`).

Shared by ParDNN's pipeline and the baseline placers, so their reports compare field by field, and so
is the one warning every placer gives (:func:`warn_if_uncosted`, once per call).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from pardnn.costs.graph import CostGraph
from pardnn.costs.machine import Machine
from pardnn.emulation.emulator import Schedule
from pardnn.emulation.memory import MemoryProfile
from pardnn.emulation.simulate import Evaluation

__all__ = ["PartitionReport", "Progress", "Result", "communication_ratio", "warn_if_uncosted"]

logger = logging.getLogger(__name__)

# Called as ``progress(stage, done, total)`` during long stages.
Progress = Callable[[str, int, int], None]


@dataclass(frozen=True)
class PartitionReport:
    """What the partitioner did: per-stage wall time (s), clusters, mapping decisions, evaluation."""

    algorithm: str
    devices: int
    ops: int
    edges: int
    ccr: float | None  # None: the graph has no work
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
    """A placement (device index per op), its report, and optionally a run order.

    ``order``: ``None``, or each op's position in its device's run sequence (int64, 0 first), to be
    enforced (:mod:`pardnn.polish.order`, :func:`pardnn.tf.apply`); the report's makespan assumes it.
    ``schedule``, ``memory``: the emulated step and its memory profile that the report's figures come
    from (``None`` only for a result built by hand), so that whoever draws the step
    (:func:`pardnn.emulation.trace.chrome_trace`) need not emulate it again.
    """

    placement: np.ndarray
    report: PartitionReport
    order: np.ndarray | None = None
    schedule: Schedule | None = field(default=None, repr=False, compare=False)
    memory: MemoryProfile | None = field(default=None, repr=False, compare=False)


def communication_ratio(graph: CostGraph, machine: Machine) -> float | None:
    """CCR: the cost of all edges if cut, over the total work (the paper's Table "DoP and CCR");
    ``None`` when no op costs anything (no work: no ratio)."""
    work = graph.total_work_us
    return float(machine.edge_comm_us(graph.edge_bytes).sum()) / work if work > 0 else None


def warn_if_uncosted(graph: CostGraph) -> bool:
    """Log a warning, and return ``True``, when ``graph`` has ops and every one costs 0 µs.

    Legal, and placed like any graph, but almost surely a mistake: a step captured for its structure
    (:func:`pardnn.tf.capture`) and never costed, so the placement cannot weigh compute at all.
    """
    if graph.n == 0 or graph.comp_us.any():
        return False
    logger.warning("every op of graph %r (%s ops) costs 0 us, so its placement cannot weigh compute: was it "
                   "captured but never costed? Cost it with pardnn.tf.profile or pardnn.tf.estimate, "
                   "`pardnn capture --profile N` or `--estimate PRESET`, or the job's [placement] costs",
                   graph.name, f"{graph.n:,}")
    return True
