"""``--compare a,b,...``: several variants of one job, one after the other in one allocation, and one table.

:func:`compare` (what :func:`launcher.run` calls when ``compare`` is set) trains each entry (a placer,
``data``, ``data+recompute`` or ``k=K``: :mod:`launcher.variants`) over the same window in the order
given, each a run of its own, then writes ``comparison.md`` and ``comparison.json`` and prints the table
(:func:`table`). docs/launcher.md (Side by side) shows the table; rules: docs/notes-launcher.md.
"""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path
from typing import Any

from launcher.cluster.topology import Topology
from launcher.errors import UNTRAINED, AgreedError
from launcher.files import write_json, write_text
from launcher.lifecycle import (
    LOG_FILE,
    attach_log,
    detach_log,
    make_folder,
    open_run,
    run_variant,
    start_allreduce,
)
from launcher.rank.failure import exit_code, one_line, status_of
from launcher.rank.signals import StopGuard
from launcher.rank.state import RunState
from launcher.reporting.summary import results_row
from launcher.settings import Settings
from launcher.variants import SharedByVariants, Variant, variants_of
from pardnn.costs.machine import format_bytes

__all__ = ["TABLE_FILE", "RunningVariant", "compare", "table"]

logger = logging.getLogger("launcher")

TABLE_FILE = "comparison.md"
ROWS_FILE = "comparison.json"


@dataclasses.dataclass
class RunningVariant:
    """The variant running now, for the run's error handling: its topology and its state."""

    topology: Topology | None = None
    state: RunState | None = None


def _one(job: Any, settings: Settings, topology: Topology, variant: Variant, shared: SharedByVariants,
         where: RunningVariant) -> dict[str, Any] | None:
    """Train ``variant`` on ``topology``; its summary on rank 0. An untrained end is its outcome."""
    where.topology, where.state = topology, None
    state, _ = open_run(job, settings, topology, variant, log=False)
    where.state = state
    try:
        with StopGuard(state.stop, exit_now=state.exit_now) as guard:
            run_variant(state, shared, guard)
    except AgreedError as error:
        status = status_of(error)
        if status not in UNTRAINED:
            raise
        state.flush(status, one_line(error), speaker=topology.is_root, exit_code=exit_code(error))
        if topology.is_root:
            logger.warning("%s: %s", status, one_line(error))
    return state.summary


def _devices_per_replica(variant: Variant, world: Topology) -> int | None:
    """The k whose every k-th rank per node trains ``variant`` (``None``: every rank): a plan ``k=K``'s K,
    a placer's one rank per node (K = the ranks per node), data parallelism's every rank."""
    if variant.placer is None:
        return None
    k = variant.replica_devices if variant.replica_devices is not None else world.ranks_per_node
    return None if k == 1 else k


def compare(job: Any, settings: Settings, world: Topology, shared: SharedByVariants,
            where: RunningVariant) -> dict[str, Any]:
    """Train every variant of ``settings.compare`` in turn and print the table (collective over ``world``).

    Returns the summaries by variant on rank 0 (``{}`` on the other ranks).
    """
    folder = make_folder(world, settings, str(getattr(job, "name", "job")), "compare")
    handler = attach_log(folder / LOG_FILE.format(rank=world.rank), world)
    try:
        variants = variants_of(settings)
        ks = [_devices_per_replica(variant, world) for variant in variants]
        start_allreduce(shared, world, settings.allreduce, replica_devices=[k for k in ks if k is not None])
        summaries: dict[str, dict[str, Any] | None] = {}
        for variant, k in zip(variants, ks, strict=True):
            world.wait_for_all()
            topology = world if k is None else world.replicas(k)  # collective; None: this rank waits
            if shared.training_k != k:  # another batch, devices and group: build and cost anew
                shared.costed = None
            shared.train_on(k)
            if topology is not None:
                run_settings = settings if variant.replica_devices is None else dataclasses.replace(
                    settings, replica_devices=variant.replica_devices)
                summaries[variant.label] = _one(job, run_settings, topology, variant, shared, where)
            where.topology, where.state = world, None
        world.wait_for_all()
        if not world.is_root:
            return {}
        rows = [None if summary is None else results_row(summary, "", Path(summary["run_dir"]))
                for summary in summaries.values()]
        text = table(list(summaries), rows)
        write_text(folder / TABLE_FILE, f"# {getattr(job, 'name', 'job')}: comparison\n\n{text}\n")
        write_json(folder / ROWS_FILE, {"variants": list(summaries), "rows": rows})
        print(text, flush=True)
        logger.info("comparison of %d variants: %s", len(summaries), folder / TABLE_FILE)
        return {label: summary for label, summary in summaries.items() if summary is not None}
    finally:
        detach_log(handler)


def _number(value: Any, digits: int = 1) -> str:
    return "" if value in (None, "") else f"{float(value):,.{digits}f}"


def table(labels: list[str], rows: list[dict[str, Any] | None]) -> str:
    """The comparison as a Markdown table: one line per variant, speed-up over the first one's samples/s;
    *of it allreduce ms*: the gradient allreduce's exposed share of the emulated step (several replicas)."""
    head = ("| variant | status | samples/s | speed-up | emulated step ms | of it allreduce ms | measured step ms "
            "| measured / emulated | peak memory | fits |")
    lines = [head, "|---" * 10 + "|"]
    first = rows[0]["samples_per_s"] if rows and rows[0] else None
    for label, row in zip(labels, rows, strict=True):
        if row is None:
            lines.append(f"| {label} | missing | | | | | | | | |")
            continue
        rate = row["samples_per_s"]
        speedup = f"{rate / first:.2f}×" if rate and first else ""
        peak = "" if row["peak_memory_bytes"] is None else format_bytes(row["peak_memory_bytes"])
        fits = {"true": "yes", "false": "no"}.get(row["fits"], "")
        steps = " | ".join(_number(row.get(key), 2) for key in ("emulated_step_ms", "emulated_allreduce_ms",
                                                                 "step_ms_median", "step_ratio"))
        lines.append(f"| {label} | {row['status']} | {_number(rate)} | {speedup} | {steps} | {peak} | {fits} |")
    return "\n".join(lines)
