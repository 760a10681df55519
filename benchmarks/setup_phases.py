"""How long ``pardnn-launch`` takes to get to its first iteration: its setup phases, first run and cached.

    python -m benchmarks.setup_phases                   # every tiny zoo job: section "setup" of RESULTS.md
    python -m benchmarks.setup_phases --jobs wrn-tiny   # some of them

Each tiny job (``jobs/*-tiny.toml``) runs twice on one node (no ``mpirun``), with few iterations:
first with an empty ``NUMBA_CACHE_DIR`` (numba compiles pardnn's kernels: a fresh install's first
run), then again with that cache filled. The phase times are read from the run's ``summary.json``
(``per_node[0].phases_seconds``) and whether a phase ran twice from ``rank-0.jsonl`` (one ``phase``
event per phase). The point of the table: ``compile`` holds numba's compilation, so ``partition``
is about the same on both runs, and the graph is built once (``build``; there is no second build).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks.report import machine_line, write_section

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
JOBS = ("word-rnn-tiny", "char-crn-tiny", "wrn-tiny", "trn-tiny", "e3d-tiny")
PHASES = ("build", "profile", "estimate", "compile", "partition", "apply")
COMMAND = "python -m benchmarks.setup_phases"


def run_once(job: str, out: Path, cache: Path, iterations: int, window: str) -> dict[str, Any]:
    """One ``pardnn-launch`` of ``job`` with numba's cache in ``cache``: its phases and phase counts."""
    env = {**os.environ, "NUMBA_CACHE_DIR": str(cache), "TF_CPP_MIN_LOG_LEVEL": "2"}
    env.pop("PARDNN_EMULATE_NODES", None)
    before = set(out.glob("*/summary.json"))
    started = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "launcher.cli", str(ROOT / "jobs" / f"{job}.toml"),
                           "--iterations", str(iterations), "--window", window, "--out", str(out), "--no-progress"],
                          cwd=ROOT, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - started
    if proc.returncode != 0:
        raise SystemExit(f"{job}: pardnn-launch exited {proc.returncode}: {proc.stderr.strip().splitlines()[-1:]}")
    [summary_path] = set(out.glob("*/summary.json")) - before
    summary = json.loads(summary_path.read_text())
    records = [json.loads(line) for line in (summary_path.parent / "rank-0.jsonl").read_text().splitlines()]
    counts = Counter(r["name"] for r in records if r["event"] == "phase")
    return {"phases": summary["per_node"][0]["phases_seconds"], "counts": dict(counts), "wall": wall,
            "ops": summary["placement"]["ops"], "costs": summary["settings"]["costs"],
            "devices": summary["devices_per_node"]}


def measure(jobs: Sequence[str], iterations: int, window: str, progress: bool) -> list[dict[str, Any]]:
    rows = []
    for job in jobs:
        with tempfile.TemporaryDirectory(prefix="pardnn-setup-") as scratch:
            cache, out = Path(scratch) / "numba-cache", Path(scratch) / "runs"
            cache.mkdir()
            out.mkdir()
            first = run_once(job, out, cache, iterations, window)
            cached = run_once(job, out, cache, iterations, window)
        rows.append({"job": job, "first": first, "cached": cached})
        if progress:
            print(f"{job}: first run {first['wall']:.1f} s (compile {first['phases'].get('compile', 0):.1f} s), "
                  f"cached {cached['wall']:.1f} s", flush=True)
    return rows


def _cell(phases: dict[str, float], name: str) -> str:
    return f"{phases[name]:.2f}" if name in phases else "–"


def render(rows: Sequence[dict[str, Any]], seconds: float, iterations: int, window: str) -> str:
    shown = [p for p in PHASES if any(p in r[run]["phases"] for r in rows for run in ("first", "cached"))]
    lines = ["## Setup phases of pardnn-launch, first run and cached (setup)", "",
             f"{machine_line()}; one node, each job's own devices and costs, --iterations {iterations} "
             f"--window {window}; first run: empty `NUMBA_CACHE_DIR`, cached: the same run again. "
             f"Seconds per phase (`summary.json`); {seconds:.0f} s in all.", "",
             "| job | ops | K | run | " + " | ".join(shown) + " | wall |",
             "|---|---:|---:|---|" + "---:|" * (len(shown) + 1)]
    verdicts = []
    for row in rows:
        for run in ("first", "cached"):
            data = row[run]
            lines.append(f"| {row['job']} | {data['ops']} | {data['devices']} | {run} | "
                         + " | ".join(_cell(data["phases"], p) for p in shown) + f" | {data['wall']:.1f} |")
        first, cached = row["first"]["phases"]["partition"], row["cached"]["phases"]["partition"]
        within = first <= 2 * cached or first - cached <= 0.1
        twice = sorted({name for run in ("first", "cached") for name, n in row[run]["counts"].items() if n > 1})
        verdicts.append((row["job"], within, first, cached, twice))
    lines += ["", "Checks:", ""]
    for job, within, first, cached, twice in verdicts:
        lines.append(f"- {job}: first-run partition {first:.2f} s vs cached {cached:.2f} s: "
                     f"{'within' if within else 'NOT within'} 2× (or 0.1 s); "
                     + ("no phase ran twice" if not twice else f"ran twice: {', '.join(twice)}") + ".")
    everything = all(v[1] for v in verdicts) and not any(v[4] for v in verdicts)
    lines += ["", f"All jobs: first-run partition within 2× of cached and no phase twice: "
                  f"**{'yes' if everything else 'no'}**. numba's compilation is the `compile` phase "
                  "(`pardnn.warmup.warm_up`); the graph is built once (`build`), with the Horovod hook "
                  "when there are several nodes."]
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=COMMAND, description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", nargs="+", default=list(JOBS), help="tiny jobs (default all five)")
    parser.add_argument("--iterations", type=int, default=6)
    parser.add_argument("--window", default="2:5")
    parser.add_argument("--results", default=str(HERE / "RESULTS.md"), help="the file to write the section into")
    parser.add_argument("--quiet", action="store_true")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    rows = measure(args.jobs, args.iterations, args.window, not args.quiet)
    write_section(Path(args.results), "setup", render(rows, time.perf_counter() - started, args.iterations,
                                                      args.window), COMMAND)
    print(f"wrote {args.results}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
