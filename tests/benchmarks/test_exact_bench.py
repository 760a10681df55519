"""benchmarks/exact.py: the random DAGs, the annealing reference and the rendered section."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("ortools")

from benchmarks.exact import anneal, random_dag, render_cases, run_case
from pardnn.emulator import emulate
from pardnn.machine import Machine
from pardnn.result import communication_ratio


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
