"""The exact CP-SAT placer: optima worked out by hand, the lower-bound property against every placer,
determinism, colocation, memory, and its refusals."""

from __future__ import annotations

import itertools
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pardnn import CostGraph, InfeasibleError, Machine
from pardnn.baselines import BASELINES, MissingDependencyError, exact
from pardnn.baselines.exact import RELATIVE_GAP, GraphTooLargeError
from pardnn.emulation.checks import check_placement, colocation_violations
from pardnn.emulation.simulate import evaluate
from pardnn.errors import PardnnError
from pardnn.registry import PLACERS
from tests.conftest import most_reach, random_dags, reached

pytest.importorskip("ortools")

# 1 byte costs 1 µs and a transfer has no latency: comm(u, v) = the edge's bytes, in µs.
BYTE_US = {"bandwidth": 1e6, "latency": 0.0}


def solve(graph: CostGraph, machine: Machine, **options):
    result = exact(graph, machine, **options)
    check_placement(graph, machine, result.placement, colocation=True)
    assert result.report.algorithm == "exact"
    assert set(result.report.stage_seconds) == {"placement", "evaluation"}
    assert result.report.evaluation == evaluate(graph, machine, result.placement, order=result.order)
    return result, result.report.details


def assert_model_schedule(graph: CostGraph, machine: Machine, placement: np.ndarray, details: dict) -> None:
    """The model's schedule of the placement returned meets the machine model in real numbers, up to the
    rounding down of every duration and transfer (less than a tick per op and edge)."""
    start = np.array(details["model_start_us"])
    tolerance = (graph.n + graph.m + 1) / details["ticks_per_us"]
    end = start + graph.comp_us
    comm = machine.edge_comm_us(graph.edge_bytes)
    cut = placement[graph.edge_src] != placement[graph.edge_dst]
    assert (start[graph.edge_dst] >= end[graph.edge_src] + np.where(cut, comm, 0.0) - tolerance).all()
    for d in range(machine.devices):
        ops = [v for v in np.argsort(start, kind="stable") if placement[v] == d and graph.comp_us[v] > 0]
        assert all(start[b] >= end[a] - tolerance for a, b in itertools.pairwise(ops))
    assert details["chosen_model_us"] == pytest.approx(end.max(initial=0.0), abs=tolerance)
    assert details["objective_us"] <= details["chosen_model_us"] + 1e-9


def fork_join(edge_bytes: int) -> CostGraph:
    """s(1) -> a(4), s -> b(4), a -> t(1), b -> t; every output is ``edge_bytes`` bytes."""
    return CostGraph.from_named_edges(["s", "a", "b", "t"], [1, 4, 4, 1], [edge_bytes] * 4,
                                      [("s", "a"), ("s", "b"), ("a", "t"), ("b", "t")])


# ------------------------------------------------------------------------------ worked by hand
def test_chain_stays_on_one_device():
    """a(1) -> b(2) -> c(3) with 10-µs transfers: any cut adds >= 10 µs, so one device, 1 + 2 + 3 = 6."""
    g = CostGraph(["a", "b", "c"], [1, 2, 3], [10, 10, 10], [0, 1], [1, 2])
    result, details = solve(g, Machine(2, **BYTE_US))
    assert details["status"] == "optimal"
    assert details["objective_us"] == pytest.approx(6.0) and details["bound_us"] == pytest.approx(6.0)
    assert result.placement.tolist() == [0, 0, 0]  # the first unit is on device 0 (value precedence)
    assert result.report.evaluation.makespan_us == pytest.approx(6.0)


def test_two_independent_heavy_ops_take_one_device_each():
    """a(5) and b(5), no edge, K = 2: max(5, 5) = 5, a on device 0 and b on device 1."""
    g = CostGraph(["a", "b"], [5, 5], [0, 0], [], [])
    result, details = solve(g, Machine(2))
    assert details["status"] == "optimal" and details["objective_us"] == pytest.approx(5.0)
    assert result.placement.tolist() == [0, 1]
    assert details["gap"] == pytest.approx(0.0)


def test_fork_join_with_heavy_edges_stays_on_one_device():
    """Edges of 100 µs: splitting a from b costs >= 1 + 100 + 4 + 100 + 1; one device: 1 + 4 + 4 + 1 = 10."""
    result, details = solve(fork_join(100), Machine(2, **BYTE_US))
    assert details["status"] == "optimal" and details["objective_us"] == pytest.approx(10.0)
    assert result.placement.tolist() == [0, 0, 0, 0]


