"""The run's summary (``summary.json``, rank 0) and its row in ``results.csv`` for sweeps.

:func:`summarize` builds the summary from the replicas' figures; :func:`results_row` is its row
(:data:`RESULTS_COLUMNS`, explained in docs/launcher.md, ``results.csv`` columns). Global throughput
is the sum of the replicas' throughputs over the window; a run missing some replicas' figures has
``None`` there (``nodes_missing``, ``window_complete``). Why: docs/notes-launcher.md.
"""

from __future__ import annotations

import dataclasses
import json
import platform
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

__all__ = ["FORMAT", "RESULTS_COLUMNS", "job_dict", "results_row", "summarize", "versions"]

FORMAT = "pardnn-launch-summary"
RESULTS_COLUMNS = (
    "finished_utc", "job", "model", "status", "nodes", "devices_per_node", "device_kind", "batch_size",
    "global_batch_size", "iterations", "window", "samples_per_s", "tokens_per_s", "samples_per_s_per_node",
    "step_ms_median", "simulated_makespan_us", "costs", "memory", "placement_sha256", "run_dir", "window_complete",
    "placer", "parallelism", "recompute", "emulated_step_ms", "step_ratio", "peak_memory_bytes", "fits", "message",
    "micro_batches", "replica_devices", "plan", "emulated_allreduce_ms", "val_loss", "val_metrics",
)


def job_dict(job: Any) -> dict[str, Any]:
    """The job's fields as plain data (a dataclass, or any object with attributes)."""
    if dataclasses.is_dataclass(job) and not isinstance(job, type):
        fields = dataclasses.asdict(job)
    else:
        fields = dict(vars(job))
    return {k: (str(v) if isinstance(v, Path) else v) for k, v in fields.items()}


def versions() -> dict[str, str | None]:
    """Versions of what ran: Python, pardnn, NumPy, TensorFlow, Horovod, mpi4py and the MPI library."""
    found: dict[str, str | None] = {"python": platform.python_version()}
    for name, module in (("pardnn", "pardnn"), ("numpy", "numpy"), ("tensorflow", "tensorflow"),
                         ("horovod", "horovod"), ("mpi4py", "mpi4py")):
        loaded = sys.modules.get(module)
        found[name] = getattr(loaded, "__version__", None) if loaded is not None else None
    mpi = sys.modules.get("mpi4py.MPI")
    found["mpi"] = mpi.Get_library_version().replace("\0", "").splitlines()[0].strip() if mpi is not None else None  # type: ignore[attr-defined]
    return found


