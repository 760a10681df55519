"""The ParDNN pipeline: :func:`partition` chains Step 1, colocation, Step 2 and the stages of :data:`POLISH`.

Each stage is a module (docs/algorithm.md); this one chains and times them. A chain is split to fit memory:
>>> from pardnn import CostGraph, Machine
>>> chain = CostGraph(list("wxyz"), [5.0] * 4, [2**20] * 4, src=[0, 1, 2], dst=[1, 2, 3], kind=["residual"] * 4)
>>> result = partition(chain, Machine(2, memory="3MiB", reserve=0))  # four 1 MiB outputs, 3 MiB per device
>>> sorted(peak // 2**20 for peak in result.report.evaluation.peak_memory_bytes)  # MiB
[2, 3]
"""

from __future__ import annotations

import math
import os
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import numpy as np

from pardnn.costs.graph import CostGraph
from pardnn.costs.machine import Machine
from pardnn.emulation.emulated import Emulated, emulate_and_track
from pardnn.emulation.memory import MemoryProfile, track_memory
from pardnn.emulation.simulate import evaluate, evaluate_step
from pardnn.errors import NoPlacementFoundError, PardnnError
from pardnn.heap import release_free_memory, reusing_freed_memory
from pardnn.placement.result import PartitionReport, Progress, Result, communication_ratio, warn_if_uncosted
from pardnn.polish.candidates import CandidateEmulations, make_candidates
from pardnn.polish.guard import Prepared, guard_stage
from pardnn.polish.order import order_stage
from pardnn.polish.refine import REFINE_SECONDS, refine_stage
from pardnn.polish.stages import Context, Stage, polish
from pardnn.steps.balance import balance_residuals, split_critical_path
from pardnn.steps.colocation import Groups, resolve_groups
from pardnn.steps.feasibility import check_feasible, infeasible_message
from pardnn.steps.mapping import map_clusters
from pardnn.steps.overflow import handle_overflow
from pardnn.steps.slicing import slice_graph

__all__ = ["MEMORY_HEURISTICS", "PAPER", "POLISH", "THREADS_VARIABLE", "available_cores", "partition",
           "resolve_heuristic"]

# Caps the threads partition() uses (the guard's candidates are made in a second thread when it allows two).
THREADS_VARIABLE = "PARDNN_THREADS"


# The memory heuristics of Step 2, by name (the CLI's and the settings' choices are built from it).
MEMORY_HEURISTICS = ("overflow", "balance")

# The polishing stages after Step 2, in order; each has its own switch in partition().
GUARD = Stage("guard", guard_stage, needs_fit=False)  # also answers when Step 2 gave up or does not fit
REFINE = Stage("refine", refine_stage)
ORDER = Stage("order", order_stage)
POLISH = (GUARD, REFINE, ORDER)
# partition()'s switches for the paper's algorithm alone: no polishing stage.
PAPER: dict[str, Any] = {"guarded": False, "refine_seconds": 0.0, "ordered": False}


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


