"""The refinement's moves tried in compiled code against the same moves in Python: time and answers.

:mod:`pardnn.polish.refine` tries the critical chain's moves and the whole-neighbourhood sweep's in
compiled code (``_first_shorter``); the kicks stay in Python. This benchmark partitions the small
random DAGs of :mod:`benchmarks.exact` (15-39 ops, K = 2-4, CCR 0.1-100, two thirds under a memory
limit) with ``pardnn.partition`` twice in one process, the moves compiled and in Python, and reports
the wall time of each and how many placements are identical (all of them should be: the same moves,
in the same order, on the same budget).

Usage: ``python -m benchmarks.refine_sweep [--graphs N]`` (about 25 s for 40); writes the section
``refine-sweep`` of ``benchmarks/RESULTS.md``.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from benchmarks.exact import BANDWIDTH, LATENCY, random_dag
from benchmarks.report import machine_line, write_section
from pardnn import partition
from pardnn.costs.machine import Machine
from pardnn.errors import PardnnError
from pardnn.polish import refine as module

HERE = Path(__file__).resolve().parent
CCRS = (0.1, 1.0, 10.0, 100.0)


def cases(count: int) -> list[tuple[str, Machine, object]]:
    """``count`` (label, machine, graph): K 2-4, CCR 0.1-100, every third under a memory limit."""
    out = []
    for seed in range(count):
        k, ccr = 2 + seed % 3, CCRS[seed % 4]
        machine = Machine(k, bandwidth=BANDWIDTH, latency=LATENCY)
        graph = random_dag(15 + seed % 25, ccr, machine, seed)
        if seed % 3:
            limit = int(max(1, graph.out_bytes.sum() * (0.4 + 0.2 * (seed % 3)) / k * 2.5))
            machine = Machine(k, bandwidth=BANDWIDTH, latency=LATENCY, memory=limit)
        out.append((f"dag{seed}", machine, graph))
    return out


def run(count: int, compiled: bool) -> tuple[float, list[object]]:
    """Wall seconds of partitioning every case, and each answer (placement and makespan, or the error)."""
    original = module._Search.__init__

    def init(self: module._Search, *args: object, **kwargs: object) -> None:
        original(self, *args, **kwargs)
        self.compiled = self.compiled and compiled

    module._Search.__init__ = init  # type: ignore[method-assign]
    answers: list[object] = []
    try:
        began = time.perf_counter()
        for _, machine, graph in cases(count):
            try:
                result = partition(graph, machine)
                answers.append((np.asarray(result.placement).tolist(), result.schedule.makespan_us))
            except PardnnError as error:
                answers.append(type(error).__name__)
        return time.perf_counter() - began, answers
    finally:
        module._Search.__init__ = original  # type: ignore[method-assign]


def render(count: int, python_s: float, compiled_s: float, same: int, placed: int, command: str) -> str:
    return "\n".join([
        "## The refinement's moves, compiled (refine-sweep)",
        "",
        f"Command: `{command}`. Machine: {machine_line()}.",
        "",
        f"{count} small random DAGs of `benchmarks.exact` (15-39 ops, K = 2-4, CCR 0.1-100, two thirds under a "
        "memory limit) partitioned by `pardnn.partition` with the default refinement budget, the chain's and the "
        "sweep's moves tried in compiled code and one by one in Python, in one process (numba's cache warm).",
        "",
        "| moves tried | wall time | per graph |",
        "|---|---:|---:|",
        f"| Python | {python_s:.2f} s | {1000 * python_s / count:.0f} ms |",
        f"| compiled | {compiled_s:.2f} s | {1000 * compiled_s / count:.0f} ms |",
        "",
        f"Compiled / Python: {compiled_s / python_s:.2f}; identical answers: {same} of {count} ({placed} placed, "
        f"{count - placed} with no placement within the limits).",
    ])


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.refine_sweep", description=__doc__.splitlines()[0])
    parser.add_argument("--graphs", type=int, default=40, help="random DAGs (default 40)")
    parser.add_argument("--results", default=str(HERE / "RESULTS.md"), help="file to write the section to")
    parser.add_argument("--no-write", action="store_true", help="print only")
    args = parser.parse_args(argv)
    run(3, True)  # compile once, outside the timing
    compiled_s, compiled = run(args.graphs, True)
    python_s, python = run(args.graphs, False)
    same = sum(a == b for a, b in zip(compiled, python, strict=True))
    command = "python -m benchmarks.refine_sweep" + ("" if args.graphs == 40 else f" --graphs {args.graphs}")
    placed = sum(isinstance(answer, tuple) for answer in compiled)
    text = render(args.graphs, python_s, compiled_s, same, placed, command)
    print(text)
    if not args.no_write:
        write_section(Path(args.results), "refine-sweep", text, command)
    return 0 if same == args.graphs else 1


if __name__ == "__main__":
    sys.exit(main())
