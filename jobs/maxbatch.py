"""`pardnn max-batch`: the largest batch a job trains with on K GPUs, ParDNN against data parallelism.

:func:`job_max_batch` (and :func:`job_max_batch_auto` for ``micro_batches = auto``) probe batch sizes with
:func:`pardnn.batch.maxbatch.max_batch`; each probe's costed graph is built by TensorFlow at batches 1, 2
and 3 (M, 2M, 3M with micro-batches) and computed for every other size by
:class:`pardnn.batch.batchscale.BatchScaling`, then checked against one more build at the largest batch
probed; a mismatch names the op and searches again building every probe (``--rebuild`` from the start).
Why the computed graphs are exact: docs/internals.md, "max-batch's computed graphs".
"""

from __future__ import annotations

import csv
import dataclasses
import io
import json
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from jobs.config import Job, load_job
from jobs.schema import AUTO
from pardnn.batch.batchscale import BatchScaling, CostParts
from pardnn.batch.maxbatch import (
    MAX_BATCH,
    BatchRow,
    ProbeCache,
    ProbeResult,
    best_micro_batches,
    fingerprint_of,
    max_batch,
)
from pardnn.costs import presets
from pardnn.costs.graph import CostGraph
from pardnn.costs.machine import Machine, format_bytes
from pardnn.costs.presets import machine_for
from pardnn.errors import InfeasibleError, ScalingError

__all__ = ["AUTO_MICRO_BATCHES", "build_parts", "format_rows", "format_tried", "job_max_batch", "job_max_batch_auto",
           "plot_rows", "rows_csv"]

GRAPHS_KEPT = 64  # costed graphs of the batch sizes built or scaled most recently (a few MB each)
FIT_BATCH = 2  # scaling is fitted on (micro-)batches 2 and 3: batch 1 has ops of its own
AUTO_MICRO_BATCHES = (1, 2, 4, 8, 16)  # the M that --micro-batches auto answers for


def job_machine(preset_name: str, devices: int, memory: str | int | None, reserve: float) -> Machine:
    """K devices of the preset, with ``memory`` (if given) instead of the preset's."""
    base = machine_for(preset_name, devices, reserve=reserve)
    if memory is None:
        return base
    return Machine(devices, memory, base.bandwidth_Bps, base.latency_us, reserve)


class _Builder:
    """Builds and costs the job's step at a batch size; keeps the most recent graphs."""

    def __init__(self, job: Job, preset_name: str, note: Callable[[str], None], micro: int = 1) -> None:
        self.job, self.preset_name, self.note, self.micro = job, preset_name, note, micro
        self.built: OrderedDict[int, CostParts] = OrderedDict()
        self.seconds = 0.0
        self.count = 0

    def parts(self, batch: int) -> CostParts:
        if batch in self.built:
            self.built.move_to_end(batch)
            return self.built[batch]
        started = time.perf_counter()
        parts = build_parts(self.job, batch, self.micro, self.preset_name)
        seconds = time.perf_counter() - started
        self.seconds += seconds
        self.count += 1
        split = f" ({self.micro} micro-batches of {batch // self.micro})" if self.micro != 1 else ""
        self.note(f"built and costed {self.job.name} at batch {batch}{split}: {parts.graph.n:,} ops, {seconds:.1f} s")
        self.built[batch] = parts
        if len(self.built) > GRAPHS_KEPT:
            self.built.popitem(last=False)
        return parts

    def graph(self, batch: int) -> CostGraph:
        return self.parts(batch).graph


def build_parts(job: Job, batch: int, micro: int, preset_name: str,
                build: Callable[..., Any] | None = None) -> CostParts:
    """The job's step built by TensorFlow at ``batch`` (``micro`` micro-batches) and costed by the preset's
    estimates: what each build of a search is. ``build``: the graph builder, called as
    ``build(job, batch_size=batch, micro_batches=micro)`` (default :func:`jobs.training.build`)."""
    from pardnn.tf.estimate import estimate_parts

    if build is None:
        from jobs.training import build

    train = build(job, batch_size=batch, micro_batches=micro)
    return estimate_parts(train.graph, train.fetches, preset_name, name=_name(job, batch, micro))


def _name(job: Job, batch: int, micro: int) -> str:
    return f"{job.name}-b{batch}" + (f"-m{micro}" if micro != 1 else "")


