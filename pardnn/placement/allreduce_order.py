"""Whether a placement's run order still pays once the gradient allreduce is in the step.

:func:`judge_order` emulates the placement with the allreduce in its run order and in order of
readiness and keeps the order unless readiness is strictly shorter (and fits). Why and the choices:
docs/algorithm.md ("The gradient allreduce in the step"), docs/notes-partitioner.md.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from pardnn.costs.graph import CostGraph
from pardnn.costs.machine import Machine
from pardnn.emulation.allreduce import AllreduceStep, Cluster, emulate_with_allreduce
from pardnn.emulation.emulated import strictly_shorter
from pardnn.emulation.emulator import emulate
from pardnn.emulation.simulate import evaluate_step
from pardnn.placement.result import Result

__all__ = ["Judged", "judge_order"]


@dataclass(frozen=True)
class Judged:
    """``result`` as it should train across the cluster (its run order dropped when ``dropped``) and its
    step with the allreduce; ``ordered_us``: the step in the run order, when one was judged."""

    result: Result
    step: AllreduceStep
    dropped: bool = False
    ordered_us: float | None = None

    @property
    def why(self) -> str:
        """One line for a report: what was judged, ``""`` when there was no order to judge."""
        if self.ordered_us is None:
            return ""
        verdict = "dropped" if self.dropped else "kept"
        return (f"run order {verdict}: {self.ordered_us / 1e3:.2f} ms with it, the allreduce across "
                f"{self.step.replicas} replicas included; {self.step.step_us / 1e3:.2f} ms as it trains")


def judge_order(graph: CostGraph, machine: Machine, result: Result, cluster: Cluster) -> Judged:
    """``result`` with its run order kept only when the step with the gradient allreduce across
    ``cluster`` is not strictly longer in it than in order of readiness (module docstring)."""
    ordered = emulate_with_allreduce(graph, machine, result.placement, cluster, order=result.order,
                                     schedule=result.schedule)
    if result.order is None or cluster.replicas == 1 or ordered.buffers == 0:
        return Judged(result, ordered)
    alone = emulate(graph, machine, result.placement)  # in order of readiness: judged, then evaluated
    readiness = emulate_with_allreduce(graph, machine, result.placement, cluster, schedule=alone)
    if not strictly_shorter(readiness.step_us, ordered.step_us):
        return Judged(result, ordered, ordered_us=ordered.step_us)
    evaluation, schedule, memory = evaluate_step(graph, machine, result.placement, schedule=alone)
    if not evaluation.memory_fits and result.report.evaluation.memory_fits:
        return Judged(result, ordered, ordered_us=ordered.step_us)
    details = {**result.report.details, "run_order_dropped": {
        "ordered_step_us": ordered.step_us, "readiness_step_us": readiness.step_us,
        "replicas": cluster.replicas}}
    report = dataclasses.replace(result.report, evaluation=evaluation, details=details)
    return Judged(Result(result.placement, report, None, schedule, memory), readiness, True, ordered.step_us)
