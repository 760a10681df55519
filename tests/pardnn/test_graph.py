from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given

from pardnn import CostGraph, InvalidGraphError, Kind
from tests.conftest import random_dags


def diamond() -> CostGraph:
    """a -> b, a -> c, b -> d, c -> d (a feeds two branches that join)."""
    return CostGraph(["a", "b", "c", "d"], [1, 2, 3, 4], [10, 20, 30, 40], [0, 0, 1, 2], [1, 2, 3, 3])


def test_csr_of_a_diamond():
    g = diamond()
    assert g.succ_ptr.tolist() == [0, 2, 3, 4, 4]
    assert g.succ.tolist() == [1, 2, 3, 3]
    assert g.pred_ptr.tolist() == [0, 0, 1, 2, 4]
    assert g.pred.tolist() == [0, 0, 1, 2]
    assert g.edge_bytes.tolist() == [10, 10, 20, 30]  # default: the producer's out_bytes
    assert g.topo_order.tolist() == [0, 1, 2, 3]
    assert g.predecessors(3).tolist() == [1, 2]
    assert g.total_work_us == 10.0


def test_arrays_are_read_only():
    g = diamond()
    with pytest.raises(ValueError):
        g.comp_us[0] = 5.0
    with pytest.raises(ValueError):
        g.succ[0] = 2


def test_parallel_edges_are_merged_by_summing_bytes():
    g = CostGraph(["a", "b"], [1, 1], [8, 0], [0, 0], [1, 1], [8, 4])
    assert g.m == 1 and g.edge_bytes.tolist() == [12]


def test_topological_order_when_indices_are_not():
    g = CostGraph(["late", "early"], [1, 1], [0, 0], [1], [0])
    assert g.topo_order.tolist() == [1, 0]
    assert g.topo_rank.tolist() == [1, 0]


def test_empty_and_single_node():
    empty = CostGraph([], [], [], [], [])
    assert empty.n == 0 and empty.m == 0 and empty.topo_order.size == 0
    single = CostGraph(["x"], [5.0], [7], [], [])
    assert single.topo_order.tolist() == [0]


def test_kinds_and_groups():
    g = CostGraph(["v", "read", "apply"], [0, 1, 1], [100, 100, 0], [0, 0], [1, 2],
                  kind=["residual", "normal", "reference"], colocation=["v", None, "v"])
    assert g.kind.tolist() == [Kind.RESIDUAL, Kind.NORMAL, Kind.REFERENCE]
    assert g.colocation.tolist() == [0, -1, 0] and g.group_names == ("v",)
    assert [m.tolist() for m in g.group_members()] == [[0, 2]]


def test_cycle_is_named():
    with pytest.raises(InvalidGraphError, match=r"cycle: 'b', 'c', 'a', 'b'"):
        CostGraph(["a", "b", "c", "x"], [1, 1, 1, 1], [0] * 4, [0, 1, 2, 3], [1, 2, 0, 0])


def test_self_loop_is_a_cycle():
    with pytest.raises(InvalidGraphError, match="op 'a' feeds itself"):
        CostGraph(["a"], [1], [0], [0], [0])


@pytest.mark.parametrize("value", [-1.0, float("nan"), float("inf")])
def test_bad_compute_names_op_and_field(value):
    with pytest.raises(InvalidGraphError, match=r"op 'b': comp_us = .* must be a finite number >= 0"):
        CostGraph(["a", "b"], [1.0, value], [0, 0], [], [])


@pytest.mark.parametrize("value", [-1, 2.5, float("nan")])
def test_bad_out_bytes_names_op_and_field(value):
    with pytest.raises(InvalidGraphError, match=r"op 'b': out_bytes = "):
        CostGraph(["a", "b"], [1.0, 1.0], [0, value], [], [])


def test_bad_edge_bytes_names_edge():
    with pytest.raises(InvalidGraphError, match=r"edge 'a' -> 'b': bytes = -3"):
        CostGraph(["a", "b"], [1, 1], [0, 0], [0], [1], [-3])


def test_duplicate_name():
    with pytest.raises(InvalidGraphError, match=r"duplicate op name 'a' \(ops #0 and #2\)"):
        CostGraph(["a", "b", "a"], [1, 1, 1], [0, 0, 0], [], [])


def test_empty_name():
    with pytest.raises(InvalidGraphError, match="empty or non-string name"):
        CostGraph(["a", ""], [1, 1], [0, 0], [], [])


def test_unknown_endpoint_by_name():
    with pytest.raises(InvalidGraphError, match=r"edge 'a' -> 'zz': unknown op 'zz'"):
        CostGraph.from_named_edges(["a", "b"], [1, 1], [0, 0], [("a", "b"), ("a", "zz")])


def test_endpoint_index_out_of_range():
    with pytest.raises(InvalidGraphError, match=r"destination index 5, outside 0\.\.1"):
        CostGraph(["a", "b"], [1, 1], [0, 0], [0], [5])


def test_unknown_kind():
    with pytest.raises(InvalidGraphError, match=r"op 'a': kind = 'variable'; expected one of normal"):
        CostGraph(["a"], [1], [0], [], [], kind=["variable"])


def test_wrong_lengths():
    with pytest.raises(InvalidGraphError, match="comp_us has 1 values for 2 ops"):
        CostGraph(["a", "b"], [1], [0, 0], [], [])


@given(random_dags())
def test_topological_order_respects_every_edge(g):
    rank = g.topo_rank
    assert np.all(rank[g.edge_src] < rank[g.edge_dst])
    assert sorted(g.topo_order.tolist()) == list(range(g.n))


@given(random_dags())
def test_csr_views_agree(g):
    pairs_succ = {(int(v), int(w)) for v in range(g.n) for w in g.successors(v)}
    pairs_pred = {(int(p), int(v)) for v in range(g.n) for p in g.predecessors(v)}
    assert pairs_succ == pairs_pred == set(zip(g.edge_src.tolist(), g.edge_dst.tolist()))
    assert np.array_equal(g.edge_bytes[g.pred_edge], g.pred_bytes)
