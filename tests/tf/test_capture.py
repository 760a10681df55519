"""capture(): the step's ops, edges with their bytes, kinds and colocation groups, on hand-built graphs."""

from __future__ import annotations

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")

from pardnn.costs.graph import Kind  # noqa: E402
from pardnn.errors import InvalidGraphError  # noqa: E402
from pardnn.tf import capture, capture_with_report, colocation_groups  # noqa: E402
from pardnn.tf.capture import op_kind  # noqa: E402
from tests.tf import models  # noqa: E402

pytestmark = pytest.mark.tf

# The step of models.tiny(): forward, gradient, update; worked out from the ops TF 2.15 builds.
TINY_OPS = {
    "x": ("Placeholder", 4 * 3 * 4),
    "w": ("VarHandleOp", 3 * 5 * 4),
    "mm/ReadVariableOp": ("ReadVariableOp", 0),  # aliases the variable; its edge carries 60 B
    "mm": ("MatMul", 4 * 5 * 4),
    "Const": ("Const", 2 * 4),
    "loss": ("Sum", 4),
    "gradients/Shape": ("Const", 0),
    "gradients/grad_ys_0/Const": ("Const", 4),
    "gradients/grad_ys_0": ("Fill", 4),
    "gradients/loss_grad/Reshape/shape": ("Const", 2 * 4),
    "gradients/loss_grad/Reshape": ("Reshape", 4),
    "gradients/loss_grad/Const": ("Const", 2 * 4),
    "gradients/loss_grad/Tile": ("Tile", 4 * 5 * 4),
    "gradients/mm_grad/MatMul": ("MatMul", 4 * 3 * 4),
    "gradients/mm_grad/MatMul_1": ("MatMul", 3 * 5 * 4),
    "gradients/mm_grad/tuple/group_deps": ("NoOp", 0),
    "gradients/mm_grad/tuple/control_dependency_1": ("Identity", 3 * 5 * 4),
    "train/learning_rate": ("Const", 4),
    "train/update_w/ResourceApplyGradientDescent": ("ResourceApplyGradientDescent", 0),
    "train": ("NoOp", 0),
}


def _edges(cost):
    return {(cost.names[s], cost.names[d]): int(b) for s, d, b in zip(cost.edge_src, cost.edge_dst, cost.edge_bytes)}


def _groups(cost):
    return {cost.group_names[g]: {cost.names[i] for i in members} for g, members in enumerate(cost.group_members())}


def test_tiny_step_nodes_and_out_bytes():
    cost = capture(models.tiny().graph, ["train", "loss:0"])
    assert set(cost.names) == set(TINY_OPS)
    for name, (op_type, out_bytes) in TINY_OPS.items():
        i = cost.index[name]
        assert (cost.ops[i], int(cost.out_bytes[i])) == (op_type, out_bytes), name
    assert not cost.comp_us.any()


def test_tiny_step_edges_carry_tensor_bytes_and_control_edges_none():
    edges = _edges(capture(models.tiny().graph, ["train", "loss"]))
    assert edges[("x", "mm")] == 48
    assert edges[("mm/ReadVariableOp", "mm")] == 60
    assert edges[("mm", "loss")] == 80
    assert edges[("gradients/loss_grad/Tile", "gradients/mm_grad/MatMul_1")] == 80
    assert edges[("gradients/mm_grad/tuple/control_dependency_1",
                  "train/update_w/ResourceApplyGradientDescent")] == 60
    # A handle carries no data; its variable's bytes are the variable node's own.
    assert edges[("w", "mm/ReadVariableOp")] == 0
    assert edges[("w", "train/update_w/ResourceApplyGradientDescent")] == 0
    # Control edges.
    assert edges[("train/update_w/ResourceApplyGradientDescent", "train")] == 0
    assert edges[("gradients/mm_grad/MatMul", "gradients/mm_grad/tuple/group_deps")] == 0
    assert len(edges) == 23


