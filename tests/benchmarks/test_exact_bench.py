"""benchmarks/exact.py: the random DAGs, the annealing and exhaustive references, the ordered schedule
and the rendered section."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

pytest.importorskip("ortools")

from benchmarks.exact import (
    anneal,
    best_fifo,
    placements_up_to_relabelling,
    random_dag,
    render_cases,
    run_case,
    upward_rank_order,
)
from pardnn.costs.graph import CostGraph
from pardnn.costs.machine import Machine
from pardnn.emulation.emulator import emulate
from pardnn.placement.result import communication_ratio


@pytest.mark.parametrize("ccr", [0.1, 10.0])
def test_random_dag_hits_its_communication_ratio(ccr):
    machine = Machine(3, bandwidth=1e9, latency=0.5)
    graph = random_dag(25, ccr, machine, seed=7)
    assert graph.n == 25 and graph.m >= 20
    assert communication_ratio(graph, machine) == pytest.approx(ccr, rel=0.05)


def test_anneal_is_deterministic_and_never_worse_than_its_starts():
    machine = Machine(2, bandwidth=1e9, latency=0.5)
    graph = random_dag(18, 10.0, machine, seed=3)
    starts = [np.zeros(graph.n, np.int64), np.arange(graph.n) % 2]
    best = anneal(graph, machine, starts, 500, seed=1)
    assert best == anneal(graph, machine, starts, 500, seed=1)
    assert best <= min(emulate(graph, machine, s).makespan_us for s in starts)


def test_a_case_is_solved_and_rendered():
    case = run_case(0, seed=0, time_limit_s=2.0)
    assert case["status"] == "optimal" and case["optimum"] > 0
    assert all(m >= case["optimum"] * (1 - 1e-4) for m in case["makespans"].values())
    text = render_cases([case], 1.0, "python -m benchmarks.exact --graphs 1", 2.0)
    assert "| pardnn |" in text and "Targets (issue)" in text


@pytest.mark.parametrize(("n", "k", "count"), [(1, 3, 1), (3, 3, 5), (4, 2, 8), (5, 3, 41), (15, 2, 2**14)])
def test_placements_up_to_relabelling_are_the_stirling_sums(n, k, count):
    # 5 ops on 3 devices: S(5,1) + S(5,2) + S(5,3) = 1 + 15 + 25; on 2 devices 2^(n-1).
    assert placements_up_to_relabelling(n, k) == count


@pytest.mark.parametrize(("k", "seed"), [(2, 1), (3, 2), (3, 5)])
def test_best_fifo_is_the_least_makespan_over_every_placement(k, seed):
    machine = Machine(k, bandwidth=1e9, latency=0.5)
    graph = random_dag(8, 10.0, machine, seed=seed)
    brute = min(emulate(graph, machine, np.array(p)).makespan_us
                for p in itertools.product(range(k), repeat=graph.n))
    assert best_fifo(graph, machine) == brute
    ordered = min(upward_rank_order(graph, machine, np.array(p)) for p in itertools.product(range(k), repeat=graph.n))
    assert best_fifo(graph, machine, ordered=True) == ordered


def test_upward_rank_order_runs_the_longer_branch_first():
    # Fork a -> {b, c} on one device; c leads to d (100 us) on the other device, b to nothing.
    # Readiness order ties b and c (both ready at 1), topological rank runs b first: c ends at 21, d at
    # 21 + 1 (transfer) + 100 = 122. Upward rank runs c (rank 121) before b (rank 10): d ends at 112.
    graph = CostGraph(["a", "b", "c", "d"], [1.0, 10.0, 10.0, 100.0], [0, 0, 1000, 0],
                      [0, 0, 2], [1, 2, 3])
    machine = Machine(2, bandwidth=1e9, latency=0.0)
    placement = np.array([0, 0, 0, 1])
    assert emulate(graph, machine, placement).makespan_us == pytest.approx(122.0)
    assert upward_rank_order(graph, machine, placement) == pytest.approx(112.0)