def test_fork_join_with_light_edges_splits():
    """Edges of 1 µs: s [0, 1] and a [1, 5] on device 0; b on device 1 from 1 + 1 = 2 to 6; t there from
    max(6, 5 + 1) = 6 to 7. Nothing beats 7: on one device it is 10, and whichever of a, b moves away
    from s starts at 2, ends at 6, and t follows it at 6 (locally) or at 7 (across). Optimum 7."""
    result, details = solve(fork_join(1), Machine(2, **BYTE_US))
    assert details["status"] == "optimal" and details["objective_us"] == pytest.approx(7.0)
    placement = result.placement.tolist()
    assert placement[0] == 0 and placement[1] != placement[2]
    assert_model_schedule(fork_join(1), Machine(2, **BYTE_US), result.placement, details)
    assert result.report.evaluation.makespan_us >= 7.0 - 1e-9


def memory_graph() -> CostGraph:
    """Two variables of 600 B (residual, groups g1 and g2 with their readers a(2), b(2)) feed c(1) over
    10-byte edges: v1 -> a -> c, v2 -> b -> c."""
    return CostGraph.from_named_edges(
        ["v1", "v2", "a", "b", "c"], [0, 0, 2, 2, 1], [600, 600, 10, 10, 0],
        [("v1", "a"), ("v2", "b"), ("a", "c"), ("b", "c")],
        kind=["residual", "residual", "normal", "normal", "normal"], colocation=["g1", "g2", "g1", "g2", None])


def test_residual_memory_forces_a_split():
    """Unlimited: one device, 2 + 2 + 1 = 5. With 1000 B per device (reserve 0) the two variables
    (1200 B) cannot share one: a [0, 2] and b [0, 2] on different devices, c after the 10-µs transfer:
    2 + 10 + 1 = 13. The placement then fits: 600 + 10 + the 10-byte copy received, per device."""
    g = memory_graph()
    free, free_details = solve(g, Machine(2, **BYTE_US))
    assert free_details["objective_us"] == pytest.approx(5.0)
    assert free.placement.tolist() == [0] * 5
    result, details = solve(g, Machine(2, memory=1000, reserve=0.0, **BYTE_US))
    assert details["status"] == "optimal" and details["objective_us"] == pytest.approx(13.0)
    placement = result.placement.tolist()
    assert placement[0] == placement[2] != placement[1] == placement[3]
    assert result.report.evaluation.memory_fits


def test_residual_bytes_that_no_assignment_packs_are_infeasible_but_still_placed():
    """Three 600-B variables on two devices of 1000 B: 1800 B fit the 2000 B in total, no two fit one
    device. The status says so; like every baseline, it still returns a placement (which does not fit)."""
    g = CostGraph(["v1", "v2", "v3"], [1, 1, 1], [600] * 3, [], [], kind=["residual"] * 3)
    result, details = solve(g, Machine(2, memory=1000, reserve=0.0))
    assert details["status"] == "infeasible" and details["objective_us"] is None
    assert not result.report.evaluation.memory_fits


def test_one_device_and_the_empty_graph_need_no_solver(monkeypatch):
    monkeypatch.setitem(sys.modules, "ortools.sat.python", None)  # the solver is never imported
    result, details = solve(fork_join(1), Machine(1))
    assert result.placement.tolist() == [0] * 4
    assert details["status"] == "optimal" and details["objective_us"] == pytest.approx(10.0)
    assert exact(CostGraph([], [], [], [], []), Machine(3)).placement.tolist() == []


# ------------------------------------------------------------------------------ contract
def test_registered_as_a_placer():
    assert BASELINES["exact"] is exact and PLACERS["exact"] is exact


def test_refuses_a_graph_above_max_ops():
    g = CostGraph([f"op{i}" for i in range(12)], [1.0] * 12, [0] * 12, [], [], name="big")
    with pytest.raises(GraphTooLargeError, match=r"up to 10 ops; 'big' has 12.*time_limit_s.*--time-budget"):
        exact(g, Machine(2), max_ops=10)
    assert issubclass(GraphTooLargeError, PardnnError) and issubclass(GraphTooLargeError, ValueError)


def test_without_ortools_says_what_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "ortools.sat.python", None)  # makes the import fail
    with pytest.raises(MissingDependencyError, match=r"pip install ortools==9\.9\.3963"):
        exact(fork_join(1), Machine(2))


def test_rejects_a_memory_heuristic_and_a_negative_time_limit():
    with pytest.raises(ValueError, match="no memory heuristic"):
        exact(fork_join(1), Machine(2), memory_heuristic="overflow")
    with pytest.raises(ValueError, match="time_limit_s"):
        exact(fork_join(1), Machine(2), time_limit_s=-1)


def test_reports_status_objective_bound_and_time():
    _, details = solve(fork_join(1), Machine(2, **BYTE_US), time_limit_s=5.0)
    for key in ("status", "objective_us", "bound_us", "solve_seconds", "time_limit_s", "timeout"):
        assert key in details
    assert details["time_limit_s"] == 5.0 and details["timeout"] is False
    assert details["bound_us"] <= details["objective_us"] + 1e-9


