"""capture(): the step's ops, edges with their bytes, kinds and colocation groups, on hand-built graphs."""

from __future__ import annotations

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")

from pardnn.errors import InvalidGraphError  # noqa: E402
from pardnn.graph import Kind  # noqa: E402
from pardnn.tf import capture, colocation_groups  # noqa: E402
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
