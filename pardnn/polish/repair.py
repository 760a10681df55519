"""Memory repair: a local search on the overflow, for when memory heuristic I finds no placement that fits.

:func:`repair` moves colocation units between devices, one at a time or two swapped, keeping a step
only when the total overflow (the bytes over the limits at the devices' peaks) falls, or stays and
the emulated step gets strictly shorter; each step is judged by the emulator with its memory
tracker. It tries the units that hold the most bytes at an overflowing device's peak first. The
rules and the measurements: docs/algorithm.md ("Memory repair").
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from pardnn.costs.graph import CostGraph, Kind
from pardnn.costs.machine import Machine
from pardnn.emulation.emulated import Emulated, emulate_and_track, strictly_shorter
from pardnn.emulation.emulator import Emulator
from pardnn.emulation.memory import accumulating_ops, tracked_peaks
from pardnn.steps.units import units_of

__all__ = ["CANDIDATES", "REPAIR_SECONDS", "Repaired", "overflow_bytes", "repair", "repair_evaluations"]

CANDIDATES = 16  # units tried per overflowing device, and swap partners per other device, each round
# The budget, as a number of emulations (deterministic on every node): REPAIR_SECONDS at a cost model of
# an emulation with its memory tracked (2 cores, AMD EPYC), at least MIN_EVALUATIONS, at most MAX_EVALUATIONS.
REPAIR_SECONDS = 2.0
SECONDS_PER_EMULATION, SECONDS_PER_ELEMENT = 1e-4, 3e-7
MIN_EVALUATIONS, MAX_EVALUATIONS = 4, 10_000


def repair_evaluations(graph: CostGraph, seconds: float = REPAIR_SECONDS) -> int:
    """The emulations ``seconds`` buys for ``graph`` under the cost model above."""
    per = SECONDS_PER_EMULATION + SECONDS_PER_ELEMENT * (graph.n + graph.m)
    return int(min(MAX_EVALUATIONS, max(MIN_EVALUATIONS, seconds // per)))


def overflow_bytes(answer: Emulated, machine: Machine) -> int:
    """The bytes over the limits, summed over the devices at their peaks (0: it fits)."""
    assert answer.memory is not None
    return _over_limits(answer.memory.peak_bytes, machine)


def _over_limits(peaks: np.ndarray, machine: Machine) -> int:
    """The bytes of ``peaks`` (one per device) over the machine's limits, summed."""
    return int(np.maximum(peaks.astype(np.int64) - machine.limits_bytes.astype(np.int64), 0).sum())


def _held(graph: CostGraph, answer: Emulated, unit: np.ndarray, units: int, device: int) -> np.ndarray:
    """Bytes each unit holds on ``device`` at its peak: its residual ops' and the buffers its ops
    own that are live then."""
    memory = answer.memory
    assert memory is not None
    mine = answer.placement == device
    residual = mine & (graph.kind == Kind.RESIDUAL)
    held = np.bincount(unit[residual], weights=graph.out_bytes[residual].astype(float), minlength=units)
    live = memory.live(device, float(memory.peak_time_us[device]))
    return held + np.bincount(unit[memory.buffer_owner[live]], weights=memory.buffer_bytes[live].astype(float),
                              minlength=units)


