"""How far does estimating mislead? Estimated against profiled op times, and what that does to placement.

    python -m benchmarks.estimate_vs_profile              # section "estimate" of RESULTS.md
    python -m benchmarks.estimate_vs_profile --calibrate  # measure this machine's CPU preset numbers

``pardnn-launch`` and ``pardnn capture`` cost a step either by *profiling* it (running a few traced
steps: the truth, but it needs the hardware) or by *estimating* it (a roofline time per op from a
device preset: no hardware, no allocation). For each model — the zoo's tiny jobs and the two Keras
user models of ``examples/`` — this benchmark builds the training step once, profiles it on one
logical CPU device and estimates it with the ``cpu-2core`` preset (this machine's measured FLOP/s and
memory bandwidth, so the two describe the same device), and reports:

- per-op time: Spearman's rank correlation between estimated and profiled times over the ops both
  cost (ops the trace does not show, e.g. ``NoOp``, are left out), and the median and the 10th/90th
  percentiles of estimated / profiled;
- placement: ParDNN places the step on K = 4 devices of the preset's machine once with the profiled
  costs and once with the estimated ones, and both placements are emulated with the *profiled*
  costs: ``estimated-cost placement / profiled-cost placement`` is what estimating costs the step
  (1.00: nothing; the profiled one is not guaranteed optimal, so a ratio can fall below 1).

Profiles on a shared 2-core machine are noisy: the op times are trimmed means over the steps
(:func:`pardnn.tf.profile.profile`), and the ratios, not the seconds, are the result.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.report import machine_line, write_section
from pardnn import Machine, partition
from pardnn.costs.presets import preset
from pardnn.emulation.simulate import evaluate

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
PRESET = "cpu-2core"
DEVICES = 4
CHAIN = 1000  # scalar adds in a row, traced: the per-op floor of profiled times
MODELS = ("word-rnn-tiny", "char-crn-tiny", "wrn-tiny", "trn-tiny", "e3d-tiny",
          str(ROOT / "examples" / "keras_cnn" / "job.toml"), str(ROOT / "examples" / "keras_transformer" / "job.toml"))


def _label(model: str) -> str:
    path = Path(model)
    return path.parent.name if path.suffix == ".toml" else model


def compare(model: str, steps: int) -> dict[str, Any]:
    """Build ``model``'s step once, profile and estimate it, and compare (module docstring)."""
    import jobs
    from jobs.costing import cost_graph

    job = jobs.load_job(model)
    train = jobs.build(job)
    profiled = cost_graph(train, "profile", profile_steps=steps, memory_bytes=None)
    estimated = cost_graph(train, "estimate", device_preset=PRESET, memory_bytes=None)
    shared = sorted(set(profiled.names) & set(estimated.names))
    p_index, e_index = profiled.index, estimated.index
    p_us = np.array([profiled.comp_us[p_index[name]] for name in shared])
    e_us = np.array([estimated.comp_us[e_index[name]] for name in shared])
    free = (e_us == 0) & (p_us > 0)  # metadata ops: no kernel in the estimate, still a few µs traced
    seen = (p_us > 0) & (e_us > 0)
    from scipy.stats import spearmanr

    rho = float(spearmanr(e_us[seen], p_us[seen]).statistic) if seen.sum() > 2 else float("nan")
    ratio = e_us[seen] / p_us[seen]
    spec = preset(PRESET)
    machine = Machine(DEVICES, bandwidth=spec.link_bandwidth_Bps, latency=f"{spec.latency_us}us")
    # Both placements are judged with the profiled costs, on the profiled graph's ops.
    by_profile = partition(profiled, machine).placement
    by_estimate_own = partition(estimated, machine).placement
    by_estimate = np.array([by_estimate_own[e_index[name]] if name in e_index else 0 for name in profiled.names])
    truth_profile = evaluate(profiled, machine, by_profile).makespan_us
    truth_estimate = evaluate(profiled, machine, by_estimate).makespan_us
    return {"model": _label(model), "ops": profiled.n, "compared": int(seen.sum()), "rho": rho,
            "free": int(free.sum()), "free_share": float(p_us[free].sum() / p_us.sum()) if p_us.sum() else 0.0,
            "median": float(np.median(ratio)), "p10": float(np.percentile(ratio, 10)),
            "p90": float(np.percentile(ratio, 90)), "sum_profiled_us": float(p_us.sum()),
            "sum_estimated_us": float(e_us.sum()), "makespan_profiled_us": truth_profile,
            "makespan_estimated_us": truth_estimate, "placement_ratio": truth_estimate / truth_profile}


