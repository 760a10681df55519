"""Pipelined micro-batches on the ten paper graphs: emulated samples/s for M = 1, 2, 4, 8, 16 on K =
2, 4, 8, 16 V100-32GB GPUs, against M = 1 and data parallelism, at each job's batch and memory limit.

    python -m benchmarks.micro build [--models NAME ...] [--out out/micro] [--base out/graphs]
    python -m benchmarks.micro run [--models NAME ...] [--graphs out/micro] [--json FILE]
                                   [--results benchmarks/RESULTS.md]
    python -m benchmarks.micro render --json FILE [--json FILE ...]            # the section from saved rows

**build** writes the steps each model needs (resumable); **run** places them with ``pardnn place``'s
pipeline and writes section "micro-batches". The files, the steps and the rules: docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.report import machine_line, write_section

HERE = Path(__file__).resolve().parent
MODELS = ("word-rnn", "char-crn", "wrn", "trn", "e3d", "word-rnn-2", "char-crn-2", "wrn-2", "trn-2", "e3d-2")
DEVICES = (2, 4, 8, 16)
MICRO = (1, 2, 4, 8, 16)
CHECKED = ("word-rnn", "wrn")  # built whole at M = 4 to check the replication
TARGETS = ("trn", "wrn", "e3d")  # at K = 16 the best M must give >= 2x M = 1's samples/s
SECTION = "micro-batches"


def _batch(name: str) -> int:
    from jobs.config import load_job

    return int(load_job(name).batch_size)


def step_path(out: Path, name: str, batch: int, micro: int) -> Path:
    return out / f"{name}-b{batch}-m{micro}.pardnn"


# ------------------------------------------------------------------ build
def builds(batch: int, checked: bool) -> list[tuple[int, int]]:
    """(batch, M) of every step ``build`` makes for a job of batch ``batch`` (``checked``: also the
    whole step of 4 micro-batches)."""
    wanted = [(batch, 1)]
    wanted += [(2 * (batch // m), 2) for m in MICRO[1:] if batch % m == 0]
    wanted += [(batch // k, 1) for k in DEVICES if batch % k == 0 and k > 1]
    if checked and batch % 4 == 0:
        wanted.append((batch, 4))
    return list(dict.fromkeys(wanted))


def build_step(name: str, batch: int, micro: int, out: Path, base: Path | None = None) -> str:
    """Build and estimate one step; write the graph and its parts. Returns a log line.

    The plain step at the job's batch is read from ``base`` (``python -m jobs.paper``'s
    ``NAME.json.gz``) when it is there: the same build and estimate, already done.
    """
    import tensorflow as tf

    from jobs.config import load_job
    from jobs.training import build
    from pardnn.io import write_graph
    from pardnn.tf.estimate import estimate_parts

    path = step_path(out, name, batch, micro)
    started = time.perf_counter()
    job = load_job(name)
    plain = None if base is None else base / f"{name}.json.gz"
    if micro == 1 and batch == job.batch_size and plain is not None and plain.exists():
        from pardnn.io import read_graph

        write_graph(read_graph(plain), path)
        return f"{path.name}: from {plain}"
    train = build(job, batch, micro_batches=micro)
    parts = estimate_parts(train.graph, train.fetches, job.device_preset, name=path.stem)
    partial = path.with_name(path.stem + ".partial.pardnn")
    np.savez(str(path) + ".parts.npz", flop_ptr=parts.flop_ptr, flop_terms=parts.flop_terms,
             moved_bytes=parts.moved_bytes, kernel=parts.kernel)
    write_graph(parts.graph, partial)
    partial.replace(path)  # the graph last: its presence means the step is done
    line = f"{path.name}: {parts.graph.n:,} ops, {time.perf_counter() - started:.0f} s"
    del train, parts
    tf.compat.v1.reset_default_graph()
    gc.collect()
    return line


def load_parts(path: Path) -> Any:
    """The :class:`~pardnn.batch.batchscale.CostParts` that ``build`` wrote for ``path``."""
    from pardnn.batch.batchscale import CostParts
    from pardnn.io import read_graph

    arrays = np.load(str(path) + ".parts.npz")
    return CostParts(read_graph(path), arrays["flop_ptr"], arrays["flop_terms"], arrays["moved_bytes"],
                     arrays["kernel"])


# ------------------------------------------------------------------ run
def _place(graph: Any, machine: Any) -> dict[str, Any]:
    from pardnn import partition
    from pardnn.errors import PardnnError

    started = time.perf_counter()
    try:
        result = partition(graph, machine)
    except PardnnError as exc:
        return {"fits": False, "error": str(exc).splitlines()[0][:200], "seconds": time.perf_counter() - started}
    evaluation = result.report.evaluation
    guard = result.report.details.get("guard")
    return {"fits": bool(evaluation.memory_fits), "step_us": float(evaluation.makespan_us),
            "peak_bytes": int(max(evaluation.peak_memory_bytes)),
            "winner": None if guard is None else guard.winner, "seconds": time.perf_counter() - started}


def run_model(name: str, graphs: Path, note: Any) -> dict[str, Any]:
    """Every (K, M) cell, data parallelism per K, and the replication check of one model."""
    from jobs.config import load_job
    from jobs.maxbatch import job_machine
    from pardnn.batch.maxbatch import data_parallel_fits
    from pardnn.batch.replicate import difference, replicate
    from pardnn.costs.presets import preset
    from pardnn.io import read_graph

    job = load_job(name)
    batch = int(job.batch_size)
    device = preset(job.device_preset)

    def machine(k: int) -> Any:
        return job_machine(job.device_preset, k, job.memory, job.reserve)

    row: dict[str, Any] = {"model": name, "batch": batch, "cells": [], "dp": {}, "check": None}
    for micro in MICRO:
        if batch % micro:
            continue
        if micro <= 2:
            graph = read_graph(step_path(graphs, name, batch, micro))
        else:
            graph = replicate(load_parts(step_path(graphs, name, 2 * (batch // micro), 2)), micro, device)
        whole = step_path(graphs, name, batch, micro)
        if micro == 4 and whole.exists():  # the check: the step just written down against the one built whole
            row["check"] = difference(read_graph(whole), graph) or "equal"
            note(f"{name}: M = 4 built whole against replicated: {row['check']}")
        for k in DEVICES:
            cell = {"devices": k, "micro_batches": micro, "ops": graph.n, **_place(graph, machine(k))}
            row["cells"].append(cell)
            step = cell.get("step_us")
            note(f"{name} K={k} M={micro}: {graph.n:,} ops, "
                 + (f"{step / 1e3:.2f} ms, {'fits' if cell['fits'] else 'over'}, {cell['winner']}" if step else
                    f"no placement: {cell['error']}") + f" ({cell['seconds']:.0f} s)")
        del graph
        gc.collect()
    for k in DEVICES:
        if batch % k:
            continue
        fits, peak, step = data_parallel_fits(read_graph(step_path(graphs, name, batch // k, 1)), machine(k))
        row["dp"][str(k)] = {"fits": bool(fits), "peak_bytes": int(peak), "step_us": float(step)}
        note(f"{name} K={k} data parallelism: {step / 1e3:.2f} ms at {batch // k} per replica, "
             f"{'fits' if fits else 'over'}")
    return row


# ------------------------------------------------------------------ render
def _auto(cells: Sequence[dict[str, Any]], batch: int) -> int | None:
    """The M ``--micro-batches auto`` picks from these cells (None: none fits)."""
    from pardnn.plan.search import Plan, Trial, choose

    trials = [Trial(Plan(c["devices"], c["micro_batches"], c["devices"]), batch,
                    "fits" if c["fits"] and not c.get("error") and c.get("step_us") else "does_not_fit",
                    step_us=c.get("step_us")) for c in cells]
    chosen = choose(trials)
    return None if chosen is None else chosen.plan.micro_batches


def _rate(cell: dict[str, Any] | None, batch: int) -> float | None:
    if cell is None or not cell.get("fits") or not cell.get("step_us"):
        return None
    return batch / (cell["step_us"] * 1e-6)


def _figure(rate: float) -> str:
    """Samples/s to three significant figures (whole numbers from 100 on)."""
    return f"{rate:,.0f}" if rate >= 100 else f"{rate:.3g}"


def render(rows: Sequence[dict[str, Any]], command: str, seconds: float) -> str:
    finished = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    lines = [f"## Pipelined micro-batches on the paper graphs ({SECTION})", "",
             f"Commands: `python -m benchmarks.micro build`, then `{command}` ({seconds:.0f} s of placing in all, "
             f"finished {finished}). Machine: {machine_line()}.",
             "", "Each cell: emulated samples/s (the job's batch B / the emulated step) of the step of M "
             "micro-batches of B / M, placed by `pardnn place` on K V100-32GB (32 GiB, 10 % reserve, 150 GB/s); "
             "`over`: no placement fits. *best / M=1*: the fastest fitting M against M = 1 (`-` when M = 1 "
             "does not fit). *DP*: data parallelism's ceiling (K replicas of the plain step at B / K, no "
             "allreduce time), `over` when that step does not fit one GPU, `-` when K does not divide B. "
             "*auto*: the M `--micro-batches auto` picks (the launcher's rule on these emulations). "
             "*pipeline*: the Ms whose kept placement is the pipeline candidate's.", "",
             "| model | B | K | M=1 | M=2 | M=4 | M=8 | M=16 | best / M=1 | DP | auto | pipeline |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    verdicts: list[str] = []
    auto_below = 0
    pipeline_wins = 0
    cells_total = 0
    for row in rows:
        batch = row["batch"]
        for k in DEVICES:
            cells = sorted((c for c in row["cells"] if c["devices"] == k), key=lambda c: c["micro_batches"])
            by_m = {c["micro_batches"]: c for c in cells}
            texts = []
            for m in MICRO:
                cell = by_m.get(m)
                rate = _rate(cell, batch)
                texts.append("" if cell is None else ("over" if rate is None else _figure(rate)))
            rates = {m: _rate(c, batch) for m, c in by_m.items()}
            fitting = {m: r for m, r in rates.items() if r is not None}
            best = max(fitting.values(), default=None)
            ratio = None if best is None or rates.get(1) is None else best / rates[1]  # type: ignore[operator]
            chosen = _auto(cells, batch)
            if chosen is not None and rates.get(1) is not None and (rates.get(chosen) or 0) < rates[1]:  # type: ignore[operator]
                auto_below += 1
            dp = row["dp"].get(str(k))
            dp_text = "-" if dp is None else ("over" if not dp["fits"] else _figure(batch / (dp["step_us"] * 1e-6)))
            wins = [str(c["micro_batches"]) for c in cells if c.get("winner") == "pipeline" and c["fits"]]
            pipeline_wins += len(wins)
            cells_total += sum(1 for c in cells if c["micro_batches"] > 1)
            lines.append(f"| {row['model']} | {batch} | {k} | " + " | ".join(texts)
                         + f" | {'-' if ratio is None else f'{ratio:.2f}'} | {dp_text} | "
                         f"{'none fits' if chosen is None else chosen} | {', '.join(wins) or '-'} |")
            if k == 16 and row["model"] in TARGETS:
                met = ratio is not None and ratio >= 2.0
                verdicts.append(f"{row['model']}: {'-' if ratio is None else f'{ratio:.2f}x'} "
                                f"({'met' if met else '**missed**'})")
    checks = [f"{row['model']}: {row['check']}" for row in rows if row.get("check")]
    lines += ["", f"Target, K = 16, best M >= 2x M = 1: {'; '.join(verdicts) or 'no target model in this run'}.",
              f"`auto` below M = 1: {auto_below} of {len(rows) * len(DEVICES)} (target 0). The pipeline "
              f"candidate's placement was kept in {pipeline_wins} of {cells_total} cells with M >= 2.",
              "Replication check (M = 4 built whole against the M = 2 step replicated): "
              f"{'; '.join(checks) or 'none run'}."]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.micro", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    b = sub.add_parser("build", help="build the micro-batched steps in TensorFlow (resumable)")
    r = sub.add_parser("run", help="place every (model, K, M) and write the section")
    s = sub.add_parser("render", help="write the section from saved rows (--json of one or more runs)")
    for p in (b, r):
        p.add_argument("--models", nargs="+", default=list(MODELS), metavar="JOB",
                       help="jobs (default: the ten paper models)")
    b.add_argument("--out", type=Path, default=Path("out/micro"), help="where to write the steps")
    b.add_argument("--base", type=Path, default=Path("out/graphs"),
                   help="the plain graphs of python -m jobs.paper, used for M = 1 when there")
    b.add_argument("--check", nargs="*", default=list(CHECKED), metavar="JOB",
                   help="jobs also built whole at M = 4, to check the replication (default: word-rnn wrn)")
    r.add_argument("--graphs", type=Path, default=Path("out/micro"), help="the steps `build` wrote")
    r.add_argument("--json", type=Path, default=None, help="also save the rows (for render)")
    s.add_argument("--json", type=Path, nargs="+", required=True, help="rows saved by run --json")
    for p in (r, s):
        p.add_argument("--results", default=str(HERE / "RESULTS.md"), help="the file to write the section into")
    args = parser.parse_args(argv)
    if args.command == "build":
        args.out.mkdir(parents=True, exist_ok=True)
        for name in args.models:
            for batch, micro in builds(_batch(name), name in args.check):
                if not step_path(args.out, name, batch, micro).exists():
                    line = build_step(name, batch, micro, args.out, args.base)
                    print(f"benchmarks.micro: {line}", file=sys.stderr, flush=True)
        return 0
    if args.command == "render":
        saved = [json.loads(path.read_text()) for path in args.json]
        rows = [row for run in saved for row in run["rows"]]
        order = {name: i for i, name in enumerate(MODELS)}
        rows.sort(key=lambda row: order.get(row["model"], len(order)))
        command = "`, `".join(run["command"] for run in saved)  # runs side by side, one per process
        write_section(Path(args.results), SECTION, render(rows, command, sum(run["seconds"] for run in saved)),
                      "python -m benchmarks.micro")
        print(f"wrote {args.results}")
        return 0
    started = time.perf_counter()
    rows = []
    command = "python -m benchmarks.micro run" + ("" if args.models == list(MODELS) else
                                                  " --models " + " ".join(args.models))
    for name in args.models:
        rows.append(run_model(name, args.graphs,
                              lambda line: print(f"benchmarks.micro: {line}", file=sys.stderr, flush=True)))
        if args.json is not None:  # after each model: an interrupted run keeps what it finished
            seconds = time.perf_counter() - started
            args.json.write_text(json.dumps({"command": command, "seconds": seconds, "rows": rows}, indent=1) + "\n")
    seconds = time.perf_counter() - started
    write_section(Path(args.results), SECTION, render(rows, command, seconds), "python -m benchmarks.micro")
    print(f"wrote {args.results}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
