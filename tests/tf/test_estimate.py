"""estimate(): FLOPs of MatMul and convolutions (forward and gradient) against hand computation,
the roofline time, function bodies, and the device presets."""

from __future__ import annotations

import pytest

tf = pytest.importorskip("tensorflow")

from pardnn.errors import InvalidGraphError, InvalidMachineError  # noqa: E402
from pardnn.tf import (  # noqa: E402
    PRESETS,
    EstimateParts,
    capture,
    capture_with_report,
    estimate,
    estimate_parts,
    estimate_with_report,
    machine_for,
    op_cost,
    op_flops,
)
from pardnn.tf.estimate import op_bytes  # noqa: E402
from tests.tf import models  # noqa: E402

pytestmark = pytest.mark.tf


def _ops_of(build):
    graph = tf.Graph()
    with graph.as_default():
        build()
    return {op.name: op for op in graph.get_operations()}


def _gradient_ops(ops, op_type):
    return sorted((op for op in ops.values() if op.type == op_type and op.name.startswith("gradients/")),
                  key=lambda op: op.name)


def test_matmul_flops_with_transposes():
    def build():
        a = tf.compat.v1.placeholder(tf.float32, [8, 3])
        b = tf.compat.v1.placeholder(tf.float32, [3, 5])
        at = tf.compat.v1.placeholder(tf.float32, [3, 8])
        bt = tf.compat.v1.placeholder(tf.float32, [5, 3])
        tf.matmul(a, b, name="plain")
        tf.matmul(at, b, transpose_a=True, name="ta")
        tf.matmul(a, bt, transpose_b=True, name="tb")
        tf.matmul(at, bt, transpose_a=True, transpose_b=True, name="tab")

    ops = _ops_of(build)
    for name in ("plain", "ta", "tb", "tab"):
        assert op_flops(ops[name]) == 2 * 8 * 5 * 3, name  # M=8, N=5, K=3


def test_matmul_gradients_cost_as_much_as_the_forward():
    def build():
        a = tf.compat.v1.placeholder(tf.float32, [8, 3])
        b = tf.compat.v1.placeholder(tf.float32, [3, 5])
        out = tf.matmul(a, b, name="forward")
        tf.gradients(tf.reduce_sum(out), [a, b])

    ops = _ops_of(build)
    grads = _gradient_ops(ops, "MatMul")
    # dA = dOut [8,5] x B^T: 2*8*3*5; dB = A^T x dOut: 2*3*5*8.
    assert [op_flops(op) for op in grads] == [240, 240]
    assert {(op.get_attr("transpose_a"), op.get_attr("transpose_b")) for op in grads} == {(False, True), (True, False)}
    assert op_flops(ops["forward"]) == 240


def test_batch_matmul_flops():
    def build():
        a = tf.compat.v1.placeholder(tf.float32, [6, 4, 7])
        b = tf.compat.v1.placeholder(tf.float32, [6, 7, 2])
        tf.matmul(a, b, name="bmm")
        tf.matmul(tf.compat.v1.placeholder(tf.float32, [6, 7, 4]), b, adjoint_a=True, name="bmm_adj")

    ops = _ops_of(build)
    assert ops["bmm"].type == "BatchMatMulV2"
    assert op_flops(ops["bmm"]) == op_flops(ops["bmm_adj"]) == 2 * 6 * 4 * 2 * 7


def test_conv2d_flops_forward_and_gradients():
    def build():
        images = tf.compat.v1.placeholder(tf.float32, [2, 9, 9, 3])
        kernel = tf.compat.v1.placeholder(tf.float32, [3, 3, 3, 4])
        out = tf.nn.conv2d(images, kernel, strides=1, padding="VALID", name="conv")
        tf.gradients(tf.reduce_sum(out), [images, kernel])

    ops = _ops_of(build)
    # Output [2, 7, 7, 4]; each output element takes 3*3*3 multiply-adds.
    expected = 2 * (2 * 7 * 7 * 4) * (3 * 3 * 3)
    assert expected == 21168
    assert op_flops(ops["conv"]) == expected
    (backprop_input,) = _gradient_ops(ops, "Conv2DBackpropInput")
    (backprop_filter,) = _gradient_ops(ops, "Conv2DBackpropFilter")
    assert op_flops(backprop_input) == expected
    assert op_flops(backprop_filter) == expected


