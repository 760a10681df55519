"""Choosing how a node's GPUs are used: replicas of k devices × M micro-batches, the allreduce included.

:func:`search_plans` tries every k dividing the node's G GPUs and every M dividing the replica's batch,
places each plan's step with ParDNN, emulates it with the cluster's gradient allreduce and keeps the
highest throughput that fits memory; plans a lower bound rules out are ``pruned``, not placed. Ties and
pruning: docs/notes-partitioner.md.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from pardnn.batch.microbound import MicroBound
from pardnn.costs.graph import CostGraph
from pardnn.costs.machine import Machine
from pardnn.emulation.allreduce import Cluster
from pardnn.emulation.emulated import strictly_shorter
from pardnn.emulation.simulate import lower_bound_us
from pardnn.errors import InfeasibleError
from pardnn.partitioner import partition
from pardnn.placement.allreduce_order import judge_order

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
    with ``reason``), ``skipped`` (the batch does not split: ``reason``) or ``pruned`` (not placed: its
    step is at least ``bound_us``, longer than a fitting plan's; module docstring). ``run_order``:
    ``None`` when the placement has no run order, else whether it trains in it (``False``: in order of
    readiness, shorter with the allreduce)."""

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
    bound_us: float | None = None
    run_order: bool | None = None

    @property
    def fits(self) -> bool:
        return self.status == "fits"

    def to_dict(self) -> dict[str, Any]:
        return {"replica_devices": self.plan.replica_devices, "micro_batches": self.plan.micro_batches,
                "replicas_per_node": self.plan.replicas_per_node, "replica_batch": self.replica_batch,
                "status": self.status, "reason": self.reason, "ops": self.ops, "compute_us": self.compute_us,
                "exposed_allreduce_us": self.exposed_us, "step_us": self.step_us,
                "samples_per_s": self.samples_per_s, "peak_bytes": self.peak_bytes, "seconds": self.seconds,
                "bound_us": self.bound_us, "run_order": self.run_order}


@dataclass(frozen=True)
class PlanSearch:
    """Every trial, by k then M (the table's order; they are tried by M, then k), the chosen one
    (``None``: nothing fits) and why it won."""

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
                 placements: dict[tuple[int, int, int], Any] | None = None, prune: bool = True,
                 bound_for: Callable[..., MicroBound | None] | None = None,
                 ahead: Callable[[list[tuple[int, int, float | None]]], None] | None = None) -> PlanSearch:
    """Try each plan and choose (module docstring).

    ``graph_for(batch, M)``: the replica's costed step at that batch with M micro-batches;
    ``machine_for(k)``: k devices of the node; ``cluster_for(replicas_per_node)``: the cluster's allreduce.
    ``replica_devices`` (default every divisor of ``node_devices``) and ``micro_batches`` limit the search.
    ``placements``: a cache of ParDNN's answers by (replica batch, M, k), kept by the caller to plan the
    same node for several cluster sizes (a placement does not depend on the number of nodes; only the
    allreduce, emulated again for each, does). ``prune``: skip placing the plans whose step's lower
    bound is longer than a fitting plan's (module docstring). ``bound_for(batch, M, k, ready_only=False)``:
    a lower bound on that plan's step without its graph (a :class:`pardnn.batch.microbound.MicroBound`,
    or ``None``; ``ready_only``: without building anything), tried before ``graph_for`` when pruning;
    ``ahead(plans)``: before each trial, the (replica batch, M, bound or ``None``) of the plans left
    that those bounds do not prune yet (a builder's hint: what it may drop, and which plans are the
    likeliest to be placed).
    """
    started = time.perf_counter()
    trials: list[Trial] = []
    cache = {} if placements is None else placements
    plans = [Plan(k, micro, node_devices) for micro in micro_batches for k in replica_devices or
             replica_options(node_devices)]
    for index, plan in enumerate(plans):
        fitting = [t.step_us for t in trials if t.fits]
        best = min(fitting) if prune and fitting else None  # type: ignore[type-var]
        if ahead is not None:
            ahead(_left(plans[index:], node_batch, best, bound_for))
        trial = _try(plan, graph_for, machine_for, cluster_for, nodes, node_batch, cache, best, bound_for)
        trials.append(trial)
        if on_trial is not None:
            on_trial(trial)
    trials.sort(key=lambda t: (t.plan.replica_devices, t.plan.micro_batches))
    chosen = _choose(trials)
    return PlanSearch(tuple(trials), chosen, _why(chosen, trials), time.perf_counter() - started)


