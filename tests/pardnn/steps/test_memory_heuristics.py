"""Step 2: memory heuristic I (overflow handler) and II (residual balancing, chunk splitting).

Machines here have reserve 0 unless stated, bandwidth 1e6 B/s and latency 1 us (an edge of b bytes
costs 1 + b us when cut).
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import event, given
from hypothesis import strategies as st

from pardnn import CostGraph, InfeasibleError, Machine, partition
from pardnn.costs.synthetic import dnn_graph
from pardnn.emulation.checks import colocation_violations
from pardnn.emulation.simulate import evaluate
from pardnn.errors import NoPlacementFoundError
from pardnn.partitioner import PAPER
from pardnn.steps.balance import balance_residuals, memory_shares, split_critical_path
from pardnn.steps.colocation import keep_groups_whole
from pardnn.steps.overflow import handle_overflow
from pardnn.steps.slicing import Clusters
from tests.conftest import most_reach, random_dags, reached

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
    """A single normal op of 150 B on devices of 100 B: wherever it runs its device holds its 150 B
    output, 50 B over every device's limit — a proof (feasibility (c)), named before any move."""
    g = CostGraph(["big"], [1], [150], [], [])
    with pytest.raises(InfeasibleError, match=r"op 'big' needs 150 B .* limit \(100 B\): 50 B short") as info:
        handle_overflow(g, Machine(2, memory=100, **LINK), np.zeros(1, int))
    assert info.value.proven and not isinstance(info.value, NoPlacementFoundError)


def test_a_heuristic_failure_says_no_placement_found_not_infeasible():
    """Residuals r1, r2, r3 (50 B each) and x (1 us, 60 B) on two devices of 100 B. No proof applies
    (residual 150 B <= 200 B in all; each unit 50 B <= 100 B; x needs 60 B <= 100 B) — yet no placement
    fits: the device without two residuals holds one (50 B) or none, and x's 60 B goes to one side;
    every split overflows (checked below over all 16). From r1, r2, r3 on 0 (150 B) and x on 1 (60 B):
    a residual unit needs 50 B on top of device 1's peak, 60 + 50 = 110 > 100, so nothing moves."""
    g = CostGraph(["r1", "r2", "r3", "x"], [0, 0, 0, 1], [50, 50, 50, 60], [], [],
                  kind=["residual", "residual", "residual", "normal"])
    machine = Machine(2, memory=100, **LINK)
    every = np.array(np.meshgrid(*[[0, 1]] * 4)).reshape(4, -1).T
    assert not any(evaluate(g, machine, p).memory_fits for p in every)
    expected = (r"^no placement found: device 0 needs 150 B .* limit is 100 B .* 50 B short after memory "
                r"heuristic I moved 0 ops in 1 round, the last moving none.*Options:")
    with pytest.raises(NoPlacementFoundError, match=expected) as info:
        handle_overflow(g, machine, np.array([0, 0, 0, 1]))
    assert isinstance(info.value, InfeasibleError) and not info.value.proven  # exit 3, but no proof


