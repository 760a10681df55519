"""After Step 2: the guard — never return a placement slower than a cheap one that also fits.

ParDNN is faithful to the paper and inherits its failures: on communication-bound graphs (an
Inception-v3 training graph at 2 GB/s, CCR ≈ 63) its makespan was 1.7-2.6× that of a contiguous
split or of one device, and a single heavy op alone on a primary path (a 6 GiB variable) can cost
22× the single-device step. The paper is our floor, not our ceiling, so after the memory heuristic
the pipeline compares ParDNN's placement with cheap candidates under the same emulator and memory
tracker, and keeps the fastest that meets every device's limit:

- ``single``: every op on device 0 (no communication at all);
- ``topological``: K contiguous blocks of the topological order, equal in compute (GPipe-style);
- ``round_robin``: op i of the topological order on device i mod K;
- ``critical_path``: the critical path on device 0, the rest greedily (Mayer et al. 2017); under
  memory limits its greedy skips devices it deems full, so its memory-blind placement is tried too
  (``critical_path, memory-blind``: the tracker may find it fits, and it can be faster);
- ``linear_clustering``: Kim and Browne's linear clustering mapped by GLB, run to the end (its
  levels are recomputed incrementally: 0.1 s on 200k ops, :mod:`pardnn.baselines.linear_clustering`);
- ``metis``: a K-way METIS partition of the undirected graph (when pymetis is installed);
- ``folded``: ParDNN's own placement with its most communication-bound device folded into the
  device it talks to most, repeated while that shortens the step (the heavy-single-op primary).

Choices where nothing says what to do:

- **Ties** go to ParDNN, then to the candidate listed first: a candidate must be strictly faster.
- **Pruning.** A placement's makespan is at least the compute of its busiest device and at least
  its longest path counting the transfer time of every cut edge (one O(|V| + |E|) sweep, cheaper
  than an emulation), so a candidate whose bound reaches the best makespan so far is not emulated
  (``single`` on any graph ParDNN parallelises well, ``round_robin`` on communicating graphs), and
  its memory is tracked only when it is faster. Exact and deterministic: it only skips losers.
- **Memory.** A candidate counts only if its emulated peaks fit the limits (the same tracker as
  ParDNN's heuristics); one whose residual state (variables, optimizer slots: held all step, so
  part of every peak) alone overflows a device is ruled out before any emulation. When ParDNN's
  own placement does not fit (heuristic II gives no guarantee, heuristic I can give up), the best
  fitting candidate wins; when none fits,
  :func:`place_under_memory` runs heuristic I from each candidate in turn, at most
  :data:`FALLBACK_MAX_ROUNDS` rounds from each (a hopeless start crawls on for hundreds of rounds).
- **Ahead of time.** The candidates do not depend on ParDNN's placement, so :func:`prepare_candidates`
  can make them, bound them and emulate them (all of them: the pruning needs ParDNN's makespan) in a
  worker thread while Steps 1 and 2 run (:func:`pardnn.pipeline.partition` does on two or more cores;
  the kernels release the GIL). The guard then decides on those numbers exactly as it would have
  lazily (pruned candidates stay pruned in the report), so the answer does not depend on it.
- **Folding.** Device ``j``'s *pressure* is the communication on its cut edges minus its compute;
  the device of highest positive pressure is folded (all its ops move) into the device it
  communicates with most; at most ``ceil(log2 K)`` folds, stopping at the first that does not
  shorten the step.

Complexity: one emulation and memory sweep, O((|V| + |E|) log |V|), per candidate not pruned, plus
each candidate's own placement (METIS's multilevel partition is the costliest); deterministic, so
every node of a cluster computes the same answer.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field, replace

import numpy as np

from pardnn.baselines.critical_path import critical_path_placement
from pardnn.baselines.linear_clustering import linear_clustering_placement
from pardnn.baselines.metis import metis_placement
from pardnn.baselines.round_robin import round_robin_placement
from pardnn.baselines.single_device import single_device_placement
from pardnn.baselines.topological import topological_placement
from pardnn.emulator import Schedule, emulate
from pardnn.errors import MissingDependencyError, NoPlacementFoundError, PardnnError
from pardnn.graph import CostGraph, Kind
from pardnn.levels import critical_path_us
from pardnn.machine import Machine, format_bytes
from pardnn.memory import MemoryProfile, track_memory
from pardnn.overflow import handle_overflow

__all__ = ["CANDIDATES", "Guarded", "Prepared", "fold_communicating_devices", "guard", "place_under_memory",
           "prepare_candidates"]

PARDNN = "pardnn"
# The cheap placements the guard compares with, in order of preference on ties.
CANDIDATES: dict[str, Callable[[CostGraph, Machine], tuple[np.ndarray, dict]]] = {
    "single": single_device_placement,
    "topological": topological_placement,
    "round_robin": round_robin_placement,
    "critical_path": critical_path_placement,
    "linear_clustering": linear_clustering_placement,
    "metis": metis_placement,
}
FOLDED = "folded"
# Under memory limits the critical-path greedy skips devices it thinks full; its memory-blind
# placement (the CP baseline as benchmarks run it) can still fit the tracker's peaks, and be faster.
BLIND_CP = "critical_path, memory-blind"
# Heuristic I's rounds per start in the last resort: every successful start measured needed at most 11
# (200k-op synthetic graph, K = 16, 0.8 × demand), while a hopeless one crawls on for hundreds.
FALLBACK_MAX_ROUNDS = 24


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

    @property
    def makespan_us(self) -> float:
        return math.inf if self.schedule is None else self.schedule.makespan_us

    def details(self) -> dict[str, object]:
        """What the report says: the winner, ParDNN's own makespan, the gain, every candidate."""
        gain = self.pardnn_makespan_us / self.makespan_us if self.winner not in (None, PARDNN) else 1.0
        return {"winner": self.winner, "pardnn_makespan_us": self.pardnn_makespan_us,
                "makespan_us": self.makespan_us, "speedup_over_pardnn": gain,
                "candidates": dict(self.makespans), "notes": dict(self.notes)}


