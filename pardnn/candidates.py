"""The guard's candidates: the cheap placements it compares ParDNN's with (:mod:`pardnn.guard`).

A candidate is a registry placer (:data:`pardnn.baselines.BASELINES`, ``cheap``), maybe placed blind
to the memory sizes. :class:`Prepared` holds what the guard needs of one: its placement, its run
order when the placer gives one (the pipeline placer's 1F1B or GPipe order: the candidate competes
in it), a lower bound on its makespan and its emulation. :func:`prepare_candidates` makes them all,
ahead of the guard, in a worker thread. The module docstring of :mod:`pardnn.guard` says how they
are judged. O(candidates × (|V| + |E|) log |V|).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from pardnn.baselines import BASELINES
from pardnn.emulator import Schedule, emulate
from pardnn.errors import MissingDependencyError
from pardnn.graph import CostGraph, Kind
from pardnn.levels import critical_path_us
from pardnn.machine import Machine, format_bytes
from pardnn.placer import Placed, Placer

__all__ = ["BLIND", "Candidate", "Prepared", "candidates", "makespan_bound", "prepare_candidates", "residual_bytes",
           "residual_overflow"]

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


def prepare_candidates(graph: CostGraph, machine: Machine, edge_weight: np.ndarray, ordered: bool = True
                       ) -> dict[str, Prepared]:
    """Every candidate's placement, makespan bound and emulation, for the guard to judge later.

    Emulates every candidate that could fit (the guard's pruning needs ParDNN's makespan, not known
    yet), so it is meant for a worker thread with a core of its own while Steps 1 and 2 run; the
    guard's answer is the same as without it. O(candidates × (|V| + |E|) log |V|).

    Only the fastest emulation so far is kept whole; the others keep their makespan alone (a
    1M-op schedule is 37 MB, eight of them a third of a placement's peak memory). Without memory
    limits only the fastest can win; with them, the guard emulates again one it lets go that wins
    (the same numbers: emulation is deterministic).
    """
    prepared: dict[str, Prepared] = {}
    residual = residual_bytes(graph, machine)
    fastest = None
    for candidate in candidates(machine):
        made = prepared[candidate.label] = Prepared.make(candidate, graph, machine, ordered)
        if made.placement is None:
            continue
        made = replace(made, bound=makespan_bound(graph, machine, made.placement, edge_weight))
        if residual is None or residual_overflow(made.placement, residual, machine) is None:
            schedule = emulate(graph, machine, made.placement, order=made.order)
            made = replace(made, schedule=schedule, makespan_us=schedule.makespan_us)
            if fastest is not None and schedule.makespan_us >= prepared[fastest].makespan_us:  # type: ignore[operator]
                made = replace(made, schedule=None)
            else:
                if fastest is not None:
                    prepared[fastest] = replace(prepared[fastest], schedule=None)
                fastest = candidate.label
        prepared[candidate.label] = made
    return prepared


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
    compute and its longest path with the cut edges' transfer times (no schedule can beat either)."""
    busiest = float(np.bincount(placement, weights=graph.comp_us, minlength=machine.devices).max(initial=0.0))
    cut = placement[graph.edge_src] != placement[graph.edge_dst]
    return max(busiest, critical_path_us(graph, np.where(cut, edge_weight, 0.0)))