def test_every_device_overflowing_at_its_own_peak_still_moves_units_without_residual_bytes():
    """Two devices of 100 B. Device 0: residual r0 (50 B) and x (1 us, 60 B), x runs [0, 1): 110 B at
    t = 0. Device 1: residual r1 (40 B), z (2 us, 0 B) then y (1 us, 70 B): z [0, 2), y [2, 3): 110 B at
    t = 2. Both overflow by 10 B at their own peak, so no device can take residual bytes all step
    (the old check asked that of every unit: "0 ops in 0 rounds").
    Round 1, device 0 at t = 0: x (pot 60, no residual bytes) fits device 1 then: 40 + 60 = 100 <= 100;
    r0 (50 B all step) does not (110 + 50 > 100). x moves (cost 1, pot 60 >= 10). Device 1 at t = 2:
    y (70) does not fit device 0 (50 + 70 > 100), r1 not on top of device 0's peak (110 + 40): nothing.
    Round 2: device 1 runs x [0, 1), r1, z [1, 3), y [3, 4): 40 + 70 = 110 at t = 3; device 0 holds 50.
    r1 (cost 0, pot 40) fits device 0 (50 + 40 = 90, also at its peak) and covers 10: it moves.
    Round 3: device 0 holds 50 + 40 = 90, device 1 max(60, 70) = 70: fits, after 2 rounds."""
    g = CostGraph(["r0", "x", "r1", "z", "y"], [0, 1, 0, 2, 1], [50, 60, 40, 0, 70], [], [],
                  kind=["residual", "normal", "residual", "normal", "normal"])
    machine = Machine(2, memory=100, **LINK)
    start = np.array([0, 0, 1, 1, 1])
    before = evaluate(g, machine, start)
    assert before.peak_memory_bytes == [110, 110] and before.peak_time_us == [0.0, 2.0]
    result = handle_overflow(g, machine, start)
    assert result.placement.tolist() == [0, 1, 0, 1, 1]
    assert result.moves == [(1, 0, 1), (2, 1, 0)] and result.rounds == 2 and result.moved_ops == 2
    assert evaluate(g, machine, result.placement).peak_memory_bytes == [90, 70]


def test_a_round_cap_stops_the_heuristic_and_says_so():
    """The graph above needs 2 rounds: capped at 1, the handler stops after round 1 (x moved) while
    device 1 still overflows (110 B at t = 3), naming the cap; capped at 2 it fits as before."""
    g = CostGraph(["r0", "x", "r1", "z", "y"], [0, 1, 0, 2, 1], [50, 60, 40, 0, 70], [], [],
                  kind=["residual", "normal", "residual", "normal", "normal"])
    machine = Machine(2, memory=100, **LINK)
    start = np.array([0, 0, 1, 1, 1])
    expected = (r"^no placement found: device 1 needs 110 B .* 10 B short after memory heuristic I moved 1 ops in "
                r"1 round, then stopped at its cap of 1 rounds \(this is not a proof")
    with pytest.raises(NoPlacementFoundError, match=expected):
        handle_overflow(g, machine, start, max_rounds=1)
    assert handle_overflow(g, machine, start, max_rounds=2).rounds == 2


def test_the_cover_heap_follows_the_remaining_overflow():
    """Residuals B (60 B, 1 us), Y (35 B, 3 us), X (40 B, 3.5 us), W (10 B, 1.5 us) on device 0 (limit
    45 B; device 1 holds 200 B): overflow 145 - 45 = 100. Ratios c/a: B 0.017, Y 0.086, X 0.0875, W 0.15;
    no unit alone covers 100. B goes (remaining 40); now X covers 40 and joins the cover heap, but Y
    costs less (3 < 3.5) and goes (remaining 5); now W covers 5 and costs 1.5 < X's 3.5: W goes,
    5 - 10 < 0. Moved B, Y, W for 5.5 us; with the cover heap frozen at the first overflow, X (3.5)
    would have gone instead of W: 7.5 us."""
    g = CostGraph(["B", "Y", "X", "W"], [1, 3, 3.5, 1.5], [60, 35, 40, 10], [], [], kind=["residual"] * 4)
    machine = Machine(2, memory="45B,200B", **LINK)
    result = handle_overflow(g, machine, np.zeros(4, int))
    assert result.placement.tolist() == [1, 1, 0, 1]
    assert [move[0] for move in result.moves] == [0, 1, 3] and result.rounds == 1
    assert evaluate(g, machine, result.placement).peak_memory_bytes == [40, 105]


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