def test_tiny_step_kinds_and_groups():
    cost = capture(models.tiny().graph, ["train", "loss"])
    kinds = {name: Kind(int(k)) for name, k in zip(cost.names, cost.kind)}
    assert kinds["w"] == Kind.RESIDUAL
    assert kinds["train/update_w/ResourceApplyGradientDescent"] == Kind.REFERENCE
    assert sum(k != Kind.NORMAL for k in kinds.values()) == 2
    assert int(cost.param_bytes[cost.index["w"]]) == 60
    assert _groups(cost) == {
        "w": {"w", "mm/ReadVariableOp", "train/update_w/ResourceApplyGradientDescent"},
        # tf.gradients colocates each gradient with its tuple/control_dependency Identity (loc:@).
        "gradients/mm_grad/MatMul": {"gradients/mm_grad/MatMul"},
        "gradients/mm_grad/MatMul_1": {"gradients/mm_grad/MatMul_1", "gradients/mm_grad/tuple/control_dependency_1"},
    }


def test_pruning_leaves_out_initializers_and_unfetched_ops():
    model = models.tiny()
    cost = capture(model.graph, model.fetches)
    assert "unused" not in cost.index
    assert not [n for n in cost.names if "Initializer" in n or n.startswith("w/")]
    # The whole graph's groups still know the initializer is the variable's.
    assert colocation_groups(model.graph)["w/Assign"] == "w"
    # Fetching only the loss runs no gradient.
    forward = capture(model.graph, model.loss)
    assert set(forward.names) == {"x", "w", "mm/ReadVariableOp", "mm", "Const", "loss"}


def test_fetches_by_name_or_object_give_the_same_graph():
    model = models.tiny()
    assert capture(model.graph, ["train", "loss:0"]) == capture(model.graph, (model.train, model.loss))


def test_unknown_batch_dim_is_an_error_naming_op_and_tensor():
    model = models.tiny(batch=None)
    with pytest.raises(InvalidGraphError, match=r"op 'x' \(Placeholder\): output 'x:0' has shape \(None, 3\)"):
        capture(model.graph, model.fetches)


def test_unknown_dim_hint_sizes_the_batch():
    model = models.tiny(batch=None)
    cost = capture(model.graph, model.fetches, unknown_dim=4)
    sizes = dict(zip(cost.names, cost.out_bytes.tolist()))
    assert (sizes["x"], sizes["mm"], sizes["gradients/mm_grad/MatMul_1"]) == (48, 80, 60)
    assert _edges(cost)[("x", "mm")] == 48


def test_unknown_fetch_is_an_error():
    with pytest.raises(InvalidGraphError, match="'nope'"):
        capture(models.tiny().graph, ["nope"])


def test_adam_groups_hold_variable_slots_updates_and_beta_powers():
    model = models.two_layer("adam")
    cost = capture(model.graph, model.fetches)
    groups = _groups(cost)
    for var in ("w1", "b1", "w2", "b2"):
        members = groups[var]
        assert {var, f"{var}/Adam", f"{var}/Adam_1", f"train/update_{var}/ResourceApplyAdam"} <= members
        for name in members:
            assert not name.startswith("gradients/"), name
    # Adam's beta powers are created colocated (loc:@) with the first variable by name: b1.
    # Their updates and every read of them (each ResourceApplyAdam reads both) join that group.
    assert {"beta1_power", "beta2_power", "train/mul", "train/AssignVariableOp", "train/AssignVariableOp_1",
            "train/update_w2/ResourceApplyAdam/ReadVariableOp"} <= groups["b1"]
    residual = {n for n, k in zip(cost.names, cost.kind) if k == Kind.RESIDUAL}
    assert residual == {"w1", "b1", "w2", "b2", "beta1_power", "beta2_power"} | {
        f"{v}/Adam{s}" for v in ("w1", "b1", "w2", "b2") for s in ("", "_1")}
    sizes = dict(zip(cost.names, cost.out_bytes.tolist()))
    assert (sizes["w1"], sizes["w1/Adam"], sizes["b2/Adam_1"], sizes["beta1_power"]) == (60, 60, 8, 4)
    reference = {n for n, k in zip(cost.names, cost.kind) if k == Kind.REFERENCE}
    assert reference == {f"train/update_{v}/ResourceApplyAdam" for v in ("w1", "b1", "w2", "b2")} | {
        "train/AssignVariableOp", "train/AssignVariableOp_1"}


