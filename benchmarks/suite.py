"""The partitioner benchmark suite: every placer on every graph, without and under memory limits.

For every graph (synthetic DNN graphs of several sizes, and any graph files given) and every device
count K, every placer runs once without a memory limit; then, for each memory factor, the machine
gets ``factor × demand / K`` bytes per device (reserve 0), where the *demand* is the sum over
devices of the per-device peaks of ParDNN's Step 1 placement (no memory heuristic). Under a limit
ParDNN runs with memory heuristic I (``overflow``) and II (``balance``). The baselines have no
heuristic and ignore memory, so their placement under a limit is the one they made without it: the
suite reads off whether its per-device peaks (which do not depend on the limit) fit.

Comparisons are ratios within one run: the benchmark machines are shared and noisy, so seconds from
different runs do not compare. Linear clustering runs under a time budget per run (its report says
when it stopped; with its incremental levels it finishes on every graph of the full suite) and is
skipped above ``lc_max_ops`` (by default none of the suite's graphs), recorded as ``skipped (size)``. The
exact CP-SAT placer is exponential: it runs only on graphs of at most ``exact_max_ops`` ops (its own
``max_ops``, so never on the suite's synthetic graphs), under ``exact_time_limit_s``, and is recorded as
``skipped (size)`` above; ``python -m benchmarks.exact`` measures it on small graphs.

Beside ParDNN as it ships, every graph and K also gets the *paper* row (the registry's
``pardnn-paper``: Steps 1 and 2 alone, no guard, refinement or run order), so the report can say what
the stages after Step 2 buy. ParDNN's own time is also recorded without its fixed-budget stages (the
refinement and the run order's refinement spend a budget of ``refine_seconds`` whatever the size), so
the fitted complexity is that of the algorithm, not of a constant.

The command line is timed too (:mod:`benchmarks.speed`); :mod:`benchmarks.report` writes the results.
"""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.speed import TARGET_DEVICES, TARGET_OPS, LinePrinter, SpeedRow, speed
from pardnn.baselines.exact import DEFAULT_MAX_OPS as EXACT_MAX_OPS
from pardnn.costs.graph import CostGraph
from pardnn.costs.machine import Machine
from pardnn.costs.synthetic import dnn_graph
from pardnn.errors import InfeasibleError, MissingDependencyError, PardnnError
from pardnn.io import read_any_graph
from pardnn.registry import PLACERS
from pardnn.warmup import warm_up

__all__ = ["FULL", "PAPER", "QUICK", "BenchResults", "LinePrinter", "Run", "SuiteConfig", "bench_graph", "graph_paths",
           "run_suite"]

BASELINES = tuple(name for name, placer in PLACERS.items() if not placer.complete)  # not ParDNN's own
PAPER = "pardnn-paper"  # the registry's paper row: Steps 1 and 2 alone (no guard, refinement or run order)
LABELS = {"pardnn": "ParDNN", "pardnn-paper": "ParDNN (paper)", "critical_path": "CP", "linear_clustering": "LC",
          "metis": "METIS", "topological": "topological", "round_robin": "round robin", "single": "single",
          "etf": "ETF", "pipeline": "pipeline", "exact": "exact"}
HEURISTICS = {"overflow": "I", "balance": "II"}
SYNTHETIC = "synthetic"
FILES = "graph files"
OK, TIMEOUT, INFEASIBLE = "ok", "timeout", "infeasible"
SKIPPED_DEPENDENCY = "skipped (missing dependency)"
SKIPPED_SIZE = "skipped (size)"
# Where `python -m jobs.paper` writes the graphs of the paper's models; the full suite runs them when
# no graph file is named.
MODEL_GRAPHS = Path("out/graphs")


@dataclass(frozen=True)
class SuiteConfig:
    """What to run. ``speed_ops = 0`` skips the command-line timing."""

    sizes: tuple[int, ...]
    devices: tuple[int, ...]
    factors: tuple[float, ...]
    baselines: tuple[str, ...]
    graph_files: tuple[Path, ...] = ()
    lc_budget_s: float = 60.0
    lc_max_ops: int = 2_000_000  # LC's levels are recomputed incrementally: 0.5 s on 1M ops
    exact_max_ops: int = EXACT_MAX_OPS
    exact_time_limit_s: float = 10.0
    speed_ops: int = TARGET_OPS
    speed_devices: int = TARGET_DEVICES
    speed_repeats: int = 5
    seed: int = 0


FULL = SuiteConfig(sizes=(10_000, 50_000, 200_000, 1_000_000), devices=(2, 4, 8, 16), factors=(1.2, 1.0, 0.8),
                   baselines=BASELINES)