class _CandidatesInBackground:
    """The guard's candidates (:mod:`pardnn.polish.candidates`), made by a worker thread while Steps 1 and 2 run
    on the caller's; the caller joins in their emulations once it waits for them (:meth:`result`). A
    daemon, so an error in the caller's stages never waits for it."""

    def __init__(self, graph: CostGraph, machine: Machine, weight: np.ndarray, ordered: bool) -> None:
        self._emulations: CandidateEmulations | None = None
        self._made = threading.Event()  # set once the placements are made (or making them failed)
        self._prepared: dict[str, Prepared] | None = None
        self._error: BaseException | None = None
        self._start = math.inf  # the guard's starting best, once Step 2 has published it
        self._thread = threading.Thread(target=self._run, args=(graph, machine, weight, ordered),
                                        name="pardnn-guard", daemon=True)
        self._thread.start()

    def _run(self, graph: CostGraph, machine: Machine, weight: np.ndarray, ordered: bool) -> None:
        try:
            try:
                made = make_candidates(graph, machine, weight, ordered)
                self._emulations = CandidateEmulations(graph, machine, made, start=lambda: self._start)
            finally:
                self._made.set()
            self._emulations.run()
            self._prepared = self._emulations.prepared
        except BaseException as exc:  # handed to the caller by result()
            self._error = exc

    def publish(self, answer: Emulated | None, machine: Machine) -> None:
        """Step 2's answer: the guard starts from its makespan when it fits (the worker skips emulating
        candidates the guard will prune against it)."""
        if answer is not None and answer.fits(machine):
            self._start = answer.makespan_us

    def running(self) -> bool:
        """Whether the worker is still making or emulating candidates."""
        return self._thread.is_alive()

    def result(self) -> dict[str, Prepared]:
        """The candidates, handed over once: the guard alone reads them, and without this reference
        they go with its stage (8 placements and the fastest's schedule: 100 MB on 1M ops). The caller
        emulates candidates too while any is left (two emulations at once on two cores: the worker no
        longer finishes the queue alone)."""
        self._made.wait()
        if self._emulations is not None:
            try:
                self._emulations.run()
            finally:
                self._thread.join()
        self._thread.join()
        if self._error is not None:
            raise self._error
        prepared, self._prepared = self._prepared, None
        assert prepared is not None, "the guard's candidates are handed over once"
        if not reusing_freed_memory():  # one shared arena: the main thread reuses it (pardnn.heap)
            release_free_memory()  # else what the worker freed stays in its arena
        return prepared


