"""The baseline placers; :data:`BASELINES` maps a name to its placer (:class:`pardnn.placement.placer.Placer`).

Each has ParDNN's signature ``f(graph, machine, *, memory_heuristic="auto", progress=None, **options) -> Result``:
``single``, ``topological``, ``round_robin``, ``critical_path``, ``linear_clustering``, ``metis``, ``etf``,
``pipeline``, ``exact``. Shared rules: docs/notes-partitioner.md.

May import: :mod:`pardnn.costs`, :mod:`pardnn.emulation`, :mod:`pardnn.steps`, :mod:`pardnn.placement`,
:mod:`pardnn.errors`.
"""

from __future__ import annotations

from pardnn.baselines.critical_path import critical_path_placement
from pardnn.baselines.etf import etf_placement
from pardnn.baselines.exact import DEFAULT_MAX_OPS, DEFAULT_TIME_LIMIT_S, GraphTooLargeError, exact_placement
from pardnn.baselines.linear_clustering import DEFAULT_TIME_BUDGET_S, linear_clustering_placement
from pardnn.baselines.metis import DEFAULT_SEED, MissingDependencyError, metis_placement
from pardnn.baselines.pipeline import pipeline_placement
from pardnn.baselines.round_robin import round_robin_placement
from pardnn.baselines.single import single_placement
from pardnn.baselines.topological import topological_placement
from pardnn.placement.placer import Placer

__all__ = [
    "BASELINES",
    "GraphTooLargeError",
    "MissingDependencyError",
    "critical_path",
    "etf",
    "exact",
    "linear_clustering",
    "metis",
    "pipeline",
    "round_robin",
    "single",
    "topological",
]

single = Placer("single", single_placement, cheap=True,
                summary="everything on device 0 (no communication, no parallelism)")
topological = Placer("topological", topological_placement, cheap=True,
                     summary="K contiguous blocks of the topological order, equal in compute (GPipe-style)")
round_robin = Placer("round_robin", round_robin_placement, cheap=True,
                     summary="op i of the topological order on device i mod K")
critical_path = Placer("critical_path", critical_path_placement, cheap=True, memory_aware=True,
                       summary="the critical path on device 0, the rest greedily (Mayer et al. 2017)")
linear_clustering = Placer("linear_clustering", linear_clustering_placement,
                           options={"time_budget_s": DEFAULT_TIME_BUDGET_S}, cheap=True, time_option="time_budget_s",
                           summary="Kim and Browne's linear clustering mapped by GLB")
metis = Placer("metis", metis_placement, options={"seed": DEFAULT_SEED}, cheap=True,
               summary="a K-way METIS partition of the undirected graph (needs pymetis)")
etf = Placer("etf", etf_placement, cheap=True, memory_aware=True,
             summary="earliest-start list scheduling by priority (Baechi's m-ETF, incremental)")
pipeline = Placer("pipeline", pipeline_placement, cheap=True, memory_aware=True,
                  summary="K contiguous stages of the single-copy graph (PipeDream's balance), every micro-batch "
                          "copy on its op's stage, in a 1F1B or GPipe run order")
exact = Placer("exact", exact_placement,
               options={"time_limit_s": DEFAULT_TIME_LIMIT_S, "max_ops": DEFAULT_MAX_OPS, "ordered": True},
               time_option="time_limit_s", order_option="ordered",
               summary="the CP-SAT optimum of placement and schedule (small graphs; a bound)")

BASELINES: dict[str, Placer] = {placer.name: placer for placer in (
    single, topological, round_robin, critical_path, linear_clustering, metis, etf, pipeline, exact)}
