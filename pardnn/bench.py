"""The partitioner benchmark suite behind ``pardnn bench`` and ``python -m benchmarks``.

For every graph (synthetic DNN graphs of several sizes, and any graph files given) and every device
count K, every placer runs once without a memory limit; then, for each memory factor, the machine
gets ``factor × demand / K`` bytes per device (reserve 0), where the *demand* is the sum over
devices of the per-device peaks of ParDNN's Step 1 placement (no memory heuristic). Under a limit
ParDNN runs with memory heuristic I (``overflow``) and II (``balance``). The baselines have no
heuristic and ignore memory, so their placement under a limit is the one they made without it: the
suite reads off whether its per-device peaks (which do not depend on the limit) fit.

The command line is timed too (``pardnn place`` and ``pardnn simulate`` in fresh interpreters, so
interpreter start, imports and reading the graph count). The outputs:

- ``RESULTS.md``: the command, the machine, a summary (ParDNN against every baseline, the speed
  targets, the fitted complexity, the memory heuristics) and a table per suite;
- ``results.csv``: one row per run (:data:`CSV_COLUMNS`);
- ``ratio-<suite>.png``: makespan / lower bound per placer and K; ``time-<suite>.png``: placer time
  against |V| on log–log axes with the fitted slopes (only for suites with several sizes).

Comparisons are ratios within one run: the benchmark machines are shared and noisy, so seconds from
different runs do not compare. Linear clustering is quadratic: it runs under a time budget per run
(its report says when it stopped) and is skipped above a size, recorded as ``skipped (quadratic)``.
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import math
import os
import platform
import re
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from pardnn import partition
from pardnn.errors import InfeasibleError, MissingDependencyError, PardnnError
from pardnn.graph import CostGraph
from pardnn.io import read_any_graph, write_graph
from pardnn.machine import Machine, format_bytes
from pardnn.placers import PLACERS
from pardnn.synthetic import dnn_graph

__all__ = ["CSV_COLUMNS", "FULL", "QUICK", "BenchResults", "Run", "SuiteConfig", "add_bench_arguments",
           "bench_graph", "command_line", "comparisons", "config_from_args", "fit_power_law", "graph_paths",
           "output_paths", "render_markdown", "run_bench", "run_suite", "slopes", "write_outputs"]

Progress = Callable[[str], None]

BASELINES = tuple(name for name in PLACERS if name != "pardnn")
LABELS = {"pardnn": "ParDNN", "critical_path": "CP", "linear_clustering": "LC", "metis": "METIS",
          "topological": "topological", "round_robin": "round robin", "single": "single"}
HEURISTICS = {"overflow": "I", "balance": "II"}
SYNTHETIC = "synthetic"
FILES = "graph files"
OK, TIMEOUT, INFEASIBLE = "ok", "timeout", "infeasible"
SKIPPED_QUADRATIC, SKIPPED_DEPENDENCY = "skipped (quadratic)", "skipped (missing dependency)"
# The speed targets, in seconds, for 200,000 ops on K = 16.
TARGET_OPS, TARGET_DEVICES = 200_000, 16
TARGET_PLACE_S, TARGET_PLACE_MEMORY_S, TARGET_SIMULATE_S = 2.0, 5.0, 3.0
SPEED_LIMIT_FACTOR = 1.2  # the memory limit of the timed `pardnn place --memory`, × demand / K
EXIT_INFEASIBLE = 3  # `pardnn place`: no placement meets memory
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
    lc_max_ops: int = 200_000
    speed_ops: int = TARGET_OPS
    speed_devices: int = TARGET_DEVICES
    speed_repeats: int = 3
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


CSV_COLUMNS = ("suite", "graph", "ops", "edges", "devices", "placer", "heuristic", "memory_factor", "limit_bytes",
               "status", "makespan_us", "lower_bound_us", "makespan_over_lower_bound", "memory_fits",
               "max_peak_bytes", "seconds", "moved_ops", "moved_share", "makespan_cost")


@dataclass(frozen=True)
class SpeedRow:
    """One timed command; ``infeasible`` when it exited with code 3 (no placement meets memory)."""

    command: str
    seconds: float
    target_s: float | None
    infeasible: bool = False


@dataclass
class BenchResults:
    config: SuiteConfig
    runs: list[Run]
    speed: list[SpeedRow]
    speed_graph: str
    seconds: float
    load_before: tuple[float, float, float]
    load_after: tuple[float, float, float]


# ------------------------------------------------------------------------------------- running
def _from_result(base: Run, result: Any, seconds: float, step1_makespan: float | None) -> Run:
    report = result.report
    evaluation = report.evaluation
    details = report.details
    return dataclasses.replace(
        base, status=TIMEOUT if details.get("timeout") else OK, makespan_us=evaluation.makespan_us,
        lower_bound_us=evaluation.lower_bound_us, memory_fits=evaluation.memory_fits,
        peak_bytes=max(evaluation.peak_memory_bytes), seconds=seconds, moved_ops=details.get("moved_ops"),
        moved_share=details.get("moved_share"),
        makespan_cost=None if step1_makespan is None else evaluation.makespan_us / step1_makespan)


def _run_baseline(base: Run, graph: CostGraph, machine: Machine, config: SuiteConfig, progress: Progress) -> Run:
    if base.placer == "linear_clustering" and graph.n > config.lc_max_ops:
        return dataclasses.replace(base, status=SKIPPED_QUADRATIC)
    options = {"time_budget_s": config.lc_budget_s} if base.placer == "linear_clustering" else {}
    start = time.perf_counter()
    try:
        result = PLACERS[base.placer](graph, machine, memory_heuristic=None, **options)
    except MissingDependencyError as exc:
        progress(f"{base.placer}: {exc}")
        return dataclasses.replace(base, status=SKIPPED_DEPENDENCY)
    return _from_result(base, result, time.perf_counter() - start, None)


def _run_pardnn(base: Run, graph: CostGraph, machine: Machine, step1_makespan: float | None) -> tuple[Run, Any]:
    """ParDNN with ``base.heuristic``: the run, and the :class:`~pardnn.partition.Result` (None if infeasible)."""
    start = time.perf_counter()
    try:
        result = partition(graph, machine, memory_heuristic=base.heuristic or None)
    except InfeasibleError:
        return dataclasses.replace(base, status=INFEASIBLE, seconds=time.perf_counter() - start), None
    return _from_result(base, result, time.perf_counter() - start, step1_makespan), result


def bench_graph(suite: str, graph: CostGraph, config: SuiteConfig, progress: Progress = print) -> list[Run]:
    """Every placer on ``graph`` for every K, without and under every memory limit of ``config``."""
    runs: list[Run] = []
    for k in config.devices:
        free = Machine(k)
        base = Run(suite, graph.name, graph.n, graph.m, k, "pardnn", "", None, None, OK)
        step1, step1_result = _run_pardnn(base, graph, free, None)
        unlimited = [step1] + [_run_baseline(dataclasses.replace(base, placer=name), graph, free, config, progress)
                               for name in config.baselines]
        runs += unlimited
        progress(f"{suite}: {graph.name} ({graph.n:,} ops), K = {k}: "
                 + ", ".join(f"{r.label} {_cell_ratio(r)}" + (f" in {_secs(r.seconds)}" if r.measured else "")
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
                     + ", ".join(f"{r.label} {_fit_word(r)} {_secs(r.seconds)}" for r in limited[-2:]))
    return runs


def _warm_up() -> None:
    """Load (or compile) every numba kernel first, so the smallest graph is not charged for it."""
    graph = dnn_graph(400, seed=1)
    for name in PLACERS:
        try:
            PLACERS[name](graph, Machine(2), memory_heuristic=None)
        except MissingDependencyError:
            pass
    peaks = partition(graph, Machine(2), memory_heuristic=None).report.evaluation.peak_memory_bytes
    for heuristic in HEURISTICS:
        try:
            partition(graph, Machine(2, memory=int(0.9 * sum(peaks) / 2), reserve=0.0), memory_heuristic=heuristic)
        except InfeasibleError:
            pass


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


def speed(config: SuiteConfig, progress: Progress = print) -> tuple[list[SpeedRow], str]:
    """Median wall time of the ``pardnn`` commands on one synthetic graph, each in a fresh interpreter."""
    ops, k, repeats = config.speed_ops, config.speed_devices, config.speed_repeats
    at_target = ops == TARGET_OPS and k == TARGET_DEVICES
    cli = [sys.executable, "-m", "pardnn.cli"]
    graph = dnn_graph(ops, seed=config.seed)
    peaks = partition(graph, Machine(k), memory_heuristic=None).report.evaluation.peak_memory_bytes
    limit = int(SPEED_LIMIT_FACTOR * sum(peaks) / k)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        graph_path, placement = Path(tmp) / f"{graph.name}.json.gz", Path(tmp) / "placement.txt"
        write_graph(graph, graph_path)
        place = [*cli, "place", str(graph_path), "-k", str(k), "-o", str(placement), "-q"]
        memory = ["--memory", str(limit), "--reserve", "0", "--memory-heuristic"]
        commands = [
            (place, f"pardnn place GRAPH -k {k} -o placement.txt", TARGET_PLACE_S),
            ([*place, *memory, "overflow"], f"pardnn place GRAPH -k {k} --memory {limit} --reserve 0 "
                                            "--memory-heuristic overflow -o placement.txt", TARGET_PLACE_MEMORY_S),
            ([*place, *memory, "balance"], f"pardnn place GRAPH -k {k} --memory {limit} --reserve 0 "
                                           "--memory-heuristic balance -o placement.txt", TARGET_PLACE_MEMORY_S),
            (place, None, None),  # the heuristic-free placement again, for simulate
            ([*cli, "simulate", str(graph_path), str(placement), "-k", str(k)],
             f"pardnn simulate GRAPH placement.txt -k {k}", TARGET_SIMULATE_S),
        ]
        for argv, shown, target in commands:
            seconds, infeasible = _median_wall(argv, 1 if shown is None else repeats)
            if shown is not None:
                rows.append(SpeedRow(shown, seconds, target if at_target else None, infeasible))
                progress(f"speed: {shown}: {seconds:.2f} s" + (" (infeasible)" if infeasible else ""))
    return rows, f"{graph.name}: {graph.n:,} ops, {graph.m:,} edges, K = {k}"


def _median_wall(argv: Sequence[str], repeats: int) -> tuple[float, bool]:
    """Median wall time of ``argv`` and whether it exited 3 (infeasible: an answer, not a failure)."""
    times = []
    infeasible = False
    for _ in range(repeats):
        start = time.perf_counter()
        done = subprocess.run(argv, capture_output=True, text=True)
        times.append(time.perf_counter() - start)
        infeasible = done.returncode == EXIT_INFEASIBLE
        if done.returncode not in (0, EXIT_INFEASIBLE):
            raise PardnnError(f"benchmark command failed (exit {done.returncode}): {shlex.join(argv)}: "
                              f"{done.stderr.strip()}")
    return statistics.median(times), infeasible


def run_suite(config: SuiteConfig, progress: Progress = print) -> BenchResults:
    """Run ``config``: graph files are read first, so a bad one fails before minutes of work; the
    command-line timings come next, the placers last."""
    started = time.perf_counter()
    load_before = os.getloadavg()
    files = [read_any_graph(path) for path in config.graph_files]
    _warm_up()  # also fills numba's on-disk cache, which the timed commands load
    rows, speed_graph = speed(config, progress) if config.speed_ops > 0 else ([], "")
    runs: list[Run] = []
    for ops in config.sizes:
        runs += bench_graph(SYNTHETIC, dnn_graph(ops, seed=config.seed), config, progress)
    for graph in files:
        runs += bench_graph(FILES, graph, config, progress)
    return BenchResults(config, runs, rows, speed_graph, time.perf_counter() - started, load_before,
                        os.getloadavg())


# ----------------------------------------------------------------------------------- analysis
def fit_power_law(sizes: Sequence[float], seconds: Sequence[float]) -> tuple[float, float]:
    """Least-squares fit of ``seconds ≈ coefficient × size ** exponent`` on log–log axes.

    Returns ``(exponent, coefficient)``: the exponent is the slope of log(seconds) against
    log(size), the empirical complexity. Raises ``ValueError`` with fewer than two distinct sizes
    or a value that is not positive.
    """
    x, y = np.asarray(sizes, dtype=np.float64), np.asarray(seconds, dtype=np.float64)
    if x.shape != y.shape or np.unique(x).size < 2:
        raise ValueError(f"a slope needs at least two distinct sizes with a time each, got {x.size} sizes")
    if (x <= 0).any() or (y <= 0).any() or not np.isfinite(np.concatenate((x, y))).all():
        raise ValueError("sizes and times must be finite and > 0 to fit a power law")
    slope, intercept = np.polyfit(np.log(x), np.log(y), 1)
    return float(slope), float(math.exp(intercept))


def _scaling_points(runs: Sequence[Run], label: str, k: int) -> tuple[list[int], list[float]]:
    """Sizes and times of one placer at one K: ParDNN's heuristics under every memory limit, the
    others without one; runs stopped by a budget, skipped or infeasible do not count."""
    points = [(r.ops, float(r.seconds)) for r in runs
              if r.label == label and r.devices == k and (r.factor is not None) == bool(r.heuristic)
              and r.status == OK and r.seconds]
    return [p[0] for p in points], [p[1] for p in points]


def slopes(runs: Sequence[Run], labels: Sequence[str], k: int) -> dict[str, float | None]:
    """The fitted exponent of each placer's time against |V| at K = ``k`` (None: fewer than two sizes)."""
    out: dict[str, float | None] = {}
    for label in labels:
        try:
            out[label] = fit_power_law(*_scaling_points(runs, label, k))[0]
        except ValueError:
            out[label] = None
    return out