class _MemoryAhead:
    """The memory profile of the answer the last polishing stage starts from, tracked in a second
    thread while that stage runs: the evaluation needs it when the stage keeps nothing (the ordering
    stage, mostly), and the second core is idle by then. The same profile the evaluation would track."""

    def __init__(self) -> None:
        self._answer: Emulated | None = None
        self._memory: MemoryProfile | None = None
        self._error: BaseException | None = None
        self._thread: threading.Thread | None = None

    def before(self, stage: Stage) -> Stage:
        """``stage``, starting the tracking of its starting answer first."""
        def run(graph: CostGraph, machine: Machine, current: Emulated | None, context: Context) -> Any:
            if current is not None and current.memory is None and self._thread is None:
                self._answer = current
                self._thread = threading.Thread(target=self._track, args=(graph, machine, current),
                                                name="pardnn-memory", daemon=True)
                self._thread.start()
            return stage.run(graph, machine, current, context)
        return replace(stage, run=run)

    def _track(self, graph: CostGraph, machine: Machine, answer: Emulated) -> None:
        try:
            self._memory = track_memory(graph, machine, np.asarray(answer.placement, dtype=np.int64), answer.schedule)
        except BaseException as exc:  # raised by memory_of, as the evaluation would have raised it
            self._error = exc

    def memory_of(self, answer: Emulated) -> MemoryProfile | None:
        """The tracked profile when ``answer`` is the one tracked, else ``None`` (waits for the thread)."""
        if self._thread is None:
            return None
        self._thread.join()
        if answer is not self._answer:
            return None
        if self._error is not None:
            raise self._error
        return self._memory


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
        The guard stage (:mod:`pardnn.polish.guard`): compare the answer with cheap placements that fit and
        keep the fastest; the default.
    refine_seconds:
        The refinement stage's budget (:mod:`pardnn.polish.refine`), turned into a fixed number of emulations
        (deterministic); 0 skips the stage. The ordering stage's refinement gets the same budget.
    ordered:
        The ordering stage (:mod:`pardnn.polish.order`): try a run order per device and keep it, with the
        placement refined under it, when the step is strictly shorter and fits; the default.
        ``False`` never returns an order (every device runs in order of readiness).

    ``**PAPER`` (:data:`PAPER`) turns every polishing stage off: the paper's algorithm alone.

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
        (:func:`pardnn.steps.feasibility.check_feasible`), or, as its subclass
        :class:`~pardnn.errors.NoPlacementFoundError`, when neither ParDNN nor the other placers
        (through the guard's last resort) found one — no proof.

    Notes
    -----
    Slicing O(K(|V| + |E|)), mapping O(|V| log^2 |V|), evaluation O((|V| + |E|) log |V|); heuristic I
    adds one evaluation per round, heuristic II O(|V| + |E|). With the guard on and two or more cores
    (:func:`available_cores`; ``PARDNN_THREADS=1`` turns it off) the guard's candidates are made and
    emulated in a second thread during Steps 1 and 2; the placement is the same either way. A graph
    whose ops all cost 0 µs is placed all the same, with one logged warning (it was never costed).
    Examples: the module docstring (a chain split to fit) and :mod:`pardnn`'s.
    """
    heuristic = resolve_heuristic(memory_heuristic, machine)
    warn_if_uncosted(graph)  # placed all the same: legal, but almost surely never costed
    seconds: dict[str, float] = {}
    details: dict[str, Any] = {"memory_heuristic": heuristic}
    started = time.perf_counter()
    if heuristic is not None:
        check_feasible(graph, machine)  # a proof that no placement fits ends here (InfeasibleError)
    weight = machine.edge_comm_us(graph.edge_bytes)
    # On two or more cores the guard's candidates are made alongside Steps 1 and 2 (same answer).
    parallel = guarded and machine.devices >= 2 and available_cores() >= 2
    ahead = _CandidatesInBackground(graph, machine, weight, ordered) if parallel else None
    ccr = communication_ratio(graph, machine)
    groups = _step1(graph, machine, heuristic, weight, ccr, seconds, details, progress, started)
    current, failure = _step2(graph, machine, heuristic, groups, seconds, details, progress)
    if ahead is not None:
        ahead.publish(current, machine)
    switches = ((GUARD, guarded), (REFINE, refine_seconds > 0), (ORDER, ordered))
    context = Context(weight, refine_seconds, failure, heuristic, ahead, ordered=ordered)
    current = _polished(graph, machine, current, [stage for stage, on in switches if on], context, parallel,
                        seconds, details, progress)
    if current is None:
        assert failure is not None  # only heuristic I giving up leaves no answer
        raise failure
    return _evaluated(graph, machine, current, heuristic, ccr, seconds, details, progress)


def _polished(graph: CostGraph, machine: Machine, current: Emulated | None, stages: list[Stage], context: Context,
              parallel: bool, seconds: dict[str, float], details: dict[str, Any],
              progress: Progress | None) -> Emulated | None:
    """The polishing stages run from ``current``; with ``parallel``, the memory of the last stage's
    starting answer is tracked beside it (:class:`_MemoryAhead`) and kept on the answer when it stays."""
    memory = _MemoryAhead()
    if parallel and stages:
        stages[-1] = memory.before(stages[-1])
    current = polish(graph, machine, current, stages, context, seconds=seconds, details=details, progress=progress)
    if current is not None and current.memory is None:
        current = replace(current, memory=memory.memory_of(current))
    return current


def _step1(graph: CostGraph, machine: Machine, heuristic: str | None, weight: np.ndarray, ccr: float | None,
           seconds: dict[str, float], details: dict[str, Any], progress: Progress | None, started: float) -> Groups:
    """Step 1: graph slicing (with heuristic II's chunk splitting), LFLAM mapping, colocation groups whole."""
    k = machine.devices
    clusters = slice_graph(graph, weight, k, progress=_within(progress, "slicing"))
    details["primary_ops"] = np.diff(clusters.ptr[: k + 1]).tolist()
    if heuristic == "balance":
        clusters, details["chunk_split_ops"] = split_critical_path(graph, clusters)
    seconds["slicing"] = time.perf_counter() - started
    started = time.perf_counter()
    if progress is not None:
        progress("mapping", 0, 1)
    mapping = map_clusters(graph, weight, clusters, k, 0.0 if ccr is None else ccr)  # no work: the low-CCR rule
    groups = resolve_groups(graph, machine, mapping.placement, weight)
    details.update(colocation_moved=groups.moved, colocation_rule=groups.rule)
    details.update(secondary_clusters=clusters.count - k, mapped_by_locality=mapping.mapped_by_locality,
                   mapped_by_balance=mapping.mapped_by_balance, lookahead_passes=mapping.passes)
    seconds["mapping"] = time.perf_counter() - started
    return groups


def _step2(graph: CostGraph, machine: Machine, heuristic: str | None, groups: Groups, seconds: dict[str, float],
           details: dict[str, Any], progress: Progress | None) -> tuple[Emulated | None, PardnnError | None]:
    """Step 2, the memory heuristic: the answer (``None`` when heuristic I gave up) and why it gave up."""
    mapped = Emulated(groups.placement, groups.schedule, groups.memory)
    if heuristic is None:
        return mapped, None
    started = time.perf_counter()
    before = evaluate(graph, machine, mapped.placement, schedule=mapped.schedule, memory=mapped.memory)
    details.update(peak_before_bytes=before.peak_memory_bytes, makespan_before_us=before.makespan_us,
                   fits_before=before.memory_fits)
    seconds["evaluation_before"] = time.perf_counter() - started
    started = time.perf_counter()
    if heuristic == "overflow":
        try:
            handled = handle_overflow(graph, machine, mapped.placement, progress=_within(progress, "memory"))
        except NoPlacementFoundError as exc:  # the heuristic gave up: no proof, other placements may fit
            details.update(memory_heuristic_failed=str(exc), moved_ops=0, moved_share=0.0)
            seconds["memory"] = time.perf_counter() - started
            return None, exc
        placement, moved = handled.placement, handled.moved_ops
        schedule, tracked = handled.schedule, handled.memory  # its last round's emulation
        details["overflow_rounds"] = handled.rounds
    else:
        balanced = balance_residuals(graph, machine, mapped.placement)
        placement, moved, schedule, tracked = balanced.placement, balanced.moved_ops, None, None
        details["residual_units_moved"] = balanced.moved_units
    details.update(moved_ops=moved, moved_share=moved / graph.n if graph.n else 0.0)
    seconds["memory"] = time.perf_counter() - started
    if schedule is not None and tracked is not None:
        answer = Emulated(np.asarray(placement, dtype=np.int64), schedule, tracked)
    else:
        answer = emulate_and_track(graph, machine, placement, schedule=schedule)
    memory = answer.memory or track_memory(graph, machine, answer.placement, answer.schedule)  # no sizes: peaks anyway
    details.update(peak_after_bytes=memory.peak_bytes.tolist(), makespan_after_us=answer.makespan_us)
    return answer, None


def _evaluated(graph: CostGraph, machine: Machine, answer: Emulated, heuristic: str | None, ccr: float | None,
               seconds: dict[str, float], details: dict[str, Any], progress: Progress | None) -> Result:
    """The kept answer evaluated and reported; raises when a memory heuristic ran and it does not fit
    (heuristic II alone, with the guard off: it balances memory but cannot guarantee the limits)."""
    started = time.perf_counter()
    if progress is not None:
        progress("evaluation", 0, 1)
    evaluation, schedule, memory = evaluate_step(graph, machine, answer.placement, schedule=answer.schedule,
                                                 memory=answer.memory, order=answer.order)
    seconds["evaluation"] = time.perf_counter() - started
    if heuristic is not None and not evaluation.memory_fits:
        limits = machine.limits_bytes
        peaks = np.array(evaluation.peak_memory_bytes)
        worst = int(np.argmax(peaks - limits))
        raise NoPlacementFoundError("no placement found: " + infeasible_message(
            worst, int(peaks[worst]), int(limits[worst]), machine,
            " after memory heuristic II (it balances memory but cannot guarantee the limits; "
            "--memory-heuristic overflow can)"))
    report = PartitionReport("pardnn", machine.devices, graph.n, graph.m, ccr, seconds, evaluation, details)
    placement = np.array(answer.placement, dtype=np.int64)
    placement.flags.writeable = False
    order = None
    if answer.order is not None:
        order = np.array(answer.order, dtype=np.int64)
        order.flags.writeable = False
    return Result(placement, report, order, schedule, memory)


def _within(progress: Progress | None, stage: str) -> Callable[[int, int], None] | None:
    return None if progress is None else lambda done, total: progress(stage, done, total)
