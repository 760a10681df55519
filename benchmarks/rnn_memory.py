"""Memory realism of the unrolled RNNs: TensorFlow's own memory accounting set
against pardnn's memory tracker (:mod:`pardnn.emulation.memory`).

    python -m benchmarks.rnn_memory               # all three parts: about 2.5 minutes on 2 cores
    python -m benchmarks.rnn_memory --part tf     # only part 1 (or: grappler, paper)

The paper's Word-RNN and Char-CRN unroll 8 LSTM layers over 28 and 35 steps. Every step multiplies
by the same LSTM kernel, so the kernel's gradient is an ``AddN`` of one ``[in + hidden, 4 hidden]``
term per step (128 MiB each at hidden size 2048): kept whole until the sum, ~200 of them are live at
once, about 25 GiB. The three parts:

1. **TensorFlow on this CPU** (``--part tf``). Scaled-down models of the same structure (8 layers,
   28 / 35 steps; hidden size 256, vocabularies of 2,000 words, Char-CRN's filter counts / 10) run
   two steps in a session, the second traced with ``FULL_TRACE``; TensorFlow's peak is the highest
   ``allocator_bytes_in_use`` its step stats report (sampled at the end of every op, variables
   included). Session settings: Grappler off (what pardnn captures and models), with ops run one at
   a time in the order they become ready (``RunOptions.inter_op_thread_pool = -1``: every kernel
   inline, as a GPU stream runs them and as pardnn's emulator runs a device's ready queue) or on
   the CPU's inter-op thread pool (which runs ready ops in a different order); Grappler as shipped
   with its memory optimizer off; the memory optimizer alone; the memory and dependency optimizers;
   Grappler as shipped (what ``pardnn-launch`` trains with). All but "thread pool" run inline. "sums
   in place" counts the ``AddN`` ops Grappler rewrote (``DestroyTemporaryVariable`` in the trace).
   pardnn's tracker prices the same graph (``estimate`` sizes, one device) without a memory limit
   (sums kept whole) and with the 256 MiB TensorFlow gives a CPU device (reserve 0), so that it
   applies Grappler's rule as TensorFlow did here.
2. **Grappler at the paper's size** (``--part grappler``). The paper-size graphs (Word-RNN at batch
   16, Char-CRN at batch 8) go through Grappler offline (``tf_optimizer.OptimizeGraph``, memory
   optimizer only) on a virtual V100 with the memory TensorFlow gives a V100-32GB's allocator
   (30,458 MiB, :data:`V100_TF_MEMORY`): Grappler's own static peak estimate and which ``AddN`` it
   rewrites (compared with the tracker's choice in part 3). Nothing is allocated.
3. **pardnn's tracker at the paper's size** (``--part paper``): Word-RNN at batch 16 and Char-CRN at
   batch 8 on one V100-32GB (``estimate`` costs, the job's 10 % reserve), with sums kept whole (the
   tracker's earlier rule) and as TensorFlow runs them, and what is live at each peak.
"""

from __future__ import annotations

import argparse
import re
import time
from collections import Counter
from typing import Any

import numpy as np

GiB = 2**30
MiB = 2**20

SCALED = {
    "word-rnn": ({"model.hidden_size": 256, "model.vocab_size": 2000}, 16),
    "char-crn": ({"model.hidden_size": 256, "model.word_vocab_size": 2000,
                  "model.kernel_features": [5, 10, 15, 20, 20, 20, 20]}, 8),
}
PAPER = {"word-rnn": 16, "char-crn": 8}
# What TensorFlow 1.x gives a V100-SXM2-32GB's allocator ("Created TensorFlow device ... with 30458 MB
# memory -> physical GPU (... Tesla V100-SXM2-32GB ...)", apple/turicreate#2777): Grappler compares
# its estimate with 80 % of this.
V100_TF_MEMORY = 30458 * MiB
SETTINGS = ("grappler off, one queue", "grappler off, thread pool", "grappler as shipped but no memory optimizer",
            "memory optimizer only", "memory and dependency optimizers", "grappler as shipped")
_PASSES = ("layout_optimizer", "constant_folding", "shape_optimization", "remapping", "arithmetic_optimization",
           "dependency_optimization", "loop_optimization", "function_optimization", "debug_stripper",
           "common_subgraph_elimination", "implementation_selector", "pin_to_host_optimization")