def test_ref_variables_group_through_reference_inputs_and_loc_attributes():
    model = models.two_layer("sgd", resource=False)
    cost = capture(model.graph, model.fetches)
    groups = _groups(cost)
    assert groups["w1"] == {"w1", "w1/read", "train/update_w1/ApplyGradientDescent"}
    kinds = dict(zip(cost.names, cost.kind.tolist()))
    assert (kinds["w1"], kinds["w1/read"], kinds["train/update_w1/ApplyGradientDescent"]) == (1, 0, 2)
    edges = _edges(cost)
    assert edges[("w1", "w1/read")] == 60  # a ref edge carries the variable's data
    assert int(cost.out_bytes[cost.index["train/update_w1/ApplyGradientDescent"]]) == 0


def test_v1_while_loop_back_edges_are_dropped():
    from tensorflow.python.ops import control_flow_util

    was_v2 = control_flow_util.ENABLE_CONTROL_FLOW_V2
    control_flow_util.ENABLE_CONTROL_FLOW_V2 = False
    try:
        graph = tf.Graph()
        with graph.as_default():
            x = tf.compat.v1.placeholder(tf.float32, [2, 2], name="x")
            _, out = tf.compat.v1.while_loop(lambda i, v: i < 3, lambda i, v: (i + 1, v * 2.0), [0, x])
    finally:
        control_flow_util.ENABLE_CONTROL_FLOW_V2 = was_v2
    cost = capture(graph, out)
    types = set(cost.ops)
    assert {"Enter", "Merge", "Switch", "NextIteration", "Exit"} <= types
    merges = [i for i, t in enumerate(cost.ops) if t == "Merge"]
    assert all(cost.ops[p] != "NextIteration" for i in merges for p in cost.predecessors(i))


@pytest.mark.parametrize(("op_type", "kind"), [
    ("VarHandleOp", Kind.RESIDUAL), ("VariableV2", Kind.RESIDUAL), ("AssignVariableOp", Kind.REFERENCE),
    ("ApplyAdam", Kind.REFERENCE), ("ResourceApplyAdam", Kind.REFERENCE), ("ScatterUpdate", Kind.REFERENCE),
    ("ResourceScatterAdd", Kind.REFERENCE), ("ResourceSparseApplyAdagrad", Kind.REFERENCE),
    ("ScatterNd", Kind.NORMAL), ("ReadVariableOp", Kind.NORMAL), ("MatMul", Kind.NORMAL),
])
def test_op_kinds(op_type, kind):
    assert op_kind(op_type) == kind


def test_captured_graph_is_deterministic():
    first = capture(models.two_layer("adam").graph, ["train", "loss"])
    second = capture(models.two_layer("adam").graph, ["train", "loss"])
    assert first == second
    assert np.array_equal(first.colocation, second.colocation)


def test_unused_output_of_unknown_rank_counts_nothing():
    """FusedBatchNormV3's sixth output (reserve_space_3) has an unknown rank and nothing reads it."""
    graph = tf.Graph()
    with graph.as_default():
        x = tf.compat.v1.placeholder(tf.float32, [2, 4, 4, 3], name="x")
        y, _, _ = tf.compat.v1.nn.fused_batch_norm(x, tf.ones([3]), tf.zeros([3]), is_training=True)
        loss = tf.reduce_sum(y, name="loss")
    cost = capture(graph, [loss])
    batch_norm = [i for i, op in enumerate(cost.ops) if op.startswith("FusedBatchNorm")]
    assert batch_norm and cost.out_bytes[batch_norm[0]] >= 2 * 4 * 4 * 3 * 4


# Sizing rules (pardnn.tf.sizing), each on a small graph with the answer worked out by hand.


def _sized(graph, fetches, **kwargs):
    """``(bytes per op name, the SizingReport)`` of the step that runs ``fetches``."""
    cost, sizing = capture_with_report(graph, fetches, **kwargs)
    assert sum(sizing.counts.values()) == sum(len(graph.get_operation_by_name(n).outputs) for n in cost.names)
    return dict(zip(cost.names, cost.out_bytes.tolist())), sizing


