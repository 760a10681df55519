"""Whether a placement's run order still pays once the gradient allreduce is in the step.

ParDNN's ordering stage (:mod:`pardnn.polish.order`) keeps a run order per device when it shortens the
replica's own step. It judges the step alone, and the order it finds (each device runs the op that feeds
the critical path first) tends to run the weight gradients, which are off the critical path, last. With
data parallelism that is the wrong way round: each gradient's allreduce starts when the gradient is
ready, so gradients computed last leave their allreduces exposed. Measured on a 4-device replica of a
small word-level RNN on 2 DGX A100 nodes: in its run order the step is 6.03 ms (compute 2.47, allreduce
exposed 3.56); the same placement in order of readiness 4.03 ms (compute 2.65, exposed 1.38).

So wherever the replicas are known (a plan search, ``pardnn place --nodes``, the launcher),
:func:`judge_order` emulates the placement both ways with the allreduce
(:func:`pardnn.emulation.allreduce.emulate_with_allreduce`) and keeps the run order only when its step
is not longer. The placement itself is ParDNN's either way: it does not depend on the cluster, so one
placement serves every number of nodes and only this judgement is made again for each.

Choices where nothing says what to do:

- **The same placement, two orders.** The placement was refined under its run order; the alternative is
  that placement in order of readiness, not the placement ParDNN had before ordering (which the result
  no longer holds). Both are placements the launcher can train as they were emulated.
- **Ties keep the order** (within the emulator's tolerance,
  :func:`pardnn.emulation.emulated.strictly_shorter`): the placement's own answer stands unless order of
  readiness is strictly shorter.
- **Memory.** Order of readiness changes the step's memory profile; it is taken only when every device
  still fits (or when the ordered step did not fit either), and the result's report is evaluated again
  in that order, so the figures a user reads are those of what trains.
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
