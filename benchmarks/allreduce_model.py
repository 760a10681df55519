"""The allreduce model against Horovod: measured allreduce times beside what the model says.

:mod:`pardnn.emulation.allreduce` prices each step's gradient allreduce (a hierarchical ring per fused
buffer, one buffer at a time per rank). This benchmark measures Horovod's allreduce under ``mpirun
-np N`` on this machine (each rank stands for a node, as the launcher's tests run them), for one
tensor (*single*) and for ``FUSED_TENSORS`` tensors of the same total submitted in one
``Session.run`` (*fused*: Horovod packs them into its fusion buffer), 4 KiB to 256 MiB in all, and
sets the model beside it with the ``cpu-2core`` preset's network and ring-step latency.

The preset's two constants (``pardnn.costs.presets.CPU_NETWORK_BPS``, ``CPU_STEP_LATENCY_US``) are
fitted here, by least squares on the ``-np 2`` single rows only (time = ring bytes / bandwidth + ring
steps × latency + one cycle: the timed tensors are submitted just after the line-up allreduce,
whose cycle began an instant before, so they wait for the next, 1 ms later); every other row is a
prediction. The section prints the fit, so a change of machine shows as a fit that no longer
matches the preset.

Usage: ``python -m benchmarks.allreduce_model [--ranks 2 4]`` (a few minutes here, horovod needed);
writes the section ``allreduce-model`` of ``benchmarks/RESULTS.md``. ``--worker`` is the part mpirun
runs on every rank.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from benchmarks import allreduce_host
from pardnn.costs.presets import CPU_NETWORK_BPS, CPU_STEP_LATENCY_US, preset
from pardnn.emulation.allreduce import CYCLE_US, Cluster, fused_channel

ROOT = Path(__file__).resolve().parents[1]
SIZES = tuple(4 << (10 + 2 * i) for i in range(9))  # 4 KiB, 16 KiB, ..., 256 MiB (x4)
FUSED_TENSORS = 64
REPEATS = 7
SECTION = "allreduce-model"


def _size(nbytes: int) -> str:
    for unit, shift in (("MiB", 20), ("KiB", 10)):
        if nbytes >= 1 << shift:
            return f"{nbytes / (1 << shift):g} {unit}"
    return f"{nbytes} B"


def worker(sizes: Sequence[int]) -> None:
    """On every rank: time Horovod's allreduce of each size, single and fused; rank 0 prints JSON lines."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import horovod.tensorflow as hvd
    import tensorflow as tf

    tf.compat.v1.disable_eager_execution()
    hvd.init()
    config = tf.compat.v1.ConfigProto(intra_op_parallelism_threads=1, inter_op_parallelism_threads=2)
    # Grappler off: nothing rewrites or prunes the allreduces timed.
    config.graph_options.rewrite_options.disable_meta_optimizer = True
    for nbytes in sizes:
        for mode, count in (("single", 1), ("fused", FUSED_TENSORS)):
            per = max(1, nbytes // 4 // count)
            graph = tf.Graph()
            with graph.as_default():
                values = [tf.compat.v1.Variable(tf.ones([per]), name=f"v{i}") for i in range(count)]
                summed = [hvd.allreduce(v, op=hvd.Sum, name=f"{mode}_{nbytes}_{i}") for i, v in enumerate(values)]
                # Fetch a value of every result, so that each allreduce runs and completes in the timed call.
                step = tf.add_n([tensor[0] for tensor in summed])
                line_up = hvd.allreduce(tf.ones([1]), op=hvd.Sum, name=f"line_up_{mode}_{nbytes}")
                check = summed[0][0]
                init = tf.compat.v1.global_variables_initializer()
            with tf.compat.v1.Session(graph=graph, config=config) as session:
                session.run(init)
                session.run(step)  # warm-up: the fusion buffer and the ranks' first negotiation
                times = []
                for _ in range(REPEATS):
                    session.run(line_up)
                    began = time.perf_counter()
                    session.run(step)
                    times.append(time.perf_counter() - began)
                assert session.run(check) == hvd.size(), "the allreduce did not sum"
            if hvd.rank() == 0:
                print(json.dumps({"ranks": hvd.size(), "bytes": per * count * 4, "mode": mode, "tensors": count,
                                  "seconds": statistics.median(times)}), flush=True)


def run_ranks(ranks: int, sizes: Sequence[int]) -> list[dict]:
    """The worker's rows under ``mpirun -np ranks``."""
    return allreduce_host.run_ranks(ranks, sizes, module="benchmarks.allreduce_model", timeout=3000)


def model_us(row: dict, network_Bps: float, latency_us: float) -> float:
    """The model's time for one measured row: the fused buffers of its tensors, all ready at once, on
    one rank's channel, after the wait for the next cycle (module docstring)."""
    cluster = Cluster(nodes=row["ranks"], replicas_per_node=1, network_Bps=network_Bps,
                      network_latency_us=latency_us, cycle_us=0.0, copy_Bps=preset("cpu-2core").memory_bandwidth_Bps)
    per = row["bytes"] // row["tensors"]
    done, _, _ = fused_channel(np.zeros(row["tensors"]), np.full(row["tensors"], per), cluster)
    return float(done.max()) + CYCLE_US


def fit(rows: list[dict]) -> tuple[float, float]:
    """``(network_Bps, latency_us)`` by least squares on the 2-rank single rows (module docstring)."""
    chosen = [r for r in rows if r["ranks"] == 2 and r["mode"] == "single"]
    if len(chosen) < 2:
        raise SystemExit("the fit needs the -np 2 single rows: run with --ranks 2 ...")
    ring = np.array([[2 * (r["ranks"] - 1) / r["ranks"] * r["bytes"] / 1e6, 2 * (r["ranks"] - 1)] for r in chosen])
    measured = np.array([r["seconds"] * 1e6 - CYCLE_US for r in chosen])
    # Relative errors: weight each row by 1 / its whole time, so that 4 KiB counts as much as 256 MiB.
    weight = 1 / np.array([r["seconds"] * 1e6 for r in chosen])
    (inverse_rate, latency), *_ = np.linalg.lstsq(ring * weight[:, None], measured * weight, rcond=None)
    return 1e12 / max(inverse_rate, 1e-12), max(float(latency), 0.0)  # µs per MB -> bytes/s


def table(rows: list[dict], network_Bps: float, latency_us: float) -> tuple[str, list[float]]:
    lines = ["| ranks | bytes | tensors | measured | model | model / measured |", "|---:|---:|---:|---:|---:|---:|"]
    ratios = []
    for row in rows:
        modelled = model_us(row, network_Bps, latency_us)
        ratio = modelled / (row["seconds"] * 1e6)
        ratios.append(ratio)
        lines.append(f"| {row['ranks']} | {_size(row['bytes'])} | {row['tensors']} | {row['seconds'] * 1e3:.3f} ms | "
                     f"{modelled / 1e3:.3f} ms | {ratio:.2f} |")
    return "\n".join(lines), ratios


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.allreduce_model", description=__doc__.split("\n")[0])
    parser.add_argument("--ranks", type=int, nargs="+", default=[2, 4], help="mpirun -np for each run (default 2 4)")
    parser.add_argument("--sizes", type=int, nargs="+", default=list(SIZES),
                        help="bytes per step (default 4 KiB..256 MiB)")
    parser.add_argument("--results", type=Path, default=ROOT / "benchmarks" / "RESULTS.md")
    parser.add_argument("--no-write", action="store_true", help="print the section instead of writing it")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        worker(args.sizes)
        return 0
    from benchmarks.report import machine_line, write_section

    began = time.perf_counter()
    rows = [row for ranks in args.ranks for row in run_ranks(ranks, args.sizes)]
    fitted_bps, fitted_latency = fit(rows)
    text_table, ratios = table(rows, CPU_NETWORK_BPS, CPU_STEP_LATENCY_US)
    predicted = [ratio for row, ratio in zip(rows, ratios, strict=True)
                 if not (row["ranks"] == 2 and row["mode"] == "single")]
    command = "python -m benchmarks.allreduce_model" + (
        "" if args.ranks == [2, 4] else " --ranks " + " ".join(map(str, args.ranks)))
    body = [
        f"## The allreduce model against Horovod ({SECTION})", "",
        f"Command: `{command}` ({time.perf_counter() - began:.0f} s, finished "
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}). Machine: {machine_line()}.", "",
        f"Horovod's allreduce (sum) under `mpirun -np N` on this machine, each rank standing for a node: one tensor "
        f"(1), or {FUSED_TENSORS} tensors of the same total in one `Session.run` (fused by Horovod); medians of "
        f"{REPEATS} runs on rank 0 after a warm-up, the ranks lined up by a one-float allreduce before each. "
        "*model*: `pardnn.emulation.allreduce` with the `cpu-2core` preset (network "
        f"{CPU_NETWORK_BPS / 1e9:g} GB/s, {CPU_STEP_LATENCY_US:g} µs per ring step), plus the wait for Horovod's next "
        "cycle (1 ms). Fitted to the 2-rank single "
        f"rows now: {fitted_bps / 1e9:.2f} GB/s, {fitted_latency:.1f} µs per step (the preset's constants come from "
        "such a fit). Over the rows the fit did not see "
        f"({len(predicted)}), model / measured is {min(predicted):.2f} to {max(predicted):.2f} "
        f"(geometric mean {float(np.exp(np.mean(np.log(predicted)))):.2f}).", "",
        text_table]
    text = "\n".join(body) + "\n"
    if args.no_write:
        print(text)
    else:
        write_section(args.results, SECTION, text, command)
        print(f"wrote section {SECTION} of {args.results}")
    print(f"fitted: network {fitted_bps / 1e9:.3f} GB/s, {fitted_latency:.2f} us per ring step", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
