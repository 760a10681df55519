"""Choosing how a node's GPUs are used: replicas of k devices × M micro-batches, the allreduce included.

:class:`Planner` judges one plan (build its step, bound it, place it, emulate it with the cluster's
gradient allreduce) and :meth:`Planner.search` tries every k and M and keeps the highest throughput
that fits. ``pardnn plan``, ``--replica-devices auto`` and ``--micro-batches auto`` all search with
it. The rules (candidates, pruning, ties): docs/planning.md, "How a plan is chosen".
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from pardnn.costs.graph import CostGraph
from pardnn.costs.machine import Machine, format_bytes
from pardnn.emulation.allreduce import Cluster
from pardnn.emulation.emulated import strictly_shorter
from pardnn.emulation.simulate import lower_bound_us
from pardnn.errors import InfeasibleError, PardnnError
from pardnn.partitioner import partition
from pardnn.placement.allreduce_order import Judged, judge_order
from pardnn.plan.microbound import MicroBound

__all__ = ["MICRO_BATCHES", "Plan", "PlanSearch", "Planner", "Steps", "Trial", "Unplaced", "choose",
           "replica_options"]

MICRO_BATCHES = (1, 2, 4, 8, 16)  # the M tried for each k (those dividing the replica's batch)

# A trial's status.
FITS, DOES_NOT_FIT, INFEASIBLE, NO_PLACEMENT, SKIPPED, PRUNED = (
    "fits", "does_not_fit", "infeasible", "no_placement", "skipped", "pruned")


class Unplaced(PardnnError):
    """Raised by a placer given to :class:`Planner` that gives no placement for a reason other than
    memory (e.g. a graph too large for it): the plan's status is ``no_placement``."""


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
    ``does_not_fit`` (a device's peak over its limit), ``infeasible`` (the placer found no placement
    that fits), ``no_placement`` (the placer gave none for another reason), ``skipped`` (the batch
    does not split) or ``pruned`` (not placed: its step is at least ``bound_us``, longer than a fitting
    plan's); ``reason`` says why. ``run_order``: ``None`` when the placement has no run order, else
    whether it trains in it (``False``: in order of readiness, shorter with the allreduce)."""

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
        return self.status == FITS

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


class Steps(Protocol):
    """Where a :class:`Planner` gets a replica's costed step: ``graph_for(batch, M)``. It may also have
    ``bound_for(batch, M, k, ready_only=False)``, a lower bound on that plan's step without building it
    (a :class:`~pardnn.plan.microbound.MicroBound` or ``None``; ``ready_only``: from what is built), and
    ``ahead(plans)``, told before each trial the (batch, M, bound or ``None``) of the plans left that no
    bound prunes yet (a builder's hint: what it may drop, what comes next)."""

    def graph_for(self, batch: int, micro: int) -> CostGraph: ...


class _Function:
    """:class:`Steps` from a bare ``graph_for`` function."""

    def __init__(self, graph_for: Callable[[int, int], CostGraph]) -> None:
        self.graph_for = graph_for


def replica_options(node_devices: int) -> list[int]:
    """Every k that divides G, the most replicas (k = 1) first."""
    return [k for k in range(1, node_devices + 1) if node_devices % k == 0]


class Planner:
    """The plans of one node of ``node_devices`` G GPUs in a cluster of ``nodes``, ``node_batch`` samples
    per node and step.

    ``steps``: a :class:`Steps`, or just its ``graph_for(batch, M)``; ``machine_for(k)``: k devices of
    the node; ``cluster_for(replicas_per_node)``: the cluster's allreduce. ``place(graph, machine)``:
    the placer (default :func:`pardnn.partition`; :class:`~pardnn.errors.InfeasibleError`: nothing
    fits, :class:`Unplaced`: no placement). ``placements``: its answers by (replica batch, M, k), a dict
    the caller may keep to plan the same node for several cluster sizes (only the allreduce depends
    on the number of nodes).

    >>> from pardnn import CostGraph, Machine
    >>> planner = Planner(lambda b, m: CostGraph(["x"], [10.0 * b], [0], [], []), Machine, lambda r: Cluster(),
    ...                   node_devices=2, nodes=1, node_batch=4)
    >>> planner.search(micro_batches=[1]).chosen.plan.label   # two replicas of 2 samples: 20 µs a step
    'k=1 M=1'
    """

    def __init__(self, steps: Steps | Callable[[int, int], CostGraph], machine_for: Callable[[int], Machine],
                 cluster_for: Callable[[int], Cluster], *, node_devices: int, nodes: int, node_batch: int,
                 place: Callable[[CostGraph, Machine], Any] | None = None,
                 placements: dict[tuple[int, int, int], Any] | None = None) -> None:
        self.steps: Any = steps if hasattr(steps, "graph_for") else _Function(steps)  # type: ignore[arg-type]
        self.machine_for, self.cluster_for = machine_for, cluster_for
        self.node_devices, self.nodes, self.node_batch = node_devices, nodes, node_batch
        self.place = place or partition
        self.placements = {} if placements is None else placements
        self.judged: dict[tuple[int, int, int], Judged] = {}  # the plans placed, their run order judged

    def batch(self, plan: Plan) -> int | None:
        """The replica's batch, ``None`` when the node's batch does not split over the replicas and M."""
        replicas = plan.replicas_per_node
        if self.node_batch % replicas or (self.node_batch // replicas) % plan.micro_batches:
            return None
        return self.node_batch // replicas

    def step(self, batch: int, micro: int) -> CostGraph:
        """The replica's costed step at ``batch`` samples in ``micro`` micro-batches."""
        return self.steps.graph_for(batch, micro)

    def bound(self, plan: Plan, ready_only: bool = False) -> MicroBound | None:
        """A lower bound on ``plan``'s step without building its graph, when ``steps`` gives one."""
        bound_for = getattr(self.steps, "bound_for", None)
        batch = self.batch(plan)
        if bound_for is None or batch is None or plan.micro_batches < 2:
            return None
        return bound_for(batch, plan.micro_batches, plan.replica_devices, ready_only=ready_only)

    def judge(self, plan: Plan, best_us: float | None = None) -> Trial:
        """Try ``plan``: a :class:`Trial`. With ``best_us`` (a fitting plan's step), a plan whose lower
        bound is strictly longer is ``pruned``: not placed, and not built when a bound without its graph
        says so."""
        replicas, batch = plan.replicas_per_node, self.batch(plan)
        if batch is None:
            if self.node_batch % replicas:
                return Trial(plan, 0, SKIPPED, f"the node's batch {self.node_batch} does not split over "
                                               f"{replicas} replicas")
            return Trial(plan, self.node_batch // replicas, SKIPPED, f"the replica's batch "
                         f"{self.node_batch // replicas} does not split into {plan.micro_batches} micro-batches")
        began = time.perf_counter()
        key = (batch, plan.micro_batches, plan.replica_devices)
        if key not in self.placements and best_us is not None:
            found = self.bound(plan, ready_only=True)
            if found is None or not strictly_shorter(best_us, found.us):  # a tighter one, building its plain step
                found = self.bound(plan) or found
            if found is not None and strictly_shorter(best_us, found.us):
                return Trial(plan, batch, PRUNED, f"its step is at least {found.us / 1e3:.2f} ms ({found.basis}; "
                             f"not built), longer than {best_us / 1e3:.2f} ms that fits",
                             seconds=time.perf_counter() - began, bound_us=found.us)
        graph = self.step(batch, plan.micro_batches)
        if key not in self.placements and best_us is not None:
            bound, _ = lower_bound_us(graph, plan.replica_devices)
            if strictly_shorter(best_us, bound):
                return Trial(plan, batch, PRUNED, f"its step is at least {bound / 1e3:.2f} ms (compute / k or the "
                             f"critical path), longer than {best_us / 1e3:.2f} ms that fits", graph.n,
                             seconds=time.perf_counter() - began, bound_us=bound)
        machine = self.machine_for(plan.replica_devices)
        if key not in self.placements:
            try:
                self.placements[key] = self.place(graph, machine)
            except (InfeasibleError, Unplaced) as error:
                self.placements[key] = error
        result = self.placements[key]
        if isinstance(result, PardnnError):
            status = NO_PLACEMENT if isinstance(result, Unplaced) else INFEASIBLE
            return Trial(plan, batch, status, str(result).split(". Options:")[0], graph.n,
                         seconds=time.perf_counter() - began)
        judged = self.judged[key] = judge_order(graph, machine, result, self.cluster_for(replicas))
        evaluation, step = judged.result.report.evaluation, judged.step
        peak = max(evaluation.peak_memory_bytes)
        reason = "" if evaluation.memory_fits else (
            f"peak {format_bytes(int(peak))} over the limit of {format_bytes(int(min(evaluation.limit_bytes)))}")
        rate = self.nodes * self.node_batch / (step.step_us * 1e-6)
        return Trial(plan, batch, FITS if evaluation.memory_fits else DOES_NOT_FIT, reason, graph.n,
                     step.compute_us, step.exposed_us, step.step_us, rate, int(peak), time.perf_counter() - began,
                     run_order=None if result.order is None else not judged.dropped)

    def search(self, replica_devices: Sequence[int] | None = None, micro_batches: Sequence[int] = MICRO_BATCHES, *,
               prune: bool = True, on_trial: Callable[[Trial], None] | None = None) -> PlanSearch:
        """Try each plan, by M then k (default: every k dividing G, and :data:`MICRO_BATCHES`), and
        choose (:func:`choose`); ``prune``: skip placing the plans whose lower bound is longer than a
        fitting plan's step. ``on_trial`` is called with each trial as it ends."""
        started = time.perf_counter()
        trials: list[Trial] = []
        plans = [Plan(k, micro, self.node_devices) for micro in micro_batches
                 for k in replica_devices or replica_options(self.node_devices)]
        ahead = getattr(self.steps, "ahead", None)
        for index, plan in enumerate(plans):
            fitting = [t.step_us for t in trials if t.fits]
            best = min(fitting) if prune and fitting else None  # type: ignore[type-var]
            if ahead is not None:
                ahead(self._left(plans[index:], best))
            trial = self.judge(plan, best)
            trials.append(trial)
            if on_trial is not None:
                on_trial(trial)
        trials.sort(key=lambda t: (t.plan.replica_devices, t.plan.micro_batches))
        chosen = choose(trials)
        return PlanSearch(tuple(trials), chosen, _why(chosen, trials), time.perf_counter() - started)

    def _left(self, plans: Sequence[Plan], best_us: float | None) -> list[tuple[int, int, float | None]]:
        """(replica batch, M, bound) of the ``plans`` that split and that no bound already built prunes
        (``bound``: that lower bound on the step, ``None`` while its plain step is not built)."""
        out = []
        for plan in plans:
            batch = self.batch(plan)
            if batch is None:
                continue
            found = self.bound(plan, ready_only=True)
            bound = None if found is None else found.us
            if bound is None or best_us is None or not strictly_shorter(best_us, bound):
                out.append((batch, plan.micro_batches, bound))
        return out


def choose(trials: Sequence[Trial]) -> Trial | None:
    """The fitting trial of the shortest step (the same samples per step for every plan); among those
    within the emulator's tolerance of it, the first by k, then M: more replicas, then the smaller M.
    (A pruned plan is strictly longer than the shortest, so pruning never changes this.)"""
    fitting = sorted((trial for trial in trials if trial.fits),
                     key=lambda t: (t.plan.replica_devices, t.plan.micro_batches))
    if not fitting:
        return None
    shortest = min(trial.step_us for trial in fitting)  # type: ignore[type-var]
    return next(trial for trial in fitting if not strictly_shorter(shortest, trial.step_us))  # type: ignore[arg-type]


def _why(chosen: Trial | None, trials: Sequence[Trial]) -> str:
    if chosen is None:
        return "no plan fits every device's memory"
    runners = [t for t in trials if t.fits and t is not chosen]
    bounds = [t.bound_us for t in trials if t.status == PRUNED]
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
