"""Look at an emulated step: a Chrome/Perfetto trace of the schedule and a plot of memory over time.

:func:`chrome_trace` (:func:`write_trace`) gives the Trace Event Format: a track per device, a flow per
cut edge, a memory counter per device; :func:`plot_memory` plots each device's use against its limit.
``pardnn simulate GRAPH PLACEMENT --trace step.json --memory-plot memory.png`` writes both.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from pardnn.costs.graph import CostGraph, Kind
from pardnn.costs.machine import Machine
from pardnn.emulation.emulator import Schedule
from pardnn.emulation.memory import MemoryProfile
from pardnn.errors import MissingDependencyError

__all__ = ["chrome_trace", "memory_series", "plot_memory", "write_trace"]

_KINDS = {int(Kind.NORMAL): "normal", int(Kind.RESIDUAL): "residual", int(Kind.REFERENCE): "reference"}
PID = 1


def memory_series(memory: MemoryProfile, device: int) -> tuple[np.ndarray, np.ndarray]:
    """``(times_us, bytes)``: the bytes in use on ``device`` from each time on (a step function that
    starts at time 0 with the device's residual bytes and changes at every allocation and release)."""
    mine = memory.buffer_device == device
    alloc, free, size = memory.buffer_alloc_us[mine], memory.buffer_free_us[mine], memory.buffer_bytes[mine]
    kept = free > alloc
    times = np.concatenate([[0.0], alloc[kept], free[kept]])
    deltas = np.concatenate([[int(memory.residual_bytes[device])], size[kept], -size[kept]]).astype(np.int64)
    order = np.lexsort((deltas, times))  # releases (negative) before allocations at one instant
    times, level = times[order], np.cumsum(deltas[order])
    last = np.r_[times[1:] != times[:-1], True]  # one point per instant: the level after all its events
    return times[last], level[last]


def chrome_trace(graph: CostGraph, machine: Machine, placement: np.ndarray, schedule: Schedule,
                 memory: MemoryProfile | None = None) -> dict[str, Any]:
    """The emulated step as a Trace Event Format object (module docstring): tracks, flows, counters."""
    place = np.asarray(placement, dtype=np.int64)
    start, finish = schedule.start_us, schedule.finish_us
    events: list[dict[str, Any]] = [{"ph": "M", "pid": PID, "name": "process_name",
                                     "args": {"name": f"pardnn emulated step: {graph.name}"}}]
    for d in range(machine.devices):
        events.append({"ph": "M", "pid": PID, "tid": d, "name": "thread_name", "args": {"name": f"device {d}"}})
        events.append({"ph": "M", "pid": PID, "tid": d, "name": "thread_sort_index", "args": {"sort_index": d}})
    kinds = graph.kind.tolist()
    for v, (name, device, t0, t1) in enumerate(zip(graph.names, place.tolist(), start.tolist(), finish.tolist(),
                                                   strict=True)):
        events.append({"ph": "X", "pid": PID, "tid": device, "name": name, "ts": t0, "dur": t1 - t0,
                       "args": {"op": v, "kind": _KINDS.get(kinds[v], str(kinds[v])),
                                "out_bytes": int(graph.out_bytes[v])}})
    cut = np.flatnonzero(place[graph.edge_src] != place[graph.edge_dst])
    for flow, e in enumerate(cut.tolist()):
        u, v = int(graph.edge_src[e]), int(graph.edge_dst[e])
        leave = finish[u] - 1e-3 * (finish[u] - start[u])
        details = {"bytes": int(graph.edge_bytes[e]), "sent_us": float(finish[u]),
                   "arrived_us": float(schedule.edge_arrival_us[e])}
        events.append({"ph": "s", "pid": PID, "tid": int(place[u]), "id": flow, "cat": "transfer",
                       "name": "transfer", "ts": float(leave), "args": details})
        events.append({"ph": "f", "bp": "e", "pid": PID, "tid": int(place[v]), "id": flow, "cat": "transfer",
                       "name": "transfer", "ts": float(start[v]), "args": details})
    if memory is not None:
        limits = machine.limits_bytes if machine.bounded else None
        for d in range(machine.devices):
            times, level = memory_series(memory, d)
            for t, b in zip(times.tolist(), level.tolist(), strict=True):
                args = {"bytes": b} if limits is None else {"bytes": b, "limit": int(limits[d])}
                events.append({"ph": "C", "pid": PID, "name": f"memory device {d}", "ts": t, "args": args})
    return {"traceEvents": events, "displayTimeUnit": "ms",
            "otherData": {"graph": graph.name, "ops": graph.n, "devices": machine.devices,
                          "machine": machine.describe(), "makespan_us": float(schedule.makespan_us),
                          "cut_edges": int(cut.size)}}


def write_trace(path: str | Path, trace: dict[str, Any]) -> None:
    """Write ``trace`` as compact JSON (``.json``; ``.json.gz`` is gzipped: viewers read both)."""
    target = Path(path)
    data = json.dumps(trace, separators=(",", ":")).encode()
    if target.name.endswith(".gz"):
        import gzip

        data = gzip.compress(data, mtime=0)
    target.write_bytes(data)


def plot_memory(path: str | Path, memory: MemoryProfile, machine: Machine, makespan_us: float, *,
                title: str = "") -> None:
    """Each device's memory over the step against its limit, as a PNG (or any format matplotlib
    writes, by ``path``'s suffix). Raises :class:`MissingDependencyError` without matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise MissingDependencyError("--memory-plot needs matplotlib: pip install matplotlib") from None
    gib = 1024.0**3
    scale, unit = (gib, "GiB") if memory.peak_bytes.max(initial=0) >= 0.5 * gib else (1024.0**2, "MiB")
    tscale, tunit = (1e3, "ms") if makespan_us >= 1e4 else (1.0, "µs")
    fig, ax = plt.subplots(figsize=(9, 4.5), dpi=110)
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for d in range(machine.devices):
        color = colors[d % len(colors)]
        times, level = memory_series(memory, d)
        times = np.append(times, max(makespan_us, times[-1]))
        level = np.append(level, level[-1])
        ax.step(times / tscale, level / scale, where="post", color=color, label=f"device {d}")
        ax.plot([memory.peak_time_us[d] / tscale], [memory.peak_bytes[d] / scale], "o", color=color, markersize=4)
        if machine.bounded:
            ax.axhline(machine.limits_bytes[d] / scale, color=color, linestyle="--", linewidth=0.8)
    ax.set_xlabel(f"time in the step ({tunit})")
    ax.set_ylabel(f"memory in use ({unit})")
    ax.set_title(title or "memory per device over one emulated step" + (" (dashed: limit)" if machine.bounded else ""))
    ax.set_xlim(0, makespan_us / tscale if makespan_us > 0 else 1)
    ax.set_ylim(bottom=0)
    ax.legend(loc="upper right", fontsize="small", ncol=max(1, machine.devices // 8))
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
