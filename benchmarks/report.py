"""The suite's outputs, and where they go.

- ``RESULTS.md``: the command, the machine, a summary (ParDNN against every baseline, the speed
  targets, the fitted complexity, the memory heuristics) and a table per suite; sections other
  benchmarks wrote into it (:func:`write_section`) are kept when the suite rewrites it;
- ``results.csv``: one row per run (:data:`CSV_COLUMNS`);
- ``ratio-<suite>.png`` and ``time-<suite>.png``: the plots (:mod:`benchmarks.plots`; the time plot
  only for suites with several sizes).
"""

from __future__ import annotations

import argparse
import csv
import os
import platform
import re
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from benchmarks.analysis import grouped, labels, placers, slopes
from benchmarks.plots import plot_ratios, plot_times
from benchmarks.speed import FIRST_RUN_ABOUT, SPEED_LIMIT_FACTOR, TARGET_DEVICES, TARGET_OPS, TARGET_PLACE_MEMORY_S
from benchmarks.suite import (
    FILES,
    HEURISTICS,
    LABELS,
    MODEL_GRAPHS,
    OK,
    SYNTHETIC,
    BenchResults,
    Run,
    SuiteConfig,
    cell_ratio,
    fit_word,
    secs,
)
from benchmarks.summary import memory_summary, percent, table, wins_section
from pardnn.costs.machine import format_bytes

__all__ = ["CSV_COLUMNS", "kept_sections", "machine_line", "output_paths", "render_markdown", "write_csv",
           "write_outputs", "write_section"]

CSV_COLUMNS = ("suite", "graph", "ops", "edges", "devices", "placer", "heuristic", "memory_factor", "limit_bytes",
               "status", "makespan_us", "lower_bound_us", "makespan_over_lower_bound", "memory_fits",
               "max_peak_bytes", "seconds", "moved_ops", "moved_share", "makespan_cost", "budget_seconds")


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


def _free_table(runs: Sequence[Run]) -> list[str]:
    names = placers(runs)
    rows = []
    for key, group in grouped(runs, lambda r: (r.graph, r.devices), lambda r: r.factor is None):
        by_placer = {r.placer: r for r in group}
        best = min((r.ratio for r in group if r.ratio is not None), default=None)
        cells = []
        for name in names:
            r = by_placer.get(name)
            if r is None:
                cells.append("")
                continue
            ratio = cell_ratio(r)
            cells.append((f"**{ratio}**" if r.ratio == best else ratio) + (f" ({secs(r.seconds)})" if r.measured
                                                                         else ""))
        rows.append([group[0].graph, f"{group[0].ops:,}", str(key[1]), *cells])
    return table(["graph", "ops", "K", *(LABELS[p] for p in names)], rows, "lrr" + "r" * len(names))


def _limited_table(runs: Sequence[Run]) -> list[str]:
    baselines = [p for p in placers(runs) if p != "pardnn"]
    rows = []
    for _, group in grouped(runs, lambda r: (r.graph, r.devices, r.factor), lambda r: r.factor is not None):
        by = {(r.placer, r.heuristic): r for r in group}
        first = group[0]
        cells = [first.graph, f"{first.ops:,}", str(first.devices), f"{first.factor:g}",
                 format_bytes(first.limit_bytes or 0), fit_word(by[("pardnn", "")])]
        for heuristic in HEURISTICS:
            r = by[("pardnn", heuristic)]
            if r.status == OK:
                cells.append(f"{r.ratio:.3f} · {fit_word(r)} · {r.moved_ops or 0:,} moved "
                             f"({percent(r.moved_share or 0)}) · ×{r.makespan_cost:.3f} · {secs(r.seconds)}")
            else:
                cells.append(f"{r.status} · {secs(r.seconds)}")
        cells += [fit_word(by[(name, "")]) for name in baselines]
        rows.append(cells)
    return table(["graph", "ops", "K", "factor", "limit / device", "ParDNN Step 1", "ParDNN I", "ParDNN II",
                   *(LABELS[p] for p in baselines)], rows, "lrrrrc" + "l" * 2 + "c" * len(baselines))


def _slope_table(runs: Sequence[Run], devices: Sequence[int]) -> list[str]:
    names = labels(runs)
    per_k = {k: slopes(runs, names, k) for k in devices}
    rows = [[label, *(f"{per_k[k][label]:.2f}" if per_k[k][label] is not None else "-" for k in devices)]
            for label in names]
    return table(["placer", *(f"K = {k}" for k in devices)], rows, "l" + "r" * len(devices))