QUICK = SuiteConfig(sizes=(2_000, 5_000), devices=(2, 4), factors=(1.2, 1.0, 0.8),
                    baselines=("critical_path", "linear_clustering", "topological", "round_robin"),
                    lc_budget_s=1.0, speed_ops=5_000, speed_devices=4, speed_repeats=1)


@dataclass(frozen=True)
class Run:
    """One placement of one graph on one machine: a row of ``results.csv``.

    ``heuristic`` is ParDNN's memory heuristic (``""``: none); ``factor`` is the memory limit as a
    factor of the demand (``None``: no limit). ``makespan_cost`` is the makespan over ParDNN's Step 1
    makespan on the same graph and K. ``seconds`` is the wall time of the placer call, its own
    evaluation included; a baseline under a limit repeats its time without one (same placement).
    ``budget_seconds`` is the part of a ParDNN run spent in its fixed-budget stages (refinement and
    run order), left out of the complexity fit.
    """

    suite: str
    graph: str
    ops: int
    edges: int
    devices: int
    placer: str
    heuristic: str
    factor: float | None
    limit_bytes: int | None
    status: str
    makespan_us: float | None = None
    lower_bound_us: float | None = None
    memory_fits: bool | None = None
    peak_bytes: int | None = None
    seconds: float | None = None
    moved_ops: int | None = None
    moved_share: float | None = None
    makespan_cost: float | None = None
    budget_seconds: float | None = None

    @property
    def measured(self) -> bool:
        """The placement exists and was evaluated (``ok``, or LC stopped by its budget)."""
        return self.status in (OK, TIMEOUT)

    @property
    def ratio(self) -> float | None:
        if self.makespan_us is None or not self.lower_bound_us:
            return None
        return self.makespan_us / self.lower_bound_us

    @property
    def label(self) -> str:
        name = LABELS.get(self.placer, self.placer)
        return f"{name} {HEURISTICS[self.heuristic]}" if self.heuristic else name


@dataclass
class BenchResults:
    config: SuiteConfig
    runs: list[Run]
    speed: list[SpeedRow]
    speed_graph: str
    seconds: float
    load_before: tuple[float, float, float]
    load_after: tuple[float, float, float]


# ------------------------------------------------------------------------------ cells of a run
def secs(seconds: float | None) -> str:
    """A wall time in ms or s, to about three digits."""
    if seconds is None:
        return "-"
    if seconds < 1:
        return f"{1e3 * seconds:.1f} ms" if seconds < 0.01 else f"{1e3 * seconds:.0f} ms"
    return f"{seconds:.2f} s" if seconds < 10 else f"{seconds:.1f} s" if seconds < 100 else f"{seconds:.0f} s"


def cell_ratio(r: Run) -> str:
    """Makespan / lower bound († when LC stopped at its budget), or the status of a run without one."""
    if not r.measured:
        return r.status
    return f"{r.ratio:.3f}" + (" †" if r.status == TIMEOUT else "")


def fit_word(r: Run) -> str:
    if not r.measured:
        return r.status
    return "fits" if r.memory_fits else "over"


# ------------------------------------------------------------------------------------- running
# ParDNN's stages that spend a fixed budget (refine_seconds) whatever the graph's size.
BUDGET_STAGES = ("refine", "order")


def _from_result(base: Run, result: Any, seconds: float, step1_makespan: float | None) -> Run:
    report = result.report
    evaluation = report.evaluation
    details = report.details
    return dataclasses.replace(
        base, status=TIMEOUT if details.get("timeout") else OK, makespan_us=evaluation.makespan_us,
        lower_bound_us=evaluation.lower_bound_us, memory_fits=evaluation.memory_fits,
        peak_bytes=max(evaluation.peak_memory_bytes), seconds=seconds, moved_ops=details.get("moved_ops"),
        moved_share=details.get("moved_share"),
        makespan_cost=None if step1_makespan is None else evaluation.makespan_us / step1_makespan,
        budget_seconds=sum(report.stage_seconds.get(stage, 0.0) for stage in BUDGET_STAGES))


def _run_baseline(base: Run, graph: CostGraph, machine: Machine, config: SuiteConfig, progress: LinePrinter) -> Run:
    placer = PLACERS[base.placer]
    # The suite's limits by placer (data, not branches): time budgets and the largest graph each is run on.
    budgets = {"linear_clustering": config.lc_budget_s, "exact": config.exact_time_limit_s}
    sizes = {"linear_clustering": config.lc_max_ops, "exact": config.exact_max_ops}
    if graph.n > sizes.get(base.placer, graph.n):
        return dataclasses.replace(base, status=SKIPPED_SIZE)
    options: dict[str, Any] = {}
    if placer.time_option and base.placer in budgets:
        options[placer.time_option] = budgets[base.placer]
    if "max_ops" in placer.options:
        options["max_ops"] = sizes.get(base.placer, placer.options["max_ops"])
    start = time.perf_counter()
    try:
        result = placer(graph, machine, memory_heuristic=None, **options)
    except MissingDependencyError as exc:
        progress(f"{base.placer}: {exc}")
        return dataclasses.replace(base, status=SKIPPED_DEPENDENCY)
    return _from_result(base, result, time.perf_counter() - start, None)


