"""Memory repair (pardnn/polish/repair.py): a swap fits what no single move and no round of memory
heuristic I can. The case is worked by hand: four variables of 60, 50, 40 and 30 bytes on two devices of
90 bytes each; only {60, 30} | {50, 40} fits."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pardnn import CostGraph, Kind, Machine
from pardnn.costs.synthetic import dnn_graph
from pardnn.emulation.emulated import emulate_and_track, strictly_shorter
from pardnn.emulation.simulate import evaluate
from pardnn.errors import NoPlacementFoundError
from pardnn.polish import repair as module
from pardnn.polish.repair import repair, repair_evaluations
from pardnn.steps.overflow import handle_overflow
from tests.conftest import most_reach, reached

SIZES = [60, 50, 40, 30]  # a, b, c, d
VARIABLES = CostGraph(["a", "b", "c", "d"], [1.0] * 4, SIZES, [], [], kind=[Kind.RESIDUAL] * 4)
TWO = Machine(2, memory="90B", reserve=0)
START = np.array([0, 0, 1, 1])  # a, b | c, d: 110 and 70 bytes, 20 over on device 0


def over(placement: np.ndarray) -> int:
    peaks = evaluate(VARIABLES, TWO, placement).peak_memory_bytes
    return sum(max(0, peak - 90) for peak in peaks)


def test_by_hand_no_single_move_lowers_the_overflow():
    assert over(START) == 20
    moved = []
    for unit in range(4):
        placement = START.copy()
        placement[unit] = 1 - placement[unit]
        moved.append(over(placement))
    assert moved == [40, 30, 60, 50]  # a, b to device 1; c, d to device 0
    with pytest.raises(NoPlacementFoundError):
        handle_overflow(VARIABLES, TWO, START)  # heuristic I: nothing on device 0 fits device 1's 20 bytes left


def test_a_swap_fits_the_only_placement_that_fits():
    fitted = repair(VARIABLES, TWO, START, evaluations=100)
    assert fitted.fits and over(fitted.answer.placement) == 0
    placement = fitted.answer.placement.tolist()
    assert placement[0] == placement[3] != placement[1] == placement[2]  # {a, d} | {b, c}
    # a and b off device 0 (2 moves, both worse), then the swap of the largest on each device, a and c: 3
    assert fitted.emulations == 3
    cut = repair(VARIABLES, TWO, START, evaluations=1)  # the budget is kept: one emulation finds nothing
    assert not cut.fits and cut.over_bytes == 20 and cut.emulations == 1


def test_nothing_to_repair_when_nothing_fits_and_the_budget_scales_with_the_graph():
    stuck = repair(VARIABLES, Machine(2, memory="80B", reserve=0), START, evaluations=200)  # 180 > 2 x 80
    assert not stuck.fits and stuck.over_bytes == 20 and stuck.emulations < 200  # a local minimum, not the budget
    small, large = repair_evaluations(VARIABLES), repair_evaluations(CostGraph(["x"] * 1, [1.0], [1], [], []))
    assert 4 <= small <= 10_000 and large >= small



@most_reach
@settings(deadline=None)
@given(n=st.integers(20, 120), k=st.integers(2, 4), seed=st.integers(0, 10_000), fraction=st.floats(0.25, 0.7))
def test_trials_judged_by_their_peaks_make_the_search_that_tracks_each_trial_in_full(n, k, seed, fraction):
    """The search judges a trial by its compiled peaks and tracks memory in full only for the trials it keeps:
    the same answer, overflow and emulations as tracking every trial (:func:`emulate_and_track`, the rule
    written in the module docstring)."""
    graph = dnn_graph(n, seed=seed)
    whole = emulate_and_track(graph, Machine(k), np.zeros(graph.n, np.int64), track=True).memory.peak_bytes.max()
    machine = Machine(k, memory=max(1, int(whole * fraction)), reserve=0.0)
    start = np.random.default_rng(seed).integers(0, k, graph.n)
    found = repair(graph, machine, start, evaluations=150)

    def tracked(self: module._Search, where: np.ndarray) -> bool:
        self.left -= 1
        answer = emulate_and_track(self.graph, self.machine, where[self.unit], track=True)
        over = module.overflow_bytes(answer, self.machine)
        if over < self.over or (over == self.over and strictly_shorter(answer.makespan_us, self.answer.makespan_us)):
            self.where, self.answer, self.over = where, answer, over
            return True
        return False

    judged = module._Search.better
    module._Search.better = tracked  # type: ignore[method-assign]
    try:
        expected = repair(graph, machine, start, evaluations=150)
    finally:
        module._Search.better = judged  # type: ignore[method-assign]
    reached(found.emulations > 1, "the repair searched (more than one trial)")
    assert (found.over_bytes, found.emulations) == (expected.over_bytes, expected.emulations)
    assert found.answer.placement.tolist() == expected.answer.placement.tolist()
    assert found.answer.makespan_us == expected.answer.makespan_us
    assert found.answer.memory.peak_bytes.tolist() == expected.answer.memory.peak_bytes.tolist()