def _rewrite_options(keep: tuple[str, ...], memory: bool) -> Any:
    """Grappler with only the passes ``keep`` (and the memory optimizer if ``memory``) on."""
    from tensorflow.core.protobuf import rewriter_config_pb2 as rc

    options = rc.RewriterConfig(min_graph_nodes=-1)
    for name in _PASSES:
        if name not in keep:
            setattr(options, name, rc.RewriterConfig.OFF)
    options.memory_optimization = rc.RewriterConfig.DEFAULT_MEM_OPT if memory else rc.RewriterConfig.NO_MEM_OPT
    return options


def _config(setting: str) -> Any:
    from pardnn.tf.apply import session_config

    if setting.startswith("grappler off"):
        return session_config(1, optimize=False)
    config = session_config(1)
    if setting == "grappler as shipped but no memory optimizer":
        config.graph_options.rewrite_options.CopyFrom(_rewrite_options(_PASSES, memory=False))
    elif setting == "memory optimizer only":
        config.graph_options.rewrite_options.CopyFrom(_rewrite_options((), memory=True))
    elif setting == "memory and dependency optimizers":
        config.graph_options.rewrite_options.CopyFrom(_rewrite_options(("dependency_optimization",), memory=True))
    return config


def tf_peak(train: Any, setting: str) -> dict[str, Any]:
    """Run two steps of ``train`` in a session of ``setting``; trace the second. TensorFlow's peak
    and lowest bytes in use (its allocator's, at the end of each op) and the sums it rewrote."""
    import tensorflow as tf

    options = tf.compat.v1.RunOptions(trace_level=tf.compat.v1.RunOptions.FULL_TRACE)
    if "thread pool" not in setting:
        options.inter_op_thread_pool = -1  # every kernel inline, in the order they become ready
    with tf.compat.v1.Session(graph=train.graph, config=_config(setting)) as session:
        session.run(train.init_op)
        session.run(train.fetches, feed_dict=train.feed_fn(0), options=options)
        metadata = tf.compat.v1.RunMetadata()
        session.run(train.fetches, feed_dict=train.feed_fn(1), options=options, run_metadata=metadata)
    in_use = [m.allocator_bytes_in_use for dev in metadata.step_stats.dev_stats for node in dev.node_stats
              for m in node.memory]
    rewritten = sum(node.timeline_label.partition(" = ")[2].startswith("DestroyTemporaryVariable")
                    for dev in metadata.step_stats.dev_stats for node in dev.node_stats)
    return {"peak": max(in_use), "low": min(in_use), "rewritten": rewritten}


def tracker_peak(graph: Any, machine: Any) -> tuple[Any, Any]:
    """pardnn's memory profile of ``graph`` on one device of ``machine`` (and the schedule)."""
    from pardnn.emulation.emulator import emulate
    from pardnn.emulation.memory import track_memory

    place = np.zeros(graph.n, dtype=np.int64)
    schedule = emulate(graph, machine, place)
    return track_memory(graph, machine, place, schedule), schedule


def whole_sums(graph: Any) -> Any:
    """``graph`` without op types: no op is a candidate for an in-place sum (the tracker as it was)."""
    return graph.replace(ops=[""] * graph.n)


def part_tf() -> list[dict[str, Any]]:
    import jobs
    from jobs.costing import cost_graph
    from pardnn import Machine

    rows = []
    for name, (overrides, batch) in SCALED.items():
        train = jobs.build(jobs.load_job(name, overrides=overrides), batch_size=batch)
        graph = cost_graph(train, "estimate", memory_bytes=None)
        residual = int(graph.out_bytes[graph.kind == 1].sum())
        whole, _ = tracker_peak(graph, Machine(1))
        tight, _ = tracker_peak(graph, Machine(1, memory=256 * MiB, reserve=0.0))
        row = {"model": name, "batch": batch, "ops": graph.n, "residual": residual,
               "tracker_whole": int(whole.peak_bytes[0]), "tracker_tf": int(tight.peak_bytes[0]),
               "tracker_rewritten": int(tight.rewritten.sum()), "tf": {}}
        for setting in SETTINGS:
            started = time.perf_counter()
            row["tf"][setting] = tf_peak(train, setting)
            row["tf"][setting]["seconds"] = time.perf_counter() - started
        rows.append(row)
    return rows