GUARD_COST_TARGET = 0.25  # our bound on what the guard and the refinement add to `pardnn place`


def _speed_lines(results: BenchResults) -> list[str]:
    if not results.speed:
        return []
    config = results.config
    first_run = f" {FIRST_RUN_ABOUT}" if any(row.note for row in results.speed) else ""
    return ["## Speed of the command line", "",
            f"{results.speed_graph}. Median of {config.speed_repeats} run(s) of each command in a fresh interpreter "
            "(start, imports and reading the `.json.gz` graph included). The memory limit is "
            f"{SPEED_LIMIT_FACTOR:g} × the Step 1 memory demand / K. Targets are for {TARGET_OPS:,} ops on "
            f"K = {TARGET_DEVICES}.{first_run}", "",
            *table(["command", "wall time", "target", "met"],
                    ([f"`{row.command}`" + (f" ({row.note})" if row.note else ""),
                      secs(row.seconds) + (" (infeasible, exit 3)" if row.infeasible else ""),
                      "-" if row.target_s is None else f"< {row.target_s:g} s",
                      "-" if row.target_s is None else ("yes" if row.seconds < row.target_s else "**no**")]
                     for row in results.speed), "lrrc"), "", *_guard_cost_lines(results)]


def _guard_cost_lines(results: BenchResults) -> list[str]:
    """What the guard, the refinement and the run order add to each command, from its interleaved paper-alone twin."""
    by_command = {row.command: row for row in results.speed if not row.note}  # not the first run's own graph
    lines = []
    for row in results.speed:
        base = by_command.get(row.twin_of) if row.twin_of else None
        if base is not None and row.seconds > 0:
            ratio = row.paired_ratio if row.paired_ratio is not None else base.seconds / row.seconds
            lines.append(f"- The guard, the refinement and the run order add {ratio - 1:+.0%} to `{base.command}` "
                         f"(the median, over the interleaved rounds, of its time over its `-a pardnn-paper` twin's; "
                         f"the medians apart: {secs(base.seconds)} against {secs(row.seconds)}, "
                         f"{base.seconds / row.seconds - 1:+.0%}; target ≤ +{GUARD_COST_TARGET:.0%}: "
                         f"{'met' if ratio <= 1 + GUARD_COST_TARGET else '**missed**'}).")
    return [*lines, ""] if lines else []


