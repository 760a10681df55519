"""`pardnn max-batch`: the largest batch a job trains with on K GPUs, ParDNN against data parallelism.

A probe needs the job's costed graph at the probed batch size and partitions it (the search and
the probe cache are :func:`pardnn.maxbatch.max_batch`). Building a paper-size graph in TensorFlow
takes 4-30 s and a search probes dozens of sizes, so by default the graph is built (and costed with
:func:`pardnn.tf.estimate.estimate_parts`) only at batches 2 and 3, and every other size's graph is
computed from those two by :class:`pardnn.batchscale.BatchScaling` (batch 1 is built: at batch 1
TensorFlow's broadcasting gradients take other ops). When the search is done, the graph is built
once more at the largest batch it probed and compared with the computed one: if they are equal, every
probe in between was exact (the module docstring of :mod:`pardnn.batchscale` says why) and the
results enter the probe cache; if not, the message names the op that differs and the search runs
again building every probe, as ``--rebuild`` asks from the start. Built graphs are kept per batch
size during a run, so the K values and a rerun share them.
"""

from __future__ import annotations

import csv
import dataclasses
import io
import json
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from jobs.config import Job, load_job
from pardnn import presets
from pardnn.batchscale import BatchScaling, CostParts
from pardnn.errors import ScalingError
from pardnn.graph import CostGraph
from pardnn.machine import Machine, format_bytes
from pardnn.maxbatch import MAX_BATCH, BatchRow, ProbeCache, ProbeResult, fingerprint_of, max_batch
from pardnn.presets import machine_for

__all__ = ["format_rows", "job_max_batch", "plot_rows", "rows_csv"]

GRAPHS_KEPT = 64  # costed graphs of the batch sizes built or scaled most recently (a few MB each)
FIT_BATCH = 2  # scaling is fitted on batches 2 and 3: batch 1 has ops of its own


def job_machine(preset_name: str, devices: int, memory: str | int | None, reserve: float) -> Machine:
    """K devices of the preset, with ``memory`` (if given) instead of the preset's."""
    base = machine_for(preset_name, devices, reserve=reserve)
    if memory is None:
        return base
    return Machine(devices, memory, base.bandwidth_Bps, base.latency_us, reserve)


class _Builder:
    """Builds and costs the job's step at a batch size; keeps the most recent graphs."""

    def __init__(self, job: Job, preset_name: str, note: Callable[[str], None]) -> None:
        self.job, self.preset_name, self.note = job, preset_name, note
        self.built: OrderedDict[int, CostParts] = OrderedDict()
        self.seconds = 0.0
        self.count = 0

    def parts(self, batch: int) -> CostParts:
        from jobs.training import build
        from pardnn.tf.estimate import estimate_parts

        if batch in self.built:
            self.built.move_to_end(batch)
            return self.built[batch]
        started = time.perf_counter()
        train = build(self.job, batch_size=batch)
        parts = estimate_parts(train.graph, train.fetches, self.preset_name, name=f"{self.job.name}-b{batch}")
        seconds = time.perf_counter() - started
        self.seconds += seconds
        self.count += 1
        self.note(f"built and costed {self.job.name} at batch {batch}: {parts.graph.n:,} ops, {seconds:.1f} s")
        self.built[batch] = parts
        if len(self.built) > GRAPHS_KEPT:
            self.built.popitem(last=False)
        return parts

    def graph(self, batch: int) -> CostGraph:
        return self.parts(batch).graph


