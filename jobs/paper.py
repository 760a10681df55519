"""The paper's ten model configurations at full size: op and parameter counts, DoP and CCR.

``python -m jobs.paper [NAME ...] [--out DIR] [--json FILE]`` builds each paper-size job (graph
mode: nothing is allocated), estimates its costs on the job's device preset (V100-32GB over
NVSwitch), writes the graph file to ``DIR`` (default ``out/graphs``, git-ignored) and prints a
Markdown table beside the paper's Table "Specifications of Models Datasets" and Table "DoP and
CCR". DoP = total work / critical path; CCR = Σ over edges of (latency + bytes / bandwidth) /
total work, at the preset's link (150 GB/s, 25 µs), as ``pardnn info`` computes them.
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

__all__ = ["PAPER", "PAPER_JOBS", "PaperFigures", "measure", "table"]


@dataclass(frozen=True)
class PaperFigures:
    """One row of the paper's tables: graph nodes, parameters (billions), DoP and CCR (per family)."""

    nodes: int
    parameters_billion: float
    dop: float | None
    ccr: float | None


PAPER: dict[str, PaperFigures] = {
    "word-rnn": PaperFigures(10_578, 0.34, 10.45, 14.5),
    "word-rnn-2": PaperFigures(39_074, 1.18, None, None),
    "char-crn": PaperFigures(22_748, 0.23, 49.0, 57.0),
    "char-crn-2": PaperFigures(86_663, 1.09, None, None),
    "wrn": PaperFigures(187_742, 1.91, 1.16, 13.02),
    "wrn-2": PaperFigures(79_742, 3.77, None, None),
    "trn": PaperFigures(204_792, 1.99, 2.0, 13.7),
    "trn-2": PaperFigures(160_518, 5.1, None, None),
    "e3d": PaperFigures(55_756, 0.95, 3.3, 1.12),
    "e3d-2": PaperFigures(55_756, 2.4, None, None),
}
PAPER_JOBS = tuple(PAPER)


def measure(name: str, *, out_dir: Path | None = None, batch_size: int | None = None,
            micro_batches: int = 1) -> dict[str, Any]:
    """Build paper job ``name`` (its batch split into ``micro_batches``), estimate it, and return its
    figures (and write it to ``out_dir``, as ``NAME.json.gz``, or ``NAME-mM.json.gz`` when M > 1)."""
    import tensorflow as tf

    from jobs.config import load_job
    from jobs.training import build, cost_graph
    from pardnn.costs.info import graph_info
    from pardnn.costs.presets import machine_for
    from pardnn.io import write_graph

    job = load_job(name)
    started = time.perf_counter()
    train = build(job, batch_size, micro_batches=micro_batches)
    built = time.perf_counter()
    cost = cost_graph(train, "estimate")
    estimated = time.perf_counter()
    info = graph_info(cost, machine_for(job.device_preset, job.devices_per_node))
    variables = sum(math.prod(v.shape.as_list()) for v in train.variables)
    row = {
        "name": name,
        "batch_size": train.batch_size,
        "micro_batches": micro_batches,
        "step_ops": cost.n,
        "graph_ops": len(train.graph.get_operations()),
        "edges": cost.m,
        "parameters": train.parameters,
        "variables": variables,
        "dop": info["dop"],
        "ccr": info["ccr"],
        "total_work_ms": info["total_work_us"] / 1e3,
        "critical_path_ms": info["critical_path_us"] / 1e3,
        "residual_gib": info["residual_bytes"] / 2**30,
        "build_s": built - started,
        "estimate_s": estimated - built,
        "paper": asdict(PAPER[name]) if name in PAPER else None,
    }
    if out_dir is not None:
        path = out_dir / (f"{name}.json.gz" if micro_batches == 1 else f"{name}-m{micro_batches}.json.gz")
        write_graph(cost, path)
        row["file"] = str(path)
        row["file_mib"] = path.stat().st_size / 2**20
    del train, cost
    tf.compat.v1.reset_default_graph()
    gc.collect()
    return row


def table(rows: Sequence[dict[str, Any]]) -> str:
    """A Markdown table of :func:`measure` rows beside the paper's figures."""
    lines = [
        "| job | batch | step ops (paper nodes) | tf.Graph ops | parameters B (paper) | variables B | "
        "DoP (paper) | CCR (paper) | build + estimate s |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    unknown = PaperFigures(0, 0.0, None, None)
    for row in rows:
        paper = PaperFigures(**row["paper"]) if row["paper"] else unknown
        family = PAPER.get(row["name"].removesuffix("-2"), paper)
        dop_paper = "" if family.dop is None else f" ({family.dop:g})"
        ccr_paper = "" if family.ccr is None else f" ({family.ccr:g})"
        nodes = f" ({paper.nodes:,})" if paper.nodes else ""
        parameters = f" ({paper.parameters_billion:g})" if paper.parameters_billion else ""
        lines.append(
            f"| {row['name']} | {row['batch_size']} | {row['step_ops']:,}{nodes} | {row['graph_ops']:,} "
            f"| {row['parameters'] / 1e9:.2f}{parameters} | {row['variables'] / 1e9:.2f} "
            f"| {row['dop']:.2f}{dop_paper} | {row['ccr']:.2f}{ccr_paper} "
            f"| {row['build_s']:.0f} + {row['estimate_s']:.0f} |")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m jobs.paper", description=__doc__.split("\n\n")[0])
    parser.add_argument("names", nargs="*", default=list(PAPER_JOBS), help="paper jobs (default: all ten)")
    parser.add_argument("--out", type=Path, default=Path("out/graphs"), help="where to write graph files")
    parser.add_argument("--no-write", action="store_true", help="do not write graph files")
    parser.add_argument("--batch-size", type=int, default=None, help="override every job's batch size")
    parser.add_argument("--micro-batches", type=int, default=1, metavar="M",
                        help="split each job's batch into M micro-batches (M copies of the forward and backward "
                             "ops); the files are named NAME-mM.json.gz")
    parser.add_argument("--json", type=Path, default=None, help="also write the rows as JSON")
    args = parser.parse_args(argv)
    out_dir = None if args.no_write else args.out
    if out_dir is not None:
        out_dir.mkdir(parents=True, exist_ok=True)
    rows = []
    for name in args.names:
        row = measure(name, out_dir=out_dir, batch_size=args.batch_size, micro_batches=args.micro_batches)
        print(f"{name}: {row['step_ops']:,} ops, DoP {row['dop']:.2f}, CCR {row['ccr']:.2f}, "
              f"build {row['build_s']:.0f} s, estimate {row['estimate_s']:.0f} s", file=sys.stderr, flush=True)
        rows.append(row)
    print(table(rows))
    if args.json is not None:
        args.json.write_text(json.dumps(rows, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
