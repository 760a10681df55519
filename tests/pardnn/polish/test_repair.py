"""Memory repair (pardnn/polish/repair.py): a swap fits what no single move and no round of memory
heuristic I can. The case is worked by hand: four variables of 60, 50, 40 and 30 bytes on two devices of
90 bytes each; only {60, 30} | {50, 40} fits."""

from __future__ import annotations

import numpy as np
import pytest

from pardnn import CostGraph, Kind, Machine
from pardnn.emulation.simulate import evaluate
from pardnn.errors import NoPlacementFoundError
from pardnn.polish.repair import repair, repair_evaluations
from pardnn.steps.overflow import handle_overflow

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