def job_max_batch(job: Job | str | Path, devices: Sequence[int], *, memory: str | int | None = None,
                  reserve: float | None = None, preset: str | None = None, cache: str | Path | None = None,
                  start: int = 1, limit: int = MAX_BATCH, rebuild: bool = False, micro_batches: int | str | None = None,
                  on_probe: Callable[[str, ProbeResult], None] | None = None,
                  on_note: Callable[[str], None] | None = None) -> list[BatchRow]:
    """Largest batch per K for ``job`` (ParDNN with heuristic I, and data parallelism).

    ``memory``, ``reserve`` and ``preset`` default to the job's ``[placement]`` settings (memory: the
    preset's when the job sets none). ``rebuild`` builds the graph at every probed batch instead of
    scaling two builds (see the module docstring). ``micro_batches`` (default the job's ``[train]``
    value): M splits each batch into M micro-batches (only multiples of M are probed); ``"auto"``
    answers for each M of :data:`AUTO_MICRO_BATCHES` and gives per K the M with the largest batch
    (:func:`job_max_batch_auto` also returns every M's rows). ``on_note`` receives progress lines
    (builds, the check of the scaled graphs, a fallback and why).
    """
    job = job if isinstance(job, Job) else load_job(job)
    micro = job.micro_batches if micro_batches is None else micro_batches
    options = {"memory": memory, "reserve": reserve, "preset": preset, "cache": cache, "start": start, "limit": limit,
               "rebuild": rebuild, "on_probe": on_probe, "on_note": on_note}
    if micro == AUTO:
        return job_max_batch_auto(job, devices, **options)[0]
    return _job_max_batch(job, devices, int(micro), **options)


def job_max_batch_auto(job: Job, devices: Sequence[int], *, micro_options: Sequence[int] = (),
                       **options: Any) -> tuple[list[BatchRow], dict[int, list[BatchRow]]]:
    """``--micro-batches auto``: per K the row of the M with the largest batch (a tie: the smaller M),
    and every M's rows (an M that fits nothing on any K has rows of 0). Raises the InfeasibleError of
    M = 1 when no M fits anything."""
    note = options.get("on_note") or (lambda message: None)
    rows_by_m: dict[int, list[BatchRow]] = {}
    first_error: InfeasibleError | None = None
    for micro in micro_options or AUTO_MICRO_BATCHES:
        note(f"micro-batches auto: M = {micro}")
        try:
            rows_by_m[micro] = _job_max_batch(job, devices, micro, **options)
        except InfeasibleError as error:
            first_error = first_error or error
            rows_by_m[micro] = [BatchRow(k, 0, 0, [], micro) for k in devices]
    if first_error is not None and all(row.pardnn_batch == 0 for rows in rows_by_m.values() for row in rows):
        raise first_error
    return best_micro_batches(rows_by_m), rows_by_m


def _job_max_batch(job: Job, devices: Sequence[int], micro: int, *, memory: str | int | None = None,
                   reserve: float | None = None, preset: str | None = None, cache: str | Path | None = None,
                   start: int = 1, limit: int = MAX_BATCH, rebuild: bool = False,
                   on_probe: Callable[[str, ProbeResult], None] | None = None,
                   on_note: Callable[[str], None] | None = None) -> list[BatchRow]:
    """:func:`job_max_batch` for one M: built graphs at micro-batches 1, 2 and 3, the others scaled."""
    preset_name = preset or job.device_preset
    reserve = job.reserve if reserve is None else reserve
    memory = memory if memory is not None else job.memory
    note = on_note or (lambda message: None)
    builder = _Builder(job, preset_name, note, micro)
    fields = {k: v for k, v in dataclasses.asdict(job).items() if k not in ("batch_size", "path", "name")}
    fields["micro_batches"] = micro  # the M probed (M = 1: the keys of the plain step, as before M existed)
    fingerprint = fingerprint_of("max-batch", fields, preset_name)
    persistent = ProbeCache(cache)

    def search(graph_for_batch: Callable[[int], CostGraph], probe_cache: ProbeCache) -> list[BatchRow]:
        return max_batch(graph_for_batch, devices, lambda k: job_machine(preset_name, k, memory, reserve),
                         fingerprint=fingerprint, cache=probe_cache, start=start, limit=limit, micro_batches=micro,
                         on_probe=on_probe)

    if rebuild:
        return search(builder.graph, persistent)
    scaled = _Scaled(builder, preset_name, micro, start)
    staged = persistent.staged()
    try:
        rows = search(scaled.graph, staged)
    except ScalingError as exc:
        note(f"cannot scale the graph with the batch ({exc}); building every probe")
        return search(builder.graph, persistent)
    computed = staged.added_since(persistent)
    top = max((result.batch for result in computed.values()), default=0)
    problem = scaled.check(top, note)
    if problem:
        note(f"the scaled graph at batch {top} is not the built one ({problem}); building every probe")
        return search(builder.graph, persistent)
    persistent.commit(computed)
    return rows