def render(rows: list[dict[str, Any]], seconds: float, command: str, steps: int) -> str:
    spec = preset(PRESET)
    lines = ["## Estimated against profiled costs (estimate)", "",
             f"Command: `{command}` ({seconds:.0f} s). Machine: {machine_line()}.", "",
             f"Each model's training step profiled ({steps} traced steps on one logical CPU device, trimmed means) "
             f"and estimated with the `{PRESET}` preset ({spec.description}: {spec.peak_flops / 1e9:.0f} GFLOP/s, "
             f"{spec.memory_bandwidth_Bps / 1e9:.1f} GB/s, {spec.launch_us:g} µs per op). Per op: Spearman's ρ "
             "between the two times and estimated / profiled (median, 10th-90th percentile) over the ops both "
             "give a time (*compared*); *free* are the ops the estimate costs 0 (metadata: `Const`, `Identity`, "
             "`Reshape`, `ReadVariableOp`... launch no kernel) that the trace still charges, with their share of "
             f"the profiled step. Placement: ParDNN on K = {DEVICES} with each cost source, both placements "
             "emulated with the profiled costs; the last column is what placing from estimates costs the step.", "",
             "| model | ops | compared | ρ | est / prof median | p10-p90 | free (share) | step sum est / prof "
             "| makespan, profiled costs | with estimated costs | ratio |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(f"| {r['model']} | {r['ops']:,} | {r['compared']:,} | {r['rho']:.2f} | {r['median']:.2f} | "
                     f"{r['p10']:.2f}-{r['p90']:.2f} | {r['free']:,} ({100 * r['free_share']:.0f} %) | "
                     f"{r['sum_estimated_us'] / r['sum_profiled_us']:.2f} | "
                     f"{r['makespan_profiled_us'] / 1e3:.2f} ms | {r['makespan_estimated_us'] / 1e3:.2f} ms | "
                     f"{r['placement_ratio']:.3f} |")
    if rows:
        rhos = [r["rho"] for r in rows]
        ratios = [r["placement_ratio"] for r in rows]
        lines += ["", f"Over the {len(rows)} models: ρ from {min(rhos):.2f} to {max(rhos):.2f} (median "
                  f"{statistics.median(rhos):.2f}); placing from estimates gives a step {min(ratios):.3f}-"
                  f"{max(ratios):.3f}× as long as placing from profiles (median {statistics.median(ratios):.3f})."]
    return "\n".join(lines)


def calibrate(repeats: int = 5) -> dict[str, float]:
    """This machine's CPU as a preset: TensorFlow's FLOP/s on a large matmul, its bytes/s on a large
    elementwise add (read 2, write 1), and the traced time of a scalar add (what the profiler charges a
    trivial op: the floor of every op's time); one logical device, graph mode, best of ``repeats`` runs."""
    import tensorflow as tf

    v1 = tf.compat.v1
    graph = tf.Graph()
    with graph.as_default():
        a = tf.random.normal([2048, 2048])
        b = tf.random.normal([2048, 2048])
        x = tf.random.normal([32 * 1024 * 1024])
        y = tf.random.normal([32 * 1024 * 1024])
        matmul = tf.reduce_sum(tf.matmul(a, b))
        add = tf.reduce_sum(x + y)
        scalar = v1.placeholder(tf.float32, [])
        one = scalar + 1.0
        chain = one
        for _ in range(CHAIN - 1):
            chain = chain + 1.0
        inputs = [a, b, x, y]
    from tensorflow.core.protobuf import rewriter_config_pb2

    config = v1.ConfigProto(device_count={"CPU": 1})
    config.graph_options.rewrite_options.CopyFrom(rewriter_config_pb2.RewriterConfig(disable_meta_optimizer=True))
    with v1.Session(graph=graph, config=config) as session:
        values = session.run(inputs)
        feed = {**dict(zip(inputs, values, strict=True)), scalar: 1.0}

        def best(fetch: Any) -> float:
            session.run(fetch, feed)
            times = []
            for _ in range(repeats):
                started = time.perf_counter()
                session.run(fetch, feed)
                times.append(time.perf_counter() - started)
            return min(times)

        flops = 2 * 2048**3 / best(matmul)
        bandwidth = 3 * 4 * 32 * 1024 * 1024 / best(add)
        options = v1.RunOptions(trace_level=v1.RunOptions.FULL_TRACE)
        metadata = v1.RunMetadata()
        session.run(chain, feed, options=options, run_metadata=metadata)
        traced = [node.all_end_rel_micros for dev in metadata.step_stats.dev_stats for node in dev.node_stats
                  if node.node_name.startswith("add")]
        launch_us = float(np.median(traced))
    return {"peak_flops": flops, "memory_bandwidth_Bps": bandwidth, "launch_us": launch_us}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.estimate_vs_profile", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", nargs="+", default=list(MODELS), help="job files or presets (default: %(default)s)")
    parser.add_argument("--steps", type=int, default=10, help="profiled steps per model (default 10)")
    parser.add_argument("--calibrate", action="store_true", help="print this machine's CPU preset numbers and stop")
    parser.add_argument("--results", default=str(HERE / "RESULTS.md"), help="the file to write the section into")
    args = parser.parse_args(argv)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    if args.calibrate:
        for key, value in calibrate().items():
            print(f"{key} = {value:.4g}")
        return 0
    started = time.perf_counter()
    rows = []
    for model in args.models:
        rows.append(compare(model, args.steps))
        r = rows[-1]
        print(f"{r['model']}: rho {r['rho']:.2f}, est/prof median {r['median']:.2f}, placement ratio "
              f"{r['placement_ratio']:.3f}", flush=True)
    command = "python -m benchmarks.estimate_vs_profile" + ("" if list(args.models) == list(MODELS) else " --models …")
    write_section(Path(args.results), "estimate", render(rows, time.perf_counter() - started, command, args.steps),
                  "python -m benchmarks.estimate_vs_profile")
    print(f"wrote {args.results}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
