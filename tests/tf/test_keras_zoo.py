"""The Keras zoo: users' own tf.keras models through capture, estimate and profile, placed by ParDNN on
four logical CPU devices, and trained two steps exactly as on one device.

Each model (tests/tf/keras_models.py) is built once, in a module-scoped fixture that runs the whole
pipeline in order: capture, estimate and profile the step; train it two steps on one device
(Grappler off); partition the estimated graph for 4 devices (``latency=0``: the logical devices
share the host's memory, so a transfer is a copy with no link latency, and the placement is
deterministic, being from analytic costs); apply it; train the same two steps on four devices. A graph
may be placed after a session has run it and closed (a new session reads the new devices), so one
build serves both runs, and the second session re-runs the seeded initializers: identical weights.
Losses must be *equal*, not close: the same kernels run on the same data in the same order (the
devices are threads of one host), and seeded Dropout draws the same masks in each new session. The
captured step, without costs, is also placed as it is (every op 0 us): one warning, no crash.

Six ``tf.keras.applications`` (weights=None, 32×32 inputs, Xception at its minimum 71×71, batch 2,
3 classes): MobileNetV2 (α 0.35), ResNet50, VGG16, EfficientNetB0, Xception, and MobileNet (α 0.25)
built on its own ``Input`` and called on the placeholder, as users often do. Then a two-layer Keras
GRU (functional ``While`` loops), self-attention (MultiHeadAttention + LayerNormalization on a
``None`` batch, costed with ``unknown_dim``), Dense/Dropout/LayerNormalization (Dropout as
``StatelessIf`` on Keras' learning phase), an Embedding trained with Adam (``Unique``), a
``mixed_float16`` conv net, a subclassed model (layers in ``__init__``, no ``Input``) and a
functional model with two outputs and two weighted losses.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")

from pardnn import partition  # noqa: E402
from pardnn.costs.graph import CostGraph  # noqa: E402
from pardnn.costs.machine import Machine  # noqa: E402
from pardnn.emulation.checks import check_placement, colocation_violations  # noqa: E402
from pardnn.errors import InvalidGraphError  # noqa: E402
from pardnn.tf import (  # noqa: E402
    ProfileReport,
    SizingReport,
    apply,
    capture,
    capture_with_report,
    device_names,
    estimate_with_report,
    op_cost,
    profile_with_report,
    session_config,
)
from pardnn.tf.loops import accumulated_element  # noqa: E402
from tests.tf import keras_models as km  # noqa: E402

pytestmark = [
    pytest.mark.tf,
    pytest.mark.slow,
    pytest.mark.filterwarnings("ignore:non-integer arguments to randrange:DeprecationWarning"),  # keras' seeding
    pytest.mark.filterwarnings("ignore:`tf.keras.backend.set_learning_phase` is deprecated:UserWarning"),
    pytest.mark.filterwarnings("ignore:`layer.updates` will be removed:UserWarning"),
]

DEVICES = 4

MODELS: dict[str, Callable[[], km.KerasModel]] = {
    "MobileNetV2": lambda: km.application("MobileNetV2", alpha=0.35),
    "ResNet50": lambda: km.application("ResNet50"),
    "VGG16": lambda: km.application("VGG16"),
    "EfficientNetB0": lambda: km.application("EfficientNetB0"),
    "Xception": lambda: km.application("Xception", size=71),
    "MobileNet": lambda: km.application("MobileNet", alpha=0.25, call=True),
    "gru": km.gru,
    "attention": km.attention,
    "dropout_layer_norm": km.dropout_layer_norm,
    "embedding": km.embedding,
    "mixed_precision": km.mixed_precision,
    "subclassed": km.subclassed,
    "two_outputs": km.two_outputs,
}

# The sizing rules each model needs besides static shapes (every one of them fires, no other does).
RULES = {
    "MobileNetV2": {"reserve"}, "ResNet50": {"reserve"}, "VGG16": set(), "EfficientNetB0": {"reserve"},
    "Xception": {"reserve"}, "MobileNet": {"reserve"},
    "gru": {"loop_accumulator"},
    "attention": {"reserve", "data_dependent", "reshape", "propagated", "unknown_dim"},
    "dropout_layer_norm": {"reserve"},
    "embedding": {"data_dependent", "propagated"},
    "mixed_precision": {"reserve"},
    "subclassed": {"reserve"},
    "two_outputs": set(),
}


@dataclass
class Run:
    name: str
    model: km.KerasModel
    cost: CostGraph
    sizing: SizingReport
    estimated: CostGraph
    estimated_sizing: SizingReport
    profiled: CostGraph
    profile_report: ProfileReport
    reference: np.ndarray
    placement: np.ndarray
    placed: np.ndarray
    devices_used: set[int]


def _train(model: km.KerasModel, devices: int) -> tuple[np.ndarray, set[int]]:
    """Losses of the model's steps on ``devices`` logical CPUs (Grappler off), and the devices that
    ran ops in the traced last step."""
    init = model.initializer()
    losses = []
    metadata = tf.compat.v1.RunMetadata()
    options = tf.compat.v1.RunOptions(trace_level=tf.compat.v1.RunOptions.FULL_TRACE)
    with tf.compat.v1.Session(graph=model.graph, config=session_config(devices, optimize=False)) as session:
        session.run(init)
        for index, feed in enumerate(model.feeds):
            last = index == len(model.feeds) - 1
            traced: dict[str, Any] = {"options": options, "run_metadata": metadata} if last else {}
            losses.append(session.run(model.fetches, feed, **traced)[1])
    used = {int(d.device.rsplit(":", 1)[1]) for d in metadata.step_stats.dev_stats if len(d.node_stats)}
    return np.array(losses), used


@pytest.fixture(scope="module", params=list(MODELS))
def run(request: pytest.FixtureRequest) -> Run:
    model = MODELS[request.param]()
    unknown = model.unknown_dim
    cost, sizing = capture_with_report(model.graph, model.fetches, unknown_dim=unknown)
    estimated, estimated_sizing = estimate_with_report(model.graph, model.fetches, unknown_dim=unknown)
    profiled, report = profile_with_report(model.graph, model.fetches, lambda step: model.feeds[0], steps=1,
                                           warmup=1, unknown_dim=unknown)
    reference, _ = _train(model, 1)
    placement = partition(estimated, Machine(DEVICES, latency=0)).placement
    apply(model.graph, placement, device_names(DEVICES), names=estimated.names)
    placed, used = _train(model, DEVICES)
    return Run(request.param, model, cost, sizing, estimated, estimated_sizing, profiled, report, reference,
               placement, placed, used)


def _outputs(run: Run) -> int:
    return sum(len(run.model.graph.get_operation_by_name(name).outputs) for name in run.cost.names)


def test_capture_sizes_every_output_by_the_rules_it_needs(run):
    counts = run.sizing.counts
    assert sum(counts.values()) == _outputs(run)
    assert counts["unsized"] == 0 and counts["static"] > _outputs(run) // 2
    assert {rule for rule, count in counts.items() if count and rule != "static"} == RULES[run.name]
    batch_norms = sum(op == "FusedBatchNormV3" for op in run.cost.ops)
    if run.name not in ("attention", "gru", "embedding", "VGG16", "two_outputs"):  # two_outputs: 2-D batch norm
        # reserve_space_3 of every batch (or layer) norm; its other outputs have static shapes.
        assert counts["reserve"] == batch_norms > 0
    assert (run.cost.out_bytes >= 0).all() and run.cost.out_bytes.sum() > 0


def test_strict_capture_raises_where_a_rule_was_needed(run):
    needed = RULES[run.name] - {"loop_accumulator"}
    if not needed:
        assert capture(run.model.graph, run.model.fetches, strict=True) == run.cost
        return
    with pytest.raises(InvalidGraphError, match=r"op '[^']+' \(\w+\): output '[^']+' has shape .*(set a static "
                                                r"shape|pass unknown_dim)"):
        capture(run.model.graph, run.model.fetches, unknown_dim=run.model.unknown_dim, strict=True)


def test_estimate_costs_the_captured_graph(run):
    cost, estimated = run.cost, run.estimated
    assert estimated.names == cost.names and run.estimated_sizing == run.sizing
    assert (estimated.out_bytes == cost.out_bytes).all() and (estimated.edge_bytes == cost.edge_bytes).all()
    assert np.isfinite(estimated.comp_us).all() and (estimated.comp_us >= 0).all()
    kernels = [i for i, op in enumerate(cost.ops) if op in ("Conv2D", "MatMul", "BatchMatMulV2", "Einsum",
                                                            "DepthwiseConv2dNative", "While", "StatelessWhile")]
    assert kernels and all(estimated.comp_us[i] > 0 for i in kernels)


def test_profile_times_the_step_within_the_captured_bounds(run):
    report, profiled, cost = run.profile_report, run.profiled, run.cost
    assert profiled.names == cost.names
    assert report.unsized == () and report.timed > 0.5 * report.ops and report.sized_from_trace > 0
    assert report.sizing is not None and report.sizing.counts["trace"] == report.sized_from_trace
    # A data-dependent output's traced size is within the bound capture gave it.
    bounded = {name.rsplit(":", 1)[0] for name in run.sizing.tensors("data_dependent")}
    for name in bounded:
        i = cost.index[name]
        assert profiled.out_bytes[i] <= cost.out_bytes[i], name


def test_placed_training_equals_one_device(run):
    placement = run.placement
    assert set(placement.tolist()) == set(range(DEVICES))
    assert not colocation_violations(run.estimated, placement)
    assert run.devices_used == set(range(DEVICES))
    assert np.isfinite(run.reference).all()
    np.testing.assert_array_equal(run.placed, run.reference)


def test_a_captured_step_without_costs_is_placed_with_one_warning(run, caplog):
    """Capture alone, without profile or estimate: every op costs 0 us (which once crashed the guard).
    ParDNN places the step within memory, its groups together, and warns once, naming how to cost it."""
    cost = run.cost
    assert not cost.comp_us.any() and cost.n > (1000 if run.name == "ResNet50" else 20)
    machine = Machine(DEVICES, memory="16GiB")
    with caplog.at_level(logging.WARNING, logger="pardnn"):
        result = partition(cost, machine)
    check_placement(cost, machine, result.placement, colocation=True)
    assert result.report.evaluation.memory_fits and result.report.ccr is None
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING and r.name.startswith("pardnn")]
    assert len(warned) == 1, warned
    assert f"({cost.n:,} ops) costs 0 us" in warned[0] and "pardnn.tf.profile or pardnn.tf.estimate" in warned[0]


def _op_bytes(run: Run, op_type: str) -> list[int]:
    return [int(b) for op, b in zip(run.cost.ops, run.cost.out_bytes, strict=True) if op == op_type]


def test_model_specific_sizes(run):
    checks: dict[str, Callable[[Run], None]] = {
        "embedding": _embedding, "gru": _gru, "mixed_precision": _mixed_precision, "attention": _attention,
        "dropout_layer_norm": _dropout,
    }
    checks.get(run.name, _application)(run)


def _application(run: Run) -> None:
    graph, sizes = run.model.graph, dict(zip(run.cost.names, run.cost.out_bytes.tolist(), strict=True))
    norms = [graph.get_operation_by_name(n) for n, op in zip(run.cost.names, run.cost.ops, strict=True)
             if op == "FusedBatchNormV3"]
    for op in norms:  # y, then batch mean and variance and reserve_space_1/_2 per channel, reserve_space_3 0
        y, channels = op.outputs[0].shape, op.outputs[0].shape[-1]
        assert sizes[op.name] == y.num_elements() * 4 + 4 * channels * 4, op.name
    if run.name == "VGG16":
        assert not norms and sizes["block1_conv1/Conv2D"] == km.BATCH * 32 * 32 * 64 * 4


def _embedding(run: Run) -> None:
    ids = run.model.extra["ids"]  # 2 × 6 = 12 ids: at most 12 distinct, int32, and idx [12]
    assert _op_bytes(run, "Unique") == [ids * 4 + ids * 4]
    assert _op_bytes(run, "UnsortedSegmentSum") == [ids * 8 * 4]  # ≤ 12 rows of the 8-wide embedding
    traced = {name: int(b) for name, b in zip(run.profiled.names, run.profiled.out_bytes, strict=True)}
    unique = next(name for name, op in zip(run.cost.names, run.cost.ops, strict=True) if op == "Unique")
    assert traced[unique] <= run.cost.out_bytes[run.cost.index[unique]]


def _gru(run: Run) -> None:
    steps, graph = run.model.extra["steps"], run.model.graph
    loops = [name for name, op in zip(run.cost.names, run.cost.ops, strict=True) if op in ("While", "StatelessWhile")]
    assert len(loops) == 4  # two GRU layers, forward and gradient
    for name in loops:
        op = graph.get_operation_by_name(name)
        per_trip = sum(op_cost(inner).us for attr in ("body", "cond")
                       for inner in graph._get_function(op.get_attr(attr).name).graph.get_operations())
        assert run.estimated.comp_us[run.cost.index[name]] == pytest.approx(steps * per_trip), name
    for tensor_name in run.sizing.tensors("loop_accumulator"):
        tensor = graph.get_tensor_by_name(tensor_name)
        element = accumulated_element(tensor.op, tensor.value_index)
        per_step = element.shape.num_elements() * element.dtype.size
        assert run.sizing.sizes[tensor_name] == steps * per_step, tensor_name  # one element per time step
    forward = [n for n in loops if not n.startswith("gradients/")]
    assert all(run.sizing.tensors("loop_accumulator")[k].split(":")[0] in loops
               for k in range(run.sizing.counts["loop_accumulator"]))
    assert all(run.cost.out_bytes[run.cost.index[n]] > steps * km.BATCH * 6 * 4 for n in forward)


def _mixed_precision(run: Run) -> None:
    sizes = dict(zip(run.cost.names, run.cost.out_bytes.tolist(), strict=True))
    conv = next(n for n in sizes if n.endswith("conv/Conv2D"))
    assert sizes[conv] == km.BATCH * 6 * 6 * 4 * 2  # float16 activations: 2 bytes
    kernel = next(n for n, op in zip(run.cost.names, run.cost.ops, strict=True) if op == "VarHandleOp"
                  and n.endswith("conv/kernel"))
    assert sizes[kernel] == 3 * 3 * 3 * 4 * 4  # float32 master weights: 4 bytes
    assert sizes[next(n for n in sizes if n.endswith("out/MatMul"))] == km.BATCH * 1 * 4  # float32 output layer


def _attention(run: Run) -> None:
    sizes = dict(zip(run.cost.names, run.cost.out_bytes.tolist(), strict=True))
    assert sizes["tokens"] == km.BATCH * 5 * 8 * 4 and run.sizing.rules["tokens:0"] == "unknown_dim"
    softmax = next(n for n, op in zip(run.cost.names, run.cost.ops, strict=True) if op == "Softmax")
    assert sizes[softmax] == km.BATCH * 2 * 5 * 5 * 4  # batch × heads × queries × keys
    # LayerNormalization reshapes [batch, 5, 8] to [1, batch × 5, 8, 1]: as many elements (the batch
    # guess would give 1 × 2 × 2 × 1).
    reshape = next(n for n in run.sizing.tensors("reshape") if "layer_normalization/Reshape" in n)
    assert run.sizing.sizes[reshape] == km.BATCH * 5 * 8 * 4
    traced = dict(zip(run.profiled.names, run.profiled.out_bytes.tolist(), strict=True))
    assert traced[reshape.split(":")[0]] == sizes[reshape.split(":")[0]]


def _dropout(run: Run) -> None:
    conds = [i for i, op in enumerate(run.cost.ops) if op in ("If", "StatelessIf")]
    assert len(conds) == 4  # two Dropouts, forward and gradient
    assert all(run.estimated.comp_us[i] > 0 for i in conds)


_EAGER_DISABLED = """
import json
import tensorflow as tf
tf.compat.v1.disable_eager_execution()
from pardnn.tf import capture_with_report, estimate_with_report
ids = tf.keras.Input((6,), dtype="int32")
image = tf.keras.Input((8, 8, 3))
h = tf.keras.layers.BatchNormalization()(tf.keras.layers.Conv2D(4, 3)(image), training=True)
e = tf.keras.layers.GlobalAveragePooling1D()(tf.keras.layers.Embedding(20, 4)(ids))
out = tf.keras.layers.Dense(1)(tf.keras.layers.Concatenate()([tf.keras.layers.Flatten()(h), e]))
model = tf.keras.Model([ids, image], out)
loss = tf.reduce_mean(tf.square(model.output))
train = tf.keras.optimizers.legacy.Adam(0.001).get_updates(loss, model.trainable_weights)
cost, sizing = capture_with_report(tf.compat.v1.get_default_graph(), [train, loss], unknown_dim=2)
_, estimated = estimate_with_report(tf.compat.v1.get_default_graph(), [train, loss], unknown_dim=2)
print(json.dumps({"counts": sizing.counts, "same": estimated == sizing, "ops": cost.n}))
"""


def test_capture_with_eager_execution_disabled_process_wide():
    """``tf.compat.v1.disable_eager_execution()`` is for the whole process: its own interpreter."""
    root = Path(__file__).resolve().parents[2]
    done = subprocess.run([sys.executable, "-c", _EAGER_DISABLED], cwd=root, capture_output=True, text=True,
                          timeout=300, check=False, env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"})
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    counts = result["counts"]
    assert result["same"] and result["ops"] > 50 and counts["unsized"] == 0
    # The batch norm's reserve_space_3, Adam's Unique over the 2 × 6 ids, the None batch as unknown_dim.
    assert counts["reserve"] >= 1 and counts["data_dependent"] >= 1 and counts["unknown_dim"] > 0