class _Scaled:
    """Graphs at any batch from builds at micro-batches ``b`` and ``b + 1`` (``FIT_BATCH`` or more; global batches
    ``M b``): :class:`BatchScaling` runs in micro-batch units, the M copies' sizes being lines in ``b``
    as the single step's are in the batch, so its exactness argument and check carry over."""

    def __init__(self, builder: _Builder, preset_name: str, micro: int, start: int) -> None:
        self.builder, self.preset_name, self.micro = builder, preset_name, micro
        self.fit = max(-(-start // micro), FIT_BATCH)  # the smaller fitted micro-batch size
        self.scaling: BatchScaling | None = None  # fitted at the first probe needing it: a cached rerun builds none
        self.graphs: OrderedDict[int, CostGraph] = OrderedDict()

    def graph(self, batch: int) -> CostGraph:
        builder, micro = self.builder, self.micro
        size = batch // micro
        if size < self.fit or batch in builder.built:
            return builder.graph(batch)
        if self.scaling is None:
            self.scaling = BatchScaling(builder.parts(self.fit * micro), builder.parts((self.fit + 1) * micro),
                                        self.fit, presets.preset(self.preset_name))
        if batch not in self.graphs:
            self.graphs[batch] = self.scaling.graph_at(size, name=_name(builder.job, batch, micro))
            if len(self.graphs) > GRAPHS_KEPT:
                self.graphs.popitem(last=False)
        return self.graphs[batch]

    def check(self, top: int, note: Callable[[str], None]) -> str | None:
        """None when the graph built at batch ``top`` (the largest probed) is the scaled one, which proves
        every scaled probe exact; else what differs. Nothing to check below the fitted sizes."""
        if self.scaling is None or top // self.micro <= self.fit + 1:
            return None
        job = self.builder.job
        note(f"checking the scaled graphs: building {job.name} at batch {top}, the largest probed")
        problem = self.scaling.mismatch(self.builder.parts(top), top // self.micro)
        if problem is None:
            note(f"the scaled graph at batch {top} equals the built one, so every probe up to it was exact")
        return problem


def format_rows(rows: Sequence[BatchRow], title: str) -> str:
    """A text table: K, ParDNN's batch, data parallelism's, and the ratio (and M when not 1)."""
    micro = any(row.micro_batches != 1 for row in rows)
    lines = [title, f"{'devices':>7}  {'ParDNN':>8}  {'data parallel':>13}  {'ParDNN / DP':>11}  probes"
             + ("  M" if micro else "")]
    for row in rows:
        ratio = f"{row.ratio:.2f}" if row.data_parallel_batch else "-"
        lines.append(f"{row.devices:>7}  {row.pardnn_batch:>8}  {row.data_parallel_batch:>13}  {ratio:>11}  "
                     f"{len(row.probes):>6}" + (f"  {row.micro_batches}" if micro else ""))
    return "\n".join(lines)


def format_tried(rows_by_m: Mapping[int, Sequence[BatchRow]], best: Sequence[BatchRow]) -> str:
    """``--micro-batches auto``: ParDNN's largest batch per K (rows) and M (columns), the chosen M marked ``*``."""
    ms = sorted(rows_by_m)
    lines = ["largest batch by M (* the M kept: the largest batch, a tie to the smaller M)",
             f"{'devices':>7}" + "".join(f"  {f'M={m}':>9}" for m in ms)]
    for position, chosen in enumerate(best):
        cells = [f"{rows_by_m[m][position].pardnn_batch}{'*' if m == chosen.micro_batches else ''}" for m in ms]
        lines.append(f"{chosen.devices:>7}" + "".join(f"  {cell:>9}" for cell in cells))
    return "\n".join(lines)


def rows_csv(rows: Sequence[BatchRow], job: str) -> str:
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow(["job", "devices", "pardnn_batch", "data_parallel_batch", "ratio", "micro_batches"])
    for row in rows:
        writer.writerow([job, row.devices, row.pardnn_batch, row.data_parallel_batch,
                         f"{row.ratio:.4f}" if row.data_parallel_batch else "", row.micro_batches])
    return out.getvalue()


def rows_json(rows: Sequence[BatchRow], job: str, machine: dict[str, Any],
              tried: Mapping[int, Sequence[BatchRow]] | None = None) -> str:
    """The rows as JSON; with ``--micro-batches auto`` also ``tried``: every M's rows, by M."""
    document: dict[str, Any] = {"job": job, "machine": machine, "rows": [row.to_dict() for row in rows]}
    if tried is not None:
        document["tried"] = {str(m): [row.to_dict() for row in rows_m] for m, rows_m in sorted(tried.items())}
    return json.dumps(document, indent=2)


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