def test_a_stopped_search_still_places_and_is_deterministic():
    """The limit is CP-SAT's deterministic time, so even a search it stops repeats exactly."""
    g = random_graph(45, seed=3)
    machine = Machine(4, **BYTE_US)
    first, details = solve(g, machine, time_limit_s=0.05, max_ops=45)
    assert details["status"] in ("feasible", "unknown", "optimal")
    second, _ = solve(g, machine, time_limit_s=0.05, max_ops=45)
    assert first.placement.tobytes() == second.placement.tobytes()
    if details["model_start_us"] is not None:
        assert_model_schedule(g, machine, first.placement, details)


def random_graph(n: int, seed: int) -> CostGraph:
    rng = np.random.default_rng(seed)
    src, dst = np.nonzero(np.triu(rng.random((n, n)) < 3.0 / n, k=1))
    return CostGraph([f"op{i}" for i in range(n)], rng.uniform(1, 50, n), rng.integers(1, 60, n), src, dst)


@most_reach
@settings(max_examples=settings.default.max_examples // 4)  # 15; CP-SAT takes up to seconds per graph
@given(g=random_dags(max_ops=14, min_ops=4, groups=0.8), k=st.integers(2, 4))
def test_deterministic_and_groups_whole(g, k):
    machine = Machine(k, bandwidth=1e8, latency=5.0)
    reached(any(members.size > 1 for members in g.group_members()), "a colocation group of two or more ops")
    first, _ = solve(g, machine)
    second, _ = solve(g, machine)
    assert first.placement.tobytes() == second.placement.tobytes()
    assert colocation_violations(g, first.placement) == []


# ------------------------------------------------------------------------------ the lower bound
@most_reach
@given(g=random_dags(max_ops=10, min_ops=3), k=st.integers(2, 4), memory=st.sampled_from([None, 4000, 20000]))
def test_optimum_bounds_every_placer_from_below(g, k, memory):
    """No placement of any placer that fits memory has an emulated makespan below the model's optimum,
    the exact placement included; and when the model is infeasible, no placer's placement fits."""
    machine = Machine(k, memory=memory, reserve=0.0, bandwidth=1e8, latency=5.0)
    result, details = solve(g, machine)
    status = details["status"]
    assert status in ("optimal", "infeasible")  # 10 ops solve well within the limit
    reached(status == "optimal", "the model has an optimum to bound the placers with")
    makespans = {}
    for name, placer in PLACERS.items():
        if name == "exact":
            continue
        try:
            evaluation = placer(g, machine).report.evaluation
        except (MissingDependencyError, InfeasibleError):
            continue
        if status == "infeasible":
            assert not evaluation.memory_fits, name
        elif evaluation.memory_fits:
            makespans[name] = evaluation.makespan_us
    if status == "infeasible":
        return
    if g.n and k > 1:
        assert_model_schedule(g, machine, result.placement, details)
    # The proven bound is below every emulated makespan; the optimum too, within the gap CP-SAT may leave
    # when it calls a solution optimal (RELATIVE_GAP).
    optimum, bound = details["objective_us"], details["bound_us"]
    tolerance = 1e-9 * max(optimum, 1.0)
    assert bound <= optimum + tolerance
    assert optimum - bound <= RELATIVE_GAP * optimum + tolerance
    for name, makespan in [*makespans.items(), ("exact", result.report.evaluation.makespan_us)]:
        assert bound <= makespan + tolerance, name
        assert optimum <= makespan * (1 + RELATIVE_GAP) + tolerance, name
    # Rounding down costs less than a tick per op and per edge; the textbook bound holds otherwise.
    slack = (g.n + g.m + 1) / details["ticks_per_us"]
    assert optimum >= result.report.evaluation.lower_bound_us - slack


def test_the_exact_placement_comes_with_the_model_order_when_that_is_faster():
    """a -> {b, c}, c -> d (1000 B at 1 GB/s: 1 us); a, b, c in one group. In order of readiness every
    placement takes >= 121 us (all on one device: 1 + 10 + 10 + 100; d apart: b runs before c, 122).
    The optimum runs c before b with d apart: 1 + 10 + 1 + 100 = 112, and the model's order gets it."""
    g = CostGraph(["a", "b", "c", "d"], [1.0, 10.0, 10.0, 100.0], [0, 0, 1000, 0], [0, 0, 2], [1, 2, 3],
                  colocation=["g", "g", "g", None])
    machine = Machine(2, bandwidth=1e9, latency=0.0)
    result, details = solve(g, machine)
    assert details["status"] == "optimal" and details["objective_us"] == pytest.approx(112.0, rel=1e-5)
    assert details["run_order"] and result.order is not None
    assert result.report.evaluation.makespan_us == pytest.approx(112.0, rel=1e-5)
    assert result.order[[1, 2]].tolist() == [2, 1]  # c before b
    assert evaluate(g, machine, result.placement).makespan_us >= 121.0  # the same placement, unordered
    plain, details = solve(g, machine, ordered=False)
    assert plain.order is None and not details["run_order"] and plain.report.evaluation.makespan_us >= 121.0