def job_max_batch(job: Job | str | Path, devices: Sequence[int], *, memory: str | int | None = None,
                  reserve: float | None = None, preset: str | None = None, cache: str | Path | None = None,
                  start: int = 1, limit: int = MAX_BATCH, rebuild: bool = False,
                  on_probe: Callable[[str, ProbeResult], None] | None = None,
                  on_note: Callable[[str], None] | None = None) -> list[BatchRow]:
    """Largest batch per K for ``job`` (ParDNN with heuristic I, and data parallelism).

    ``memory``, ``reserve`` and ``preset`` default to the job's ``[placement]`` settings (memory: the
    preset's when the job sets none). ``rebuild`` builds the graph at every probed batch instead of
    scaling two builds (see the module docstring). ``on_note`` receives progress lines (builds, the
    check of the scaled graphs, a fallback and why).
    """
    job = job if isinstance(job, Job) else load_job(job)
    preset_name = preset or job.device_preset
    reserve = job.reserve if reserve is None else reserve
    memory = memory if memory is not None else job.memory
    note = on_note or (lambda message: None)
    builder = _Builder(job, preset_name, note)
    fields = {k: v for k, v in dataclasses.asdict(job).items() if k not in ("batch_size", "path", "name")}
    fingerprint = fingerprint_of("max-batch", fields, preset_name)
    persistent = ProbeCache(cache)

    def search(graph_for_batch: Callable[[int], CostGraph], probe_cache: ProbeCache) -> list[BatchRow]:
        return max_batch(graph_for_batch, devices, lambda k: job_machine(preset_name, k, memory, reserve),
                         fingerprint=fingerprint, cache=probe_cache, start=start, limit=limit, on_probe=on_probe)

    if rebuild:
        return search(builder.graph, persistent)
    fit = max(start, FIT_BATCH)
    scaling: BatchScaling | None = None  # fitted at the first probe that needs it: a cached rerun builds nothing
    scaled: OrderedDict[int, CostGraph] = OrderedDict()

    def graph_for_batch(batch: int) -> CostGraph:
        nonlocal scaling
        if batch < fit or batch in builder.built:
            return builder.graph(batch)
        if scaling is None:
            scaling = BatchScaling(builder.parts(fit), builder.parts(fit + 1), fit, presets.preset(preset_name))
        if batch not in scaled:
            scaled[batch] = scaling.graph_at(batch, name=f"{job.name}-b{batch}")
            if len(scaled) > GRAPHS_KEPT:
                scaled.popitem(last=False)
        return scaled[batch]

    staged = persistent.staged()
    try:
        rows = search(graph_for_batch, staged)
    except ScalingError as exc:
        note(f"cannot scale the graph with the batch ({exc}); building every probe")
        return search(builder.graph, persistent)
    computed = staged.added_since(persistent)
    top = max((result.batch for result in computed.values()), default=0)
    if scaling is not None and top > fit + 1:
        note(f"checking the scaled graphs: building {job.name} at batch {top}, the largest probed")
        problem = scaling.mismatch(builder.parts(top), top)
        if problem:
            note(f"the scaled graph at batch {top} is not the built one ({problem}); building every probe")
            return search(builder.graph, persistent)
        note(f"the scaled graph at batch {top} equals the built one, so every probe up to it was exact")
    persistent.commit(computed)
    return rows


def format_rows(rows: Sequence[BatchRow], title: str) -> str:
    """A text table: K, ParDNN's batch, data parallelism's, and the ratio."""
    lines = [title, f"{'devices':>7}  {'ParDNN':>8}  {'data parallel':>13}  {'ParDNN / DP':>11}  probes"]
    for row in rows:
        ratio = f"{row.ratio:.2f}" if row.data_parallel_batch else "-"
        lines.append(f"{row.devices:>7}  {row.pardnn_batch:>8}  {row.data_parallel_batch:>13}  {ratio:>11}  "
                     f"{len(row.probes)}")
    return "\n".join(lines)


def rows_csv(rows: Sequence[BatchRow], job: str) -> str:
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow(["job", "devices", "pardnn_batch", "data_parallel_batch", "ratio"])
    for row in rows:
        writer.writerow([job, row.devices, row.pardnn_batch, row.data_parallel_batch,
                         f"{row.ratio:.4f}" if row.data_parallel_batch else ""])
    return out.getvalue()


def rows_json(rows: Sequence[BatchRow], job: str, machine: dict[str, Any]) -> str:
    return json.dumps({"job": job, "machine": machine, "rows": [row.to_dict() for row in rows]}, indent=2)


def plot_rows(rows: Sequence[BatchRow], title: str, path: str | Path) -> None:
    """Max batch against K, ParDNN and data parallelism, log2 axes (PNG)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    devices = [row.devices for row in rows]
    figure, axes = plt.subplots(figsize=(5, 3.5))
    axes.plot(devices, [max(row.pardnn_batch, 0.5) for row in rows], "o-", label="ParDNN")
    axes.plot(devices, [max(row.data_parallel_batch, 0.5) for row in rows], "s--", label="data parallelism")
    axes.set_xscale("log", base=2)
    axes.set_yscale("log", base=2)
    axes.set_xlabel("devices")
    axes.set_ylabel("largest batch")
    axes.set_title(title)
    axes.legend()
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)


def describe_machine(machine: Machine) -> dict[str, Any]:
    return {"memory_per_device": format_bytes(int(machine.memory_bytes[0])), "reserve": machine.reserve,
            "bandwidth_Bps": machine.bandwidth_Bps, "latency_us": machine.latency_us}