def _batch(plan: Plan, node_batch: int) -> int | None:
    """The replica's batch, ``None`` when the node's batch does not split over the replicas and M."""
    replicas = plan.replicas_per_node
    if node_batch % replicas or (node_batch // replicas) % plan.micro_batches:
        return None
    return node_batch // replicas


def _left(plans: Sequence[Plan], node_batch: int, best_us: float | None,
          bound_for: Callable[..., MicroBound | None] | None) -> list[tuple[int, int, float | None]]:
    """(replica batch, M, bound) of the ``plans`` that split and that no bound already built prunes
    (``bound``: that lower bound on the step, ``None`` while its plain step is not built)."""
    out = []
    for plan in plans:
        batch = _batch(plan, node_batch)
        if batch is None:
            continue
        found = None if bound_for is None or plan.micro_batches < 2 else \
            bound_for(batch, plan.micro_batches, plan.replica_devices, ready_only=True)
        bound = None if found is None else found.us
        if bound is None or best_us is None or not strictly_shorter(best_us, bound):
            out.append((batch, plan.micro_batches, bound))
    return out


def _try(plan: Plan, graph_for: Callable[[int, int], CostGraph], machine_for: Callable[[int], Machine],
         cluster_for: Callable[[int], Cluster], nodes: int, node_batch: int,
         placements: dict[tuple[int, int, int], Any], best_us: float | None,
         bound_for: Callable[..., MicroBound | None] | None = None) -> Trial:
    replicas = plan.replicas_per_node
    if node_batch % replicas:
        return Trial(plan, 0, "skipped", f"the node's batch {node_batch} does not split over {replicas} replicas")
    batch = node_batch // replicas
    if batch % plan.micro_batches:
        return Trial(plan, batch, "skipped", f"the replica's batch {batch} does not split into "
                                             f"{plan.micro_batches} micro-batches")
    began = time.perf_counter()
    key = (batch, plan.micro_batches, plan.replica_devices)
    if key not in placements and best_us is not None and bound_for is not None and plan.micro_batches > 1:
        found = bound_for(batch, plan.micro_batches, plan.replica_devices, ready_only=True)
        if found is None or not strictly_shorter(best_us, found.us):  # a tighter one, building its plain step
            found = bound_for(batch, plan.micro_batches, plan.replica_devices)
        if found is not None and strictly_shorter(best_us, found.us):
            return Trial(plan, batch, "pruned", f"its step is at least {found.us / 1e3:.2f} ms ({found.basis}; "
                         f"not built), longer than {best_us / 1e3:.2f} ms that fits",
                         seconds=time.perf_counter() - began, bound_us=found.us)
    graph = graph_for(batch, plan.micro_batches)
    if key not in placements and best_us is not None:
        bound, _ = lower_bound_us(graph, plan.replica_devices)
        if strictly_shorter(best_us, bound):
            return Trial(plan, batch, "pruned", f"its step is at least {bound / 1e3:.2f} ms (compute / k or the "
                         f"critical path), longer than {best_us / 1e3:.2f} ms that fits", graph.n,
                         seconds=time.perf_counter() - began, bound_us=bound)
    machine = machine_for(plan.replica_devices)
    if key not in placements:
        try:
            placements[key] = partition(graph, machine)
        except InfeasibleError as error:
            placements[key] = error
    result = placements[key]
    if isinstance(result, InfeasibleError):
        return Trial(plan, batch, "infeasible", str(result).split(". Options:")[0], graph.n,
                     seconds=time.perf_counter() - began)
    judged = judge_order(graph, machine, result, cluster_for(replicas))
    evaluation, step = judged.result.report.evaluation, judged.step
    status = "fits" if evaluation.memory_fits else "does_not_fit"
    return Trial(plan, batch, status, "" if evaluation.memory_fits else "a device's peak is over its limit", graph.n,
                 step.compute_us, step.exposed_us, step.step_us, nodes * node_batch / (step.step_us * 1e-6),
                 max(evaluation.peak_memory_bytes), time.perf_counter() - began,
                 run_order=None if result.order is None else not judged.dropped)


def _choose(trials: Sequence[Trial]) -> Trial | None:
    """The fitting trial of the shortest step (the same samples per step for every plan); among those
    within the emulator's tolerance of it, the first in ``trials``' order: more replicas, then the
    smaller M. (A pruned plan is strictly longer than the shortest, so pruning never changes this.)"""
    fitting = [trial for trial in trials if trial.fits]
    if not fitting:
        return None
    shortest = min(trial.step_us for trial in fitting)  # type: ignore[type-var]
    return next(trial for trial in fitting if not strictly_shorter(shortest, trial.step_us))  # type: ignore[arg-type]


def _why(chosen: Trial | None, trials: Sequence[Trial]) -> str:
    if chosen is None:
        return "no plan fits every device's memory"
    runners = [t for t in trials if t.fits and t is not chosen]
    bounds = [t.bound_us for t in trials if t.status == "pruned"]
    second = min(runners, key=lambda t: t.step_us) if runners else None  # type: ignore[arg-type, return-value]
    if bounds and chosen.step_us > 0 and (second is None or min(bounds) < second.step_us):  # type: ignore[operator]
        return (f"{chosen.plan.label}: at least {min(bounds) / chosen.step_us:.2f}x the samples/s of every other plan "  # type: ignore[operator]
                f"({len(bounds)} not placed: their lower bounds are longer than its step)")
    if second is None:
        return f"{chosen.plan.label}: the only plan that fits"
    ratio = second.step_us / chosen.step_us  # type: ignore[operator]
    if ratio <= 1.0 + 1e-9 or not strictly_shorter(chosen.step_us, second.step_us):  # type: ignore[arg-type]
        return (f"{chosen.plan.label}: as fast as {second.plan.label} within the emulator's tolerance, and simpler "
                "(more replicas, then fewer micro-batches)")
    return f"{chosen.plan.label}: {ratio:.2f}x the samples/s of the next best, {second.plan.label}"