def _batch_norm_graph():
    """A training batch norm whose channel count is unknown statically: x [2, 4, 4, C=3]."""
    graph = tf.Graph()
    with graph.as_default():
        x = tf.compat.v1.placeholder_with_default(tf.ones([2, 4, 4, 3]), [2, 4, 4, None], name="x")
        scale = tf.compat.v1.placeholder_with_default(tf.ones([3]), [None], name="scale")
        offset = tf.compat.v1.placeholder_with_default(tf.zeros([3]), [None], name="offset")
        y, _, _ = tf.compat.v1.nn.fused_batch_norm(x, scale, offset, is_training=True, name="bn")
        loss = tf.reduce_sum(y, name="loss")
        grads = tf.gradients(loss, [x, scale])
    return graph, [loss, *grads]


def test_batch_norm_reserve_is_per_channel_and_reserve_space_3_is_empty():
    sizes, sizing = _sized(*_batch_norm_graph())
    # x: 2*4*4*3 floats = 384 B (the bound of placeholder_with_default: its default's size). bn: y like x
    # (384), batch mean, variance, reserve_space_1, _2: 3 floats each (48), reserve_space_3: 0.
    assert sizes["x"] == sizes["scale"] * 32 == 384
    assert sizes["bn"] == 384 + 4 * 3 * 4
    assert sizing.rules["bn:0"] == "propagated"
    assert [sizing.rules[f"bn:{k}"] for k in range(1, 6)] == ["reserve"] * 5
    # Its gradient: x_backprop 384, scale and offset backprop 12 each, reserve_space_4/_5 0.
    grad = next(n for n in sizes if n.endswith("FusedBatchNormGradV3"))
    assert sizes[grad] == 384 + 2 * 12
    assert sizing.counts["largest_input"] == 3  # x, scale and offset: bounded by their defaults
    assert sizes["gradients/loss_grad/Tile"] == 384  # tiled to tf.shape(y): y's size


def test_strict_keeps_the_old_errors():
    graph, fetches = _batch_norm_graph()
    with pytest.raises(InvalidGraphError, match=r"op 'x' \(PlaceholderWithDefault\): output 'x:0' has shape "
                                                r"\(2, 4, 4, None\), pass unknown_dim"):
        capture(graph, fetches, strict=True)
    graph = tf.Graph()
    with graph.as_default():
        x = tf.compat.v1.placeholder(tf.float32, [2, 4, 4, 3], name="x")
        y, _, _ = tf.compat.v1.nn.fused_batch_norm(x, tf.ones([3]), tf.zeros([3]), is_training=True, name="bn")
        grads = tf.gradients(tf.reduce_sum(y), x)
    with pytest.raises(InvalidGraphError, match=r"op 'bn' \(FusedBatchNormV3\): output 'bn:5' has shape <unknown>, "
                                                r"unknown rank; set a static shape"):
        capture(graph, grads, strict=True)
    sizes, sizing = _sized(graph, grads)
    assert sizes["bn"] == 2 * 4 * 4 * 3 * 4 + 4 * 3 * 4 and sizing.tensors("reserve") == ["bn:5"]


def _sparse_graph():
    graph = tf.Graph()
    with graph.as_default():
        summed, unique = models.sparse_rows()
        scaled = tf.multiply(summed, 0.5, name="scaled")
        projected = tf.matmul(scaled, tf.compat.v1.placeholder(tf.float32, [8, 16]), name="projected")
        rows = tf.gather(tf.compat.v1.placeholder(tf.float32, [50, 4], name="table"), unique, name="rows")
        mask = tf.compat.v1.placeholder(tf.bool, [4, 6], name="mask")
        where = tf.where(mask, name="where")
        picked = tf.boolean_mask(tf.compat.v1.placeholder(tf.float32, [4, 6, 3]), mask, name="picked")
        pieces = tf.dynamic_partition(tf.compat.v1.placeholder(tf.float32, [10]),
                                      tf.compat.v1.placeholder(tf.int32, [10]), 2, name="pieces")
        axes = tf.compat.v1.placeholder(tf.int32, [1], name="axes")
        reduced = tf.reduce_sum(tf.compat.v1.placeholder(tf.float32, [4, 5]), axis=axes, name="reduced")
    return graph, [projected, rows, where, picked, pieces, reduced]


