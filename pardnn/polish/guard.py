"""After Step 2: the guard, never returning a placement slower than a cheap one that also fits.

:func:`guard` (the stage: :func:`guard_stage`) emulates ParDNN's placement beside the registry's
``cheap`` placers and ParDNN's own folded (:func:`fold_communicating_devices`), and keeps the fastest
that fits every device, ties to ParDNN; :func:`place_under_memory` runs heuristic I from each when none
fits. Candidates are made ahead by :mod:`pardnn.polish.candidates`. Ties, pruning, memory and folding:
docs/notes-partitioner.md.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from pardnn.costs.graph import CostGraph
from pardnn.costs.machine import Machine, format_bytes
from pardnn.emulation.emulated import Emulated, emulate_and_track, strictly_shorter
from pardnn.emulation.emulator import Schedule, emulate
from pardnn.emulation.memory import MemoryProfile
from pardnn.errors import NoPlacementFoundError, PardnnError
from pardnn.polish.candidates import (
    Candidate,
    Prepared,
    candidates,
    makespan_bound,
    prepare_candidates,
    residual_bytes,
    residual_overflow,
)
from pardnn.polish.repair import overflow_bytes, repair, repair_evaluations
from pardnn.polish.stages import Context
from pardnn.steps.overflow import handle_overflow

__all__ = ["Candidate", "GuardDetails", "Guarded", "Prepared", "candidates", "first_fold", "fold_communicating_devices",
           "guard", "guard_stage", "place_under_memory", "prepare_candidates"]  # candidates: polish.candidates

PARDNN = "pardnn"
FOLDED = "folded"
# Heuristic I's rounds per start in the last resort: every successful start measured needed at most 11
# (200k-op synthetic graph, K = 16, 0.8 × demand), while a hopeless one crawls on for hundreds.
FALLBACK_MAX_ROUNDS = 24
REPAIR_STARTS = 3  # the starts memory repair tries, those that overflow least


@dataclass(frozen=True)
class GuardDetails:
    """What the report says of the guard: the winner (``None``: nothing fits), ParDNN's own makespan,
    the kept one, the gain (1.0 when ParDNN's placement is kept or nothing fits; ``None`` when it has
    no finite value: ParDNN's placement did not fit, or the winner takes 0 µs), every candidate's
    emulated makespan (``None`` when pruned, unavailable or ruled out) and why, in ``notes``."""

    winner: str | None
    pardnn_makespan_us: float
    makespan_us: float
    speedup_over_pardnn: float | None
    candidates: dict[str, float | None]
    notes: dict[str, str]
    ordered: bool = False  # the kept placement runs in its candidate's own run order (e.g. the pipeline's)


@dataclass
class Guarded:
    """The guard's answer: the placement kept, who made it, its emulation, and every candidate's
    emulated makespan (``None`` with a reason in ``notes`` when it was pruned, unavailable or did not
    fit). ``winner`` is ``None`` when no placement, ParDNN's included, fits the limits."""

    placement: np.ndarray
    winner: str | None
    schedule: Schedule | None
    memory: MemoryProfile | None
    pardnn_makespan_us: float
    makespans: dict[str, float | None] = field(default_factory=dict)
    notes: dict[str, str] = field(default_factory=dict)
    order: np.ndarray | None = None  # the winner's run order (None: order of readiness)

    @property
    def makespan_us(self) -> float:
        return math.inf if self.schedule is None else self.schedule.makespan_us

    def details(self) -> GuardDetails:
        gain: float | None = 1.0
        if self.winner not in (None, PARDNN):
            finite = self.makespan_us > 0 and math.isfinite(self.pardnn_makespan_us)
            gain = self.pardnn_makespan_us / self.makespan_us if finite else None
        return GuardDetails(self.winner, self.pardnn_makespan_us, self.makespan_us, gain, dict(self.makespans),
                            dict(self.notes), self.order is not None)

    def keep(self, answer: Emulated, winner: str) -> None:
        self.placement, self.winner = answer.placement, winner
        self.schedule, self.memory, self.order = answer.schedule, answer.memory, answer.order


class _Best:
    """The fastest fitting placement seen so far (strictly faster replaces it)."""

    def __init__(self, graph: CostGraph, machine: Machine, out: Guarded, edge_weight: np.ndarray) -> None:
        self.graph, self.machine, self.out, self.edge_weight = graph, machine, out, edge_weight
        self.residual = residual_bytes(graph, machine)

    def rule_out(self, name: str, why: str) -> None:
        self.out.notes[name] = why
        self.out.makespans[name] = None

    def offer(self, name: str, ahead: Prepared) -> float | None:
        """Emulate ``placement`` unless a lower bound on its makespan already reaches the best, or its
        residual state alone overflows a device (the tracker's peak includes it); keep it if it is
        strictly faster and fits. Returns its makespan (``None`` when pruned or ruled out). ``ahead``:
        the placement, with its bound and emulation when made beforehand (:func:`prepare_candidates`)."""
        graph, machine, out = self.graph, self.machine, self.out
        placement = np.asarray(ahead.placement, dtype=np.int64)  # made ahead: held in the smallest type
        bound = makespan_bound(graph, machine, placement, self.edge_weight) if ahead.bound is None else ahead.bound
        if not strictly_shorter(bound, out.makespan_us):
            self.rule_out(name, f"pruned: its makespan is at least {bound:.1f} us")
            return None
        overflow = None if self.residual is None else residual_overflow(placement, self.residual, machine)
        if overflow is not None:
            self.rule_out(name, overflow)
            return None
        order = ahead.order
        if ahead.schedule is None and ahead.makespan_us is not None and \
                not strictly_shorter(ahead.makespan_us, out.makespan_us):  # emulated ahead, and not kept
            out.makespans[name] = ahead.makespan_us
            return ahead.makespan_us
        schedule = emulate(graph, machine, placement, order=order) if ahead.schedule is None else ahead.schedule
        out.makespans[name] = schedule.makespan_us
        if not strictly_shorter(schedule.makespan_us, out.makespan_us):
            return schedule.makespan_us
        answer = emulate_and_track(graph, machine, placement, schedule=schedule, order=order)
        if not answer.fits(machine):
            out.notes[name] = "does not fit the memory limits"
            return schedule.makespan_us
        out.keep(answer, name)
        return schedule.makespan_us


def fold_communicating_devices(graph: CostGraph, machine: Machine, placement: np.ndarray,
                               edge_weight: np.ndarray) -> tuple[np.ndarray, int]:
    """Fold the most communication-bound device into the device it talks to most.

    Pressure of device ``j``: the cost of the cut edges touching it minus its compute. Returns the
    new placement and the device folded (-1, placement unchanged, when no pressure is positive).
    O(|V| + |E| + K²).
    """
    k = machine.devices
    src, dst = placement[graph.edge_src], placement[graph.edge_dst]
    cut = src != dst
    talk = np.bincount(src[cut] * k + dst[cut], weights=edge_weight[cut], minlength=k * k).reshape(k, k)
    talk = talk + talk.T
    load = np.bincount(placement, weights=graph.comp_us, minlength=k)
    pressure = talk.sum(axis=1) - load
    j = int(np.argmax(pressure))
    if k < 2 or pressure[j] <= 0:
        return placement, -1
    target = int(np.argmax(talk[j]))
    folded = placement.copy()
    folded[folded == j] = target
    return folded, j


def guard(graph: CostGraph, machine: Machine, placement: np.ndarray, schedule: Schedule | None,
          memory: MemoryProfile | None, edge_weight: np.ndarray,
          prepared: dict[str, Prepared] | None = None, order: np.ndarray | None = None,
          ordered: bool = True, folded: Prepared | None = None) -> Guarded:
    """Keep ParDNN's ``placement`` unless a cheap candidate that fits is strictly faster.

    Parameters
    ----------
    graph, machine:
        What runs, on what.
    placement, schedule, memory:
        ParDNN's placement after Step 2 and its emulation (``memory`` ``None`` on an unbounded
        machine; ``schedule`` ``None`` when ParDNN produced no placement, e.g. heuristic I gave up).
    edge_weight:
        Each edge's communication cost if cut (µs), for folding.
    prepared:
        The candidates made ahead by :func:`prepare_candidates` with the same graph, machine and
        ``edge_weight``; ``None`` makes them here, one at a time, emulating only those not pruned.
    order:
        The run order ``schedule`` assumes (``None``: order of readiness).
    ordered:
        Candidates compete in their own run order when they have one; ``False``: in order of
        readiness (``partition(..., ordered=False)`` returns no order).
    folded:
        :func:`first_fold` of the same placement, made ahead (while the candidates' worker runs);
        ``None`` folds here.

    Returns
    -------
    Guarded
        The winner (``None`` if nothing fits) and every candidate's makespan.
    """
    own = None if schedule is None else Emulated(np.asarray(placement, dtype=np.int64), schedule, memory, order)
    fits = own is not None and own.fits(machine)
    out = Guarded(placement, PARDNN if fits else None, schedule if fits else None, memory if fits else None,
                  math.inf if own is None else own.makespan_us, order=order if fits else None)
    out.makespans[PARDNN] = None if own is None else own.makespan_us
    if machine.devices < 2:
        return out
    best = _Best(graph, machine, out, edge_weight)
    for candidate in candidates(machine):
        ahead = Prepared.make(candidate, graph, machine, ordered) if prepared is None else prepared[candidate.label]
        if ahead.placement is None:
            best.rule_out(candidate.label, ahead.note)
            continue
        best.offer(candidate.label, ahead)
    if own is not None:
        _fold(graph, machine, own, best, edge_weight, folded)
    return out


def first_fold(graph: CostGraph, machine: Machine, own: Emulated, edge_weight: np.ndarray) -> Prepared | None:
    """ParDNN's placement folded once (:func:`fold_communicating_devices`) with its makespan bound,
    and its emulation unless the bound reaches ParDNN's makespan (the guard then prunes it whatever
    the candidates did): the guard's first fold, made while it waits for its candidates. ``None``
    when no device is folded."""
    folded, device = fold_communicating_devices(graph, machine, own.placement, edge_weight)
    if device < 0:
        return None
    bound = makespan_bound(graph, machine, folded, edge_weight)
    if not strictly_shorter(bound, own.makespan_us):
        return Prepared(folded, bound=bound)
    return Prepared(folded, bound=bound, schedule=emulate(graph, machine, folded))


def _fold(graph: CostGraph, machine: Machine, own: Emulated, best: _Best, edge_weight: np.ndarray,
          first: Prepared | None = None) -> None:
    """Offer ParDNN's placement folded, again and again while each fold shortens the step (module
    docstring); ``first``: the first fold made ahead (:func:`first_fold`), the same placement and numbers."""
    folded, last = own.placement, own.makespan_us
    tried: list[float] = []
    for i in range(max(1, math.ceil(math.log2(machine.devices)))):
        if i == 0 and first is not None:
            made: Prepared = first
        else:
            folded, device = fold_communicating_devices(graph, machine, folded, edge_weight)
            if device < 0:
                break
            made = Prepared(folded)
        folded = np.asarray(made.placement, dtype=np.int64)
        makespan = best.offer(FOLDED, made)
        if makespan is None or makespan >= last:
            break
        tried.append(makespan)
        last = makespan
    if tried:
        best.out.makespans[FOLDED] = min(tried)


def place_under_memory(graph: CostGraph, machine: Machine, kept: Guarded, failure: PardnnError | None, *,
                       prepared: dict[str, Prepared] | None = None,
                       progress: Callable[[int, int], None] | None = None) -> Guarded:
    """When no placement fits as it is: memory heuristic I from ParDNN's placement and from every
    candidate, keeping the fastest that fits.

    Each start gets at most :data:`FALLBACK_MAX_ROUNDS` rounds of heuristic I (each round one
    emulation), so the last resort costs at most ``starts × 24`` emulations however hopeless the starts;
    ``progress(start, starts)`` is called before each start; ``prepared``: the candidates the guard
    judged (:func:`prepare_candidates`), so they are not made again.

    Raises :class:`~pardnn.errors.NoPlacementFoundError` saying "no placement found" and what was tried when
    none fits — a failure of the heuristics, not a proof that no placement exists (the proofs are
    :mod:`pardnn.steps.feasibility`'s, checked before any placer runs).
    """
    best = _Best(graph, machine, kept, machine.edge_comm_us(graph.edge_bytes))
    tried = []
    starts: list[tuple[str, np.ndarray]] = []
    if failure is None:  # heuristic II's placement: let heuristic I repair it too
        starts.append((PARDNN, np.asarray(kept.placement, dtype=np.int64)))
    for candidate in candidates(machine):
        made = Prepared.make(candidate, graph, machine, False) if prepared is None else prepared[candidate.label]
        if made.placement is not None:
            starts.append((candidate.label, np.asarray(made.placement, dtype=np.int64)))
    closest = ""
    for i, (name, start) in enumerate(starts):
        if progress is not None:
            progress(i, len(starts))
        tried.append(name)
        try:
            handled = handle_overflow(graph, machine, start, max_rounds=FALLBACK_MAX_ROUNDS)
        except NoPlacementFoundError as exc:
            closest = closest or str(exc)
            continue
        best.offer(f"{name} + heuristic I", Prepared(handled.placement))
    if kept.winner is not None:
        return kept
    repaired = _repaired(graph, machine, starts, best)
    if kept.winner is None:
        first = str(failure) if failure is not None else closest
        raise NoPlacementFoundError(
            f"no placement found that meets every device's memory limit: memory heuristic I failed from "
            f"ParDNN's placement and from the {', '.join(n for n in tried if n != PARDNN)} placements, none "
            f"of those fits as it is, and {repaired}. ParDNN's: {first}")
    return kept


def _repaired(graph: CostGraph, machine: Machine, starts: list[tuple[str, np.ndarray]], best: _Best) -> str:
    """Memory repair (:mod:`pardnn.polish.repair`) from the :data:`REPAIR_STARTS` starts that overflow
    least, offering what fits to ``best``; when nothing does, what was tried (for the error)."""
    budget = repair_evaluations(graph)
    least: list[tuple[int, int, Emulated]] = []  # (overflow, index, emulation) of the least so far, at most 3
    for i, (_, start) in enumerate(starts):
        answer = emulate_and_track(graph, machine, start, track=True)
        least = sorted([*least, (overflow_bytes(answer, machine), i, answer)], key=lambda t: t[:2])[:REPAIR_STARTS]
    chosen = [(starts[i][0], answer) for _, i, answer in least]
    used, short = 0, []
    for name, start in chosen:
        repaired = repair(graph, machine, start, evaluations=budget // len(chosen))
        if repaired.fits:
            best.offer(f"{name} + memory repair", Prepared(repaired.answer.placement))
            return ""
        used += repaired.emulations
        short.append(format_bytes(repaired.over_bytes))
    return (f"memory repair from the {', '.join(name for name, _ in chosen)} placements stopped "
            f"{', '.join(short)} over the limits after {used} emulations")


def guard_stage(graph: CostGraph, machine: Machine, current: Emulated | None, context: Context
                ) -> tuple[Emulated | None, GuardDetails]:
    """The guard as a polishing stage (:mod:`pardnn.polish.stages`): the fastest fitting of ``current`` and the
    candidates (made ahead when ``context.ahead`` is set); when none fits and a memory heuristic ran,
    heuristic I from every start (:func:`place_under_memory`), which raises when that fails too."""
    folded = None
    if current is not None and context.ahead is not None and context.ahead.running():
        folded = first_fold(graph, machine, current, context.edge_weight)  # while the worker finishes
    prepared = None if context.ahead is None else context.ahead.result()
    if current is None:  # Step 2 gave up: no placement of ParDNN's to keep or to fold
        kept = guard(graph, machine, np.zeros(graph.n, np.int64), None, None, context.edge_weight, prepared,
                     ordered=context.ordered)
    else:
        kept = guard(graph, machine, current.placement, current.schedule, current.memory, context.edge_weight,
                     prepared, current.order, context.ordered, folded)
    if kept.winner is None and context.heuristic is not None:
        kept = place_under_memory(graph, machine, kept, context.failure, prepared=prepared, progress=context.progress)
    if kept.winner is None or kept.schedule is None:
        return None, kept.details()
    return Emulated(np.asarray(kept.placement, dtype=np.int64), kept.schedule, kept.memory, kept.order), kept.details()
