"""profile(): trace-node ownership, step_stats parsing, the trimmed mean, and a real profiled step."""

from __future__ import annotations

import logging

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")

from tensorflow.core.framework import step_stats_pb2, types_pb2  # noqa: E402

from pardnn.tf import capture, profile, profile_with_report  # noqa: E402
from pardnn.tf.profile import owner_op, parse_step_stats, trimmed_mean  # noqa: E402
from tests.tf import models  # noqa: E402

pytestmark = pytest.mark.tf

OPS = {"x", "lstm/while", "lstm/while/Identity_3", "dense/MatMul", "gradients/Mean_grad/truediv"}


@pytest.mark.parametrize(("node", "owner"), [
    ("dense/MatMul", ("dense/MatMul", -1)),
    ("lstm/while/Identity_3", ("lstm/while/Identity_3", -1)),  # a real op under the loop's name
    ("_arg_x_0_0", ("x", 0)),  # a fed placeholder
    ("lstm/while/body/_1/lstm_cell/MatMul", ("lstm/while", None)),  # the lowered loop's body
    ("lstm/while/merge/_52", ("lstm/while", None)),
    ("Func/lstm/while/body/_1/input/_401", ("lstm/while", None)),
    ("gradients/Mean_grad/truediv/_0__cf__0", ("gradients/Mean_grad/truediv", None)),  # a folded constant
    ("dense/MatMul/_15", ("dense/MatMul", None)),
    ("_SOURCE", None),
    ("_retval_Mean_0_0", None),
    ("other/op", None),
])
def test_owner_op(node, owner):
    assert owner_op(node, OPS) == owner


def _node(stats, name, op_type, start_ns, end_ns, outputs=()):
    node = stats.node_stats.add(node_name=name, timeline_label=f"{name} = {op_type}(a, b)",
                                op_start_rel_nanos=start_ns, op_end_rel_nanos=end_ns)
    for slot, (dtype, dims) in enumerate(outputs):
        output = node.output.add(slot=slot)
        output.tensor_description.dtype = dtype
        for size in dims:
            output.tensor_description.shape.dim.add(size=size)
        output.tensor_description.allocation_description.requested_bytes = 999
    return node


def test_parse_step_stats_sums_loop_nodes_and_reads_runtime_shapes():
    step = step_stats_pb2.StepStats()
    cpu = step.dev_stats.add(device="/job:localhost/replica:0/task:0/device:CPU:0")
    _node(cpu, "_SOURCE", "NoOp", 0, 5000)
    _node(cpu, "_arg_x_0_0", "_Arg", 0, 1000, [(types_pb2.DT_FLOAT, [8, 4])])
    _node(cpu, "dense/MatMul", "_MklMatMul", 2000, 11500, [(types_pb2.DT_FLOAT, [8, 7])])
    for _ in range(5):  # one node per loop iteration
        _node(cpu, "lstm/while/body/_1/lstm_cell/MatMul", "MatMul", 100, 2100, [(types_pb2.DT_FLOAT, [8, 24])])
    _node(cpu, "lstm/while/Identity_3", "Identity", 0, 500, [(types_pb2.DT_VARIANT, [])])
    _node(cpu, "dense/MatMul/_15", "_Send", 0, 40000)
    _node(cpu, "mystery/_7", "Const", 0, 300)
    trace = parse_step_stats(step, OPS)
    assert trace.time_us == pytest.approx({"x": 1.0, "dense/MatMul": 9.5, "lstm/while": 10.0,
                                           "lstm/while/Identity_3": 0.5})
    # Runtime shape × dtype size, not the allocator's request; variants and loop nodes give none.
    assert trace.sizes == {"x": {0: 128}, "dense/MatMul": {0: 224}}
    assert trace.unmatched == 1


def test_parse_step_stats_takes_the_larger_of_executor_and_stream_views():
    step = step_stats_pb2.StepStats()
    _node(step.dev_stats.add(device="/device:GPU:0"), "dense/MatMul", "MatMul", 0, 3000)
    _node(step.dev_stats.add(device="/device:GPU:0/stream:all"), "dense/MatMul", "MatMul", 0, 40000)
    _node(step.dev_stats.add(device="/device:GPU:0/memcpy"), "dense/MatMul", "MatMul", 0, 90000)
    assert parse_step_stats(step, OPS).time_us == {"dense/MatMul": 40.0}


def test_trimmed_mean():
    assert trimmed_mean(np.array([1.0, 2.0, 3.0, 4.0, 1000.0]), 0.2) == 3.0
    assert trimmed_mean(np.array([5.0]), 0.2) == 5.0
    assert trimmed_mean(np.array([2.0, 4.0]), 0.0) == 3.0


def _feeds(model, count):
    data = models.batches(model, count)
    return lambda step: data[step]


def test_profile_times_every_op_that_runs_and_keeps_static_sizes(caplog):
    model = models.two_layer("adam")
    with caplog.at_level(logging.INFO, logger="pardnn.tf.profile"):
        cost, report = profile_with_report(model.graph, model.fetches, _feeds(model, 6), steps=4, warmup=2)
    static = capture(model.graph, model.fetches)
    assert cost.names == static.names
    assert (cost.edge_bytes == static.edge_bytes).all() and (cost.out_bytes == static.out_bytes).all()
    assert (report.steps, report.warmup, report.ops) == (4, 2, cost.n)
    assert report.timed == cost.n and report.missing == () and report.unsized == ()
    assert report.unmatched_trace_nodes == 0
    times = dict(zip(cost.names, cost.comp_us.tolist()))
    assert times["mm1"] > 0 and times["train/update_w1/ResourceApplyAdam"] > 0
    assert "4 steps after 2 warm-up" in caplog.text


def test_profile_sizes_an_unknown_batch_from_the_trace():
    model = models.tiny(batch=None)
    data = [{model.inputs[0]: np.ones((6, 3), np.float32)}] * 3
    cost, report = profile_with_report(model.graph, model.fetches, lambda step: data[step], steps=2, warmup=1)
    sizes = dict(zip(cost.names, cost.out_bytes.tolist()))
    assert (sizes["x"], sizes["mm"], sizes["w"]) == (6 * 3 * 4, 6 * 5 * 4, 60)
    index = cost.index
    edges = dict(zip(zip(cost.edge_src.tolist(), cost.edge_dst.tolist()), cost.edge_bytes.tolist()))
    assert edges[(index["x"], index["mm"])] == 72
    assert report.unsized == ()


@pytest.mark.filterwarnings("ignore:non-integer arguments to randrange:DeprecationWarning")  # keras' own seeding
def test_profile_attributes_a_lowered_while_loop_to_its_op():
    model = models.lstm_dense()
    cost, report = profile_with_report(model.graph, model.fetches, _feeds(model, 3), steps=2, warmup=1)
    times = dict(zip(cost.names, cost.comp_us.tolist()))
    assert times["lstm/while"] > times["lstm/while/Identity_3"]
    assert times["gradients/lstm/while_grad/lstm/while_grad"] > 0
    # TensorFlow prunes the loop's unused accumulators after lowering: they never run.
    missing_types = {model.graph.get_operation_by_name(name).type for name in report.missing}
    assert missing_types <= {"Const", "EmptyTensorList"}
    assert report.timed + len(report.missing) == report.ops


def test_profile_returns_the_cost_graph_only():
    model = models.tiny()
    cost = profile(model.graph, model.fetches, _feeds(model, 2), steps=1, warmup=1)
    assert cost.comp_us[cost.index["mm"]] > 0
