"""Every model's tiny job trains (loss falls over 30 steps), alone and then placed by ParDNN on 4 devices
(one build for both); builds are deterministic and a gradient hook adds only its own ops."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")

from jobs import build, cost_graph, load_job  # noqa: E402
from pardnn import partition  # noqa: E402
from pardnn.costs.machine import Machine  # noqa: E402
from pardnn.tf import apply, capture, device_names, session_config  # noqa: E402

pytestmark = pytest.mark.tf

TINY = ["word-rnn-tiny", "char-crn-tiny", "wrn-tiny", "trn-tiny", "e3d-tiny"]
STEPS = 30


def train(graph_of_job, config=None, steps: int = STEPS):
    """Losses of ``steps`` training steps from fresh variables, and the last step's RunMetadata."""
    metadata = tf.compat.v1.RunMetadata()
    options = tf.compat.v1.RunOptions(trace_level=tf.compat.v1.RunOptions.FULL_TRACE)
    losses = []
    with tf.compat.v1.Session(graph=graph_of_job.graph, config=config) as session:
        session.run(graph_of_job.init_op)
        for step in range(steps):
            last = step == steps - 1
            _, loss = session.run(graph_of_job.fetches, graph_of_job.feed_fn(step),
                                  options=options if last else None, run_metadata=metadata if last else None)
            losses.append(loss)
    return np.array(losses), metadata


def assert_learns(losses: np.ndarray) -> None:
    assert np.isfinite(losses).all()
    assert losses[-5:].mean() < losses[:5].mean(), f"loss did not fall: {np.round(losses, 3)}"


@pytest.mark.parametrize("name", [*TINY[:-1], pytest.param(TINY[-1], marks=pytest.mark.slow)])
def test_tiny_job_trains_alone_and_placed_by_pardnn_on_four_devices(name):
    """One build: its contract, then 30 steps on one device (the loss falls), then the same graph
    profiled, placed by ParDNN on 4 devices and trained again from fresh variables (the loss falls, on
    at least 2 devices)."""
    job = load_job(name)
    trained = build(job)
    assert trained.fetches == [trained.train_op, trained.loss]
    assert trained.loss.graph is trained.graph and trained.train_op.graph is trained.graph
    assert trained.samples_per_step == trained.batch_size == job.batch_size
    slots = {v.name for v in trained.variables if v.name.endswith(("/Adam:0", "/Adam_1:0", "/Momentum:0"))}
    assert slots and trained.parameters == sum(int(np.prod(v.shape)) for v in trained.variables
                                               if v.trainable and v.name not in slots)
    captured = capture(trained.graph, trained.fetches)  # every tensor of the step has a static shape
    assert captured.n > 100 and captured.param_bytes.sum() >= 4 * trained.parameters
    losses, _ = train(trained)
    assert_learns(losses)

    cost = cost_graph(trained, job.costs)  # the tiny jobs profile 3 steps on this machine
    assert cost.total_work_us > 0
    result = partition(cost, Machine(4))
    assert len(np.unique(result.placement)) >= 2
    apply(trained.graph, result.placement, device_names(4), names=cost.names)
    losses, metadata = train(trained, session_config(4))
    assert_learns(losses)
    used = {d.device.rsplit(":", 1)[1] for d in metadata.step_stats.dev_stats if d.node_stats}
    assert len(used) >= 2


def _initial_values(trained):
    with tf.compat.v1.Session(graph=trained.graph) as session:
        session.run(trained.init_op)
        return session.run(trained.variables)


@pytest.mark.parametrize("name", ["wrn-tiny", "trn-tiny"])
def test_builds_are_identical_and_a_gradient_hook_adds_only_its_own_ops(name):
    job = load_job(name)
    first, second = build(job), build(job)
    names = [op.name for op in first.graph.get_operations()]
    assert names == [op.name for op in second.graph.get_operations()]
    for a, b in zip(_initial_values(first), _initial_values(second)):
        np.testing.assert_array_equal(a, b)

    created: list[str] = []

    def average(grads_and_vars):
        """Like hvd.allreduce(..., op=Average): unscoped top-level ops per gradient."""
        graph = tf.compat.v1.get_default_graph()
        before = len(graph.get_operations())
        out = [(tf.math.truediv(grad, tf.cast(1, grad.dtype)), var) for grad, var in grads_and_vars]
        created.extend(op.name for op in graph.get_operations()[before:])
        return out

    hooked = build(job, gradient_hook=average)
    hooked_names = [op.name for op in hooked.graph.get_operations()]
    assert created and set(hooked_names) - set(names) == set(created)
    assert set(names) <= set(hooked_names)
    updates = [op for op in hooked.graph.get_operations() if op.type.startswith("ResourceApply")]
    assert updates and all(op.inputs[-1].op.type == "RealDiv" or any(i.op.type == "RealDiv" for i in op.inputs)
                           for op in updates)


def test_batch_size_override_and_contract_fields():
    trained = build(load_job("word-rnn-tiny"), batch_size=3)
    assert trained.inputs["tokens"].shape.as_list() == [3, 10]
    feed = trained.feed_fn(0)
    assert {t.name for t in feed} == {"tokens:0", "targets:0"} and feed[trained.inputs["tokens"]].shape == (3, 10)
    assert (trained.samples_per_step, trained.tokens_per_step) == (3, 30)
    assert build(load_job("wrn-tiny")).tokens_per_step is None
    assert trained.init_op.type == "NoOp" and trained.train_op.type == "NoOp"


def _cifar(tmp_path):
    path = tmp_path / "train"
    rng = np.random.default_rng(0)
    path.write_bytes(pickle.dumps({b"data": rng.integers(0, 256, (20, 3072), dtype=np.uint8),
                                   b"fine_labels": rng.integers(0, 10, 20).tolist()}))
    return "cifar100", path, {"model.image_size": 32}


def _text(tmp_path):
    path = tmp_path / "input.txt"
    path.write_text("to be or not to be that is the question whether tis nobler in the mind to suffer\n" * 20)
    return "tiny_shakespeare", path, {}


def _ptb(tmp_path):
    path = tmp_path / "ptb.train.txt"
    path.write_text(" no it was n't black monday \n but while the new york stock exchange did n't fall \n" * 20)
    return "ptb", path, {}


def _iwslt(tmp_path):
    (tmp_path / "train.de").write_text("ein kleines haus\nzwei große häuser am see\n" * 10)
    (tmp_path / "train.en").write_text("a small house\ntwo big houses at the lake\n" * 10)
    return "iwslt16", tmp_path / "train", {}


def _mnist(tmp_path):
    path = tmp_path / "mnist_test_seq.npy"
    np.save(path, np.random.default_rng(0).integers(0, 256, (10, 6, 16, 16), dtype=np.uint8))
    return "moving_mnist", path, {}


@pytest.mark.parametrize(("name", "dataset"), [("word-rnn-tiny", _text), ("char-crn-tiny", _ptb),
                                               ("wrn-tiny", _cifar), ("trn-tiny", _iwslt),
                                               pytest.param("e3d-tiny", _mnist, marks=pytest.mark.slow)])
def test_tiny_job_steps_on_its_real_dataset(tmp_path, name, dataset):
    source, path, extra = dataset(tmp_path)
    job = load_job(name, overrides={"data.source": source, "data.path": str(path), **extra})
    losses, _ = train(build(job), steps=3)
    assert np.isfinite(losses).all()
