"""The guard's candidates: the cheap placements it compares ParDNN's with (:mod:`pardnn.polish.guard`).

A candidate is a registry placer (:data:`pardnn.baselines.BASELINES`, ``cheap``), maybe placed blind
to the memory sizes. :class:`Prepared` holds what the guard needs of one: its placement, its run
order when the placer gives one (the pipeline placer's 1F1B or GPipe order: the candidate competes
in it), a lower bound on its makespan and its emulation. :func:`prepare_candidates` makes them all,
ahead of the guard, in a worker thread. The module docstring of :mod:`pardnn.polish.guard` says how they
are judged. O(candidates × (|V| + |E|) log |V|).
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np
from numba import njit

from pardnn.baselines import BASELINES
from pardnn.costs.graph import CostGraph, Kind
from pardnn.costs.machine import Machine, format_bytes
from pardnn.emulation.emulator import Schedule, emulate
from pardnn.errors import MissingDependencyError
from pardnn.placement.placer import Placed, Placer

__all__ = ["BLIND", "Candidate", "CandidateEmulations", "Prepared", "candidates", "make_candidates", "makespan_bound",
           "prepare_candidates", "residual_bytes", "residual_overflow"]

BLIND = ", memory-blind"  # the label's suffix for a memory-aware placer placed blind to the memory sizes


@dataclass(frozen=True)
class Candidate:
    """A cheap placement the guard compares with: a registry placer, maybe blind to the memory sizes."""

    label: str
    placer: Placer
    blind: bool = False

    def place(self, graph: CostGraph, machine: Machine) -> tuple[np.ndarray, np.ndarray | None]:
        """Its placement and run order (``None``: order of readiness); MissingDependencyError when the
        placer needs what is not installed."""
        placed = Placed(*self.placer.place(graph, replace(machine, memory=None) if self.blind else machine))
        order = None if placed.order is None else np.ascontiguousarray(placed.order, dtype=np.int64)
        return np.ascontiguousarray(placed.placement, dtype=np.int64), order


def candidates(machine: Machine) -> list[Candidate]:
    """The candidates on ``machine``, in order of preference on ties: every ``cheap`` placer of the
    registry, then, when the machine has memory sizes, every ``memory_aware`` one blind to them."""
    cheap = [placer for placer in BASELINES.values() if placer.cheap]
    blind = [Candidate(p.name + BLIND, p, blind=True) for p in cheap if p.memory_aware] if machine.bounded else []
    return [Candidate(p.name, p) for p in cheap] + blind


@dataclass(frozen=True)
class Prepared:
    """A candidate made before the guard runs: its placement (``None`` when it is unavailable, ``note``
    says why), a lower bound on its makespan, its emulation (``None`` when not made ahead, or when
    its residual state alone overflows a device) and its run order (``None``: order of readiness;
    the emulation, the guard's and the answer kept all assume it). ``makespan_us``: the emulated
    makespan, kept when the emulation itself was let go (:func:`prepare_candidates`)."""

    placement: np.ndarray | None
    note: str = ""
    bound: float | None = None
    schedule: Schedule | None = None
    order: np.ndarray | None = None
    makespan_us: float | None = None

    @classmethod
    def make(cls, candidate: Candidate, graph: CostGraph, machine: Machine, ordered: bool = True) -> Prepared:
        """The candidate's placement and run order only (no order unless ``ordered``), or why it is
        unavailable (not installed)."""
        try:
            placement, order = candidate.place(graph, machine)
        except MissingDependencyError as exc:
            return cls(None, f"unavailable: {exc}")
        return cls(placement, order=order if ordered else None)


def prepare_candidates(graph: CostGraph, machine: Machine, edge_weight: np.ndarray, ordered: bool = True,
                       start: Callable[[], float] | None = None) -> dict[str, Prepared]:
    """Every candidate's placement and makespan bound, and the emulation of each the guard could
    need, for the guard to judge later: :func:`make_candidates`, then :class:`CandidateEmulations` run by
    this thread alone.

    Meant for a worker thread with a core of its own while Steps 1 and 2 run: ParDNN's makespan, which
    the guard's pruning starts from, is not known yet. ``start`` returns it once it is (the guard's
    starting best: ParDNN's makespan when its placement fits, else inf), and inf before; it is asked
    again before each emulation and never waited for. The guard's answer and report are the same as
    without it (O(candidates × (|V| + |E|) log |V|)).
    """
    emulations = CandidateEmulations(graph, machine, make_candidates(graph, machine, edge_weight, ordered), start)
    emulations.run()
    return emulations.prepared


def make_candidates(graph: CostGraph, machine: Machine, edge_weight: np.ndarray,
                    ordered: bool = True) -> dict[str, Prepared]:
    """Every candidate's placement (no run order unless ``ordered``) and makespan bound, in the guard's
    order; METIS's is made last (its GIL-free call aside, its preparation holds the GIL, which stalls
    slicing's Python steps, while LFLAM's mapping runs in compiled code without it); each placement
    held as int16 until the guard reads it: 2 MB, not 8, per 1M ops."""
    every = candidates(machine)
    made_first: dict[str, Prepared] = {}
    for candidate in sorted(every, key=lambda c: c.placer.name == "metis"):
        made = Prepared.make(candidate, graph, machine, ordered)
        if made.placement is not None:
            made = replace(made, placement=_compact(made.placement, machine.devices),
                           bound=makespan_bound(graph, machine, made.placement, edge_weight))
        made_first[candidate.label] = made
    return {candidate.label: made_first[candidate.label] for candidate in every}


class CandidateEmulations:
    """The emulations of the candidates (:func:`make_candidates`) that the guard could need, likeliest
    winners first (lowest bound; ties in the guard's order), so that the losers come last, when
    ``start`` (:func:`prepare_candidates`) may know more. :meth:`run` may be called by several threads
    at once: each takes the next emulation left (the pipeline's main thread joins in once its own
    stages are done and the guard waits for them).

    - A candidate is not emulated when the guard will prune it whatever happens before it: when its
      bound reaches ParDNN's makespan (the guard's best is never above it), or, on a machine without
      memory sizes (where every placement fits), an emulated makespan of a candidate the guard judges
      before it (its best then is at most that makespan over ``1 - TOLERANCE``). A candidate the guard
      would emulate is never skipped (one emulated by another thread meanwhile only prunes less).
    - Only the fastest emulation (ties: the guard's first) is kept whole; the others keep their
      makespan alone (a 1M-op schedule is 37 MB, eight of them a third of a placement's peak memory).
      The guard emulates again one it lets go that wins after all (the same numbers: emulation is
      deterministic): under memory limits when the fastest does not fit, or when a candidate judged
      earlier is within ``TOLERANCE`` of the fastest (the guard keeps only a strictly shorter one).
    """

    def __init__(self, graph: CostGraph, machine: Machine, prepared: dict[str, Prepared],
                 start: Callable[[], float] | None = None) -> None:
        self.graph, self.machine, self.prepared, self._start = graph, machine, dict(prepared), start
        self._labels = list(prepared)
        self._residual = residual_bytes(graph, machine)
        self._queue = sorted((i for i, label in enumerate(self._labels) if prepared[label].placement is not None),
                             key=lambda i: (prepared[self._labels[i]].bound, i))
        self._emulated: dict[int, float] = {}  # guard position -> emulated makespan
        self._fastest: int | None = None  # guard position of the fastest so far
        self._lock = threading.Lock()

    def run(self) -> None:
        """Emulate the candidates left that the guard could need, one at a time, until none is left."""
        while (job := self._next()) is not None:
            i, made = job
            assert made.placement is not None  # only candidates with a placement are queued
            schedule = emulate(self.graph, self.machine, made.placement, order=made.order)
            with self._lock:
                self._record(i, made, schedule)

    def _next(self) -> tuple[int, Prepared] | None:
        """The next candidate to emulate, taken off the queue (those the guard will prune skipped)."""
        machine = self.machine
        while True:
            with self._lock:
                if not self._queue:
                    return None
                i = self._queue.pop(0)
                made = self.prepared[self._labels[i]]
                earlier = [m for j, m in self._emulated.items() if j < i] if not machine.bounded else []
            assert made.placement is not None and made.bound is not None
            if self._residual is not None and residual_overflow(made.placement, self._residual, machine) is not None:
                continue  # the guard rules it out before any emulation
            reached = min([math.inf if self._start is None else self._start(), *earlier])
            if made.bound < reached:  # else the guard prunes it (its bound reaches the guard's best by then)
                return i, made

    def _record(self, i: int, made: Prepared, schedule: Schedule) -> None:
        self._emulated[i] = schedule.makespan_us
        made = replace(made, schedule=schedule, makespan_us=schedule.makespan_us)
        fastest = self._fastest
        if fastest is not None and (schedule.makespan_us, i) > (self._emulated[fastest], fastest):
            made = replace(made, schedule=None)  # ties: the guard's first
        else:
            if fastest is not None:
                self.prepared[self._labels[fastest]] = replace(self.prepared[self._labels[fastest]], schedule=None)
            self._fastest = i
        self.prepared[self._labels[i]] = made


def _compact(placement: np.ndarray, devices: int) -> np.ndarray:
    """``placement`` in int16 when the device indices fit (read back as int64 by the guard)."""
    return placement.astype(np.int16) if devices <= np.iinfo(np.int16).max else placement


def residual_bytes(graph: CostGraph, machine: Machine) -> np.ndarray | None:
    return np.where(graph.kind == Kind.RESIDUAL, graph.out_bytes, 0) if machine.bounded else None


def residual_overflow(placement: np.ndarray, residual: np.ndarray, machine: Machine) -> str | None:
    """Why ``placement``'s residual state alone overflows a device, or ``None`` when it does not."""
    over = np.bincount(placement, weights=residual, minlength=machine.devices) - machine.limits_bytes
    if not (over > 0).any():
        return None
    d = int(np.argmax(over))
    return (f"does not fit the memory limits: its residual state alone overflows device {d} "
            f"by {format_bytes(float(over[d]))}")


def makespan_bound(graph: CostGraph, machine: Machine, placement: np.ndarray, edge_weight: np.ndarray) -> float:
    """A lower bound on the emulated makespan of ``placement``: the larger of its busiest device's
    compute and its longest path with the cut edges' transfer times (no schedule can beat either).

    One compiled pass, bit for bit ``np.bincount(placement, weights=comp).max()`` and
    :func:`~pardnn.costs.levels.critical_path_us` with the uncut edges' weights zeroed (0.02-0.04 s on 1M ops
    with the gathers and the masked copy of the weights; the guard's worker makes eight of them)."""
    weight = np.asarray(edge_weight, dtype=np.float64)
    if weight.shape != (graph.m,):
        raise ValueError(f"edge_weight has {weight.size} values for {graph.m} edges")
    place = np.asarray(placement, dtype=np.int64)
    if place.shape != (graph.n,) or (graph.n and not 0 <= place.min() <= place.max() < machine.devices):
        raise ValueError(f"a placement of {place.size} ops on devices {place.min(initial=0)}..{place.max(initial=0)} "
                         f"for {graph.n} ops on {machine.devices} devices")  # the compiled pass checks no index
    return float(_bound(place, machine.devices, graph.topo_order, graph.succ_ptr, graph.succ, weight, graph.comp_us))


@njit(cache=True, nogil=True)
def _bound(placement: np.ndarray, devices: int, order: np.ndarray, succ_ptr: np.ndarray, succ: np.ndarray,
           weight: np.ndarray, comp: np.ndarray) -> float:
    busiest = np.zeros(devices)
    for v in range(placement.size):  # in index order, as np.bincount sums
        busiest[placement[v]] += comp[v]
    bound = 0.0
    for d in range(devices):
        bound = max(bound, busiest[d])
    bottom = np.zeros(placement.size)  # levels.bottom_levels_sweep's formula, a cut edge's weight or 0
    for i in range(order.size - 1, -1, -1):
        v = order[i]
        best = 0.0
        for k in range(succ_ptr[v], succ_ptr[v + 1]):
            s = succ[k]
            length = (weight[k] if placement[s] != placement[v] else 0.0) + bottom[s]
            if length > best:
                best = length
        bottom[v] = comp[v] + best
        bound = max(bound, bottom[v])
    return bound
