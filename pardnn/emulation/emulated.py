"""An emulated answer, and the rules every stage judges answers by, each written once here.

:class:`Emulated` holds a placement's schedule, its memory and its run order; :func:`emulate_and_track`
makes one. :meth:`Emulated.fits` (every peak within its limit), :func:`strictly_shorter` (by more than
:data:`TOLERANCE`) and :meth:`Emulated.beats` (fits, and the other does not or is strictly longer).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from pardnn.costs.graph import CostGraph
from pardnn.costs.machine import Machine
from pardnn.emulation.emulator import Emulator, RunOrder, Schedule, emulate
from pardnn.emulation.memory import MemoryProfile, track_memory

__all__ = ["TOLERANCE", "Emulated", "emulate_and_track", "strictly_shorter"]

# Relative margin by which a makespan must beat another to count as shorter (one tolerance for all).
TOLERANCE = 1e-9


def strictly_shorter(makespan_us: float, than_us: float) -> bool:
    """``makespan_us`` beats ``than_us`` by more than :data:`TOLERANCE` of it (anything finite beats inf)."""
    if math.isinf(than_us):
        return not math.isinf(makespan_us)
    return makespan_us < than_us * (1 - TOLERANCE)


@dataclass(frozen=True)
class Emulated:
    """A placement with its emulated schedule and memory (``None``: not tracked, on a machine without
    memory sizes), and ``order``: each op's position in its device's run sequence when the schedule
    assumes an enforced order, else ``None`` (each device runs its ops in order of readiness)."""

    placement: np.ndarray
    schedule: Schedule
    memory: MemoryProfile | None
    order: np.ndarray | None = None

    @property
    def makespan_us(self) -> float:
        return self.schedule.makespan_us

    def fits(self, machine: Machine) -> bool:
        """Every device's peak within its limit (always true when memory was not tracked)."""
        return self.memory is None or bool((self.memory.peak_bytes <= machine.limits_bytes).all())

    def beats(self, other: Emulated | None, machine: Machine) -> bool:
        """Fits, and ``other`` is ``None``, does not fit, or is not as short (:func:`strictly_shorter`)."""
        if not self.fits(machine):
            return False
        return other is None or not other.fits(machine) or strictly_shorter(self.makespan_us, other.makespan_us)


def emulate_and_track(graph: CostGraph, machine: Machine, placement: np.ndarray, *,
                      emulator: Emulator | None = None, order: RunOrder = None,
                      schedule: Schedule | None = None, track: bool | None = None) -> Emulated:
    """Emulate ``placement`` (checked, with :func:`~pardnn.emulation.emulator.emulate`; or with ``emulator``, which
    takes an unchecked int64 placement) and track its memory when the machine has memory sizes.

    ``order``: the run order (:data:`~pardnn.emulation.emulator.RunOrder`) for a new emulator; ``schedule``:
    ``placement``'s emulation, when already made; ``track``: track memory even on a machine without
    memory sizes (``True``; an evaluation reports peaks anyway) or never (``False``). The record's
    ``order`` is set when ``order`` is positions. O((|V| + |E|) log |V|).
    """
    place = np.asarray(placement, dtype=np.int64)
    if schedule is None:
        schedule = emulate(graph, machine, place, order=order) if emulator is None else emulator(place)
    memory = track_memory(graph, machine, place, schedule) if (machine.bounded if track is None else track) else None
    positions = order if isinstance(order, np.ndarray) else None
    return Emulated(place, schedule, memory, positions)