@dataclass(frozen=True)
class Comparison:
    """ParDNN's makespan over a baseline's on one graph and K, neither under a memory limit."""

    graph: str
    ops: int
    devices: int
    baseline: str
    relative: float
    baseline_timeout: bool


def comparisons(runs: Sequence[Run]) -> list[Comparison]:
    cases: dict[tuple[str, int], dict[str, Run]] = {}
    for r in runs:
        if r.factor is None and r.measured:
            cases.setdefault((r.graph, r.devices), {})[r.placer] = r
    out = []
    for (graph, k), placed in cases.items():
        ours = placed.get("pardnn")
        if ours is None or ours.makespan_us is None:
            continue
        for name, theirs in placed.items():
            if name != "pardnn" and theirs.makespan_us:
                out.append(Comparison(graph, ours.ops, k, name, ours.makespan_us / theirs.makespan_us,
                                      theirs.status == TIMEOUT))
    return out


def _labels(runs: Sequence[Run]) -> list[str]:
    return list(dict.fromkeys(r.label for r in runs))


def _placers(runs: Sequence[Run]) -> list[str]:
    return list(dict.fromkeys(r.placer for r in runs if not r.heuristic))


# ---------------------------------------------------------------------------------- formatting
def _secs(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    if seconds < 1:
        return f"{1e3 * seconds:.1f} ms" if seconds < 0.01 else f"{1e3 * seconds:.0f} ms"
    return f"{seconds:.2f} s" if seconds < 10 else f"{seconds:.1f} s" if seconds < 100 else f"{seconds:.0f} s"


def _cell_ratio(r: Run) -> str:
    if not r.measured:
        return r.status
    return f"{r.ratio:.3f}" + (" †" if r.status == TIMEOUT else "")


def _fit_word(r: Run) -> str:
    if not r.measured:
        return r.status
    return "fits" if r.memory_fits else "over"


def _percent(share: float) -> str:
    return f"{100 * share:.2f} %" if abs(share) < 0.01 else f"{100 * share:.1f} %"


def _table(header: Sequence[str], rows: Iterable[Sequence[str]], align: str) -> list[str]:
    return ["| " + " | ".join(header) + " |", "|" + "|".join({"l": "---", "r": "---:", "c": ":---:"}[a]
                                                             for a in align) + "|",
            *("| " + " | ".join(row) + " |" for row in rows)]


def _mean(values: Sequence[float]) -> str:
    return f"{statistics.mean(values):.3f}" if values else "n/a"


def _geomean(values: Sequence[float]) -> float:
    return float(np.exp(np.mean(np.log(values))))


def machine_line() -> str:
    cpu = "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    import numba

    return (f"{os.cpu_count()} cores ({cpu}), Python {platform.python_version()}, NumPy {np.__version__}, "
            f"numba {numba.__version__}, {platform.system()} {platform.release()}")


def _wins_section(runs: Sequence[Run], what: str) -> list[str]:
    found = comparisons(runs)
    if not found:
        return []
    rows = []
    for name in dict.fromkeys(c.baseline for c in found):
        mine = [c for c in found if c.baseline == name]
        rel = [c.relative for c in mine]
        timeouts = sum(c.baseline_timeout for c in mine)
        rows.append([LABELS[name], str(len(mine)), str(sum(x < 1 for x in rel)), str(sum(x == 1 for x in rel)),
                     str(sum(x > 1 for x in rel)), f"{_geomean(rel):.3f}", f"{min(rel):.3f} – {max(rel):.3f}",
                     f"{timeouts} (LC stopped at its budget)" if timeouts else "-"])
    losses = [c for c in found if c.relative > 1]
    cases = {(c.graph, c.devices) for c in found}
    beaten_all = sum(all(c.relative < 1 for c in found if (c.graph, c.devices) == case) for case in cases)
    lines = [f"ParDNN's makespan / the baseline's on the same {what} and K, no memory limit (below 1: ParDNN is "
             "faster).", "",
             *_table(["baseline", "cases", "ParDNN faster", "equal", "ParDNN slower", "geometric mean",
                      "range", "baseline timeouts"], rows, "lrrrrrrl"), ""]
    if losses:
        lines += [f"**ParDNN's makespan is not ≤ every baseline's**: it is slower in {len(losses)} of {len(found)} "
                  "comparisons:", "",
                  *_table(["graph", "ops", "K", "baseline", "ParDNN / baseline", "ParDNN slower by"],
                          ([c.graph, f"{c.ops:,}", str(c.devices), LABELS[c.baseline] + (" †" if c.baseline_timeout
                                                                                         else ""),
                            f"{c.relative:.4f}", _percent(c.relative - 1)]
                           for c in sorted(losses, key=lambda c: (c.ops, c.devices, c.baseline))), "lrrlrr"), ""]
    else:
        lines += [f"ParDNN's makespan is ≤ every baseline's in all {len(found)} comparisons.", ""]
    lines.append(f"ParDNN beats every baseline at once in {beaten_all} of {len(cases)} cases (graph × K).")
    pair = [c for c in found if c.baseline in ("round_robin", "topological")]
    if {c.baseline for c in pair} == {"round_robin", "topological"}:
        both = sum(all(c.relative < 1 for c in pair if (c.graph, c.devices) == case) for case in cases)
        lines.append(f"ParDNN beats both round robin and topological in {both} of {len(cases)} cases.")
    return [*lines, ""]


def _memory_summary(runs: Sequence[Run]) -> list[str]:
    limited = [r for r in runs if r.factor is not None]
    if not limited:
        return []
    step1 = {(r.graph, r.devices, r.factor): r for r in limited if r.placer == "pardnn" and not r.heuristic}
    lines = []
    for heuristic, numeral in HEURISTICS.items():
        mine = [r for r in limited if r.heuristic == heuristic]
        fits = [r for r in mine if r.status == OK and r.memory_fits]
        overflowed = [r for r in mine if not step1[(r.graph, r.devices, r.factor)].memory_fits]
        rescued = [r for r in overflowed if r.status == OK and r.memory_fits]
        shares = [r.moved_share or 0.0 for r in fits]
        moved_mean = _percent(statistics.mean(shares)) if shares else "n/a"
        moved_max = _percent(max(shares)) if shares else "n/a"
        lines.append(
            f"- ParDNN with heuristic {numeral} ({heuristic}): fits in {len(fits)} of {len(mine)} cases; "
            f"Step 1 alone overflowed in {len(overflowed)} of them and heuristic {numeral} made "
            f"{len(rescued)} of those feasible ({_percent(len(rescued) / len(overflowed)) if overflowed else 'n/a'}); "
            f"ops moved where it fits: mean {moved_mean}, max {moved_max} (the paper reports 8 % on "
            f"average); makespan cost (makespan / Step 1 makespan) where it fits: mean "
            f"{_mean([r.makespan_cost for r in fits if r.makespan_cost])}, max "
            f"{max((r.makespan_cost or 0 for r in fits), default=0):.3f}; time: mean "
            f"{_secs(statistics.mean(r.seconds or 0 for r in mine)) if mine else '-'}, max "
            f"{_secs(max((r.seconds or 0 for r in mine), default=0))}.")
    overflow = {(r.graph, r.devices, r.factor): r for r in limited if r.heuristic == "overflow"}
    baselines = [r for r in limited if r.placer != "pardnn"]
    for name in dict.fromkeys(r.placer for r in baselines):
        mine = [r for r in baselines if r.placer == name and r.measured]
        fitting = [(r, overflow[(r.graph, r.devices, r.factor)]) for r in mine if r.memory_fits]
        ours = [(r, o) for r, o in fitting if o.status == OK]
        faster = sum(o.makespan_us is not None and r.makespan_us is not None and o.makespan_us < r.makespan_us
                     for r, o in ours)
        if mine:
            lines.append(f"- {LABELS[name]} (no heuristic) fits in {len(fitting)} of {len(mine)} cases"
                         + (f"; in those, ParDNN I fits in {len(ours)} and has the shorter makespan in {faster}."
                            if fitting else "."))
    step1_fits = sum(bool(r.memory_fits) for r in step1.values())
    lines.append(f"- ParDNN Step 1 alone fits in {step1_fits} of {len(step1)} cases.")
    return [*lines, ""]


def _free_table(runs: Sequence[Run]) -> list[str]:
    placers = _placers(runs)
    rows = []
    for key, group in _grouped(runs, lambda r: (r.graph, r.devices), lambda r: r.factor is None):
        by_placer = {r.placer: r for r in group}
        best = min((r.ratio for r in group if r.ratio is not None), default=None)
        cells = []
        for name in placers:
            r = by_placer.get(name)
            if r is None:
                cells.append("")
                continue
            ratio = _cell_ratio(r)
            cells.append((f"**{ratio}**" if r.ratio == best else ratio) + (f" ({_secs(r.seconds)})" if r.measured
                                                                         else ""))
        rows.append([group[0].graph, f"{group[0].ops:,}", str(key[1]), *cells])
    return _table(["graph", "ops", "K", *(LABELS[p] for p in placers)], rows, "lrr" + "r" * len(placers))


def _limited_table(runs: Sequence[Run]) -> list[str]:
    baselines = [p for p in _placers(runs) if p != "pardnn"]
    rows = []
    for _, group in _grouped(runs, lambda r: (r.graph, r.devices, r.factor), lambda r: r.factor is not None):
        by = {(r.placer, r.heuristic): r for r in group}
        first = group[0]
        cells = [first.graph, f"{first.ops:,}", str(first.devices), f"{first.factor:g}",
                 format_bytes(first.limit_bytes or 0), _fit_word(by[("pardnn", "")])]
        for heuristic in HEURISTICS:
            r = by[("pardnn", heuristic)]
            if r.status == OK:
                cells.append(f"{r.ratio:.3f} · {_fit_word(r)} · {r.moved_ops or 0:,} moved "
                             f"({_percent(r.moved_share or 0)}) · ×{r.makespan_cost:.3f} · {_secs(r.seconds)}")
            else:
                cells.append(f"{r.status} · {_secs(r.seconds)}")
        cells += [_fit_word(by[(name, "")]) for name in baselines]
        rows.append(cells)
    return _table(["graph", "ops", "K", "factor", "limit / device", "ParDNN Step 1", "ParDNN I", "ParDNN II",
                   *(LABELS[p] for p in baselines)], rows, "lrrrrc" + "l" * 2 + "c" * len(baselines))


def _grouped(runs: Sequence[Run], key: Callable[[Run], Any],
             keep: Callable[[Run], bool]) -> list[tuple[Any, list[Run]]]:
    groups: dict[Any, list[Run]] = {}
    for r in runs:
        if keep(r):
            groups.setdefault(key(r), []).append(r)
    return list(groups.items())


def _slope_table(runs: Sequence[Run], devices: Sequence[int]) -> list[str]:
    labels = _labels(runs)
    per_k = {k: slopes(runs, labels, k) for k in devices}
    rows = [[label, *(f"{per_k[k][label]:.2f}" if per_k[k][label] is not None else "-" for k in devices)]
            for label in labels]
    return _table(["placer", *(f"K = {k}" for k in devices)], rows, "l" + "r" * len(devices))


def _speed_lines(results: BenchResults) -> list[str]:
    if not results.speed:
        return []
    config = results.config
    return ["## Speed of the command line", "",
            f"{results.speed_graph}. Median of {config.speed_repeats} run(s) of each command in a fresh interpreter "
            "(start, imports and reading the `.json.gz` graph included). The memory limit is "
            f"{SPEED_LIMIT_FACTOR:g} × the Step 1 memory demand / K. Targets are for {TARGET_OPS:,} ops on "
            f"K = {TARGET_DEVICES}.", "",
            *_table(["command", "wall time", "target", "met"],
                    ([f"`{row.command}`", _secs(row.seconds) + (" (infeasible, exit 3)" if row.infeasible else ""),
                      "-" if row.target_s is None else f"< {row.target_s:g} s",
                      "-" if row.target_s is None else ("yes" if row.seconds < row.target_s else "**no**")]
                     for row in results.speed), "lrrc"), ""]


def _target_line(results: BenchResults) -> str:
    """In-process ParDNN time with each heuristic at the target size and K (or the largest run)."""
    synthetic = [r for r in results.runs if r.suite == SYNTHETIC and r.placer == "pardnn"]
    sizes = sorted({r.ops for r in synthetic})
    near = [s for s in sizes if abs(s - TARGET_OPS) <= 0.01 * TARGET_OPS]
    ops = near[0] if near else sizes[-1]
    k = TARGET_DEVICES if TARGET_DEVICES in results.config.devices else max(results.config.devices)
    at = [r for r in synthetic if r.ops == ops and r.devices == k]
    parts = [f"Step 1 {_secs(r.seconds)}" for r in at if r.factor is None]
    for heuristic, numeral in HEURISTICS.items():
        timings = ", ".join(f"{_secs(r.seconds)} at {r.factor:g}×" + ("" if r.status == OK else f" ({r.status})")
                            for r in at if r.heuristic == heuristic)
        if timings:
            parts.append(f"heuristic {numeral} {timings}")
    line = f"- ParDNN's time in process at {ops:,} ops, K = {k}: {'; '.join(parts)}."
    worst = max((r.seconds or 0.0 for r in at if r.heuristic), default=None)
    if near and k == TARGET_DEVICES and worst is not None:
        met = "met" if worst < TARGET_PLACE_MEMORY_S else "**missed**"
        line += f" Target < {TARGET_PLACE_MEMORY_S:g} s with a memory heuristic: {met} (slowest {_secs(worst)})."
    return line


def render_markdown(results: BenchResults, command: str, artifacts: Path, results_path: Path) -> str:
    config = results.config
    link = Path(os.path.relpath(artifacts, results_path.parent)).as_posix()
    finished = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    load = "/".join(f"{x:.2f}" for x in results.load_before), "/".join(f"{x:.2f}" for x in results.load_after)
    lines = ["# Benchmark results", "",
             f"Command: `{command}` ({results.seconds:.0f} s, finished {finished})",
             "", f"Machine: {machine_line()}. Load average (1/5/15 min) {load[0]} at the start, {load[1]} at the end: "
             "the machine may be shared, so compare ratios within this file, not seconds across runs.", "",
             "Written by the command above; do not edit by hand. The per-run CSV and the plots are in "
             f"[`{link}/`]({link}/) (generated, not committed).", ""]
    if not config.graph_files:
        lines += [f"Graph files: none (the full suite runs the model graphs in `{MODEL_GRAPHS}/` when it exists; "
                  f"`python -m jobs.paper --out {MODEL_GRAPHS}` writes them).", ""]
    suites = dict.fromkeys(r.suite for r in results.runs)
    k_scaling = max(config.devices)
    lines += ["## Summary", ""]
    for suite in suites:
        runs = [r for r in results.runs if r.suite == suite]
        lines += [f"### {suite.capitalize()}: ParDNN against the baselines", "",
                  *_wins_section(runs, "graph" if suite == FILES else "synthetic graph")]
    synthetic = [r for r in results.runs if r.suite == SYNTHETIC]
    if synthetic:
        lines += ["### Speed and complexity", "", _target_line(results)]
        for row in results.speed:
            if row.target_s is not None:
                lines.append(f"- `{row.command}`: {_secs(row.seconds)}"
                             + (" (infeasible, exit 3)" if row.infeasible else "") + f" (target < {row.target_s:g} s: "
                             f"{'met' if row.seconds < row.target_s else '**missed**'}).")
        fitted = slopes(synthetic, ["ParDNN", "LC", "ParDNN I", "ParDNN II"], k_scaling)
        sizes = sorted({r.ops for r in synthetic})
        lines.append(f"- Log–log slope of placer time against |V| (K = {k_scaling}, {len(sizes)} sizes "
                     f"{sizes[0]:,}–{sizes[-1]:,}; 1 is linear, 2 quadratic): "
                     + "; ".join(f"{label} {'-' if value is None else f'{value:.2f}'}"
                                 for label, value in fitted.items() if label in _labels(synthetic))
                     + ". ParDNN I and II: every run under a limit that fitted; LC: runs that finished within "
                     "its budget.")
        lines.append("")
    for suite in suites:
        runs = [r for r in results.runs if r.suite == suite]
        if any(r.factor is not None for r in runs):
            lines += [f"### {suite.capitalize()}: memory heuristics", "", *_memory_summary(runs)]
    lines += _speed_lines(results)
    for suite in suites:
        lines += _suite_lines(suite, [r for r in results.runs if r.suite == suite], config, link)
    return "\n".join(lines) + "\n"


def _suite_lines(suite: str, runs: Sequence[Run], config: SuiteConfig, link: str) -> list[str]:
    source = (f"`pardnn.synthetic.dnn_graph(ops, seed={config.seed})`" if suite == SYNTHETIC else
              ", ".join(f"`{path}`" for path in config.graph_files) + " (their `memory_limit_bytes` is not used)")
    lines = [f"## Suite: {suite}", "", f"Graphs: {source}; interconnect 150 GB/s, 25 µs (the defaults).", "",
             "### Without a memory limit", "",
             "Each cell: makespan / lower bound (1 is optimal; the best of the row in bold) and, in brackets, the "
             "wall time of the placer call (its evaluation included). † LC stopped at its time budget "
             f"({config.lc_budget_s:g} s) and mapped the ops left singly; LC is skipped above {config.lc_max_ops:,} "
             "ops (quadratic).", "", *_free_table(runs), "",
             f"![makespan / lower bound]({link}/ratio-{_slug(suite)}.png)", ""]
    if any(r.factor is not None for r in runs):
        lines += ["### Under memory limits", "",
                  "Limit per device = factor × demand / K, demand = the sum over devices of ParDNN Step 1's "
                  "per-device peaks; reserve 0. ParDNN I / II cells: makespan / lower bound · fits · ops moved "
                  "(share of all ops) · makespan cost (× the Step 1 makespan) · time; `infeasible` when the "
                  "heuristic raised InfeasibleError (time until then). Baselines ignore memory: their placement is "
                  "the one without a limit; the columns say whether it fits.", "", *_limited_table(runs), ""]
    if len({r.ops for r in runs}) >= 2:
        lines += ["### Placer time against graph size", "",
                  "Log–log slope of the wall time against |V| (least squares; 1 is linear, 2 quadratic). ParDNN I "
                  "and II: their runs under every memory limit; the others: their runs without one. Runs that "
                  "timed out, were skipped or were infeasible are left out.", "",
                  *_slope_table(runs, config.devices), "",
                  f"![placer time against |V|]({link}/time-{_slug(suite)}.png)", ""]
    return lines


def _slug(suite: str) -> str:
    return suite.replace(" ", "-")


# -------------------------------------------------------------------------------------- outputs
def write_csv(runs: Sequence[Run], path: Path) -> None:
    with path.open("w", newline="") as out:
        writer = csv.writer(out)
        writer.writerow(CSV_COLUMNS)
        for r in runs:
            writer.writerow([r.suite, r.graph, r.ops, r.edges, r.devices, r.placer, r.heuristic,
                             "" if r.factor is None else r.factor, "" if r.limit_bytes is None else r.limit_bytes,
                             r.status, _csv(r.makespan_us), _csv(r.lower_bound_us), _csv(r.ratio),
                             "" if r.memory_fits is None else str(r.memory_fits).lower(), _csv(r.peak_bytes),
                             _csv(r.seconds), _csv(r.moved_ops), _csv(r.moved_share), _csv(r.makespan_cost)])


def _csv(value: float | int | None) -> str:
    return "" if value is None else repr(value)


def _figure(width: float, height: float) -> Any:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=(width, height), layout="constrained")
    FigureCanvasAgg(figure)
    return figure


