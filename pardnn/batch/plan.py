"""Choosing how a node's GPUs are used: replicas of k devices × M micro-batches, the allreduce included.

A node of G GPUs can run G/k replicas of k devices each (k dividing G): k = G is one model-parallel
replica per node, k = 1 plain data parallelism. Each replica trains B·k/G of the node's batch B, split
into M micro-batches. A *plan* is (k, M); its cost is one replica's emulated step with the gradient
allreduce across all N·G/k replicas of the cluster in it (:mod:`pardnn.emulation.allreduce`), placed
by ParDNN on the k devices. The cluster trains N·B samples per step, so the plan's throughput is
``N·B / step``.

:func:`search_plans` tries every k that divides G and, for each, every M that divides the replica's
batch; each trial costs the replica's real graph at its real batch and M (a callback builds it) and
places it. It keeps the highest throughput that fits every device's memory. Ties (within the
emulator's tolerance, :func:`pardnn.emulation.emulated.strictly_shorter`) go to the simpler plan: more
replicas first (the smaller k), then the smaller M. k = 1 and k = G are always tried, so the plan
chosen is never slower, in the emulator, than plain data parallelism or one replica per node where
those fit.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from pardnn.costs.graph import CostGraph
from pardnn.costs.machine import Machine
from pardnn.emulation.allreduce import Cluster, emulate_with_allreduce
from pardnn.emulation.emulated import strictly_shorter
from pardnn.errors import InfeasibleError
from pardnn.partitioner import partition

__all__ = ["MICRO_BATCHES", "Plan", "PlanSearch", "Trial", "replica_options", "search_plans"]

MICRO_BATCHES = (1, 2, 4, 8, 16)  # the M tried for each k


@dataclass(frozen=True)
class Plan:
    """``replica_devices`` k and ``micro_batches`` M on a node of ``node_devices`` G."""

    replica_devices: int
    micro_batches: int
    node_devices: int

    @property
    def replicas_per_node(self) -> int:
        return self.node_devices // self.replica_devices

    @property
    def label(self) -> str:
        return f"k={self.replica_devices} M={self.micro_batches}"


@dataclass(frozen=True)
class Trial:
    """One plan tried. Times in µs; ``samples_per_s``: the cluster's; ``status``: ``fits``,
    ``does_not_fit`` (the placement's peak is over a device's limit), ``infeasible`` (no placement,
    with ``reason``) or ``skipped`` (the batch does not split: ``reason``)."""

    plan: Plan
    replica_batch: int
    status: str
    reason: str = ""
    ops: int = 0
    compute_us: float | None = None
    exposed_us: float | None = None
    step_us: float | None = None
    samples_per_s: float | None = None
    peak_bytes: int | None = None
    seconds: float = 0.0

    @property
    def fits(self) -> bool:
        return self.status == "fits"

    def to_dict(self) -> dict[str, Any]:
        return {"replica_devices": self.plan.replica_devices, "micro_batches": self.plan.micro_batches,
                "replicas_per_node": self.plan.replicas_per_node, "replica_batch": self.replica_batch,
                "status": self.status, "reason": self.reason, "ops": self.ops, "compute_us": self.compute_us,
                "exposed_allreduce_us": self.exposed_us, "step_us": self.step_us,
                "samples_per_s": self.samples_per_s, "peak_bytes": self.peak_bytes, "seconds": self.seconds}


@dataclass(frozen=True)
class PlanSearch:
    """Every trial in the order tried, the chosen one (``None``: nothing fits) and why it won."""

    trials: tuple[Trial, ...]
    chosen: Trial | None
    why: str
    seconds: float

    def to_dict(self) -> dict[str, Any]:
        return {"chosen": None if self.chosen is None else self.chosen.to_dict(), "why": self.why,
                "seconds": self.seconds, "trials": [trial.to_dict() for trial in self.trials]}


def replica_options(node_devices: int) -> list[int]:
    """Every k that divides G, the most replicas (k = 1) first."""
    return [k for k in range(1, node_devices + 1) if node_devices % k == 0]


def search_plans(graph_for: Callable[[int, int], CostGraph], machine_for: Callable[[int], Machine],
                 cluster_for: Callable[[int], Cluster], *, node_devices: int, nodes: int, node_batch: int,
                 replica_devices: Sequence[int] | None = None, micro_batches: Sequence[int] = MICRO_BATCHES,
                 on_trial: Callable[[Trial], None] | None = None,
                 placements: dict[tuple[int, int, int], Any] | None = None) -> PlanSearch:
    """Try each plan and choose (module docstring).

    ``graph_for(batch, M)``: the replica's costed step at that batch with M micro-batches;
    ``machine_for(k)``: k devices of the node; ``cluster_for(replicas_per_node)``: the cluster's allreduce.
    ``replica_devices`` (default every divisor of ``node_devices``) and ``micro_batches`` limit the search.
    ``placements``: a cache of ParDNN's answers by (replica batch, M, k), kept by the caller to plan the
    same node for several cluster sizes (a placement does not depend on the number of nodes; only the
    allreduce, emulated again for each, does).
    """
    started = time.perf_counter()
    trials: list[Trial] = []
    cache = {} if placements is None else placements
    for k in replica_devices or replica_options(node_devices):
        for micro in micro_batches:
            trial = _try(Plan(k, micro, node_devices), graph_for, machine_for, cluster_for, nodes, node_batch, cache)
            trials.append(trial)
            if on_trial is not None:
                on_trial(trial)
    chosen = _choose(trials)
    return PlanSearch(tuple(trials), chosen, _why(chosen, trials), time.perf_counter() - started)


def _try(plan: Plan, graph_for: Callable[[int, int], CostGraph], machine_for: Callable[[int], Machine],
         cluster_for: Callable[[int], Cluster], nodes: int, node_batch: int,
         placements: dict[tuple[int, int, int], Any]) -> Trial:
    replicas = plan.replicas_per_node
    if node_batch % replicas:
        return Trial(plan, 0, "skipped", f"the node's batch {node_batch} does not split over {replicas} replicas")
    batch = node_batch // replicas
    if batch % plan.micro_batches:
        return Trial(plan, batch, "skipped", f"the replica's batch {batch} does not split into "
                                             f"{plan.micro_batches} micro-batches")
    began = time.perf_counter()
    graph = graph_for(batch, plan.micro_batches)
    machine = machine_for(plan.replica_devices)
    key = (batch, plan.micro_batches, plan.replica_devices)
    if key not in placements:
        try:
            placements[key] = partition(graph, machine)
        except InfeasibleError as error:
            placements[key] = error
    result = placements[key]
    if isinstance(result, InfeasibleError):
        return Trial(plan, batch, "infeasible", str(result).split(". Options:")[0], graph.n,
                     seconds=time.perf_counter() - began)
    evaluation = result.report.evaluation
    step = emulate_with_allreduce(graph, machine, result.placement, cluster_for(replicas), order=result.order,
                                  schedule=result.schedule)
    status = "fits" if evaluation.memory_fits else "does_not_fit"
    return Trial(plan, batch, status, "" if evaluation.memory_fits else "a device's peak is over its limit", graph.n,
                 step.compute_us, step.exposed_us, step.step_us, nodes * node_batch / (step.step_us * 1e-6),
                 max(evaluation.peak_memory_bytes), time.perf_counter() - began)


def _choose(trials: Sequence[Trial]) -> Trial | None:
    """The fitting trial of the shortest step (the same samples per step for every plan), a tie to the
    one tried first: more replicas, then the smaller M."""
    best: Trial | None = None
    for trial in trials:
        if trial.fits and (best is None or strictly_shorter(trial.step_us, best.step_us)):  # type: ignore[arg-type]
            best = trial
    return best


def _why(chosen: Trial | None, trials: Sequence[Trial]) -> str:
    if chosen is None:
        return "no plan fits every device's memory"
    runners = [t for t in trials if t.fits and t is not chosen]
    if not runners:
        return f"{chosen.plan.label}: the only plan that fits"
    second = min(runners, key=lambda t: t.step_us)  # type: ignore[arg-type, return-value]
    ratio = second.step_us / chosen.step_us  # type: ignore[operator]
    if ratio <= 1.0 + 1e-9 or not strictly_shorter(chosen.step_us, second.step_us):  # type: ignore[arg-type]
        return (f"{chosen.plan.label}: as fast as {second.plan.label} within the emulator's tolerance, and simpler "
                "(more replicas, then fewer micro-batches)")
    return f"{chosen.plan.label}: {ratio:.2f}x the samples/s of the next best, {second.plan.label}"
