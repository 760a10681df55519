"""pardnn.batch.batchscale: graphs at any batch size from two, checked at a third (no TensorFlow needed)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pardnn.batch.batchscale import BatchScaling, CostParts, largest_term
from pardnn.costs.graph import CostGraph, Kind
from pardnn.costs.presets import preset
from pardnn.errors import ScalingError

V100 = preset("v100-32gb")


def step_at(batch: int, *, square: bool = False, extra_op_from: int | None = None) -> CostParts:
    """A small training step as the estimator would cost it at ``batch``::

        w (variable, 4 MiB) --> matmul (kernel) --> segsum (kernel) --> loss (kernel)
        x (free: a metadata op) ---^

    ``segsum`` is an embedding gradient's segment sum: its FLOP candidates are its input's elements
    (512·batch) and its output's (10,000, fixed), so its FLOPs are 10,000 up to batch 19 and 512·batch
    from batch 20 on. ``square`` gives ``loss`` a batch × batch output (a similarity matrix), which
    no line follows; ``extra_op_from`` adds an op from that batch on (a graph that changes shape).
    """
    names = ["w", "x", "matmul", "segsum", "loss"]
    kinds = [Kind.RESIDUAL, Kind.NORMAL, Kind.NORMAL, Kind.NORMAL, Kind.NORMAL]
    out_bytes = [4 << 20, 4096 * batch, 2048 * batch, 40_000, (batch * batch if square else batch) * 4]
    param_bytes = [4 << 20, 0, 0, 0, 0]
    terms = [[], [], [2 * 512 * batch * 1024], [512 * batch, 10_000], [batch * batch if square else batch]]
    moved = [0, 0, (4 << 20) + 4096 * batch + 2048 * batch, 2048 * batch + 40_000, 2048 * batch]
    kernel = [False, False, True, True, True]
    src, dst = [0, 1, 2, 3], [2, 2, 3, 4]
    if extra_op_from is not None and batch >= extra_op_from:
        names.append("extra")
        kinds.append(Kind.NORMAL)
        out_bytes.append(8)
        param_bytes.append(0)
        terms.append([])
        moved.append(0)
        kernel.append(False)
    counts = [len(t) for t in terms]
    ptr = np.concatenate(([0], np.cumsum(counts))).astype(np.int64)
    flat = np.array([v for t in terms for v in t], np.float64)
    moved_a = np.array(moved, np.float64)
    kernel_a = np.array(kernel)
    comp = np.where(kernel_a, V100.kernel_us(largest_term(flat, ptr), moved_a), 0.0)
    more = len(names) - 5
    graph = CostGraph(names, comp, out_bytes, src, dst, kind=[int(k) for k in kinds],
                      colocation=["w", None, None, None, None] + [None] * more,
                      ops=["VarHandleOp", "Shape", "MatMul", "UnsortedSegmentSum", "Sum"] + ["Const"] * more,
                      param_bytes=param_bytes, name=f"step-b{batch}")
    return CostParts(graph, ptr, flat, moved_a, kernel_a)


def test_largest_term_by_segment() -> None:
    terms = np.array([3.0, 1.0, 7.0, 2.0])
    ptr = np.array([0, 0, 2, 2, 4, 4])  # empty, [3, 1], empty, [7, 2], empty
    assert largest_term(terms, ptr).tolist() == [0.0, 3.0, 0.0, 7.0, 0.0]


def test_scaled_graph_equals_the_built_one_across_the_max_switch() -> None:
    """segsum's FLOPs switch from its output (fixed) to its input (grows) at batch 20; scaling each
    candidate and then taking the largest gets both sides right, to the bit."""
    scaling = BatchScaling(step_at(2), step_at(3), 2, V100)
    for batch in (1, 2, 3, 4, 19, 20, 21, 57, 4096):
        built = step_at(batch)
        assert scaling.graph_at(batch, name=built.graph.name) == built.graph, batch
        assert np.array_equal(scaling.graph_at(batch).comp_us, built.graph.comp_us)  # not merely close
        assert scaling.mismatch(built, batch) is None


def test_a_quadratic_term_is_caught_and_named() -> None:
    scaling = BatchScaling(step_at(2, square=True), step_at(3, square=True), 2, V100)
    problem = scaling.mismatch(step_at(64, square=True), 64)
    assert problem is not None
    assert "op 'loss' (Sum)" in problem and "out_bytes 16384 at batch 64" in problem and "linearly" in problem


def test_a_graph_that_changes_shape_is_caught() -> None:
    scaling = BatchScaling(step_at(2, extra_op_from=50), step_at(3, extra_op_from=50), 2, V100)
    assert scaling.mismatch(step_at(49, extra_op_from=50), 49) is None
    problem = scaling.mismatch(step_at(50, extra_op_from=50), 50)
    assert problem is not None and "1 ops are in one graph only (e.g. 'extra')" in problem


def test_fitting_on_graphs_of_different_shape_raises() -> None:
    with pytest.raises(ScalingError, match="the graphs at batch 2 and 3 differ: 1 ops are in one graph only"):
        BatchScaling(step_at(2, extra_op_from=3), step_at(3, extra_op_from=3), 2, V100)


def test_a_shrinking_quantity_raises() -> None:
    low, high = step_at(3), step_at(2)  # given in the wrong order: everything shrinks
    with pytest.raises(ScalingError, match="shrinks as the batch grows"):
        BatchScaling(low, high, 2, V100)


def random_step(draw: Callable, ops: int) -> Callable[[int], CostParts]:
    """A chain of ``ops`` kernel ops whose every quantity is ``a + c·batch`` with drawn a, c >= 0."""
    affine = st.tuples(st.integers(0, 10**6), st.integers(0, 10**4))
    out = [draw(affine) for _ in range(ops)]
    edge = [draw(affine) for _ in range(ops - 1)]
    moved = [draw(affine) for _ in range(ops)]
    terms = [[draw(affine) for _ in range(draw(st.integers(0, 3)))] for _ in range(ops)]

    def at(batch: int) -> CostParts:
        line = lambda ac: ac[0] + ac[1] * batch  # noqa: E731
        counts = [len(t) for t in terms]
        ptr = np.concatenate(([0], np.cumsum(counts))).astype(np.int64)
        flat = np.array([line(ac) for t in terms for ac in t], np.float64)
        moved_a = np.array([line(ac) for ac in moved], np.float64)
        kernel = np.ones(ops, bool)
        graph = CostGraph([f"op{i}" for i in range(ops)], V100.kernel_us(largest_term(flat, ptr), moved_a),
                          [line(ac) for ac in out], list(range(ops - 1)), list(range(1, ops)),
                          [line(ac) for ac in edge], name="random")
        return CostParts(graph, ptr, flat, moved_a, kernel)

    return at


@settings(max_examples=60, deadline=None)
@given(data=st.data(), ops=st.integers(2, 12), batch=st.integers(1, 100_000))
def test_affine_quantities_scale_exactly(data: st.DataObject, ops: int, batch: int) -> None:
    at = random_step(data.draw, ops)
    scaling = BatchScaling(at(2), at(3), 2, V100)
    assert scaling.graph_at(batch) == at(batch).graph
    assert scaling.mismatch(at(batch), batch) is None
