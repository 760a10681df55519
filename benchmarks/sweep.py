"""Bandwidth sweep: ParDNN against the cheap placements from fast links to communication-bound ones.

    python -m jobs.paper --out out/graphs          # the paper's ten model graphs (a few minutes)
    python -m benchmarks.sweep out/graphs          # then this (a few minutes on 2 cores)

For every model graph, K and interconnect bandwidth (150 GB/s, NVSwitch, down to 1 GB/s, where
almost every graph is communication-bound), no memory limit, 25 us per transfer: the emulated
makespan of ParDNN as `partition()` returns it (the paper's Steps 1-2, the guard, the refinement and
the run order),
of the paper's algorithm alone (``**PAPER``) and of every cheap placement (one device,
contiguous topological split, round robin, critical path, METIS). Writes the section ``sweep`` of
``benchmarks/RESULTS.md``: per bandwidth, how often each ParDNN is strictly faster and how often
slower than a cheap placement (ParDNN as it ships: never, by construction, since its guard keeps the
fastest of them; the paper's algorithm alone: by up to how much), and the geometric mean of each over
the best cheap placement. It also runs ParDNN without its run-order stage (``ordered=False``: every device in
order of readiness) and reports what the stage buys: ParDNN's makespan over that one's.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from benchmarks.report import machine_line, write_section
from pardnn import Machine, partition
from pardnn.errors import MissingDependencyError
from pardnn.io import read_any_graph
from pardnn.partitioner import PAPER
from pardnn.registry import PLACERS

HERE = Path(__file__).resolve().parent
CHEAP = tuple(name for name, placer in PLACERS.items() if placer.cheap)  # the guard's candidates
BANDWIDTHS_GBPS = (150.0, 50.0, 16.0, 4.0, 1.0)
SECTION = "sweep"


def measure(paths: Sequence[Path], ks: Sequence[int], bandwidths: Sequence[float]) -> list[dict[str, object]]:
    """One row per (graph, K, bandwidth): ParDNN's, the paper's and each cheap placement's makespan (us)."""
    rows: list[dict[str, object]] = []
    for path in paths:
        graph = read_any_graph(path)
        for k in ks:
            for gbps in bandwidths:
                machine = Machine(k, bandwidth=gbps * 1e9, latency=25.0)
                row: dict[str, object] = {"graph": graph.name, "ops": graph.n, "k": k, "gbps": gbps}
                result = partition(graph, machine)
                row["pardnn"] = result.report.evaluation.makespan_us
                row["unordered"] = partition(graph, machine, ordered=False).report.evaluation.makespan_us
                row["order_kept"] = result.order is not None
                row["paper"] = partition(graph, machine, **PAPER).report.evaluation.makespan_us
                for name in CHEAP:
                    try:
                        row[name] = PLACERS[name](graph, machine).report.evaluation.makespan_us
                    except MissingDependencyError:
                        row[name] = None
                rows.append(row)
                best = min(v for n in CHEAP if isinstance(v := row[n], float))
                print(f"sweep: {graph.name} K={k} {gbps:g} GB/s: ParDNN {row['pardnn'] / best:.3f}, "
                      f"paper {row['paper'] / best:.3f} of the best cheap placement", file=sys.stderr, flush=True)
    return rows


