"""The paper's ten model graphs on K V100-32GB GPUs (10 % reserve): every placer's simulated makespan
and whether it fits. Writes ``benchmarks/PAPER_GRAPHS.md``.

    python -m jobs.paper --out out/graphs          # build the ten graphs first (a few minutes)
    python -m benchmarks.paper_graphs out/graphs   # then this (about ten minutes on 2 cores)

ParDNN runs with memory heuristic I (it raises when it cannot meet memory: "infeasible"); the
baselines ignore memory and are checked against it. Makespans are relative to the lower bound and,
in the last column, ParDNN's over the best baseline's *that fits* (below 1: ParDNN is faster).
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from benchmarks.report import machine_line
from pardnn.costs.presets import machine_for
from pardnn.errors import InfeasibleError
from pardnn.io import read_any_graph
from pardnn.registry import PLACERS

HERE = Path(__file__).resolve().parent
BASELINES = tuple(name for name, placer in PLACERS.items() if placer.cheap)  # the guard's candidates


def run(directory: Path, ks: Sequence[int], lc_budget: float) -> list[str]:
    files = sorted(directory.glob("*.json.gz"))
    if not files:
        raise SystemExit(f"{directory}: no *.json.gz graphs; run python -m jobs.paper --out {directory} first")
    header = "| graph | ops | K | ParDNN | " + " | ".join(BASELINES) + " | ParDNN / best fitting baseline |"
    lines = [header, "|---|---:|---:|" + "---|" * (len(BASELINES) + 1) + "---:|"]
    for path in files:
        graph = read_any_graph(path)
        for k in ks:
            machine = machine_for("v100-32gb", k, reserve=0.10)
            cells = []
            try:
                ours = PLACERS["pardnn"](graph, machine, memory_heuristic="overflow").report.evaluation
                cells.append(f"{ours.ratio:.3f} fits")
            except InfeasibleError:
                ours = None
                cells.append("infeasible")
            best = None
            for name in BASELINES:
                placer = PLACERS[name]
                options = {placer.time_option: lc_budget} if placer.time_option else {}
                report = placer(graph, machine, **options).report
                e = report.evaluation
                timeout = "†" if report.details.get("timeout") else ""
                cells.append(f"{e.ratio:.3f}{timeout} {'fits' if e.memory_fits else 'over'}")
                if e.memory_fits and (best is None or e.makespan_us < best):
                    best = e.makespan_us
            versus = f"{ours.makespan_us / best:.3f}" if ours is not None and best is not None else "-"
            lines.append(f"| {graph.name} | {graph.n:,} | {k} | " + " | ".join(cells) + f" | {versus} |")
            print(lines[-1], flush=True)
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("graphs", type=Path, help="directory of the paper's graph files (*.json.gz)")
    parser.add_argument("--devices", type=int, nargs="+", default=[2, 4, 8, 16])
    parser.add_argument("--lc-budget", type=float, default=10.0, help="seconds per linear-clustering run")
    parser.add_argument("--out", type=Path, default=HERE / "PAPER_GRAPHS.md")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    table = run(args.graphs, args.devices, args.lc_budget)
    command = f"python -m benchmarks.paper_graphs {args.graphs}"
    text = ["# The paper's ten graphs on V100-32GB GPUs", "",
            f"Command: `{command}` ({time.perf_counter() - started:.0f} s). Machine: {machine_line()}.", "",
            "Each cell: makespan / lower bound, and whether the placement fits 32 GiB less the 10 % reserve "
            "by emulation (ParDNN: heuristic I, `infeasible` when it cannot meet memory; † linear clustering "
            f"hit its {args.lc_budget:g} s budget). Graphs from `python -m jobs.paper` (costs estimated on V100, "
            "the paper's 4-GPU batch sizes).", "", *table, ""]
    args.out.write_text("\n".join(text))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
