"""benchmarks/refine_budget.py: the refinement's cost model set beside measured moves."""

from __future__ import annotations

from benchmarks.exact import random_dag
from benchmarks.refine_budget import measure, model_seconds, render
from pardnn.costs.machine import Machine
from pardnn.polish.refine import SECONDS_PER_ELEMENT, SECONDS_PER_MOVE, evaluations_for


def test_model_is_the_refinements_own():
    graph = random_dag(20, 1.0, Machine(2, bandwidth=1e9, latency=0.5), seed=1)
    assert model_seconds(graph) == SECONDS_PER_MOVE + SECONDS_PER_ELEMENT * (graph.n + graph.m)
    # A budget of exactly N modelled moves buys N of them.
    assert evaluations_for(graph, 50 * model_seconds(graph) * (1 + 1e-9)) == 50


def test_measure_tries_the_budgeted_moves_and_render_states_the_ratio():
    machine = Machine(3, bandwidth=1e9, latency=0.5)
    graph = random_dag(18, 10.0, machine, seed=5)
    tried, per_move = measure(graph, machine)
    assert tried >= 2 and per_move > 0
    text = render([("random DAG, 18 ops", graph, tried, per_move)], 1.0, "python -m benchmarks.refine_budget")
    row = next(line for line in text.splitlines() if line.startswith("| random DAG, 18 ops"))
    assert row.split("|")[3].strip() == f"{tried:,}"
    assert row.split("|")[-2].strip() == f"{per_move / model_seconds(graph):.2f}"
    assert "measured / model: min" in text
