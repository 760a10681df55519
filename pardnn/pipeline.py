"""The ParDNN pipeline: slicing → (chunk splitting) → LFLAM mapping → colocation → memory heuristic →
guard → refinement → ordering → evaluation. :func:`partition` is the public entry point
(``from pardnn import partition``).

``partition(graph, machine)`` returns the placement and a report of what each stage did and cost.
Each stage is a module with one public entry (Step 1: :mod:`~pardnn.slicing`, :mod:`~pardnn.mapping`;
colocation: :mod:`~pardnn.colocation`; Step 2: :mod:`~pardnn.overflow`, :mod:`~pardnn.balance`);
this module only chains them and measures.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from pardnn.balance import balance_residuals, split_critical_path
from pardnn.colocation import resolve_groups
from pardnn.emulator import Schedule, emulate
from pardnn.errors import NoPlacementFoundError, PardnnError
from pardnn.feasibility import check_feasible, infeasible_message
from pardnn.graph import CostGraph
from pardnn.guard import Prepared, guard, place_under_memory, prepare_candidates
from pardnn.machine import Machine
from pardnn.mapping import map_clusters
from pardnn.memory import track_memory
from pardnn.order import order_placement
from pardnn.overflow import handle_overflow
from pardnn.refine import REFINE_SECONDS, refine
from pardnn.result import PartitionReport, Progress, Result, communication_ratio
from pardnn.simulate import evaluate
from pardnn.slicing import slice_graph

__all__ = ["MEMORY_HEURISTICS", "THREADS_VARIABLE", "available_cores", "partition", "resolve_heuristic"]

# Caps the threads partition() uses (the guard's candidates are made in a second thread when it allows two).
THREADS_VARIABLE = "PARDNN_THREADS"


# The memory heuristics of Step 2, by name (the CLI's and the settings' choices are built from it).
MEMORY_HEURISTICS = ("overflow", "balance")


def resolve_heuristic(memory_heuristic: str | None, machine: Machine) -> str | None:
    """The heuristic to run: ``"auto"`` is ``"overflow"`` on a machine with memory, else none.

    ``None`` and ``"none"`` mean Step 1 only. Raises :class:`ValueError` for an unknown name.
    """
    if memory_heuristic == "auto":
        return "overflow" if machine.bounded else None
    if memory_heuristic in (None, "none"):
        return None
    if memory_heuristic not in MEMORY_HEURISTICS:
        expected = ", ".join(repr(name) for name in MEMORY_HEURISTICS)
        raise ValueError(f"memory_heuristic={memory_heuristic!r}; expected {expected}, None or 'auto'")
    return memory_heuristic


def available_cores() -> int:
    """The cores this process may run on, capped by ``$PARDNN_THREADS`` when it is set."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    text = os.environ.get(THREADS_VARIABLE, "").strip()
    if not text:
        return cores
    try:
        cap = int(text)
    except ValueError:
        cap = 0
    if cap < 1:
        raise PardnnError(f"${THREADS_VARIABLE} = {text!r}: expected a whole number of threads >= 1 "
                          f"(1 runs everything in one thread; unset it to use every core)")
    return min(cores, cap)


class _Ahead:
    """The guard's candidates (:func:`pardnn.guard.prepare_candidates`), made by a worker thread while
    Steps 1 and 2 run on the caller's. A daemon, so an error in the caller's stages never waits for it."""

    def __init__(self, graph: CostGraph, machine: Machine, weight: np.ndarray) -> None:
        self._prepared: dict[str, Prepared] | None = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, args=(graph, machine, weight), name="pardnn-guard",
                                        daemon=True)
        self._thread.start()

    def _run(self, graph: CostGraph, machine: Machine, weight: np.ndarray) -> None:
        try:
            self._prepared = prepare_candidates(graph, machine, weight)
        except BaseException as exc:  # handed to the caller by result()
            self._error = exc

    def result(self) -> dict[str, Prepared]:
        self._thread.join()
        if self._error is not None:
            raise self._error
        assert self._prepared is not None
        return self._prepared


