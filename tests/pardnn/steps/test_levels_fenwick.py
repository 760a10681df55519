"""Levels (tl, bl, w_lvl) and Fenwick trees: hand-worked values and checks against brute force."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from pardnn import CostGraph
from pardnn.costs.csr import pointers, stable_buckets
from pardnn.costs.levels import bottom_levels, critical_path_us, top_levels, weighted_levels
from pardnn.steps.fenwick import (
    FenwickTree,
    fenwick_add,
    fenwick_build,
    fenwick_build_all,
    fenwick_move,
    fenwick_range,
    fenwick_ranges,
)
from tests.conftest import random_dags
from tests.helpers.graphs import g1


def test_levels_by_hand():
    g, w = g1()
    top, bottom, level = weighted_levels(g, w)
    assert top.tolist() == [0, 2, 2, 6, 8]
    assert bottom.tolist() == [10, 5, 8, 1, 2]
    assert level.tolist() == [10, 7, 10, 7, 10]
    assert critical_path_us(g, w) == 10
    assert critical_path_us(g) == 5  # without communication: a(1) + b(3) + d(1)


def test_levels_of_a_subgraph_ignore_inactive_ops():
    g, w = g1()
    active = np.array([False, True, False, True, False])  # only b -> d remains
    assert top_levels(g, w, active).tolist() == [0, 0, 0, 4, 0]
    assert bottom_levels(g, w, active).tolist() == [0, 5, 0, 1, 0]


def test_empty_graph():
    g = CostGraph([], [], [], [], [])
    assert critical_path_us(g) == 0.0 and top_levels(g).size == 0


def brute_force_levels(g: CostGraph, w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    top = np.zeros(g.n)
    bottom = np.zeros(g.n)
    for v in g.topo_order:
        for k in range(g.pred_ptr[v], g.pred_ptr[v + 1]):
            p = g.pred[k]
            top[v] = max(top[v], top[p] + g.comp_us[p] + w[g.pred_edge[k]])
    for v in g.topo_order[::-1]:
        best = 0.0
        for k in range(g.succ_ptr[v], g.succ_ptr[v + 1]):
            best = max(best, w[k] + bottom[g.succ[k]])
        bottom[v] = g.comp_us[v] + best
    return top, bottom


@given(random_dags(kinds=False, groups=False), st.integers(0, 2**31))
def test_levels_match_brute_force(g, seed):
    w = np.random.default_rng(seed).random(g.m) * 10
    top, bottom, level = weighted_levels(g, w)
    expected_top, expected_bottom = brute_force_levels(g, w)
    assert np.allclose(top, expected_top) and np.allclose(bottom, expected_bottom)
    # Every op's weighted level is at most the critical path, and some op attains it.
    assert level.max() == pytest.approx(critical_path_us(g, w))


def test_fenwick_by_hand():
    tree = FenwickTree(8)
    tree.add(0, 1.0)
    tree.add(3, 4.0)
    tree.add(7, 2.0)
    assert tree.prefix_sum(4) == 5.0
    assert tree.range_sum(1, 8) == 6.0
    assert tree.range_sum(4, 7) == 0.0
    assert tree.range_sum(5, 2) == 0.0  # empty range
    tree.add(3, -4.0)
    assert tree.range_sum(0, 8) == 3.0
    with pytest.raises(IndexError):
        tree.add(8, 1.0)


@given(st.lists(st.floats(-100, 100, allow_nan=False), min_size=1, max_size=64), st.data())
def test_fenwick_matches_cumsum(values, data):
    values = np.array(values)
    tree = FenwickTree(values.size, values)
    start = data.draw(st.integers(0, values.size))
    end = data.draw(st.integers(start, values.size))
    assert tree.range_sum(start, end) == pytest.approx(values[start:end].sum(), abs=1e-9)
    index = data.draw(st.integers(0, values.size - 1))
    tree.add(index, 3.5)
    values[index] += 3.5
    assert tree.prefix_sum(end) == pytest.approx(values[:end].sum(), abs=1e-9)


@given(st.integers(1, 40), st.integers(1, 5), st.data())
def test_many_trees_in_one_walk_match_brute_force(levels, trees, data):
    """Trees side by side (pardnn.steps.fenwick's level-major columns): moving work between two and summing
    every tree over a range agree with per-level arrays kept by hand."""
    values = np.array(data.draw(st.lists(st.lists(st.floats(-100, 100, allow_nan=False), min_size=levels,
                                                  max_size=levels), min_size=trees, max_size=trees)))
    tree = np.zeros((levels + 1, trees))
    for t in range(trees):
        fenwick_build(tree, t, values[t])
    moves = data.draw(st.lists(st.tuples(st.integers(0, trees - 1), st.integers(0, trees - 1),
                                         st.integers(0, levels - 1), st.floats(-50, 50, allow_nan=False)),
                               max_size=6))
    by_adds = tree.copy()  # the same moves as two single-tree additions: equal to the last bit
    for source, target, index, delta in moves:
        fenwick_move(tree, source, target, index, delta)
        fenwick_add(by_adds, target, index, delta)
        fenwick_add(by_adds, source, index, -delta)
        values[source, index] -= delta
        values[target, index] += delta
    assert np.array_equal(tree, by_adds)
    start = data.draw(st.integers(0, levels))
    end = data.draw(st.integers(0, levels))
    out = np.full(trees, np.nan)
    fenwick_ranges(tree, start, end, out, np.full(trees, np.nan))
    assert out.tolist() == [fenwick_range(tree, t, start, end) for t in range(trees)]  # bit for bit
    expected = values[:, start:end].sum(axis=1) if end > start else np.zeros(trees)
    np.testing.assert_allclose(out, expected, atol=1e-9)


@given(st.integers(1, 30), st.integers(1, 5), st.data())
def test_building_every_tree_in_one_pass_matches_one_tree_at_a_time(levels, trees, data):
    # fenwick_build_all over items grouped by level gives, to the last bit, each tree built alone from
    # its per-level sums (items summed in index order, as np.bincount sums them).
    items = data.draw(st.integers(0, 60))
    level = np.array(data.draw(st.lists(st.integers(0, levels - 1), min_size=items, max_size=items)), np.int64)
    column = np.array(data.draw(st.lists(st.integers(0, trees - 1), min_size=items, max_size=items)), np.int64)
    weight = np.array(data.draw(st.lists(st.floats(0, 1e6, allow_nan=False), min_size=items, max_size=items)))
    alone = np.zeros((levels + 1, trees))
    for t in range(trees):
        mine = column == t
        fenwick_build(alone, t, np.bincount(level[mine], weights=weight[mine], minlength=levels))
    together = np.zeros((levels + 1, trees))
    ptr = pointers(level, levels)
    fenwick_build_all(together, ptr, stable_buckets(level, ptr), column, weight)
    assert together.tobytes() == alone.tobytes()