def test_strided_conv2d_counts_output_positions_only():
    def build():
        images = tf.compat.v1.placeholder(tf.float32, [1, 8, 8, 2])
        kernel = tf.compat.v1.placeholder(tf.float32, [2, 2, 2, 5])
        tf.nn.conv2d(images, kernel, strides=2, padding="SAME", name="conv")

    assert op_flops(_ops_of(build)["conv"]) == 2 * (1 * 4 * 4 * 5) * (2 * 2 * 2)


def test_conv3d_flops_forward_and_gradients():
    def build():
        volume = tf.compat.v1.placeholder(tf.float32, [1, 5, 5, 5, 2])
        kernel = tf.compat.v1.placeholder(tf.float32, [2, 2, 2, 2, 3])
        out = tf.nn.conv3d(volume, kernel, strides=[1, 1, 1, 1, 1], padding="VALID", name="conv3d")
        tf.gradients(tf.reduce_sum(out), [volume, kernel])

    ops = _ops_of(build)
    expected = 2 * (1 * 4 * 4 * 4 * 3) * (2 * 2 * 2 * 2)
    assert op_flops(ops["conv3d"]) == expected == 6144
    (backprop_input,) = _gradient_ops(ops, "Conv3DBackpropInputV2")
    (backprop_filter,) = _gradient_ops(ops, "Conv3DBackpropFilterV2")
    assert op_flops(backprop_input) == op_flops(backprop_filter) == expected


def test_roofline_time_compute_bound_and_memory_bound():
    def build():
        a = tf.compat.v1.placeholder(tf.float32, [1024, 1024])
        tf.matmul(a, a, name="big")
        tf.add(a, a, name="add")
        tf.identity(a, name="free")

    ops = _ops_of(build)
    v100 = PRESETS["v100-32gb"]
    big = op_cost(ops["big"], "v100")
    assert big.flops == 2 * 1024**3
    assert big.us == pytest.approx(2 * 1024**3 / 15.7e12 * 1e6 + 5.0)  # compute bound: 141.8 us
    add = op_cost(ops["add"], v100)
    assert add.bytes == op_bytes(ops["add"]) == 3 * 4 * 1024**2
    assert add.us == pytest.approx(3 * 4 * 1024**2 / 900e9 * 1e6 + 5.0)  # memory bound: 19.0 us
    assert op_cost(ops["add"], "h100").us < add.us
    assert op_cost(ops["free"]).us == 0.0


def test_optimizer_update_moves_variable_and_slots():
    model = models.two_layer("adam")
    op = model.graph.get_operation_by_name("train/update_w1/ResourceApplyAdam")
    # Reads the 60-byte gradient and 6 scalars (beta powers, lr, betas, epsilon), reads and writes w1, m, v.
    assert op_bytes(op) == 60 + 6 * 4 + 2 * 3 * 60


def test_estimate_keeps_the_captured_structure_and_costs_ops():
    model = models.two_layer("adam")
    cost = estimate(model.graph, model.fetches, "a100")
    captured = capture(model.graph, model.fetches)
    assert cost.names == captured.names
    assert (cost.edge_bytes == captured.edge_bytes).all() and (cost.out_bytes == captured.out_bytes).all()
    times = dict(zip(cost.names, cost.comp_us.tolist()))
    assert times["mm1"] == pytest.approx(max(2 * 4 * 5 * 3 / 19.5e12, (48 + 60 + 80) / 2039e9) * 1e6 + 5.0)
    assert times["w1"] == times["mm1/ReadVariableOp"] == 0.0