def partition(graph: CostGraph, machine: Machine, *, memory_heuristic: str | None = "auto",
              progress: Progress | None = None, guarded: bool = True,
              refine_seconds: float = REFINE_SECONDS, ordered: bool = True) -> Result:
    """Place every op of ``graph`` on one of ``machine.devices`` devices with ParDNN.

    Parameters
    ----------
    graph:
        The training step's cost graph.
    machine:
        Devices, memory, interconnect.
    memory_heuristic:
        ``"overflow"`` (heuristic I: emulate and move ops off overflowing devices; guarantees the
        limits or raises), ``"balance"`` (heuristic II: critical-path chunk splitting before mapping
        and residual balancing after it; no emulation, no guarantee), ``None`` (Step 1 only), or
        ``"auto"`` (the default: ``"overflow"`` when the machine has a memory size, else ``None``).
    progress:
        Called as ``progress(stage, done, total)`` during long stages.
    guarded:
        Compare the answer with cheap placements that fit, keep the fastest (:mod:`pardnn.guard`) and
        refine it by local search on its schedule (:mod:`pardnn.refine`); the default. ``False``
        returns the paper's algorithm alone.
    refine_seconds:
        The refinement's budget, turned into a fixed number of emulations (deterministic); 0 skips it.
        The ordering stage's refinement gets the same budget.
    ordered:
        With the guard: try a run order per device (:mod:`pardnn.order`) and keep it, with the
        placement refined under it, when the step is strictly shorter and fits; the default.
        ``False`` never returns an order (every device runs in order of readiness).

    Returns
    -------
    Result
        ``placement`` (int64, one device per op; colocation groups whole; byte-identical across
        runs), a :class:`PartitionReport`, and ``order`` (``None`` or each op's position on its
        device, which the report's makespan assumes).

    Raises
    ------
    InfeasibleError
        With a memory heuristic: a proof that no placement meets every device's limit
        (:func:`pardnn.feasibility.check_feasible`), or, as its subclass
        :class:`~pardnn.errors.NoPlacementFoundError`, when neither ParDNN nor the other placers
        (through the guard's last resort) found one — no proof.

    Notes
    -----
    Slicing O(K(|V| + |E|)), mapping O(|V| log^2 |V|), evaluation O((|V| + |E|) log |V|); heuristic I
    adds one evaluation per round, heuristic II O(|V| + |E|). With the guard on and two or more cores
    (:func:`available_cores`; ``PARDNN_THREADS=1`` turns it off) the guard's candidates are made and
    emulated in a second thread during Steps 1 and 2; the placement is the same either way.
    """
    heuristic = resolve_heuristic(memory_heuristic, machine)
    k = machine.devices
    seconds: dict[str, float] = {}
    details: dict[str, Any] = {"memory_heuristic": heuristic}

    def report_progress(stage: str) -> Callable[[int, int], None] | None:
        return None if progress is None else lambda done, total: progress(stage, done, total)

    t0 = time.perf_counter()
    if heuristic is not None:
        check_feasible(graph, machine)  # a proof that no placement fits ends here (InfeasibleError)
    weight = machine.edge_comm_us(graph.edge_bytes)
    # On two or more cores the guard's candidates are made alongside Steps 1 and 2 (same answer).
    ahead = _Ahead(graph, machine, weight) if guarded and k >= 2 and available_cores() >= 2 else None
    ccr = communication_ratio(graph, machine)
    clusters = slice_graph(graph, weight, k, progress=report_progress("slicing"))
    details["primary_ops"] = np.diff(clusters.ptr[: k + 1]).tolist()
    if heuristic == "balance":
        clusters, details["chunk_split_ops"] = split_critical_path(graph, clusters)
    seconds["slicing"] = time.perf_counter() - t0

    t1 = time.perf_counter()
    if progress is not None:
        progress("mapping", 0, 1)
    mapping = map_clusters(graph, weight, clusters, k, ccr)
    groups = resolve_groups(graph, machine, mapping.placement, weight)
    placement = groups.placement
    schedule: Schedule | None = groups.schedule
    details.update(colocation_moved=groups.moved, colocation_rule=groups.rule)
    details.update(secondary_clusters=clusters.count - k, mapped_by_locality=mapping.mapped_by_locality,
                   mapped_by_balance=mapping.mapped_by_balance, lookahead_passes=mapping.passes)
    seconds["mapping"] = time.perf_counter() - t1

    failure: PardnnError | None = None
    order: np.ndarray | None = None
    memory = groups.memory
    if heuristic is not None:
        t2 = time.perf_counter()
        before = evaluate(graph, machine, placement, schedule=schedule, memory=groups.memory)
        details.update(peak_before_bytes=before.peak_memory_bytes, makespan_before_us=before.makespan_us,
                       fits_before=before.memory_fits)
        seconds["evaluation_before"] = time.perf_counter() - t2
        t3 = time.perf_counter()
        moved = 0
        if heuristic == "overflow":
            try:
                handled = handle_overflow(graph, machine, placement, progress=report_progress("memory"))
            except NoPlacementFoundError as exc:  # the heuristic gave up: no proof, other placements may fit
                failure = exc
                details["memory_heuristic_failed"] = str(exc)
            else:
                placement, moved = handled.placement, handled.moved_ops
                schedule, memory = handled.schedule, handled.memory  # its last round's emulation
                details["overflow_rounds"] = handled.rounds
        else:
            balanced = balance_residuals(graph, machine, placement)
            placement, moved = balanced.placement, balanced.moved_ops
            schedule, memory = None, None
            details["residual_units_moved"] = balanced.moved_units
        details.update(moved_ops=moved, moved_share=moved / graph.n if graph.n else 0.0)
        seconds["memory"] = time.perf_counter() - t3
        if failure is None:
            if schedule is None or memory is None:
                schedule = emulate(graph, machine, placement)
                memory = track_memory(graph, machine, placement, schedule)
            details.update(peak_after_bytes=memory.peak_bytes.tolist(), makespan_after_us=schedule.makespan_us)

    if guarded:
        t4 = time.perf_counter()
        if progress is not None:
            progress("guard", 0, 1)
        prepared = None if ahead is None else ahead.result()
        kept = guard(graph, machine, placement, None if failure else schedule, memory, weight, prepared)
        if kept.winner is None and heuristic is not None:
            kept = place_under_memory(graph, machine, kept, failure, prepared=prepared,
                                      progress=report_progress("fallback"))
        details["guard"] = kept.details()
        seconds["guard"] = time.perf_counter() - t4
        if kept.winner is not None:
            placement, schedule, memory, failure = kept.placement, kept.schedule, kept.memory, None
            t5 = time.perf_counter()
            if progress is not None:
                progress("refine", 0, 1)
            refined = refine(graph, machine, placement, schedule, memory, seconds=refine_seconds)
            placement, schedule, memory = refined.placement, refined.schedule, refined.memory
            details["refine"] = refined.details()
            seconds["refine"] = time.perf_counter() - t5
            if ordered:
                t7 = time.perf_counter()
                if progress is not None:
                    progress("order", 0, 1)
                chosen, details["order"] = order_placement(graph, machine, placement, schedule,
                                                           seconds=refine_seconds)
                if chosen is not None:
                    placement, schedule, memory = chosen.placement, chosen.schedule, chosen.memory
                    order = chosen.position
                seconds["order"] = time.perf_counter() - t7
    if failure is not None:
        raise failure

    t6 = time.perf_counter()
    if progress is not None:
        progress("evaluation", 0, 1)
    evaluation = evaluate(graph, machine, placement, schedule=schedule, memory=memory)
    seconds["evaluation"] = time.perf_counter() - t6
    if heuristic is not None and not evaluation.memory_fits:
        limits = machine.limits_bytes
        peaks = np.array(evaluation.peak_memory_bytes)
        worst = int(np.argmax(peaks - limits))
        raise NoPlacementFoundError("no placement found: " + infeasible_message(
            worst, int(peaks[worst]), int(limits[worst]), machine,
            " after memory heuristic II (it balances memory but cannot guarantee the limits; "
            "--memory-heuristic overflow can)"))
    report = PartitionReport("pardnn", k, graph.n, graph.m, ccr, seconds, evaluation, details)
    placement.flags.writeable = False
    if order is not None:
        order.flags.writeable = False
    return Result(placement, report, order)
