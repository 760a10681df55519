"""Step 2: memory heuristic I (overflow handler) and II (residual balancing, chunk splitting).

Machines here have reserve 0 unless stated, bandwidth 1e6 B/s and latency 1 us (an edge of b bytes
costs 1 + b us when cut).
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from pardnn import CostGraph, InfeasibleError, Machine, partition
from pardnn.balance import balance_residuals, memory_shares, split_critical_path
from pardnn.checks import colocation_violations
from pardnn.colocation import keep_groups_whole
from pardnn.overflow import handle_overflow
from pardnn.simulate import evaluate
from pardnn.slicing import Clusters
from pardnn.synthetic import dnn_graph
from tests.conftest import random_dags

LINK = {"bandwidth": 1e6, "latency": 1.0, "reserve": 0.0}


def test_overflow_moves_the_op_of_least_move_cost_per_byte():
    """a (residual, 60 B) feeds c (1 us, 10 B); b (residual, 50 B) stands alone. All on device 0 of
    two with 100 B each: peak 120 at t = 0, overflow 20. Potentials: a 60, b 50, c 10 (running).
    Move costs (Eq. 5): a = 0 + comm(a, c) = 61, b = 0, c = 1 + 61. b has the lowest ratio (0) and
    covers the overflow: it alone moves to device 1."""
    g = CostGraph(["a", "b", "c"], [0, 0, 1], [60, 50, 10], [0], [2], kind=["residual", "residual", "normal"])
    machine = Machine(2, memory=100, **LINK)
    assert evaluate(g, machine, np.zeros(3, int)).peak_memory_bytes == [120, 0]
    result = handle_overflow(g, machine, np.zeros(3, int))
    assert result.placement.tolist() == [0, 1, 0]
    assert result.moved_ops == 1 and result.rounds == 1
    assert evaluate(g, machine, result.placement).peak_memory_bytes == [70, 50]


def test_overflow_prefers_the_cheaper_single_cover():
    """x (residual, 10 us, 200 B) and y (residual, 2 us, 20 B) on device 0 (limit 200): overflow 20.
    By ratio x is best (10/200 = 0.05 < 2/20 = 0.1) but y alone covers the overflow at a lower move
    cost (2 < 10): the second heap wins and only y moves."""
    g = CostGraph(["x", "y"], [10, 2], [200, 20], [], [], kind=["residual", "residual"])
    result = handle_overflow(g, Machine(2, memory=200, **LINK), np.zeros(2, int))
    assert result.placement.tolist() == [0, 1]


def test_overflow_target_must_have_room():
    """v (residual, 50 B, 1 us) and w (residual, 60 B, 5 us) on device 0 (limit 100): overflow 10. v has
    the lower ratio (1/50 < 5/60). It talks only with u on device 1 (a control edge), but device 1 is
    nearly full (u holds 90 B); device 2 is empty, so v goes to device 2."""
    g = CostGraph(["v", "w", "u"], [1, 5, 1], [50, 60, 90], [0], [2], [0],
                  kind=["residual", "residual", "residual"])
    result = handle_overflow(g, Machine(3, memory=100, **LINK), np.array([0, 0, 1]))
    assert result.placement.tolist() == [2, 0, 1]


def test_overflow_with_heterogeneous_memory():
    """Devices of 300, 100 and 100 B. Residuals a (150 B), b (80 B), c (60 B) all on device 1:
    overflow 190. All move costs are 0, so ratio ties go to the lowest op: a first, which fits only on
    device 0; then b, which fits on 0 and 2 — no communication either way, so the lower peak wins
    (device 2, empty, over device 0, now holding a). 230 B moved >= 190: done."""
    g = CostGraph(["a", "b", "c"], [0, 0, 0], [150, 80, 60], [], [], kind=["residual"] * 3)
    machine = Machine(3, memory="300B,100B,100B", **LINK)
    result = handle_overflow(g, machine, np.array([1, 1, 1]))
    assert result.placement.tolist() == [0, 2, 1]
    assert evaluate(g, machine, result.placement).peak_memory_bytes == [150, 60, 80]


def test_overflow_moves_colocation_groups_whole():
    """var (residual 80 B) with its update op apply (reference) and read (normal, 10 B) form group 'v';
    other (residual 40 B). Device 0 (limit 100) holds everything: 130 B. The group's move cost is
    higher than other's (1 + 1 us of compute vs 0), so other moves; with other pinned by a larger
    size, the group moves as one."""
    names = ["var", "read", "apply", "other"]
    g = CostGraph(names, [0, 1, 1, 0], [80, 10, 0, 40], [0, 0], [1, 2],
                  kind=["residual", "normal", "reference", "residual"], colocation=["v", "v", "v", None])
    result = handle_overflow(g, Machine(2, memory=100, **LINK), np.zeros(4, int))
    assert result.placement.tolist() == [0, 0, 0, 1]
    big = CostGraph(names, [0, 1, 1, 500], [80, 10, 0, 40], [0, 0], [1, 2],
                    kind=["residual", "normal", "reference", "residual"], colocation=["v", "v", "v", None])
    result = handle_overflow(big, Machine(2, memory=100, **LINK), np.zeros(4, int))
    assert result.placement.tolist() == [1, 1, 1, 0]
    assert colocation_violations(big, result.placement) == []


def test_residuals_larger_than_all_devices_fail_at_once():
    g = CostGraph(["a", "b"], [0, 0], [150, 100], [], [], kind=["residual", "residual"])
    with pytest.raises(InfeasibleError, match=r"residual ops .* alone need 250 B .* hold 200 B .* 50 B short"):
        handle_overflow(g, Machine(2, memory=100, **LINK), np.zeros(2, int))


def test_an_op_that_fits_nowhere_is_named_with_its_shortfall():
    """A single normal op of 150 B on devices of 100 B: device 0 needs 150 B, limit 100 B, 50 B short."""
    g = CostGraph(["big"], [1], [150], [], [])
    with pytest.raises(InfeasibleError, match=r"device 0 needs 150 B .* limit is 100 B .* 50 B short"):
        handle_overflow(g, Machine(2, memory=100, **LINK), np.zeros(1, int))


def test_reserve_lowers_the_limit():
    """With a 10 % reserve, 100 B devices hold 90 B: a 95 B op does not fit."""
    g = CostGraph(["a"], [1], [95], [], [])
    assert evaluate(g, Machine(1, memory=100, reserve=0.0), np.zeros(1, int)).memory_fits
    assert not evaluate(g, Machine(1, memory=100), np.zeros(1, int)).memory_fits


def test_residual_balancing_by_hand():
    """Residuals r0 (60 B), r1 (30 B), r2 (10 B) all on device 0, one normal op n (100 B) on device 1.
    Shares: device 0 = 1 + 0, device 1 = 0 + 1: Eq. 6 holds (K/2 × 1 = 1), nothing moves. With the
    normal op on device 0 too, shares are [2, 0]: move the unit that brings them closest without
    swapping (gap 2; r0's share 0.6 → distance |2 - 1.2| = 0.8, r1 0.3 → 1.4, r2 → 1.8): r0 goes; now
    [1.4, 0.6], gap 0.8: r1 (0.3 → 0.2) beats r2 (0.1 → 0.6); [1.1, 0.9]: r2 (0.1; 0.2 - 0.2 = 0)
    → [1.0, 1.0]."""
    g = CostGraph(["r0", "r1", "r2", "n"], [0, 0, 0, 1], [60, 30, 10, 100], [], [],
                  kind=["residual", "residual", "residual", "normal"])
    m = Machine(2)
    assert balance_residuals(g, m, np.array([0, 0, 0, 1])).moved_units == 0
    result = balance_residuals(g, m, np.array([0, 0, 0, 0]))
    assert result.placement.tolist() == [1, 1, 1, 0]
    assert result.shares_after.tolist() == pytest.approx([1.0, 1.0])


def test_chunk_splitting_by_hand():
    """Three primaries: P0 = six ops of 10 B, P1 and P2 empty-handed (0 B each, one op). Mean 20 B,
    P0 holds 60 > 2 × 20: chunks of P0 from its start lift P1 (ops 0, 1) and P2 (ops 2, 3) to 20 B."""
    names = [f"p{i}" for i in range(6)] + ["q", "r"]
    g = CostGraph(names, [1] * 8, [10] * 6 + [0, 0], list(range(5)), list(range(1, 6)))
    clusters = Clusters(3, np.array([0] * 6 + [1, 2]), np.array([0, 6, 7, 8]), np.arange(8))
    split, moved = split_critical_path(g, clusters)
    assert moved == 4
    assert [split.cluster(c).tolist() for c in range(3)] == [[4, 5], [0, 1, 6], [2, 3, 7]]
    # Balanced primaries are left alone.
    even = Clusters(2, np.array([0] * 6 + [1, 1]), np.array([0, 6, 8]), np.arange(8))
    g2 = CostGraph(names, [1] * 8, [10] * 6 + [30, 30], list(range(5)), list(range(1, 6)))
    assert split_critical_path(g2, even)[1] == 0


def feasible_limit(g: CostGraph, k: int, seed: int) -> tuple[Machine, np.ndarray]:
    """A machine whose memory the random placement ``witness`` meets: a feasible placement exists."""
    witness = np.random.default_rng(seed).integers(0, k, g.n)
    groups = g.colocation >= 0
    if groups.any():  # keep the witness's groups whole
        leader = {}
        for v in np.flatnonzero(groups):
            leader.setdefault(int(g.colocation[v]), witness[v])
            witness[v] = leader[int(g.colocation[v])]
    peak = max(evaluate(g, Machine(k, **LINK), witness).peak_memory_bytes)
    return Machine(k, memory=max(peak, 1), **LINK), witness


@given(random_dags(max_ops=30), st.integers(2, 4), st.integers(0, 2**31))
def test_heuristic_one_fits_or_says_infeasible(g, k, seed):
    machine, witness = feasible_limit(g, k, seed)
    assert evaluate(g, machine, witness).memory_fits
    try:
        result = partition(g, machine, memory_heuristic="overflow")
    except InfeasibleError as exc:
        assert "Options:" in str(exc)
        return
    assert evaluate(g, machine, result.placement).memory_fits
    assert colocation_violations(g, result.placement) == []
    again = partition(g, machine, memory_heuristic="overflow")
    assert again.placement.tobytes() == result.placement.tobytes()


@given(random_dags(max_ops=30), st.integers(2, 5), st.integers(0, 2**31))
def test_heuristic_two_never_worsens_the_memory_ratio(g, k, seed):
    place, _ = keep_groups_whole(g, np.random.default_rng(seed).integers(0, k, g.n))
    machine = Machine(k)
    before = memory_shares(g, machine, place)
    result = balance_residuals(g, machine, place)
    after = result.shares_after
    assert after.max() <= before.max() + 1e-12 and after.min() >= before.min() - 1e-12
    assert balance_residuals(g, machine, place).placement.tobytes() == result.placement.tobytes()


@pytest.mark.parametrize("heuristic", ["overflow", "balance"])
def test_synthetic_graph_meets_a_limit_and_reports(heuristic):
    g = dnn_graph(3_000, seed=5)
    base = partition(g, Machine(4), memory_heuristic=None).report.evaluation
    limit = int(1.2 * sum(base.peak_memory_bytes) / 4)
    machine = Machine(4, memory=limit, reserve=0.0)
    try:
        result = partition(g, machine, memory_heuristic=heuristic)
    except InfeasibleError:
        assert heuristic == "balance", "heuristic I must meet a limit 20 % above the mean Step 1 peak here"
        return
    details = result.report.details
    assert result.report.evaluation.memory_fits
    assert details["memory_heuristic"] == heuristic
    assert {"moved_ops", "moved_share", "peak_before_bytes", "peak_after_bytes", "makespan_before_us",
            "makespan_after_us"} <= set(details)
    assert max(details["peak_after_bytes"]) <= limit
    assert "memory" in result.report.stage_seconds


def test_auto_heuristic_follows_the_machine():
    g = dnn_graph(500, seed=1)
    assert partition(g, Machine(2)).report.details["memory_heuristic"] is None
    big = Machine(2, memory="1TiB")
    assert partition(g, big).report.details["memory_heuristic"] == "overflow"
    with pytest.raises(ValueError, match="memory_heuristic='knapsack'"):
        partition(g, big, memory_heuristic="knapsack")