def _sum(values: Sequence[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return float(sum(present)) if len(present) == len(values) and present else None


def summarize(*, status: str, job: Any, settings: Mapping[str, Any], nodes: Sequence[Mapping[str, Any]],
              devices: Mapping[str, Any], placement: Mapping[str, Any], extra: Mapping[str, Any],
              node_count: int | None = None, replicas_per_node: int = 1,
              batch_size: int | None = None) -> dict[str, Any]:
    """The summary document. ``nodes`` are the replicas' :meth:`Collector.node_summary` figures, by rank;
    ``node_count`` the run's replicas (default: as many as figures), more when some figures are missing;
    ``replicas_per_node`` 1, or K with data parallelism; ``batch_size`` a replica's (default the settings')."""
    count = len(nodes) if node_count is None else node_count
    trained = all(n["throughput"].get("steps", 1) for n in nodes)
    rates = [n["throughput"]["samples_per_s"] for n in nodes]
    tokens = [n["throughput"]["tokens_per_s"] for n in nodes]
    whole = len(nodes) == count and trained
    batch = settings["batch_size"] if batch_size is None else batch_size
    return {
        "format": FORMAT,
        "version": 1,
        "status": status,
        "job": job_dict(job),
        "settings": dict(settings),
        "nodes": count // replicas_per_node,
        "replicas": count,
        "devices_per_node": devices["count"] * replicas_per_node,
        "device_kind": devices["kind"],
        "device_names": list(devices["names"]),
        "batch_size": batch,
        "global_batch_size": batch * count,
        "window": list(settings["window"]),
        "throughput": {
            "samples_per_s": _sum(rates) if whole else None,
            "tokens_per_s": _sum(tokens) if whole else None,
            "per_node_samples_per_s": rates,
            "complete": whole and all(n["throughput"]["complete"] for n in nodes),
        },
        "per_node": list(nodes),
        "placement": dict(placement),
        **extra,
        "versions": versions(),
    }


def results_row(summary: Mapping[str, Any], finished_utc: str, run_dir: Path) -> dict[str, Any]:
    """The ``results.csv`` row of a summary (columns :data:`RESULTS_COLUMNS`)."""
    throughput = summary["throughput"]
    medians = [n["throughput"]["step_ms_median"] for n in summary["per_node"]]
    medians = [m for m in medians if m is not None]
    evaluation = summary["placement"].get("report", {}).get("evaluation", {})
    job = summary["job"]
    step = summary.get("step_ms") or {}
    peaks = [peak for n in summary["per_node"] for peak in n.get("memory", {}).get("device_peak_bytes", {}).values()]
    fits = evaluation.get("memory_fits")
    last_validation = (summary.get("validation") or [{}])[-1]  # [eval]: the last validation, every rank's mean
    return {
        "finished_utc": finished_utc,
        "job": job.get("name"),
        "model": job.get("model"),
        "status": summary["status"],
        "nodes": summary["nodes"],
        "devices_per_node": summary["devices_per_node"],
        "device_kind": summary["device_kind"],
        "batch_size": summary["batch_size"],
        "global_batch_size": summary["global_batch_size"],
        "iterations": summary["settings"]["iterations"],
        "window": "{}:{}".format(*summary["window"]),
        "samples_per_s": throughput["samples_per_s"],
        "tokens_per_s": throughput["tokens_per_s"],
        "samples_per_s_per_node": (throughput["samples_per_s"] / summary["nodes"]
                                   if throughput["samples_per_s"] is not None else None),
        "step_ms_median": max(medians) if medians else None,
        "simulated_makespan_us": evaluation.get("makespan_us"),
        "costs": summary["settings"]["costs"],
        "memory": summary["settings"]["memory"] or "unlimited",
        "placement_sha256": summary["placement"].get("sha256"),
        "run_dir": str(run_dir),
        "window_complete": str(bool(throughput["complete"])).lower(),
        "placer": summary.get("placer"),
        "parallelism": summary.get("parallelism", "model"),
        "recompute": str(bool(summary.get("recompute"))).lower(),
        "emulated_step_ms": step.get("emulated"),
        "step_ratio": step.get("ratio"),
        "peak_memory_bytes": max(peaks, default=None),
        "fits": "" if fits is None else str(bool(fits)).lower(),
        "message": summary.get("message"),
        "micro_batches": _micro_batches(summary),
        "replica_devices": _replica_devices(summary),
        "plan": _plan(summary.get("plan")),
        "emulated_allreduce_ms": step.get("emulated_allreduce_exposed"),
        "val_loss": last_validation.get("loss"),
        "val_metrics": json.dumps(last_validation["metrics"], sort_keys=True) if last_validation else None,
    }


def _replica_devices(summary: Mapping[str, Any]) -> Any:
    """Devices per replica: 1 for data parallelism, else the setting or plan (all the node's by default)."""
    if summary.get("parallelism") == "data":
        return 1
    chosen = (summary.get("plan") or {}).get("chosen")
    if chosen:
        return chosen["replica_devices"]
    k = summary["settings"].get("replica_devices")
    return summary["devices_per_node"] if k in (None, "auto") else k


def _plan(report: Mapping[str, Any] | None) -> str | None:
    """``auto: k=2 M=4 of 12 plans tried (5 pruned, not placed)`` for a planned run
    (``--replica-devices auto``), else empty."""
    if not report:
        return None
    chosen = report.get("chosen")
    tried = sum(trial["status"] != "skipped" for trial in report.get("trials", ()))
    pruned = sum(trial["status"] == "pruned" for trial in report.get("trials", ()))
    what = "none fits" if chosen is None else f"k={chosen['replica_devices']} M={chosen['micro_batches']}"
    return f"{report.get('mode', 'auto')}: {what} of {tried} plans tried" + (f" ({pruned} pruned, not placed)"
                                                                              if pruned else "")


def _micro_batches(summary: Mapping[str, Any]) -> Any:
    """The M trained: ``--micro-batches auto``'s choice (``None`` when no M fitted), else the setting."""
    chosen = summary.get("micro_batches")
    if isinstance(chosen, Mapping):
        return chosen.get("chosen")
    return summary["settings"].get("micro_batches", 1)
