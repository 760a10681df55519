"""One step seen two ways: TensorFlow's own timeline of a measured step and ParDNN's emulated step.

:func:`write_measured` writes ``timeline-rank<r>.json`` (every rank) from one traced iteration just
outside the measured window (:func:`traced_iteration`); :func:`write_emulated` writes ``emulated-step.json``
(rank 0). Both open in ``chrome://tracing`` or https://ui.perfetto.dev. :func:`step_ms` is
``summary.json`` → ``step_ms``; :func:`allreduce_share` adds the gradient allreduce to the emulated step.
Rules: docs/notes-launcher.md.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from launcher.files import write_text
from pardnn.emulation.emulator import emulate
from pardnn.emulation.memory import track_memory
from pardnn.emulation.trace import chrome_trace, write_trace

__all__ = ["EMULATED_FILE", "TIMELINE_FILE", "allreduce_share", "step_ms", "traced_iteration", "write_emulated",
           "write_measured"]

TIMELINE_FILE = "timeline-rank{rank}.json"
EMULATED_FILE = "emulated-step.json"


def traced_iteration(window: tuple[int, int], iterations: int) -> int | None:
    """The iteration traced, outside the measured window ``[start, end)`` so that tracing's overhead
    never counts in its throughput: the last one before the window when a warm iteration precedes
    it (``start >= 2``), else the first after it, else iteration 0 (``start == 1``); ``None`` when
    every iteration is measured (no timeline then)."""
    start, end = window
    if start >= 2:
        return start - 1
    if iterations > end:
        return end
    return 0 if start == 1 else None


def write_measured(path: Path, run_metadata: Any) -> None:
    """TensorFlow's timeline of a traced ``Session.run`` as a Chrome trace."""
    from tensorflow.python.client import timeline

    write_text(path, timeline.Timeline(run_metadata.step_stats).generate_chrome_trace_format())


def write_emulated(path: Path, graph: Any, machine: Any, placement: np.ndarray, order: np.ndarray | None = None,
                   *, schedule: Any = None, memory: Any = None) -> float:
    """The emulated step of ``placement`` (in its run ``order``, if any) as a Chrome trace; returns its
    makespan in µs.

    ``schedule``, ``memory``: the step as the placer emulated it (:attr:`pardnn.placement.result.Result.schedule`
    and ``.memory``), drawn as they are; only a placement without them (read back from a file, as a
    resumed run's is) is emulated here.
    """
    place = np.asarray(placement, dtype=np.int64)
    if schedule is None or memory is None:
        schedule = emulate(graph, machine, place, order=order)
        memory = track_memory(graph, machine, place, schedule)
    write_trace(path, chrome_trace(graph, machine, place, schedule, memory))
    return float(schedule.makespan_us)


def allreduce_share(topology: Any, device_preset: str, kind: str, graph: Any, machine: Any, placement: Any,
                    order: Any = None, schedule: Any = None, step: Any = None) -> dict[str, Any] | None:
    """The replica's emulated step with its gradients averaged across the run's replicas (``None`` for
    one replica): compute, exposed allreduce and step in µs, the bytes averaged, the model's network.
    ``step``: that step, when already emulated (:class:`~pardnn.emulation.allreduce.AllreduceStep`)."""
    cluster = run_cluster(topology, device_preset, kind)
    if cluster is None:
        return None
    from pardnn.emulation.allreduce import emulate_with_allreduce

    preset_name = cluster_preset(device_preset, kind)
    if step is None:
        step = emulate_with_allreduce(graph, machine, np.asarray(placement, dtype=np.int64), cluster, order=order,
                                      schedule=schedule)
    return {"compute_us": step.compute_us, "exposed_us": step.exposed_us, "step_us": step.step_us,
            "busy_us": step.busy_us, "gradient_bytes": step.gradient_bytes, "buffers": step.buffers,
            "replicas": step.replicas, "preset": preset_name, "network_Bps": cluster.network_Bps}


def run_cluster(topology: Any, device_preset: str, kind: str) -> Any:
    """The run's replicas as the emulator's :class:`~pardnn.emulation.allreduce.Cluster` (the CPU preset
    on logical CPU devices), ``None`` for one replica."""
    if topology.size <= 1:
        return None
    from pardnn.emulation.allreduce import cluster_for

    return cluster_for(cluster_preset(device_preset, kind), topology.node_count, topology.ranks_per_node)


def cluster_preset(device_preset: str, kind: str) -> str:
    """The preset the allreduce is emulated with: the run's, or the CPU one on logical CPU devices."""
    return "cpu-2core" if kind == "cpu" else device_preset


def step_ms(makespan_us: float | None, medians_ms: Sequence[float | None],
            allreduce: dict[str, Any] | None = None) -> dict[str, float | None]:
    """``{"emulated", "measured_median", "ratio"}``: the emulated step, the slowest node's median step
    over the window, and measured / emulated (``None`` when either is missing). With ``allreduce``
    (:func:`allreduce_share`) the emulated step is its step, and ``emulated_compute`` and
    ``emulated_allreduce_exposed`` say what it is made of."""
    measured = [m for m in medians_ms if m is not None]
    median = max(measured) if measured else None
    extra: dict[str, float | None] = {}
    if allreduce is not None and makespan_us is not None:
        extra = {"emulated_compute": makespan_us / 1000.0,
                 "emulated_allreduce_exposed": allreduce["exposed_us"] / 1000.0}
        makespan_us = makespan_us + allreduce["exposed_us"]
    emulated = None if makespan_us is None else makespan_us / 1000.0
    ratio = median / emulated if median is not None and emulated else None
    return {"emulated": emulated, "measured_median": median, "ratio": ratio, **extra}