def test_data_dependent_outputs_are_bounded_by_their_inputs():
    sizes, sizing = _sized(*_sparse_graph())
    # 24 ids: at most 24 distinct (int32) and the static idx [24]; the segment sum of [24, 8] floats has
    # at most 24 rows; what follows keeps that bound (24 rows of 8, then of 16).
    assert sizes["unique"] == 24 * 4 + 24 * 4
    assert sizes["summed"] == sizes["scaled"] == 24 * 8 * 4
    assert sizes["projected"] == 24 * 16 * 4
    assert sizing.rules["scaled:0"] == sizing.rules["projected:0"] == "propagated"
    assert sizes["rows"] == 24 * 4 * 4  # gather: 24 ids × a row of 4
    assert sizes["where"] == 24 * 2 * 8  # ≤ 24 true cells, 2 int64 coordinates each
    # boolean_mask: Where over the 24 flattened cells, squeezed, then a gather of rows of 3.
    assert (sizes["picked/Where"], sizes["picked/Squeeze"], sizes["picked/GatherV2"]) == (24 * 8, 24 * 8, 24 * 3 * 4)
    assert sizes["pieces"] == 2 * 10 * 4  # each piece ≤ the 10 elements
    assert sizes["reduced"] == 4 * 5 * 4  # axes known only at run time: ≤ the input
    assert sizing.counts["data_dependent"] == 9 and sizing.counts["propagated"] == 3
    assert sizing.counts["static"] + 12 == sum(sizing.counts.values())


def test_strict_data_dependent_needs_unknown_dim_as_before():
    graph, fetches = _sparse_graph()
    with pytest.raises(InvalidGraphError, match=r"op 'unique' \(Unique\): output 'unique:0' has shape \(None,\)"):
        capture(graph, fetches, strict=True)
    cost = capture(graph, fetches, strict=True, unknown_dim=3)
    assert cost.out_bytes[cost.index["unique"]] == 3 * 4 + 24 * 4  # the batch guess, as before the rules


def test_unknown_rank_and_unresolved_dims_are_bounded_by_the_largest_input():
    graph = tf.Graph()
    with graph.as_default():
        x = tf.compat.v1.placeholder(tf.float32, [2, 3], name="x")
        any_rank = tf.compat.v1.placeholder_with_default(x, None, name="any_rank")
        any_rows = tf.compat.v1.placeholder_with_default(x, [None, 3], name="any_rows")
        out = [tf.multiply(any_rank, 2.0, name="twice"), tf.reduce_sum(any_rows)]
    sizes, sizing = _sized(graph, out)
    assert sizes["any_rank"] == sizes["any_rows"] == sizes["twice"] == 2 * 3 * 4
    assert sizing.tensors("largest_input") == ["any_rank:0", "any_rows:0", "twice:0"]
    # unknown_dim takes precedence over the bound for unknown dimensions (not for an unknown rank).
    sizes, sizing = _sized(graph, out, unknown_dim=5)
    assert (sizes["any_rank"], sizes["any_rows"]) == (2 * 3 * 4, 5 * 3 * 4)
    assert sizing.rules["any_rows:0"] == "unknown_dim"


def test_reshape_keeps_its_elements_and_what_follows_propagates_them():
    graph = tf.Graph()
    with graph.as_default():
        x = tf.compat.v1.placeholder(tf.float32, [None, 3], name="x")
        flat = tf.reshape(x, [-1], name="flat")  # shape (None,): 3 × batch elements, not batch
        doubled = tf.multiply(flat, 2.0, name="doubled")
        loss = tf.reduce_sum(doubled, name="loss")
    with pytest.raises(InvalidGraphError, match=r"op 'x' \(Placeholder\): output 'x:0' has shape \(None, 3\)"):
        capture(graph, loss)
    sizes, sizing = _sized(graph, loss, unknown_dim=4)
    assert sizes["x"] == 4 * 3 * 4 and sizing.rules["x:0"] == "unknown_dim"
    assert sizes["flat"] == sizes["doubled"] == 12 * 4
    assert (sizing.rules["flat:0"], sizing.rules["doubled:0"]) == ("reshape", "propagated")
    strict = capture(graph, loss, unknown_dim=4, strict=True)
    assert strict.out_bytes[strict.index["flat"]] == 4 * 4  # the batch guess: 4 elements


