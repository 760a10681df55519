"""Proofs of infeasibility (pardnn.steps.feasibility): hand-worked probes of each proof, and soundness over
random DAGs — a proof never stands while some placement fits.

Machines have reserve 0, bandwidth 1e6 B/s and latency 1 us (an edge of b bytes costs 1 + b us when cut).
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from pardnn import CostGraph, InfeasibleError, Machine
from pardnn.emulation.simulate import evaluate
from pardnn.errors import MissingDependencyError, NoPlacementFoundError
from pardnn.registry import PLACERS
from pardnn.steps.feasibility import check_feasible, check_residual_capacity, op_need_bytes
from tests.conftest import random_dags

LINK = {"bandwidth": 1e6, "latency": 1.0, "reserve": 0.0}


def fitting(g: CostGraph, machine: Machine) -> list[tuple[int, ...]]:
    """Every placement (all K^n of them) whose peaks meet the limits."""
    every = itertools.product(range(machine.devices), repeat=g.n)
    return [p for p in every if evaluate(g, machine, np.array(p)).memory_fits]


def test_a_residual_bytes_over_total_memory():
    """a (90 B), b (80 B), c (80 B) are residual: 250 B all step, the two devices hold 2 x 100 = 200 B
    (each alone fits a device, so (b) does not apply). Three such devices hold 300 B: no proof."""
    g = CostGraph(["a", "b", "c"], [0, 0, 0], [90, 80, 80], [], [], kind=["residual"] * 3)
    machine = Machine(2, memory=100, **LINK)
    with pytest.raises(InfeasibleError, match=r"residual ops .* alone need 250 B .* hold 200 B .* 50 B short"):
        check_feasible(g, machine)
    assert fitting(g, machine) == []
    check_feasible(g, Machine(3, memory=100, **LINK))


def test_b_one_groups_residual_bytes_over_every_device():
    """var (80 B) and its slot (40 B), residual, colocated: 120 B on one device of 100 B (total 120 B
    <= 200 B, so (a) does not apply)."""
    g = CostGraph(["var", "slot"], [0, 0], [80, 40], [], [], kind=["residual", "residual"],
                  colocation=["v", "v"])
    machine = Machine(2, memory=100, **LINK)
    with pytest.raises(InfeasibleError, match=r"op 'var' and its colocation group hold 120 B .* "
                                              r"limit \(100 B\): 20 B short"):
        check_feasible(g, machine)
    check_feasible(g, Machine(2, memory="100B,120B", **LINK))  # the larger device holds 120 B


def test_c_an_ops_inputs_and_output_over_every_device():
    """p (1 us, 60 B) -> q (1 us, 50 B) over an edge of 60 B. q on p's device: p's 60 B are held
    until q finishes, with q's 50 B: 110 B. q elsewhere: p's copy (60 B) lands there, allocated from
    p's finish, with q's 50 B: 110 B. need(q) = 50 + min(60, 60) = 110 > 100 on every device."""
    g = CostGraph(["p", "q"], [1, 1], [60, 50], [0], [1])
    machine = Machine(2, memory=100, **LINK)
    need, unit_residual, own, inputs = op_need_bytes(g)
    assert need.tolist() == [60, 110] and own.tolist() == [60, 50] and inputs.tolist() == [0, 60]
    assert unit_residual.tolist() == [0, 0]
    with pytest.raises(InfeasibleError, match=r"op 'q' needs 110 B on its device while it runs \(its output "
                                              r"50 B, its inputs 60 B\), .* limit \(100 B\): 10 B short") as info:
        check_feasible(g, machine)
    assert info.value.proven
    assert fitting(g, machine) == []
    assert fitting(g, Machine(2, memory=110, **LINK)) != []  # the bound is tight: 110 B fits
    check_feasible(g, Machine(2, memory=110, **LINK))


def test_c_counts_the_smaller_of_the_producers_output_and_its_edge():
    """p (1 us, 60 B) -> q (1 us, 50 B) over an edge of only 30 B. q on p's device holds p's whole
    60 B output (110 B); q on the other device holds a 30 B copy (80 B). need(q) = 50 + min(60, 30) =
    80: at a limit of 79 B it is a proof, at 80 B the split placement fits exactly."""
    g = CostGraph(["p", "q"], [1, 1], [60, 50], [0], [1], [30])
    assert op_need_bytes(g)[0].tolist() == [60, 80]
    with pytest.raises(InfeasibleError, match=r"op 'q' needs 80 B .* 1 B short"):
        check_feasible(g, Machine(2, memory=79, **LINK))
    check_feasible(g, Machine(2, memory=80, **LINK))
    assert fitting(g, Machine(2, memory=80, **LINK)) == [(0, 1), (1, 0)]
    assert evaluate(g, Machine(2, **LINK), np.array([0, 1])).peak_memory_bytes == [60, 80]


def test_c_by_kind_of_producer_and_of_op():
    """var (residual 80 B) -> read (1 us, 10 B), colocated: the unit's 80 B count once, need(read) =
    80 + 10 = 90. A reference op (999 B declared) holds nothing on its device, so a consumer on that
    device needs nothing for it: need(use) = 0 + 5 (own) = 5 — min(0, 999). An op that takes no time
    (zz: 0 us, 20 B, reading p's 60 B) is charged only its output: at its instant the tracker releases
    p's 60 B before it allocates zz's 20 B, so the peak of p -> zz on one device is 60, not 80."""
    g = CostGraph(["var", "read", "ref", "use", "p", "zz"], [0, 1, 1, 1, 1, 0], [80, 10, 999, 5, 60, 20],
                  [0, 2, 4], [1, 3, 5], [80, 999, 60], kind=["residual", "normal", "reference", "normal", "normal",
                                                         "normal"], colocation=["v", "v", None, None, None, None])
    need, unit_residual, own, inputs = op_need_bytes(g)
    assert need.tolist() == [80, 90, 0, 5, 60, 20]
    assert unit_residual.tolist() == [80, 80, 0, 0, 0, 0] and inputs.tolist() == [0, 0, 0, 0, 0, 0]
    assert own.tolist() == [0, 10, 0, 5, 60, 20]  # residual and reference ops: none of their own
    solo = CostGraph(["p", "zz"], [1, 0], [60, 20], [0], [1])
    assert evaluate(solo, Machine(1, **LINK), np.zeros(2, int)).peak_memory_bytes == [60]


def test_no_proof_is_no_guarantee():
    """Residuals r1, r2, r3 (50 B each) and x (1 us, 60 B) on two devices of 100 B: no proof applies,
    yet nothing fits (two residuals fill one device; the other holds 50 + 60 = 110 B with x, or x goes
    with two residuals: 160 B). The heuristic then says so without claiming a proof."""
    g = CostGraph(["r1", "r2", "r3", "x"], [0, 0, 0, 1], [50, 50, 50, 60], [], [],
                  kind=["residual", "residual", "residual", "normal"])
    machine = Machine(2, memory=100, **LINK)
    check_feasible(g, machine)
    assert fitting(g, machine) == []
    assert issubclass(NoPlacementFoundError, InfeasibleError) and not NoPlacementFoundError.proven


def test_unbounded_machines_need_no_proof():
    g = CostGraph(["big"], [1], [10**15], [], [], kind=["residual"])
    check_feasible(g, Machine(1))
    with pytest.raises(InfeasibleError):
        check_residual_capacity(g, Machine(1, memory=100))


def baseline_placements(g: CostGraph, machine: Machine):
    for name, placer in PLACERS.items():
        if placer.memory_heuristics or name == "exact":  # ParDNN's own raise; exact refuses larger graphs
            continue
        try:
            yield name, placer(g, machine).placement
        except MissingDependencyError:  # metis without pymetis
            continue


@given(random_dags(max_ops=25), st.integers(1, 4), st.integers(0, 2**31))
def test_every_op_needs_its_bound_under_any_placement(g, k, seed):
    """The lower bounds hold under the tracker itself: for any placement, each device's peak is at
    least need(v) of every op v on it, its residual bytes, and every unit's residual bytes on it."""
    place = np.random.default_rng(seed).integers(0, k, g.n)
    units = np.where(g.colocation >= 0, g.colocation, len(g.group_names) + np.arange(g.n))
    place = place[np.unique(units, return_inverse=True)[1]]  # a unit's members share one device
    peaks = np.array(evaluate(g, Machine(k, **LINK), place).peak_memory_bytes)
    need = op_need_bytes(g)[0]
    assert np.all(peaks[place] >= need)


@given(random_dags(max_ops=20), st.integers(1, 4), st.lists(st.floats(0.3, 2.5), min_size=4, max_size=4))
def test_a_proof_never_stands_while_a_baseline_fits(g, k, factors):
    """Random limits around the largest op bound: whenever some baseline's placement fits,
    check_feasible does not raise; whenever it raises, no baseline's placement fits."""
    scale = max(int(op_need_bytes(g)[0].max(initial=0)), 1)
    machine = Machine(k, memory=[max(1, int(f * scale)) for f in factors[:k]], **LINK)
    fits = [name for name, place in baseline_placements(g, machine) if evaluate(g, machine, place).memory_fits]
    try:
        check_feasible(g, machine)
    except InfeasibleError as exc:
        assert exc.proven and "short" in str(exc) and "Options:" in str(exc)
        assert fits == [], f"a proof ({exc}) while {fits} fit"
