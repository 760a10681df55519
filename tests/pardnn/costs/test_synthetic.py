"""Synthetic training graphs: size, determinism, training-graph structure, DoP/CCR, speed."""

from __future__ import annotations

import re

import numpy as np
import pytest

from pardnn.costs.graph import CostGraph, Kind
from pardnn.costs.machine import Machine
from pardnn.costs.synthetic import chain_graph, dnn_graph


def critical_path_us(graph: CostGraph) -> float:
    """Longest compute-only path, by dynamic programming over ``topo_order``."""
    finish = np.zeros(graph.n)
    for v in graph.topo_order.tolist():
        preds = graph.predecessors(v)
        finish[v] = graph.comp_us[v] + (finish[preds].max() if preds.size else 0.0)
    return float(finish.max())


def dop(graph: CostGraph) -> float:
    return graph.total_work_us / critical_path_us(graph)


def ccr(graph: CostGraph) -> float:
    """Every edge cut on the default interconnect (150 GB/s, 25 µs), over the total compute."""
    return float(Machine(devices=2).edge_comm_us(graph.edge_bytes).sum()) / graph.total_work_us


def layer(name: str) -> int:
    match = re.search(r"layer_(\d+)/", name)
    return int(match.group(1)) if match else -1


@pytest.fixture(scope="module")
def graph() -> CostGraph:
    return dnn_graph(3000, seed=7)


@pytest.mark.parametrize("ops", [100, 1000, 10_000])
def test_op_count_within_tolerance(ops: int) -> None:
    for seed in range(3):
        assert abs(len(dnn_graph(ops, seed=seed)) - ops) <= min(4, 0.05 * ops)


def test_op_count_small_graphs_within_four_ops() -> None:
    errors = [len(dnn_graph(ops, seed=seed)) - ops for ops in range(30, 300, 11) for seed in range(3)]
    assert max(map(abs, errors)) <= 4


def test_deterministic_for_a_seed() -> None:
    first, second = dnn_graph(2000, seed=3), dnn_graph(2000, seed=3)
    assert first == second
    for field in ("comp_us", "out_bytes", "param_bytes", "kind", "colocation", "edge_src", "edge_dst", "edge_bytes"):
        assert getattr(first, field).tobytes() == getattr(second, field).tobytes()
    assert dnn_graph(2000, seed=4, name="g") != dnn_graph(2000, seed=3, name="g")
    assert first.name == "dnn-2000-s3"


def test_indices_are_topological_and_names_tf_like(graph: CostGraph) -> None:
    assert (graph.edge_src < graph.edge_dst).all()
    pattern = re.compile(
        r"input/IteratorGetNext|loss/\w+|gradients/loss/.+"
        r"|layer_\d+/(branch_\d+/)?(kernel|bias|gamma)(/Adam(_1)?)?"
        r"|layer_\d+/(branch_\d+/)?[A-Za-z0-9_]+(/Mul)?"
        r"|gradients/layer_\d+/.+_grad/\w+|gradients/layer_\d+/AddN"
        r"|Adam/update_layer_\d+/(branch_\d+/)?(kernel|bias|gamma)/ResourceApplyAdam"
    )
    assert all(pattern.fullmatch(name) for name in graph.names)
    assert "layer_0/MatMul" in graph.index or "layer_0/Conv2D" in graph.index or "layer_0/concat" in graph.index
    assert all(op for op in graph.ops)


def test_variables_slots_and_updates_share_a_group(graph: CostGraph) -> None:
    kinds = set(graph.kind.tolist())
    assert kinds == {Kind.NORMAL, Kind.RESIDUAL, Kind.REFERENCE}
    assert (graph.colocation[graph.kind != Kind.NORMAL] >= 0).all()
    assert (graph.colocation[graph.kind == Kind.NORMAL] == -1).all()
    for members in graph.group_members():
        # One group: variable, its two Adam slots, its update op.
        assert sorted(graph.kind[members].tolist()) == [1, 1, 1, 2]
        variable, slot, slot_1, update = members
        assert graph.names[slot] == graph.names[variable] + "/Adam"
        assert graph.names[slot_1] == graph.names[variable] + "/Adam_1"
        assert graph.param_bytes[variable] == graph.out_bytes[variable] > 0
        assert graph.out_bytes[slot] == graph.out_bytes[slot_1] == graph.out_bytes[variable]
        assert graph.param_bytes[slot] == graph.out_bytes[update] == graph.param_bytes[update] == 0
        # The update reads the variable, both slots and the weight gradient (the size of the variable).
        preds = set(graph.predecessors(update).tolist())
        (gradient,) = preds - {variable, slot, slot_1}
        assert len(preds) == 4 and graph.names[gradient].startswith("gradients/")
        assert graph.out_bytes[gradient] == graph.out_bytes[variable]
        # The variable is read by its forward op and its input-gradient op, and updated.
        readers = graph.successors(variable).tolist()
        assert len(readers) == 3 and update in readers
        assert sorted(graph.names[r].startswith("gradients/") for r in readers if r != update) == [False, True]