def part_grappler(memory_bytes: int) -> list[dict[str, Any]]:
    import tensorflow as tf
    from tensorflow.core.protobuf import config_pb2, device_properties_pb2
    from tensorflow.python.grappler import cluster as gcluster
    from tensorflow.python.grappler import item as gitem
    from tensorflow.python.grappler import tf_optimizer

    import jobs

    def gpu(memory: int) -> Any:
        device = device_properties_pb2.NamedDevice(name="/job:localhost/replica:0/task:0/device:GPU:0")
        props = device.properties
        props.type, props.memory_size, props.num_cores, props.frequency = "GPU", memory, 80, 1530
        props.bandwidth, props.l2_cache_size = 900_000_000, 6 * MiB
        props.environment["architecture"] = "7"
        return device

    config = config_pb2.ConfigProto()
    config.graph_options.rewrite_options.CopyFrom(_rewrite_options((), memory=True))
    probe = gcluster.Cluster(devices=[gpu(2**50)])  # room for anything: DeterminePeakMemoryUsage raises on overflow
    cluster = gcluster.Cluster(devices=[gpu(memory_bytes)])
    rows = []
    for name, batch in PAPER.items():
        train = jobs.build(jobs.load_job(name), batch_size=batch)
        with train.graph.as_default():
            tf.compat.v1.add_to_collection(tf.compat.v1.GraphKeys.TRAIN_OP, train.train_op)
            meta = tf.compat.v1.train.export_meta_graph(graph=train.graph)
        estimate = max(v[0] for v in probe.DeterminePeakMemoryUsage(gitem.Item(meta)).values())
        optimized = tf_optimizer.OptimizeGraph(config, meta, verbose=False, cluster=cluster)
        sums = sorted(n.name for n in optimized.node if n.op == "DestroyTemporaryVariable")  # the AddN's name
        big = sum(1 for op in train.graph.get_operations() if op.type == "AddN" and len(op.inputs) > 2)
        rows.append({"model": name, "batch": batch, "estimate": int(estimate), "rewritten": len(sums),
                     "candidates": big, "names": sums})
    return rows


def _category(name: str, op: str) -> str:
    if op in ("AddN", "AccumulateNV2") and name.startswith("gradients/AddN"):
        return "gradient sums (AddN: accumulators when in place)"
    if re.search(r"rnn/step_\d+/layer_\d+/MatMul_grad/(MatMul_1|tuple/control_dependency_1)$", name):
        return "per-step LSTM kernel gradients"
    if re.search(r"^gradients/char_crn/MatMul(_\d+)?_grad/(MatMul_1|tuple/control_dependency_1)$", name):
        return "per-step softmax kernel gradients"
    if "softmax" in name and name.startswith("gradients/"):
        return "softmax gradients"
    if name.startswith("dense_gradients/"):
        return "dense embedding gradient"
    if name.startswith("gradients/"):
        return "other backward tensors"
    if name.startswith(("clip_gradients/", "apply_gradients/")):
        return "clipping and optimizer temporaries"
    return "forward activations"


def breakdown(graph: Any, profile: Any) -> list[tuple[str, int, int]]:
    """``(category, bytes, buffers)`` live on device 0 at its peak, largest first, residual included."""
    live = profile.live(0, float(profile.peak_time_us[0]))
    sizes: Counter[str] = Counter()
    counts: Counter[str] = Counter()
    for b in np.flatnonzero(live):
        p = int(profile.buffer_producer[b])
        key = _category(graph.names[p], graph.ops[p])
        sizes[key] += int(profile.buffer_bytes[b])
        counts[key] += 1
    rows = [("variables and optimizer slots (residual)", int(profile.residual_bytes[0]), int((graph.kind == 1).sum()))]
    rows += [(key, size, counts[key]) for key, size in sizes.most_common()]
    return rows


def part_paper() -> list[dict[str, Any]]:
    import jobs
    from jobs.costing import cost_graph
    from pardnn.costs.presets import machine_for

    rows = []
    for name, batch in PAPER.items():
        job = jobs.load_job(name)
        graph = cost_graph(jobs.build(job, batch_size=batch), "estimate")
        machine = machine_for(job.device_preset, 1, reserve=job.reserve)
        before, _ = tracker_peak(whole_sums(graph), machine)
        after, _ = tracker_peak(graph, machine)
        rows.append({"model": name, "batch": batch, "limit": int(machine.limits_bytes[0]),
                     "before": int(before.peak_bytes[0]), "after": int(after.peak_bytes[0]),
                     "rewritten": int(after.rewritten.sum()),
                     "names": sorted(graph.names[i] for i in np.flatnonzero(after.rewritten)),
                     "breakdown_before": breakdown(graph, before), "breakdown_after": breakdown(graph, after)})
    return rows