class _Search:
    """The search's state: the answer, its overflow, and the emulations left.

    A trial is emulated by one :class:`~pardnn.emulation.emulator.Emulator` made for the search and judged by
    its peaks alone (:func:`~pardnn.emulation.memory.tracked_peaks`, one compiled call); only a kept trial
    gets its whole memory profile (:func:`~pardnn.emulation.memory.track_memory`), which the next round's
    ranking reads. The same trials, judged by the same numbers, as emulating and tracking each in full.
    """

    def __init__(self, graph: CostGraph, machine: Machine, start: Emulated, evaluations: int) -> None:
        self.graph, self.machine, self.left = graph, machine, evaluations
        ids, self.unit = np.unique(units_of(graph), return_inverse=True)
        self.units = ids.size
        self.where = np.zeros(self.units, np.int64)
        self.where[self.unit] = start.placement
        self.answer, self.over = start, overflow_bytes(start, machine)
        self.emulator = Emulator(graph, machine)  # in order of readiness, as emulate_and_track's own
        self.candidates = accumulating_ops(graph)

    def better(self, where: np.ndarray) -> bool:
        """Emulate ``where`` (a device per unit) and keep it if it improves (module docstring)."""
        self.left -= 1
        graph, place = self.graph, where[self.unit]
        schedule = self.emulator(place)
        # tracked_peaks takes the times as the compiled kicks pass them (writable): one compiled signature.
        peak = tracked_peaks(self.machine.devices, place, graph.succ_ptr, graph.succ, graph.edge_src, graph.edge_dst,
                             graph.edge_bytes, graph.kind, graph.out_bytes, self.candidates,
                             self.machine.limits_bytes, np.array(schedule.start_us), np.array(schedule.finish_us),
                             np.array(schedule.edge_arrival_us))
        over = _over_limits(peak, self.machine)
        if over < self.over or (over == self.over and strictly_shorter(schedule.makespan_us, self.answer.makespan_us)):
            self.where, self.over = where, over
            self.answer = emulate_and_track(graph, self.machine, place, schedule=schedule, track=True)
            return True
        return False

    def ranked(self, device: int) -> np.ndarray:
        """The units on ``device``, the most bytes held at its peak first, at most :data:`CANDIDATES`."""
        held = _held(self.graph, self.answer, self.unit, self.units, device)
        on = np.flatnonzero(self.where == device)
        return on[np.argsort(-held[on], kind="stable")][:CANDIDATES]

    def step(self) -> bool:
        """One improving move or swap, the first found; ``False`` at a local minimum or out of emulations."""
        k = self.machine.devices
        peaks = self.answer.memory.peak_bytes  # type: ignore[union-attr]
        full = [d for d in range(k) if peaks[d] > self.machine.limits_bytes[d]]
        for device in full:
            for u in self.ranked(device):
                for target in range(k):
                    if target == device or self.left <= 0:
                        continue
                    where = self.where.copy()
                    where[u] = target
                    if self.better(where):
                        return True
        for device in full:
            mine = self.ranked(device)
            for target in range(k):
                if target == device:
                    continue
                for v in self.ranked(target):
                    for u in mine:
                        if self.left <= 0:
                            return False
                        where = self.where.copy()
                        where[u], where[v] = target, device
                        if self.better(where):
                            return True
        return False


class Repaired(NamedTuple):
    """What :func:`repair` ended with: the answer (``fits``: within every limit), the bytes still
    over the limits, and the emulations it took."""

    answer: Emulated
    over_bytes: int
    emulations: int

    @property
    def fits(self) -> bool:
        return self.over_bytes == 0


def repair(graph: CostGraph, machine: Machine, start: np.ndarray | Emulated, *, evaluations: int) -> Repaired:
    """The placement nearest a fit found from ``start`` (a placement, or one already emulated with its
    memory tracked) within ``evaluations`` emulations (module docstring): it stops when it fits, at a
    local minimum, or out of emulations. Deterministic.

    >>> from pardnn import CostGraph, Machine
    >>> g = CostGraph(["a", "b"], [1.0, 1.0], [600, 600], [], [], kind=[1, 1])   # two residual ops
    >>> fitted = repair(g, Machine(2, memory="1000B", reserve=0), np.zeros(2, np.int64), evaluations=10)
    >>> fitted.fits, sorted(fitted.answer.placement.tolist()), fitted.emulations
    (True, [0, 1], 1)
    """
    if not isinstance(start, Emulated) or start.memory is None:
        start = emulate_and_track(graph, machine, np.asarray(getattr(start, "placement", start), dtype=np.int64),
                                  track=True)
    search = _Search(graph, machine, start, evaluations)
    while search.over > 0 and search.left > 0 and search.step():
        pass
    return Repaired(search.answer, search.over, evaluations - search.left)