def test_every_forward_op_has_a_gradient(graph: CostGraph) -> None:
    forward = [name for name, kind in zip(graph.names, graph.kind.tolist(), strict=True)
               if kind == Kind.NORMAL and name.startswith("layer_")]
    gradient_of = {name.split("_grad/")[0].removeprefix("gradients/") for name in graph.names if "_grad/" in name}
    assert forward and set(forward) <= gradient_of


def test_long_lived_activations_and_residual_connections(graph: CostGraph) -> None:
    names = graph.names
    src, dst = graph.edge_src.tolist(), graph.edge_dst.tolist()
    forward_to_backward = [(s, d) for s, d in zip(src, dst, strict=True)
                           if graph.kind[s] == Kind.NORMAL and names[s].startswith("layer_")
                           and names[d].startswith("gradients/layer_")]
    layers = 1 + max(layer(name) for name in names)
    assert len(forward_to_backward) >= 2 * layers
    # Saved activations feed the mirrored backward layer (or the next one: weight gradients read the input).
    assert all(layer(names[d]) - layer(names[s]) in (0, 1) for s, d in forward_to_backward)
    skips = [(s, d) for s, d in zip(src, dst, strict=True)
             if names[d].endswith("/add") and layer(names[d]) - layer(names[s]) >= 2]
    assert len(skips) > layers // 5
    assert all(2 <= layer(names[d]) - layer(names[s]) <= 4 for s, d in skips)
    # Residual gradients flow back over the same spans.
    back = [(s, d) for s, d in zip(src, dst, strict=True)
            if names[s].endswith("add_grad/Identity") and layer(names[s]) - layer(names[d]) >= 2]
    assert len(back) == len([1 for s, _ in skips if layer(names[s]) >= 0])


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_default_dop_and_ccr_in_documented_range(seed: int) -> None:
    g = dnn_graph(10_000, seed=seed)
    assert 2.0 <= dop(g) <= 10.0
    assert 0.5 <= ccr(g) <= 5.0


def test_branches_raise_dop() -> None:
    chains, default, wide = (dop(dnn_graph(4000, **kw)) for kw in ({"block_share": 0.0}, {}, {"branches": 16}))
    assert chains < 2.0 < default < wide


def test_ccr_target_is_met() -> None:
    g = dnn_graph(5000, seed=1, ccr=3.0)
    assert ccr(g) == pytest.approx(3.0, rel=1e-6)
    assert dnn_graph(5000, seed=1, ccr=1.0).total_work_us == g.total_work_us


def test_ccr_below_floor_rejected() -> None:
    with pytest.raises(ValueError, match="floor"):
        dnn_graph(1000, ccr=0.01)


@pytest.mark.parametrize("options", [{"ops": 10}, {"ops": 100, "branches": 1}, {"ops": 100, "block_share": 1.5},
                                     {"ops": 100, "skip_share": -0.1}, {"ops": 100, "ccr": 0.0}])
def test_bad_options_rejected(options: dict[str, float]) -> None:
    with pytest.raises(ValueError):
        dnn_graph(**options)  # type: ignore[arg-type]


def test_chain_graph_by_hand() -> None:
    g = chain_graph(4, comp_us=10.0, out_bytes=8)
    assert g.names == ("op_0", "op_1", "op_2", "op_3")
    assert g.edge_src.tolist() == [0, 1, 2] and g.edge_dst.tolist() == [1, 2, 3]
    assert g.edge_bytes.tolist() == [8, 8, 8]
    assert critical_path_us(g) == g.total_work_us == 40.0


def test_chain_graph_single_op() -> None:
    g = chain_graph(1)
    assert len(g) == 1 and g.m == 0


@pytest.mark.slow
@pytest.mark.parametrize("ops", [200_000, 1_000_000])
def test_large_graphs_build(ops: int) -> None:
    # Structure only: how fast they build is the benchmarks' business, never a test's.
    g = dnn_graph(ops)
    assert abs(len(g) - ops) <= 4
    assert (g.edge_src < g.edge_dst).all()