def plot_ratios(runs: Sequence[Run], path: Path, title: str) -> None:
    """Grouped bars: makespan / lower bound per placer (bars) and K (groups), one panel per graph."""
    free = [r for r in runs if r.factor is None]
    graphs = list(dict.fromkeys(r.graph for r in free))
    placers = _placers(free)
    columns = min(2, len(graphs))
    rows = math.ceil(len(graphs) / columns)
    figure = _figure(6.5 * columns, 3.6 * rows)
    axes = figure.subplots(rows, columns, squeeze=False).ravel()
    width = 0.8 / len(placers)
    for ax, graph in zip(axes, graphs):
        mine = [r for r in free if r.graph == graph]
        devices = sorted({r.devices for r in mine})
        for i, name in enumerate(placers):
            by_k = {r.devices: r for r in mine if r.placer == name}
            heights = [by_k[k].ratio if k in by_k and by_k[k].ratio is not None else 0.0 for k in devices]
            ax.bar(np.arange(len(devices)) + (i - (len(placers) - 1) / 2) * width, heights, width, label=LABELS[name])
        ax.axhline(1.0, color="black", linewidth=0.8)
        ax.set_xticks(np.arange(len(devices)), [f"K = {k}" for k in devices])
        ax.set_ylabel("makespan / lower bound")
        ax.set_title(f"{graph} ({mine[0].ops:,} ops)")
    for ax in axes[len(graphs):]:
        ax.set_visible(False)
    axes[0].legend(fontsize="small", ncols=2)
    figure.suptitle(title)
    figure.savefig(path, dpi=110)


