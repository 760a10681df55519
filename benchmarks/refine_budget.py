"""What one move of the refinement costs: the model behind ``--refine-seconds``, measured.

:mod:`pardnn.polish.refine` turns its budget in seconds into a number of emulations by a fixed model,
``SECONDS_PER_MOVE + SECONDS_PER_ELEMENT * (|V| + |E|)`` per move tried, never by the clock, so that
every node of a cluster computes the same placement. This benchmark times what a move really costs
here: :func:`pardnn.polish.refine.refine` run from ParDNN's unrefined placement with a budget of a fixed
number of moves, on the small random DAGs of :mod:`benchmarks.exact` and on synthetic training graphs
of 500 to 200,000 ops, without and with a memory limit (a limit adds a memory sweep to every
accepted move). Each row is the median of three runs; ``measured / model`` above 1 means a budget
overruns its seconds, below 1 that it buys fewer moves than its seconds could.

Usage: ``python -m benchmarks.refine_budget`` (about 10 s); writes the section ``refine-budget``
of ``benchmarks/RESULTS.md``.
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from benchmarks.exact import BANDWIDTH, LATENCY, random_dag
from benchmarks.report import machine_line, write_section
from pardnn import partition
from pardnn.costs.graph import CostGraph
from pardnn.costs.machine import Machine
from pardnn.costs.synthetic import dnn_graph
from pardnn.emulation.emulated import Emulated
from pardnn.emulation.emulator import emulate
from pardnn.emulation.memory import track_memory
from pardnn.partitioner import PAPER
from pardnn.polish.refine import SECONDS_PER_ELEMENT, SECONDS_PER_MOVE, refine

HERE = Path(__file__).resolve().parent
DEVICES = 4
MOVES = 4_000  # moves per timed run on the smallest graph; fewer on larger ones (about 0.3 s each)
REPEATS = 3
DNN_SIZES = (500, 2_000, 10_000, 50_000, 200_000)
LIMIT_FACTOR = 1.2  # the memory limit per device: this × the unlimited placement's peaks / K


def model_seconds(graph: CostGraph) -> float:
    """The refinement's model of one move on ``graph`` (seconds)."""
    return SECONDS_PER_MOVE + SECONDS_PER_ELEMENT * (graph.n + graph.m)


def measure(graph: CostGraph, machine: Machine) -> tuple[int, float]:
    """Moves tried and the median wall seconds per move of :func:`refine` from ParDNN's placement."""
    start = partition(graph, machine, refine_seconds=0)
    seconds = max(2, min(MOVES, int(0.3 / model_seconds(graph)))) * model_seconds(graph)
    schedule = emulate(graph, machine, start.placement)
    memory = track_memory(graph, machine, start.placement, schedule) if machine.bounded else None
    per_move, tried = [], 0
    for _ in range(REPEATS):
        began = time.perf_counter()
        refined = refine(graph, machine, Emulated(start.placement, schedule, memory), seconds=seconds)
        elapsed = time.perf_counter() - began
        tried = refined.evaluations
        per_move.append(elapsed / max(1, tried))
    return tried, statistics.median(per_move)


def cases() -> list[tuple[str, CostGraph, Machine]]:
    """The graphs and machines timed: random DAGs (CCR 10, K = 4) and synthetic training graphs."""
    rows = []
    for ops in (15, 30):
        machine = Machine(DEVICES, bandwidth=BANDWIDTH, latency=LATENCY)
        rows.append((f"random DAG, {ops} ops", random_dag(ops, 10.0, machine, seed=ops), machine))
    for ops in DNN_SIZES:
        graph = dnn_graph(ops, seed=0)
        free = Machine(DEVICES)
        rows.append((f"dnn-{ops}", graph, free))
        peaks = partition(graph, free, memory_heuristic=None, **PAPER).report.evaluation.peak_memory_bytes
        limited = Machine(DEVICES, memory=int(LIMIT_FACTOR * sum(peaks) / DEVICES), reserve=0)
        rows.append((f"dnn-{ops}, {LIMIT_FACTOR}× memory", graph, limited))
    return rows


def render(rows: Sequence[tuple[str, CostGraph, int, float]], seconds: float, command: str) -> str:
    lines = ["## The refinement's cost model, measured (refine-budget)", "",
             f"Command: `{command}` ({seconds:.0f} s). Machine: {machine_line()}.", "",
             _markdown(__doc__.split("\n\n")[1]), "",
             f"Model: {SECONDS_PER_MOVE * 1e6:g} µs + {SECONDS_PER_ELEMENT * 1e9:g} ns × (|V| + |E|) per move "
             f"(`pardnn.polish.refine.SECONDS_PER_MOVE`, `SECONDS_PER_ELEMENT`); K = {DEVICES}.", "",
             "| graph | ops + edges | moves tried | measured per move | model | measured / model |",
             "|---|---:|---:|---:|---:|---:|"]
    ratios = []
    for label, graph, tried, per_move in rows:
        model = model_seconds(graph)
        ratios.append(per_move / model)
        lines.append(f"| {label} | {graph.n + graph.m:,} | {tried:,} | {_time(per_move)} | {_time(model)} | "
                     f"{per_move / model:.2f} |")
    lines += ["", f"measured / model: min {min(ratios):.2f}, median {statistics.median(ratios):.2f}, "
              f"max {max(ratios):.2f}."]
    return "\n".join(lines) + "\n"


def _markdown(text: str) -> str:
    # The module docstring's paragraph as Markdown: one line, roles and double backquotes as code.
    return re.sub(r":\w+:`~?([^`]+)`", r"`\1`", text.replace("``", "`")).replace("\n", " ")


def _time(seconds: float) -> str:
    return f"{seconds * 1e6:.1f} µs" if seconds < 1e-3 else f"{seconds * 1e3:.2f} ms"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.refine_budget", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--results", default=str(HERE / "RESULTS.md"), help="the file to write the section into")
    args = parser.parse_args(argv)
    began = time.perf_counter()
    rows = []
    for label, graph, machine in cases():
        tried, per_move = measure(graph, machine)
        rows.append((label, graph, tried, per_move))
        print(f"{label}: {tried} moves, {per_move * 1e6:.1f} µs per move "
              f"(model {model_seconds(graph) * 1e6:.1f} µs)", flush=True)
    command = "python -m benchmarks.refine_budget"
    write_section(Path(args.results), "refine-budget", render(rows, time.perf_counter() - began, command), command)
    print(f"wrote {args.results}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
