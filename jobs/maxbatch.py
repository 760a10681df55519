"""`pardnn max-batch`: the largest batch a job trains with on K GPUs, ParDNN against data parallelism.

Each probe builds the job's graph at the probed batch size (graph mode builds without allocating),
estimates its costs on the device preset (:func:`pardnn.tf.estimate`) and partitions it with memory
heuristic I; :func:`pardnn.maxbatch.max_batch` does the search and the caching. Costed graphs are
kept per batch size during a run, so the K values share one build per batch.
"""

from __future__ import annotations

import csv
import dataclasses
import io
import json
from collections import OrderedDict
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from jobs.config import Job, load_job
from pardnn.graph import CostGraph
from pardnn.machine import Machine, format_bytes
from pardnn.maxbatch import MAX_BATCH, BatchRow, ProbeCache, ProbeResult, fingerprint_of, max_batch
from pardnn.presets import machine_for

__all__ = ["format_rows", "job_max_batch", "plot_rows", "rows_csv"]

GRAPHS_KEPT = 64  # costed graphs of the batch sizes probed most recently (a few MB each)


def job_machine(preset_name: str, devices: int, memory: str | int | None, reserve: float) -> Machine:
    """K devices of the preset, with ``memory`` (if given) instead of the preset's."""
    base = machine_for(preset_name, devices, reserve=reserve)
    if memory is None:
        return base
    return Machine(devices, memory, base.bandwidth_Bps, base.latency_us, reserve)


def job_max_batch(job: Job | str | Path, devices: Sequence[int], *, memory: str | int | None = None,
                  reserve: float | None = None, preset: str | None = None, cache: str | Path | None = None,
                  start: int = 1, limit: int = MAX_BATCH,
                  on_probe: Callable[[str, ProbeResult], None] | None = None) -> list[BatchRow]:
    """Largest batch per K for ``job`` (ParDNN with heuristic I, and data parallelism).

    ``memory``, ``reserve`` and ``preset`` default to the job's ``[placement]`` settings (memory: the
    preset's when the job sets none).
    """
    from jobs.training import build
    from pardnn.tf import estimate

    job = job if isinstance(job, Job) else load_job(job)
    preset_name = preset or job.device_preset
    reserve = job.reserve if reserve is None else reserve
    memory = memory if memory is not None else job.memory
    graphs: OrderedDict[int, CostGraph] = OrderedDict()

    def graph_for_batch(batch: int) -> CostGraph:
        if batch in graphs:
            graphs.move_to_end(batch)
            return graphs[batch]
        train = build(job, batch_size=batch)
        cost = estimate(train.graph, train.fetches, preset_name, name=f"{job.name}-b{batch}")
        graphs[batch] = cost
        if len(graphs) > GRAPHS_KEPT:
            graphs.popitem(last=False)
        return cost

    fields = {k: v for k, v in dataclasses.asdict(job).items() if k not in ("batch_size", "path", "name")}
    fingerprint = fingerprint_of("max-batch", fields, preset_name)
    return max_batch(graph_for_batch, devices,
                     lambda k: job_machine(preset_name, k, memory, reserve), fingerprint=fingerprint,
                     cache=ProbeCache(cache), start=start, limit=limit, on_probe=on_probe)


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