def plot_times(runs: Sequence[Run], path: Path, devices: int, title: str) -> None:
    """Placer time against |V| on log–log axes at one K, a fitted power law per placer (slope in the legend)."""
    figure = _figure(7.5, 5.0)
    ax = figure.subplots()
    fitted = slopes(runs, _labels(runs), devices)
    for label, slope in fitted.items():
        sizes, seconds = _scaling_points(runs, label, devices)
        if not sizes:
            continue
        (line,) = ax.plot(sizes, seconds, "o", label=f"{label}: slope {slope:.2f}" if slope is not None else label)
        if slope is not None:
            exponent, coefficient = fit_power_law(sizes, seconds)
            x = np.geomspace(min(sizes), max(sizes), 20)
            ax.plot(x, coefficient * x**exponent, "-", color=line.get_color(), linewidth=1)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("|V| (ops)")
    ax.set_ylabel("wall time of the placer call (s)")
    ax.grid(True, which="both", linewidth=0.3)
    ax.legend(fontsize="small")
    shown = [f"{label} slope {fitted[label]:.2f}" for label in ("ParDNN", "LC") if fitted.get(label) is not None]
    ax.set_title(title + (f"\n{', '.join(shown)}" if shown else ""))
    figure.savefig(path, dpi=110)


def write_outputs(results: BenchResults, command: str, artifacts: Path, results_path: Path) -> list[Path]:
    """Write ``results.csv`` and the plots into ``artifacts`` and the Markdown report to ``results_path``."""
    artifacts.mkdir(parents=True, exist_ok=True)
    results_path.parent.mkdir(parents=True, exist_ok=True)
    written = [artifacts / "results.csv"]
    write_csv(results.runs, written[0])
    k = max(results.config.devices)
    for suite in dict.fromkeys(r.suite for r in results.runs):
        runs = [r for r in results.runs if r.suite == suite]
        written.append(artifacts / f"ratio-{_slug(suite)}.png")
        plot_ratios(runs, written[-1], f"{suite}: makespan / lower bound (no memory limit)")
        if len({r.ops for r in runs}) >= 2:
            written.append(artifacts / f"time-{_slug(suite)}.png")
            plot_times(runs, written[-1], k, f"{suite}: placer time against |V| at K = {k} (log–log)")
    kept = kept_sections(results_path.read_text()) if results_path.exists() else []
    results_path.write_text("\n".join([render_markdown(results, command, artifacts, results_path), *kept]))
    return [results_path, *written]