def _target_line(results: BenchResults) -> str:
    """In-process ParDNN time with each heuristic at the target size and K (or the largest run)."""
    synthetic = [r for r in results.runs if r.suite == SYNTHETIC and r.placer == "pardnn"]
    sizes = sorted({r.ops for r in synthetic})
    near = [s for s in sizes if abs(s - TARGET_OPS) <= 0.01 * TARGET_OPS]
    ops = near[0] if near else sizes[-1]
    k = TARGET_DEVICES if TARGET_DEVICES in results.config.devices else max(results.config.devices)
    at = [r for r in synthetic if r.ops == ops and r.devices == k]
    parts = [f"Step 1 {secs(r.seconds)}" for r in at if r.factor is None]
    for heuristic, numeral in HEURISTICS.items():
        timings = ", ".join(f"{secs(r.seconds)} at {r.factor:g}×" + ("" if r.status == OK else f" ({r.status})")
                            for r in at if r.heuristic == heuristic)
        if timings:
            parts.append(f"heuristic {numeral} {timings}")
    line = f"- ParDNN's time in process at {ops:,} ops, K = {k}: {'; '.join(parts)}."
    worst = max((r.seconds or 0.0 for r in at if r.heuristic), default=None)
    if near and k == TARGET_DEVICES and worst is not None:
        met = "met" if worst < TARGET_PLACE_MEMORY_S else "**missed**"
        line += f" Target < {TARGET_PLACE_MEMORY_S:g} s with a memory heuristic: {met} (slowest {secs(worst)})."
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
             f"`{link}/` (generated, not committed).", ""]
    if not config.graph_files:
        lines += [f"Graph files: none (the full suite runs the model graphs in `{MODEL_GRAPHS}/` when it exists; "
                  f"`python -m jobs.paper --out {MODEL_GRAPHS}` writes them).", ""]
    suites = dict.fromkeys(r.suite for r in results.runs)
    k_scaling = max(config.devices)
    lines += ["## Summary", ""]
    for suite in suites:
        runs = [r for r in results.runs if r.suite == suite]
        lines += [f"### {suite.capitalize()}: ParDNN against the baselines", "",
                  *wins_section(runs, "graph" if suite == FILES else "synthetic graph")]
    synthetic = [r for r in results.runs if r.suite == SYNTHETIC]
    if synthetic:
        lines += ["### Speed and complexity", "", _target_line(results)]
        for row in results.speed:
            if row.target_s is not None:
                lines.append(f"- `{row.command}`" + (f" ({row.note})" if row.note else "") + f": {secs(row.seconds)}"
                             + (" (infeasible, exit 3)" if row.infeasible else "") + f" (target < {row.target_s:g} s: "
                             f"{'met' if row.seconds < row.target_s else '**missed**'}).")
        fitted = slopes(synthetic, ["ParDNN", "ParDNN (paper)", "LC", "ParDNN I", "ParDNN II"], k_scaling)
        sizes = sorted({r.ops for r in synthetic})
        lines.append(f"- Log–log slope of placer time against |V| (K = {k_scaling}, {len(sizes)} sizes "
                     f"{sizes[0]:,}–{sizes[-1]:,}; 1 is linear, 2 quadratic): "
                     + "; ".join(f"{label} {'-' if value is None else f'{value:.2f}'}"
                                 for label, value in fitted.items() if label in labels(synthetic))
                     + ". ParDNN, ParDNN I and II: their time less the fixed budget of the refinement and the run "
                     "order; ParDNN I and II: every run under a limit that fitted; LC: runs that finished within "
                     "its budget.")
        lines.append("")
    for suite in suites:
        runs = [r for r in results.runs if r.suite == suite]
        if any(r.factor is not None for r in runs):
            lines += [f"### {suite.capitalize()}: memory heuristics", "", *memory_summary(runs)]
    lines += _speed_lines(results)
    for suite in suites:
        lines += _suite_lines(suite, [r for r in results.runs if r.suite == suite], config, link)
    return "\n".join(lines) + "\n"


def _suite_lines(suite: str, runs: Sequence[Run], config: SuiteConfig, link: str) -> list[str]:
    source = (f"`pardnn.costs.synthetic.dnn_graph(ops, seed={config.seed})`" if suite == SYNTHETIC else
              ", ".join(f"`{path}`" for path in config.graph_files) + " (their `memory_limit_bytes` is not used)")
    lines = [f"## Suite: {suite}", "", f"Graphs: {source}; interconnect 150 GB/s, 25 µs (the defaults).", "",
             "### Without a memory limit", "",
             "Each cell: makespan / lower bound (1 is optimal; the best of the row in bold) and, in brackets, the "
             "wall time of the placer call (its evaluation included). † LC stopped at its time budget "
             f"({config.lc_budget_s:g} s) and mapped the ops left singly; LC is skipped above {config.lc_max_ops:,} "
             "ops.", "", *_free_table(runs), "",
             f"Plot: `{link}/ratio-{_slug(suite)}.png` (makespan / lower bound; generated, not committed).", ""]
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
                  "and II: their runs under every memory limit; the others: their runs without one. ParDNN's time "
                  "leaves out its refinement and run-order stages, which spend a fixed budget whatever the size. "
                  "Runs that timed out, were skipped or were infeasible are left out.", "",
                  *_slope_table(runs, config.devices), "",
                  f"Plot: `{link}/time-{_slug(suite)}.png` (placer time against |V|; generated, not committed).",
                  ""]
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
                             _csv(r.seconds), _csv(r.moved_ops), _csv(r.moved_share), _csv(r.makespan_cost),
                             _csv(r.budget_seconds)])


def _csv(value: float | int | None) -> str:
    return "" if value is None else repr(value)


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


def output_paths(args: argparse.Namespace) -> tuple[Path, Path]:
    """``(artifacts directory, RESULTS.md path)``."""
    out = args.out if args.out is not None else Path("benchmarks/out/quick" if args.quick else "benchmarks/out")
    results = args.results if args.results is not None else (
        out / "RESULTS.md" if args.quick else Path("benchmarks/RESULTS.md"))
    return out, results


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
