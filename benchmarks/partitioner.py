"""Partitioner benchmarks: speed of the CLI, placement quality against simple baselines, and the
memory heuristics under tight limits. Writes ``benchmarks/RESULTS.md``.

    python -m benchmarks.partitioner            # full run (a few minutes on 2 cores)
    python -m benchmarks.partitioner --quick    # small graphs only (seconds), for a smoke test

Quality is reported as makespan / lower bound (lower is better) and, against each baseline, as the
ratio of makespans measured in the same run, so a noisy machine does not bias the comparison.
Memory limits are factors of the *memory demand*: the sum over devices of the per-device peaks of
ParDNN's Step 1 placement (no heuristic), divided by K — what the step needs on K devices before any
memory handling; the reserve is 0 so the limit is exactly that figure.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from pardnn import InfeasibleError, Machine
from pardnn.baselines import PLACERS
from pardnn.graph import CostGraph
from pardnn.io import write_graph
from pardnn.partition import partition
from pardnn.synthetic import dnn_graph

HERE = Path(__file__).resolve().parent


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


def timed(command: Sequence[str], repeats: int) -> tuple[float, str]:
    """Median wall time of ``command`` (a subprocess, so interpreter start and imports count)."""
    times = []
    out = ""
    for _ in range(repeats):
        start = time.perf_counter()
        done = subprocess.run(command, check=True, capture_output=True, text=True)
        times.append(time.perf_counter() - start)
        out = done.stdout
    return statistics.median(times), out


def speed_section(ops: int, devices: int, repeats: int) -> list[str]:
    cli = [sys.executable, "-m", "pardnn.cli"]
    with tempfile.TemporaryDirectory() as tmp:
        graph_path = Path(tmp) / f"dnn-{ops}.json.gz"
        placement_path = Path(tmp) / "placement.txt"
        graph = dnn_graph(ops, seed=0)
        write_graph(graph, graph_path)
        demand_machine = Machine(devices)
        step1 = partition(graph, demand_machine, memory_heuristic=None)
        limit = int(1.2 * sum(step1.report.evaluation.peak_memory_bytes) / devices)
        rows = []
        place_s, _ = timed([*cli, "place", str(graph_path), "-k", str(devices), "-o", str(placement_path), "-q"],
                           repeats)
        rows.append((f"`pardnn place GRAPH -k {devices} -o placement.txt`", place_s, 2.0))
        place_mem_s, _ = timed([*cli, "place", str(graph_path), "-k", str(devices), "--memory", str(limit),
                                "--reserve", "0", "-o", str(placement_path), "-q"], repeats)
        rows.append((f"`pardnn place GRAPH -k {devices} --memory {limit} --reserve 0` (heuristic I)",
                     place_mem_s, 5.0))
        simulate_s, _ = timed([*cli, "simulate", str(graph_path), str(placement_path), "-k", str(devices)], repeats)
        rows.append((f"`pardnn simulate GRAPH placement.txt -k {devices}`", simulate_s, 3.0))
        in_process = partition(graph, Machine(devices, memory=limit, reserve=0.0))
    lines = [f"### Speed: {graph.n:,} ops, {graph.m:,} edges, K = {devices}", "",
             f"Median of {repeats} runs of each command, wall time including interpreter start, imports and "
             "loading the `.json.gz` graph. The memory limit is 1.2 × the Step 1 memory demand.", "",
             "| command | wall time (s) | target (s) |", "|---|---:|---:|"]
    lines += [f"| {name} | {seconds:.2f} | < {target:g} |" for name, seconds, target in rows]
    stages = ", ".join(f"{k} {v:.3f} s" for k, v in in_process.report.stage_seconds.items())
    lines += ["", f"Stages of the heuristic I run, in process: {stages}; "
                  f"{in_process.report.details.get('overflow_rounds', 0)} overflow rounds, "
                  f"{in_process.report.details.get('moved_ops', 0):,} ops moved.", ""]
    return lines


def quality_section(sizes: Sequence[int], ks: Sequence[int]) -> list[str]:
    baselines = ["round_robin", "topological"]
    lines = ["### Quality: makespan against the lower bound and against baselines", "",
             "Synthetic DNN graphs (`pardnn.synthetic.dnn_graph`, seed 0), default interconnect (150 GB/s, 25 us), "
             "no memory limit. `ratio` = makespan / max(critical path, work / K). `x rr` and `x topo` = ParDNN's "
             "makespan / the baseline's (below 1: ParDNN is faster).", "",
             "| ops | K | ParDNN ratio | round robin ratio | topological ratio | x rr | x topo | ParDNN time (s) |"
             " slicing / mapping / evaluation (s) |",
             "|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    wins = total = 0
    for ops in sizes:
        graph = dnn_graph(ops, seed=0)
        for k in ks:
            machine = Machine(k)
            ours = partition(graph, machine, memory_heuristic=None)
            theirs = {name: PLACERS[name](graph, machine).report.evaluation for name in baselines}
            e = ours.report.evaluation
            rel = [e.makespan_us / theirs[name].makespan_us for name in baselines]
            total += 1
            wins += all(r < 1 for r in rel)
            st = ours.report.stage_seconds
            lines.append(f"| {graph.n:,} | {k} | {e.ratio:.3f} | {theirs['round_robin'].ratio:.3f} | "
                         f"{theirs['topological'].ratio:.3f} | {rel[0]:.3f} | {rel[1]:.3f} | "
                         f"{ours.report.total_seconds:.3f} | {st['slicing']:.3f} / {st['mapping']:.3f} / "
                         f"{st['evaluation']:.3f} |")
    lines += ["", f"ParDNN beats both baselines in {wins} of {total} cases.", ""]
    return lines


def memory_section(sizes: Sequence[int], ks: Sequence[int], factors: Sequence[float]) -> list[str]:
    lines = ["### Memory heuristics under limits", "",
             "Limit per device = factor × memory demand / K (demand: sum of the Step 1 per-device peaks), reserve 0. "
             "`fits` says whether the placement meets every limit (by emulation); `moved` is the share of ops the "
             "heuristic moved; `makespan cost` is the makespan after / the Step 1 makespan; `time` is the whole "
             "`partition` call.", "",
             "| ops | K | factor | Step 1 fits | heuristic I | moved | makespan cost | time (s) | "
             "heuristic II | moved | makespan cost | time (s) |",
             "|---:|---:|---:|:---:|:---:|---:|---:|---:|:---:|---:|---:|---:|"]
    outcomes: dict[str, list[bool]] = {"overflow": [], "balance": []}
    moved_shares: dict[str, list[float]] = {"overflow": [], "balance": []}
    for ops in sizes:
        graph = dnn_graph(ops, seed=0)
        for k in ks:
            step1 = partition(graph, Machine(k), memory_heuristic=None).report.evaluation
            demand = sum(step1.peak_memory_bytes) / k
            for factor in factors:
                machine = Machine(k, memory=int(factor * demand), reserve=0.0)
                fits_before = max(step1.peak_memory_bytes) <= machine.limits_bytes[0]
                cells = []
                for heuristic in ("overflow", "balance"):
                    cell, ok, share = _memory_cell(graph, machine, heuristic, step1.makespan_us)
                    outcomes[heuristic].append(ok)
                    if ok:
                        moved_shares[heuristic].append(share)
                    cells.append(cell)
                lines.append(f"| {graph.n:,} | {k} | {factor:g} | {'yes' if fits_before else 'no'} | "
                             f"{cells[0]} | {cells[1]} |")
    lines.append("")
    for heuristic, label in (("overflow", "Heuristic I"), ("balance", "Heuristic II")):
        ok = outcomes[heuristic]
        shares = moved_shares[heuristic]
        mean_moved = f"{100 * statistics.mean(shares):.1f} %" if shares else "n/a"
        lines.append(f"- {label}: feasible in {sum(ok)} of {len(ok)} cases ({len(ok) - sum(ok)} raised "
                     f"InfeasibleError); mean share of ops moved where it succeeded: {mean_moved} "
                     f"(the paper reports 8 % on average).")
    lines.append("")
    return lines


def _memory_cell(graph: CostGraph, machine: Machine, heuristic: str, step1_makespan: float) -> tuple[str, bool, float]:
    start = time.perf_counter()
    try:
        result = partition(graph, machine, memory_heuristic=heuristic)
    except InfeasibleError:
        return f"infeasible | - | - | {time.perf_counter() - start:.2f}", False, 0.0
    seconds = time.perf_counter() - start
    details = result.report.details
    cost = result.report.evaluation.makespan_us / step1_makespan
    return (f"fits | {100 * details['moved_share']:.1f} % | {cost:.3f} | {seconds:.2f}", True,
            float(details["moved_share"]))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="small graphs only (seconds)")
    parser.add_argument("--out", type=Path, default=HERE / "RESULTS.md", help="file to write (default: %(default)s)")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    if args.quick:
        sections: list[Callable[[], list[str]]] = [
            lambda: speed_section(20_000, 8, 1),
            lambda: quality_section([5_000], [2, 4]),
            lambda: memory_section([5_000], [4], [1.2, 1.0]),
        ]
    else:
        sections = [
            lambda: speed_section(200_000, 16, 3),
            lambda: quality_section([10_000, 50_000, 200_000], [2, 4, 8, 16]),
            lambda: memory_section([50_000, 200_000], [4, 8, 16], [1.2, 1.0, 0.8]),
        ]
    body: list[str] = []
    for section in sections:
        body += section()
        print("\n".join(body[-3:]), flush=True)
    command = "python -m benchmarks.partitioner" + (" --quick" if args.quick else "")
    header = ["# Benchmark results", "", f"Command: `{command}` ({time.perf_counter() - started:.0f} s)", "",
              f"Machine: {machine_line()}", "", "## Partitioner", ""]
    args.out.write_text("\n".join(header + body) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