@pytest.mark.filterwarnings("ignore:non-integer arguments to randrange:DeprecationWarning")  # keras' own seeding
def test_while_loops_cost_their_body_times_the_time_steps():
    model = models.lstm_dense(steps=5)
    for name in ("lstm/while", "gradients/lstm/while_grad/lstm/while_grad"):
        loop = model.graph.get_operation_by_name(name)
        per_trip = sum(op_cost(op).us
                       for attr in ("body", "cond")
                       for op in model.graph._get_function(loop.get_attr(attr).name).graph.get_operations())
        assert per_trip > 5.0, name
        # Keras loops to tf.shape(x)[0] = 5 time steps (maximum_iterations is -1); the gradient loop
        # runs as often as the forward loop's final counter says.
        assert op_cost(loop).us == pytest.approx(5 * per_trip), name
        assert op_cost(loop, loop_trips=100).us == pytest.approx(5 * per_trip), name


def test_presets_build_machines():
    machine = machine_for("v100", 16)
    assert machine.devices == 16
    assert int(machine.memory_bytes[0]) == 32 * 2**30
    assert machine.bandwidth_Bps == 150e9
    assert machine.limits_bytes[0] == int(32 * 2**30 * 0.9)
    assert machine_for("H100-80GB", 8, reserve=0.2).bandwidth_Bps == 450e9
    assert {p.name: (p.peak_flops, p.memory_bandwidth_Bps) for p in PRESETS.values()} == {
        "v100-32gb": (15.7e12, 900e9), "a100-80gb": (19.5e12, 2039e9), "h100-80gb": (67e12, 3350e9),
        "h200-141gb": (67e12, 4800e9), "cpu-2core": (1.4e11, 19e9)}
    with pytest.raises(InvalidMachineError, match="unknown device preset 'tpu'"):
        machine_for("tpu", 4)


def _sparse_step():
    graph = tf.Graph()
    with graph.as_default():
        summed, _ = models.sparse_rows()
        projected = tf.matmul(summed, tf.compat.v1.placeholder(tf.float32, [8, 16], name="w"), name="projected")
    return graph, projected


def test_estimate_costs_rule_sized_tensors_at_their_bounds():
    graph, fetch = _sparse_step()
    parts = estimate_parts(graph, fetch, "a100")
    cost, sizing = estimate_with_report(graph, fetch, "a100")
    assert isinstance(parts, EstimateParts) and parts.sizing == sizing == capture_with_report(graph, fetch)[1]
    assert sizing.counts["data_dependent"] == 2 and sizing.counts["propagated"] == 1
    flops = dict(zip(cost.names, parts.flops.tolist()))
    moved = dict(zip(cost.names, parts.moved_bytes.tolist()))
    # At most 24 distinct ids: the segment sum has ≤ 24 rows of 8, the MatMul ≤ 24 × 16 outputs of 8 terms.
    assert flops["projected"] == 2 * 24 * 16 * 8
    assert moved["projected"] == 24 * 8 * 4 + 8 * 16 * 4 + 24 * 16 * 4
    assert flops["summed"] == 24 * 8  # one FLOP per element of its largest tensor
    assert cost.comp_us[cost.index["projected"]] == pytest.approx(
        max(2 * 24 * 16 * 8 / 19.5e12, (768 + 512 + 1536) / 2039e9) * 1e6 + 5.0)
    sizes = {"projected:0": 24 * 16 * 4}
    op = graph.get_operation_by_name("projected")
    assert op_flops(op) == 0 and op_flops(op, sizes=sizes) == 2 * 24 * 16 * 8  # without sizes: unknown rows
    with pytest.raises(InvalidGraphError, match=r"op 'unique' \(Unique\): output 'unique:0' has shape \(None,\)"):
        estimate(graph, fetch, strict=True)