_SECTION = re.compile(r"<!-- section: (?P<name>[\w-]+) .*?-->\n.*?<!-- end section: (?P=name) -->\n", re.S)


def kept_sections(text: str) -> list[str]:
    """The sections other benchmarks wrote into a results file, which ``pardnn bench`` keeps."""
    return [match.group(0) for match in _SECTION.finditer(text)]


def write_section(path: Path, name: str, body: str, writer: str) -> None:
    """Put ``body`` into the Markdown file ``path`` as section ``name``, in place of its last version.

    The section is delimited by HTML comments naming it and ``writer`` (the command that writes it);
    the rest of the file is left as it is, and ``pardnn bench`` keeps the section when it rewrites
    its own part of ``benchmarks/RESULTS.md``.
    """
    block = (f"<!-- section: {name} (written by `{writer}`; `pardnn bench` keeps it) -->\n{body.rstrip()}\n"
             f"<!-- end section: {name} -->\n")
    text = path.read_text() if path.exists() else "# Benchmark results\n"
    current = next((m for m in _SECTION.finditer(text) if m.group("name") == name), None)
    if current is not None:
        text = text[:current.start()] + block + text[current.end():]
    else:
        text = text.rstrip("\n") + "\n\n" + block
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


# ---------------------------------------------------------------------------------- command line
def _number(text: str, kind: type, rule: str, ok: Callable[[Any], bool]) -> Any:
    try:
        value = kind(text.replace("_", ""))
    except ValueError:
        value = None
    if value is None or not ok(value):
        raise argparse.ArgumentTypeError(f"{text!r} is not {rule}")
    return value


