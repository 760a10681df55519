"""A run order on each device, chosen with the placement and enforced (the ordering stage).

:func:`order_placement` (the stage: :func:`order_stage`) runs each device's ready ops by upward rank,
refines the placement again under that order and keeps the order only when the step is strictly
shorter and fits; :func:`positions` gives each op's place in its device's sequence, which
:func:`pardnn.tf.apply` enforces. Why: docs/algorithm.md (step 7); choices: docs/notes-partitioner.md.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from pardnn.costs.graph import CostGraph
from pardnn.costs.machine import Machine
from pardnn.emulation.checks import dense_positions
from pardnn.emulation.emulated import Emulated, emulate_and_track, strictly_shorter
from pardnn.emulation.emulator import UPWARD_RANK, Schedule
from pardnn.polish.refine import Refined, RefineDetails, evaluations_for, refine
from pardnn.polish.stages import Context

__all__ = ["MIN_REFINE_MOVES", "OrderDetails", "order_placement", "order_stage", "positions"]

# Below this many moves in the budget (graphs of about 100,000 ops and more at the default 0.1 s) the
# placement is not refined under the order: one or two moves there gain next to nothing (on the 200k-op
# benchmark graph 0.001 %) and cost a chain of 200k ops (0.05 s of a 2 s placement).
MIN_REFINE_MOVES = 8


@dataclass(frozen=True)
class OrderDetails:
    """What the ordering stage tried: whether the order was kept (else ``why_not``), the unordered
    makespan, the makespan in upward-rank order before and after refining under it, and that refinement."""

    kept: bool
    unordered_us: float
    why_not: str | None = None
    ranked_us: float | None = None
    ordered_us: float | None = None
    refine: RefineDetails | None = None
    came_ordered: bool = False  # the answer came with a run order of its own (a guard candidate's): its makespan
    # is ``unordered_us``, and it keeps that order unless upward rank is shorter


def positions(placement: np.ndarray, schedule: Schedule) -> np.ndarray:
    """Each op's position in its device's run sequence in ``schedule`` (0 first), from its start order."""
    if schedule.sequence is None:
        raise ValueError("the schedule has no start sequence (make it with pardnn.emulation.emulator)")
    return dense_positions(np.asarray(placement, dtype=np.int64), schedule.sequence)


def order_placement(graph: CostGraph, machine: Machine, current: Emulated, *,
                    seconds: float) -> tuple[Emulated | None, OrderDetails]:
    """The ordering stage (module docstring): ``current`` (an unordered, fitting answer) refined under
    upward-rank order, with its positions, if that step is strictly shorter and fits; else ``None``.
    Deterministic. Also returns what it tried."""
    unordered, came = current.makespan_us, current.order is not None
    if machine.devices < 2 or graph.n == 0:
        return None, OrderDetails(False, unordered, "one device" if graph.n else "no ops")
    ranked = emulate_and_track(graph, machine, current.placement, order=UPWARD_RANK)
    if not ranked.fits(machine):
        return None, OrderDetails(False, unordered, "over a device's memory in upward-rank order", ranked.makespan_us)
    if evaluations_for(graph, seconds) >= MIN_REFINE_MOVES:
        refined = refine(graph, machine, ranked, seconds=seconds, order=UPWARD_RANK)
    else:
        refined = Refined(ranked, ranked.makespan_us)
    answer = refined.answer
    if not strictly_shorter(answer.makespan_us, unordered):
        than = "the run order it came with" if came else "the order of readiness"
        return None, OrderDetails(False, unordered, f"not shorter than {than}", ranked.makespan_us,
                                  answer.makespan_us, refined.details(), came)
    ordered = replace(answer, order=positions(answer.placement, answer.schedule))
    return ordered, OrderDetails(True, unordered, None, ranked.makespan_us, answer.makespan_us, refined.details())


def order_stage(graph: CostGraph, machine: Machine, current: Emulated, context: Context
                ) -> tuple[Emulated | None, OrderDetails]:
    """The ordering stage as a polishing stage (:mod:`pardnn.polish.stages`): ``context.seconds`` of budget."""
    return order_placement(graph, machine, current, seconds=context.seconds)