def render(rows: Sequence[dict[str, object]], command: str, seconds: float) -> str:
    ks = ", ".join(str(k) for k in sorted({int(r["k"]) for r in rows}))  # type: ignore[call-overload]
    lines = [f"## Bandwidth sweep on the model graphs ({SECTION})", "",
             f"Command: `{command}` ({seconds:.0f} s). Machine: {machine_line()}.", "",
             f"{len({r['graph'] for r in rows})} graphs × K = {ks} "
             "× bandwidth, no memory limit, 25 us per transfer. *ParDNN* is `partition()` as it ships "
             "(Steps 1-2, guard, refinement, run order); *paper* is Steps 1-2 alone (`-a pardnn-paper`). Each is "
             "compared with every cheap "
             f"placement ({', '.join(CHEAP)}; METIS when installed) on the same emulator: *faster* counts the "
             "comparisons it wins strictly, *slower* those it loses, *worst* is its largest makespan / that "
             "placement's, *geomean* its makespan over the best cheap placement's (below 1: faster than all of "
             "them).", "",
             "| bandwidth | cases | ParDNN faster | ParDNN slower | ParDNN geomean | paper faster | paper slower "
             "| paper worst | paper geomean |", "|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    totals = {who: {"faster": 0, "slower": 0, "of": 0, "worst": 0.0} for who in ("pardnn", "paper")}
    for gbps in sorted({float(r["gbps"]) for r in rows}, reverse=True):
        at = [r for r in rows if r["gbps"] == gbps]
        cells = [f"{gbps:g} GB/s", str(len(at))]
        for who in ("pardnn", "paper"):
            ratios = [float(r[who]) / float(r[n]) for r in at for n in CHEAP if isinstance(r[n], float) and r[n] > 0]
            best = [float(r[who]) / min(float(r[n]) for n in CHEAP if isinstance(r[n], float)) for r in at]
            total = totals[who]
            faster, slower = sum(x < 1 - 1e-9 for x in ratios), sum(x > 1 + 1e-9 for x in ratios)
            total["faster"] += faster
            total["slower"] += slower
            total["of"] += len(ratios)
            total["worst"] = max(total["worst"], max(ratios))
            cells += [f"{faster} of {len(ratios)}", f"{slower} of {len(ratios)}"]
            cells += [f"{max(ratios):.3f}"] if who == "paper" else []
            cells.append(f"{_geomean(best):.3f}")
        lines.append("| " + " | ".join(cells) + " |")
    ours, paper = totals["pardnn"], totals["paper"]
    lines += ["", f"ParDNN is never slower than a cheap placement *by construction*, not as a finding: its guard "
                  f"emulates those placements on this emulator and keeps the fastest (slower here in {ours['slower']} "
                  f"of {ours['of']} comparisons; anything but 0 is a bug). What it buys is the margin: strictly "
                  f"faster in {ours['faster']} of {ours['of']}. The paper's algorithm alone is strictly faster in "
                  f"{paper['faster']} and slower in {paper['slower']} of {paper['of']}, by up to "
                  f"{paper['worst']:.3f}×.", ""]
    return "\n".join(lines + _order_lines(rows))


def _order_lines(rows: Sequence[dict[str, object]]) -> list[str]:
    # ParDNN over ParDNN without its run-order stage, per bandwidth.
    lines = ["What the run-order stage buys: ParDNN's makespan over ParDNN's with `--no-run-order` (every device "
             "in order of readiness, as TensorFlow's executor runs it); below 1 the kept order shortens the step. "
             "The stage keeps an order only when it is strictly shorter, so no ratio is above 1.", "",
             "| bandwidth | cases | order kept | geomean | best | shorter by > 5 % |",
             "|---:|---:|---:|---:|---:|---:|"]
    everything: list[float] = []
    for gbps in sorted({float(r["gbps"]) for r in rows}, reverse=True):
        at = [r for r in rows if r["gbps"] == gbps]
        ratios = [float(r["pardnn"]) / float(r["unordered"]) for r in at]
        everything += ratios
        lines.append(f"| {gbps:g} GB/s | {len(ratios)} | {sum(bool(r['order_kept']) for r in at)} | "
                     f"{_geomean(ratios):.3f} | {min(ratios):.3f} | {sum(x < 0.95 for x in ratios)} |")
    best = min(rows, key=lambda r: float(r["pardnn"]) / float(r["unordered"]))
    kept = sum(bool(r["order_kept"]) for r in rows)
    ratio = float(best["pardnn"]) / float(best["unordered"])
    lines += ["", f"Over all {len(everything)} cases: an order kept in {kept}, geomean {_geomean(everything):.3f}, "
                  f"the best {ratio:.3f} ({best['graph']}, K = {best['k']}, {float(best['gbps']):g} GB/s); above 1 in "
                  f"{sum(x > 1 + 1e-9 for x in everything)}.", ""]
    return lines


def _geomean(values: Sequence[float]) -> float:
    return math.exp(sum(math.log(x) for x in values) / len(values))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("graphs", type=Path, help="directory of graph files (*.json.gz), e.g. out/graphs")
    parser.add_argument("--devices", type=int, nargs="+", default=[2, 4, 8, 16])
    parser.add_argument("--bandwidths", type=float, nargs="+", default=list(BANDWIDTHS_GBPS), help="GB/s")
    parser.add_argument("--out", type=Path, default=HERE / "RESULTS.md", help="the results file (section 'sweep')")
    args = parser.parse_args(argv)
    paths = sorted(args.graphs.glob("*.json.gz"))
    if not paths:
        print(f"{args.graphs}: no *.json.gz graphs; run python -m jobs.paper --out {args.graphs} first",
              file=sys.stderr)
        return 1
    started = time.perf_counter()
    rows = measure(paths, args.devices, args.bandwidths)
    command = "python -m benchmarks.sweep " + " ".join(sys.argv[1:] if argv is None else argv)
    write_section(args.out, SECTION, render(rows, command.strip(), time.perf_counter() - started),
                  "python -m benchmarks.sweep")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