def _loop_graph(limit=None):
    """``v ← v × w`` five times (or ``limit`` times, fed), writing each v [3, 4] to a TensorArray."""
    graph = tf.Graph()
    with graph.as_default():
        x = tf.compat.v1.placeholder(tf.float32, [3, 4], name="x")
        w = tf.Variable(0.5, name="w")
        stop = 5 if limit is None else tf.compat.v1.placeholder(tf.int32, [], name="limit")

        def body(i, v, array):
            v = v * w
            return i + 1, v, array.write(i, v)

        _, v, array = tf.while_loop(lambda i, v, array: i < stop, body,
                                    [0, x, tf.TensorArray(tf.float32, size=5)], name="loop")
        loss = tf.reduce_sum(array.stack()) + tf.reduce_sum(v)
        train = tf.compat.v1.train.GradientDescentOptimizer(0.1).minimize(loss, name="train")
    return graph, [train, loss]


def test_while_loop_holds_its_accumulators_for_backprop():
    sizes, sizing = _sized(*_loop_graph())
    # Outputs: loop counter, maximum iterations, i (int32 scalars: 12 B), v [3, 4] (48), the resource
    # w (0) and four lists growing by one element per trip, 5 trips: the TensorArray of v (5 × 48) and
    # what the gradient loop needs, i, w and v at each step (5 × 4, 5 × 4, 5 × 48).
    assert sizes["loop"] == 12 + 48 + 0 + 5 * 48 + 5 * 4 + 5 * 4 + 5 * 48
    assert [name.split(":")[0] for name in sizing.tensors("loop_accumulator")].count("loop") == 4
    # With a limit fed at run time (one more int32 loop variable) the trip count is loop_trips: 1 unless given.
    graph, fetches = _loop_graph(limit=True)
    one, _ = _sized(graph, fetches)
    seven, _ = _sized(graph, fetches, loop_trips=7)
    assert one["loop"] == 16 + 48 + (48 + 4 + 4 + 48)
    assert seven["loop"] == 16 + 48 + 7 * (48 + 4 + 4 + 48)


def test_cudnn_rnn_reserve_holds_the_gates_of_every_step():
    graph = tf.Graph()
    with graph.as_default():
        x = tf.compat.v1.placeholder(tf.float32, [5, 2, 3], name="x")  # time, batch, features
        state = tf.zeros([1, 2, 4])
        out = tf.raw_ops.CudnnRNN(input=x, input_h=state, input_c=state, params=tf.zeros([160]), rnn_mode="lstm",
                                  is_training=True, name="rnn")
        loss = tf.reduce_sum(out[0]) + tf.reduce_sum(out[3])
    sizes, sizing = _sized(graph, loss)
    # output [5, 2, 4] = 160 B, output_h and output_c 32 B each, reserve: 4 LSTM gates × 160 B.
    assert sizes["rnn"] == 160 + 32 + 32 + 4 * 160
    assert sizing.rules["rnn:3"] == "reserve"


def test_mixed_precision_counts_each_dtype_at_its_width():
    graph = tf.Graph()
    with graph.as_default():
        x = tf.compat.v1.placeholder(tf.float32, [4, 8], name="x")
        w = tf.compat.v1.get_variable("w", [8, 16], use_resource=True)
        half = tf.matmul(tf.cast(x, tf.float16, name="x16"), tf.cast(w, tf.float16, name="w16"), name="mm")
        loss = tf.reduce_sum(tf.cast(half, tf.float32), name="loss")
        train = tf.compat.v1.train.GradientDescentOptimizer(0.1).minimize(loss, name="train")
    sizes, _ = _sized(graph, [train, loss])
    assert (sizes["w"], sizes["x16"], sizes["w16"], sizes["mm"]) == (8 * 16 * 4, 4 * 8 * 2, 8 * 16 * 2, 4 * 16 * 2)
    assert sizes["gradients/w16_grad/Cast"] == 8 * 16 * 4  # the float32 gradient of the float32 weights