def _gib(x: float) -> str:
    return f"{x / GiB:.2f}"


def _mib(x: float) -> str:
    return f"{x / MiB:.0f}"


def report(tf_rows: list[dict[str, Any]] | None, grappler_rows: list[dict[str, Any]] | None,
           paper_rows: list[dict[str, Any]] | None, memory_bytes: int) -> str:
    out: list[str] = []
    if tf_rows:
        out += ["Part 1: TensorFlow on this CPU, scaled-down models (MiB; peak = bytes in use incl. variables)", "",
                "| model | batch | ops | setting | TF peak | TF lowest | sums in place | s |",
                "|---|---:|---:|---|---:|---:|---:|---:|"]
        for row in tf_rows:
            for setting, m in row["tf"].items():
                out.append(f"| {row['model']} | {row['batch']} | {row['ops']:,} | {setting} | {_mib(m['peak'])} | "
                           f"{_mib(m['low'])} | {m['rewritten']} | {m['seconds']:.0f} |")
        out += ["", "| model | residual | tracker, sums whole | TF, grappler off, one queue | ratio TF / tracker | "
                "tracker, 256 MiB device | sums in place | TF, grappler as shipped | ratio TF / tracker |",
                "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
        for row in tf_rows:
            off = row["tf"][SETTINGS[0]]["peak"]
            mem = row["tf"][SETTINGS[-1]]["peak"]
            out.append(f"| {row['model']} | {_mib(row['residual'])} | {_mib(row['tracker_whole'])} | {_mib(off)} | "
                       f"{off / row['tracker_whole']:.2f} | {_mib(row['tracker_tf'])} | {row['tracker_rewritten']} | "
                       f"{_mib(mem)} | {mem / row['tracker_tf']:.2f} |")
        out.append("")
    if grappler_rows:
        out += [f"Part 2: Grappler's memory optimizer at the paper's size, a virtual V100 whose allocator has "
                f"{memory_bytes // MiB:,} MiB = {_gib(memory_bytes)} GiB (rewrites when its estimate > 80 % = "
                f"{_gib(0.8 * memory_bytes)} GiB)", "",
                "| model | batch | Grappler's static peak estimate GiB (no variables) | AddN of > 2 inputs | "
                "rewritten in place |", "|---|---:|---:|---:|---:|"]
        for row in grappler_rows:
            out.append(f"| {row['model']} | {row['batch']} | {_gib(row['estimate'])} | {row['candidates']} | "
                       f"{row['rewritten']} |")
        out.append("")
    if paper_rows:
        grappler = {row["model"]: row["names"] for row in grappler_rows or ()}
        out += ["Part 3: pardnn's tracker at the paper's size, one V100-32GB (GiB)", "",
                "| model | batch | limit | peak, sums kept whole (before) | peak, sums as TF runs them (after) | "
                "sums in place | the same sums as Grappler's |", "|---|---:|---:|---:|---:|---:|---|"]
        for row in paper_rows:
            theirs = grappler.get(row["model"])
            same = "-" if theirs is None else "yes" if theirs == row["names"] else (
                f"no: {len(set(theirs) ^ set(row['names']))} differ")
            out.append(f"| {row['model']} | {row['batch']} | {_gib(row['limit'])} | {_gib(row['before'])} | "
                       f"{_gib(row['after'])} | {row['rewritten']} | {same} |")
        for row in paper_rows:
            for label in ("before", "after"):
                out += ["", f"{row['model']} at batch {row['batch']}, live at the peak ({label}):", "",
                        "| what | GiB | buffers |", "|---|---:|---:|"]
                out += [f"| {key} | {_gib(size)} | {count:,} |" for key, size, count in row[f"breakdown_{label}"][:7]]
        out.append("")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--part", choices=("all", "tf", "grappler", "paper"), default="all")
    args = parser.parse_args(argv)
    memory = V100_TF_MEMORY
    started = time.perf_counter()
    tf_rows = part_tf() if args.part in ("all", "tf") else None
    grappler_rows = part_grappler(memory) if args.part in ("all", "grappler") else None
    paper_rows = part_paper() if args.part in ("all", "paper") else None
    print(report(tf_rows, grappler_rows, paper_rows, memory))
    print(f"({time.perf_counter() - started:.0f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