@dataclass(frozen=True)
class Prepared:
    """A candidate made before the guard runs: its placement (``None`` when it is unavailable, ``note``
    says why), a lower bound on its makespan, and its emulation (``None`` when not made ahead, or when
    its residual state alone overflows a device)."""

    placement: np.ndarray | None
    note: str = ""
    bound: float | None = None
    schedule: Schedule | None = None

    @classmethod
    def make(cls, name: str, graph: CostGraph, machine: Machine) -> Prepared:
        """Candidate ``name``'s placement only, or why it is unavailable (not installed)."""
        try:
            return cls(_candidate(name, graph, machine))
        except MissingDependencyError as exc:
            return cls(None, f"unavailable: {exc}")


def prepare_candidates(graph: CostGraph, machine: Machine, edge_weight: np.ndarray) -> dict[str, Prepared]:
    """Every candidate's placement, makespan bound and emulation, for the guard to judge later.

    Emulates every candidate that could fit (the guard's pruning needs ParDNN's makespan, not known
    yet), so it is meant for a worker thread with a core of its own while Steps 1 and 2 run; the
    guard's answer is the same as without it. O(candidates × (|V| + |E|) log |V|).
    """
    prepared = {}
    residual = _residual(graph, machine)
    for name in _names(machine):
        made = prepared[name] = Prepared.make(name, graph, machine)
        if made.placement is None:
            continue
        fits = residual is None or _residual_overflow(made.placement, residual, machine) is None
        prepared[name] = replace(made, bound=_makespan_bound(graph, machine, made.placement, edge_weight),
                                 schedule=emulate(graph, machine, made.placement) if fits else None)
    return prepared


def _residual(graph: CostGraph, machine: Machine) -> np.ndarray | None:
    return np.where(graph.kind == Kind.RESIDUAL, graph.out_bytes, 0) if machine.bounded else None


def _residual_overflow(placement: np.ndarray, residual: np.ndarray, machine: Machine) -> str | None:
    """Why ``placement``'s residual state alone overflows a device, or ``None`` when it does not."""
    over = np.bincount(placement, weights=residual, minlength=machine.devices) - machine.limits_bytes
    if not (over > 0).any():
        return None
    d = int(np.argmax(over))
    return (f"does not fit the memory limits: its residual state alone overflows device {d} "
            f"by {format_bytes(float(over[d]))}")


def _candidate(name: str, graph: CostGraph, machine: Machine) -> np.ndarray:
    """Candidate ``name``'s placement (MissingDependencyError when it needs what is not installed)."""
    if name == BLIND_CP:
        candidate, _ = critical_path_placement(graph, replace(machine, memory=None))
    else:
        candidate, _ = CANDIDATES[name](graph, machine)
    return np.ascontiguousarray(candidate, dtype=np.int64)


def _names(machine: Machine) -> list[str]:
    """The candidates to try on ``machine``: every one, and the memory-blind CP when it is bounded."""
    return [*CANDIDATES, BLIND_CP] if machine.bounded else list(CANDIDATES)


def _fits(machine: Machine, memory: MemoryProfile | None) -> bool:
    return memory is None or bool((memory.peak_bytes <= machine.limits_bytes).all())