def feasible_limit(g: CostGraph, k: int, seed: int, per_device: bool = False,
                   witness: np.ndarray | None = None) -> tuple[Machine, np.ndarray]:
    """A machine whose memory the placement ``witness`` (default: random, groups whole) meets: a
    feasible placement exists. Every device gets the witness's largest peak, or (``per_device``) its
    own peak under the witness."""
    if witness is None:
        witness, _ = keep_groups_whole(g, np.random.default_rng(seed).integers(0, k, g.n))
    peaks = evaluate(g, Machine(k, **LINK), witness).peak_memory_bytes
    memory = [f"{max(peak, 1)}B" for peak in peaks] if per_device else max(max(peaks), 1)
    return Machine(k, memory=memory, **LINK), witness


LIMITS = st.sampled_from([True] * 4 + [False])  # per device (tighter: most starts overflow), or uniform


@most_reach
@given(random_dags(max_ops=30), st.integers(2, 4), st.integers(0, 2**31),
       st.sampled_from(["rotated"] * 2 + [True] * 2 + [False]))
def test_heuristic_one_fits_or_says_infeasible(g, k, seed, limits):
    """The witness: a random placement (limits per device or uniform), or ParDNN's own Step 1 placement
    with its devices rotated (d to d + 1 mod K, limits per device), which Step 1 itself overflows
    unless every device peaks alike."""
    step1 = partition(g, Machine(k, **LINK), memory_heuristic=None, **PAPER).placement
    rotated = (step1 + 1) % k if limits == "rotated" else None
    machine, witness = feasible_limit(g, k, seed, bool(limits), rotated)
    assert evaluate(g, machine, witness).memory_fits
    own = partition(g, machine, memory_heuristic=None, **PAPER).report.evaluation
    reached(not own.memory_fits, "Step 1 overflows: heuristic I has work to do")
    try:
        result = partition(g, machine, memory_heuristic="overflow")
    except InfeasibleError as exc:
        event("no placement found")
        assert "Options:" in str(exc)
        return
    assert evaluate(g, machine, result.placement, order=result.order).memory_fits
    assert colocation_violations(g, result.placement) == []
    again = partition(g, machine, memory_heuristic="overflow")
    assert again.placement.tobytes() == result.placement.tobytes()


@most_reach
@given(random_dags(max_ops=30), st.integers(2, 4), st.integers(0, 2**31), st.integers(0, 2**31), LIMITS)
def test_heuristic_one_never_claims_a_proof_when_a_placement_fits(g, k, seed, start_seed, per_device):
    """From any start, heuristic I fits, or fails with NoPlacementFoundError — never a proof, as the
    witness fits — and it moves each unit at most once, deterministically."""
    machine, _ = feasible_limit(g, k, seed, per_device)
    start, _ = keep_groups_whole(g, np.random.default_rng(start_seed).integers(0, k, g.n))
    reached(not evaluate(g, machine, start).memory_fits, "the start overflows: heuristic I has work to do")
    try:
        result = handle_overflow(g, machine, start)
    except NoPlacementFoundError as exc:
        event("no placement found")
        assert str(exc).startswith("no placement found: device ") and "Options:" in str(exc)
        return
    event(f"fits after {min(result.rounds, 3)}{'+' * (result.rounds >= 3)} rounds")
    assert evaluate(g, machine, result.placement).memory_fits
    moved_units = [g.colocation[op] if g.colocation[op] >= 0 else -1 - op for op, _, _ in result.moves]
    assert len(set(moved_units)) == len(moved_units)
    assert handle_overflow(g, machine, start).placement.tobytes() == result.placement.tobytes()


@most_reach
@given(random_dags(max_ops=30, min_ops=6), st.integers(2, 5), st.integers(0, 2**31), st.integers(1, 5))
def test_heuristic_two_never_worsens_the_memory_ratio(g, k, seed, used):
    """From a random placement on the first ``used`` devices: an unbalanced start is where heuristic II
    has work."""
    place, _ = keep_groups_whole(g, np.random.default_rng(seed).integers(0, min(used, k), g.n))
    machine = Machine(k)
    before = memory_shares(g, machine, place)
    result = balance_residuals(g, machine, place)
    reached(result.moved_units > 0, "heuristic II moves a residual unit")
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