def _run_pardnn(base: Run, graph: CostGraph, machine: Machine, step1_makespan: float | None) -> tuple[Run, Any]:
    """ParDNN (or the paper row, ``base.placer``) with ``base.heuristic``: the run, and the
    :class:`~pardnn.placement.result.Result` (None if infeasible)."""
    start = time.perf_counter()
    try:
        result = PLACERS[base.placer](graph, machine, memory_heuristic=base.heuristic or None)
    except InfeasibleError:
        return dataclasses.replace(base, status=INFEASIBLE, seconds=time.perf_counter() - start), None
    return _from_result(base, result, time.perf_counter() - start, step1_makespan), result


def bench_graph(suite: str, graph: CostGraph, config: SuiteConfig, progress: LinePrinter = print) -> list[Run]:
    """Every placer on ``graph`` for every K, without and under every memory limit of ``config``."""
    runs: list[Run] = []
    for k in config.devices:
        free = Machine(k)
        base = Run(suite, graph.name, graph.n, graph.m, k, "pardnn", "", None, None, OK)
        step1, step1_result = _run_pardnn(base, graph, free, None)
        paper = _run_pardnn(dataclasses.replace(base, placer=PAPER), graph, free, None)[0]
        unlimited = [step1, paper] + [_run_baseline(dataclasses.replace(base, placer=name), graph, free, config,
                                                    progress) for name in config.baselines]
        runs += unlimited
        progress(f"{suite}: {graph.name} ({graph.n:,} ops), K = {k}: "
                 + ", ".join(f"{r.label} {cell_ratio(r)}" + (f" in {secs(r.seconds)}" if r.measured else "")
                             for r in unlimited))
        demand = sum(step1_result.report.evaluation.peak_memory_bytes)
        for factor in config.factors if demand > 0 else ():
            machine = Machine(k, memory=int(factor * demand / k), reserve=0.0)
            limit = int(machine.limits_bytes[0])
            limited = [dataclasses.replace(r, factor=factor, limit_bytes=limit,
                                           memory_fits=None if r.peak_bytes is None else r.peak_bytes <= limit)
                       for r in unlimited]
            limited += [_run_pardnn(dataclasses.replace(base, heuristic=heuristic, factor=factor, limit_bytes=limit),
                                    graph, machine, step1.makespan_us)[0] for heuristic in HEURISTICS]
            runs += limited
            progress(f"{suite}: {graph.name}, K = {k}, limit {factor:g} × demand / K: "
                     + ", ".join(f"{r.label} {fit_word(r)} {secs(r.seconds)}" for r in limited[-2:]))
    return runs


def graph_paths(items: Iterable[str | Path]) -> tuple[Path, ...]:
    """Graph files named by ``items``: files as given, directories expanded to their ``*.json(.gz)``.

    Raises :class:`PardnnError` for a path that does not exist or a directory without graph files.
    """
    found: dict[Path, Path] = {}
    for item in items:
        path = Path(item)
        if path.is_dir():
            files = sorted([*path.glob("*.json.gz"), *path.glob("*.json")])
            if not files:
                raise PardnnError(f"{path}: directory holds no graph files (*.json.gz or *.json)")
        elif path.exists():
            files = [path]
        else:
            raise PardnnError(f"{path}: no such graph file or directory")
        for file in files:
            found.setdefault(file.resolve(), file)
    return tuple(found.values())


def run_suite(config: SuiteConfig, progress: LinePrinter = print) -> BenchResults:
    """Run ``config``: graph files are read first, so a bad one fails before minutes of work; the
    command-line timings come next, the placers last."""
    started = time.perf_counter()
    load_before = os.getloadavg()
    files = [read_any_graph(path) for path in config.graph_files]
    warm_up()  # also fills numba's on-disk cache, which the timed commands load
    rows, speed_graph = (speed(config.speed_ops, config.speed_devices, config.speed_repeats, config.seed, progress)
                         if config.speed_ops > 0 else ([], ""))
    runs: list[Run] = []
    for ops in config.sizes:
        runs += bench_graph(SYNTHETIC, dnn_graph(ops, seed=config.seed), config, progress)
    for graph in files:
        runs += bench_graph(FILES, graph, config, progress)
    return BenchResults(config, runs, rows, speed_graph, time.perf_counter() - started, load_before,
                        os.getloadavg())