class _Best:
    """The fastest fitting placement seen so far (strictly faster replaces it)."""

    def __init__(self, graph: CostGraph, machine: Machine, out: Guarded, edge_weight: np.ndarray) -> None:
        self.graph, self.machine, self.out, self.edge_weight = graph, machine, out, edge_weight
        self.residual = _residual(graph, machine)

    def offer(self, name: str, ahead: Prepared) -> float | None:
        """Emulate ``placement`` unless a lower bound on its makespan already reaches the best, or its
        residual state alone overflows a device (the tracker's peak includes it); keep it if it is
        strictly faster and fits. Returns its makespan (``None`` when pruned or ruled out). ``ahead``:
        the placement, with its bound and emulation when made beforehand (:func:`prepare_candidates`)."""
        graph, machine, out, placement = self.graph, self.machine, self.out, ahead.placement
        bound = _makespan_bound(graph, machine, placement, self.edge_weight) if ahead.bound is None else ahead.bound
        if bound >= out.makespan_us:
            out.notes[name] = f"pruned: its makespan is at least {bound:.1f} us"
            out.makespans[name] = None
            return None
        if self.residual is not None:
            overflow = _residual_overflow(placement, self.residual, machine)
            if overflow is not None:
                out.notes[name] = overflow
                out.makespans[name] = None
                return None
        schedule = emulate(graph, machine, placement) if ahead.schedule is None else ahead.schedule
        out.makespans[name] = schedule.makespan_us
        if schedule.makespan_us >= out.makespan_us:
            return schedule.makespan_us
        memory = track_memory(graph, machine, placement, schedule) if machine.bounded else None
        if not _fits(machine, memory):
            out.notes[name] = "does not fit the memory limits"
            return schedule.makespan_us
        out.placement, out.winner, out.schedule, out.memory = placement, name, schedule, memory
        return schedule.makespan_us


def _makespan_bound(graph: CostGraph, machine: Machine, placement: np.ndarray, edge_weight: np.ndarray) -> float:
    """A lower bound on the emulated makespan of ``placement``: the larger of its busiest device's
    compute and its longest path with the cut edges' transfer times (no schedule can beat either)."""
    busiest = float(np.bincount(placement, weights=graph.comp_us, minlength=machine.devices).max(initial=0.0))
    cut = placement[graph.edge_src] != placement[graph.edge_dst]
    return max(busiest, critical_path_us(graph, np.where(cut, edge_weight, 0.0)))


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
          prepared: dict[str, Prepared] | None = None) -> Guarded:
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

    Returns
    -------
    Guarded
        The winner (``None`` if nothing fits) and every candidate's makespan.
    """
    fits = schedule is not None and _fits(machine, memory)
    own = math.inf if schedule is None else schedule.makespan_us
    out = Guarded(placement, PARDNN if fits else None, schedule if fits else None, memory if fits else None, own)
    out.makespans[PARDNN] = None if schedule is None else own
    if machine.devices < 2:
        return out
    best = _Best(graph, machine, out, edge_weight)
    for name in _names(machine):
        ahead = Prepared.make(name, graph, machine) if prepared is None else prepared[name]
        if ahead.placement is None:
            out.notes[name] = ahead.note
            out.makespans[name] = None
            continue
        best.offer(name, ahead)
    if schedule is not None:
        folded = np.asarray(placement, dtype=np.int64)
        last = own
        tried: list[float] = []
        for _ in range(max(1, math.ceil(math.log2(machine.devices)))):
            folded, device = fold_communicating_devices(graph, machine, folded, edge_weight)
            if device < 0:
                break
            makespan = best.offer(FOLDED, Prepared(folded))
            if makespan is None or makespan >= last:
                break
            tried.append(makespan)
            last = makespan
        if tried:
            out.makespans[FOLDED] = min(tried)
    return out


def place_under_memory(graph: CostGraph, machine: Machine, kept: Guarded, failure: PardnnError | None, *,
                       prepared: dict[str, Prepared] | None = None,
                       progress: Callable[[int, int], None] | None = None) -> Guarded:
    """When no placement fits as it is: memory heuristic I from ParDNN's placement and from every
    candidate, keeping the fastest that fits.

    Each start gets at most :data:`FALLBACK_MAX_ROUNDS` rounds of heuristic I (each round one
    emulation), so the last resort costs at most ``8 × 24`` emulations however hopeless the starts;
    ``progress(start, starts)`` is called before each start; ``prepared``: the candidates the guard
    judged (:func:`prepare_candidates`), so they are not made again.

    Raises :class:`~pardnn.errors.NoPlacementFoundError` saying "no placement found" and what was tried when
    none fits — a failure of the heuristics, not a proof that no placement exists (the proofs are
    :mod:`pardnn.feasibility`'s, checked before any placer runs).
    """
    best = _Best(graph, machine, kept, machine.edge_comm_us(graph.edge_bytes))
    tried = []
    starts: list[tuple[str, np.ndarray]] = []
    if failure is None:  # heuristic II's placement: let heuristic I repair it too
        starts.append((PARDNN, np.asarray(kept.placement, dtype=np.int64)))
    for name in _names(machine):
        made = Prepared.make(name, graph, machine) if prepared is None else prepared[name]
        if made.placement is not None:
            starts.append((name, made.placement))
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
    if kept.winner is None:
        first = str(failure) if failure is not None else closest
        raise NoPlacementFoundError(
            f"no placement found that meets every device's memory limit: memory heuristic I failed from "
            f"ParDNN's placement and from the {', '.join(n for n in tried if n != PARDNN)} placements, and none "
            f"of those fits as it is. ParDNN's: {first}")
    return kept