def _positive_int(text: str) -> int:
    return int(_number(text, int, "a whole number >= 1", lambda v: v >= 1))


def _factor(text: str) -> float:
    return float(_number(text, float, "a finite number > 0", lambda v: math.isfinite(v) and v > 0))


def _seconds(text: str) -> float:
    return float(_number(text, float, "a finite number of seconds >= 0", lambda v: math.isfinite(v) and v >= 0))


def add_bench_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``pardnn bench`` (and ``python -m benchmarks``). ``None`` means "the mode's default"."""
    parser.add_argument("graph_files", nargs="*", metavar="GRAPH",
                        help="graph files (or directories of *.json.gz) to run besides the synthetic graphs")
    parser.add_argument("--graphs", nargs="+", action="extend", default=[], metavar="DIR_OR_FILE",
                        help="more graph files or directories of graph files (default in the full suite: "
                             f"{MODEL_GRAPHS}/ if it exists, where `python -m jobs.paper` writes the paper's models)")
    parser.add_argument("--quick", action="store_true",
                        help=f"the CI suite (seconds): {', '.join(f'{s:,}' for s in QUICK.sizes)} ops, K = "
                             f"{', '.join(map(str, QUICK.devices))}, {', '.join(LABELS[p] for p in QUICK.baselines)}, "
                             f"LC budget {QUICK.lc_budget_s:g} s; writes under benchmarks/out/quick/")
    parser.add_argument("--sizes", nargs="*", type=_positive_int, default=None, metavar="OPS",
                        help="synthetic graph sizes (default: " + ", ".join(f"{s:_}" for s in FULL.sizes)
                             + "; none: `--sizes` alone)")
    parser.add_argument("--devices", "-k", nargs="+", type=_positive_int, default=None, metavar="K",
                        help="device counts (default: " + ", ".join(map(str, FULL.devices)) + ")")
    parser.add_argument("--factors", nargs="*", type=_factor, default=None, metavar="F",
                        help="memory limits as factors of demand / K (default: "
                             + ", ".join(f"{f:g}" for f in FULL.factors) + "; none: `--factors` alone)")
    parser.add_argument("--placers", nargs="+", choices=BASELINES, default=None, metavar="NAME",
                        help="baselines to compare ParDNN with (default: all: " + ", ".join(BASELINES) + ")")
    parser.add_argument("--lc-budget", type=_seconds, default=None, metavar="SECONDS",
                        help=f"time budget of each linear clustering run (default: {FULL.lc_budget_s:g} s)")
    parser.add_argument("--lc-max-ops", type=_positive_int, default=None, metavar="OPS",
                        help=f"skip linear clustering above this many ops (default: {FULL.lc_max_ops:_})")
    parser.add_argument("--seed", type=int, default=None, help="seed of the synthetic graphs (default: 0)")
    parser.add_argument("--no-speed", action="store_true", help="do not time the pardnn commands")
    parser.add_argument("--out", type=Path, default=None, metavar="DIR",
                        help="directory for results.csv and the plots (default: benchmarks/out)")
    parser.add_argument("--results", type=Path, default=None, metavar="FILE",
                        help="the Markdown report (default: benchmarks/RESULTS.md; with --quick, DIR/RESULTS.md)")


def config_from_args(args: argparse.Namespace) -> SuiteConfig:
    """The suite of the mode (``--quick`` or full) with the options given replacing its defaults."""
    mode = QUICK if args.quick else FULL

    def chosen(value: Any, default: Any) -> Any:
        if value is None:
            return default
        return tuple(dict.fromkeys(value)) if isinstance(value, list) else value

    named = [*args.graph_files, *args.graphs]
    if not named and not args.quick and MODEL_GRAPHS.is_dir():
        named = [MODEL_GRAPHS]
    config = SuiteConfig(
        sizes=chosen(args.sizes, mode.sizes), devices=chosen(args.devices, mode.devices),
        factors=chosen(args.factors, mode.factors), baselines=chosen(args.placers, mode.baselines),
        graph_files=graph_paths(named),
        lc_budget_s=chosen(args.lc_budget, mode.lc_budget_s), lc_max_ops=chosen(args.lc_max_ops, mode.lc_max_ops),
        speed_ops=0 if args.no_speed else mode.speed_ops,
        speed_devices=mode.speed_devices, speed_repeats=mode.speed_repeats, seed=chosen(args.seed, mode.seed))
    if not config.sizes and not config.graph_files:
        raise PardnnError("nothing to run: no synthetic sizes (--sizes) and no graph files")
    return config


def output_paths(args: argparse.Namespace) -> tuple[Path, Path]:
    """``(artifacts directory, RESULTS.md path)``."""
    out = args.out if args.out is not None else Path("benchmarks/out/quick" if args.quick else "benchmarks/out")
    results = args.results if args.results is not None else (
        out / "RESULTS.md" if args.quick else Path("benchmarks/RESULTS.md"))
    return out, results


def command_line(prog: str, args: argparse.Namespace) -> str:
    """The command with the options given (in a canonical order), for the report's first line."""
    parts = [*shlex.split(prog), *args.graph_files]
    if args.quick:
        parts.append("--quick")
    for flag, values in (("--sizes", args.sizes), ("--devices", args.devices), ("--factors", args.factors),
                         ("--placers", args.placers), ("--graphs", args.graphs or None)):
        if values is not None:
            parts += [flag, *map(str, values)]
    for flag, value in (("--lc-budget", args.lc_budget), ("--lc-max-ops", args.lc_max_ops), ("--seed", args.seed),
                        ("--out", args.out), ("--results", args.results)):
        if value is not None:
            parts += [flag, str(value)]
    if args.no_speed:
        parts.append("--no-speed")
    return shlex.join(parts)


def run_bench(args: argparse.Namespace, prog: str = "pardnn bench", progress: Progress = print) -> list[Path]:
    """Run the suite the parsed ``args`` describe, write its outputs, return the files written."""
    try:
        import matplotlib  # noqa: F401
    except ImportError as exc:
        raise MissingDependencyError("pardnn bench draws its plots with matplotlib: pip install matplotlib") from exc
    config = config_from_args(args)
    artifacts, results_path = output_paths(args)
    results = run_suite(config, progress)
    return write_outputs(results, command_line(prog, args), artifacts, results_path)
