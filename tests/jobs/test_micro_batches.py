"""Micro-batched steps (``[train] micro_batches``, ``--micro-batches``): the settings and their one-line
errors, then (TensorFlow) the step itself: its loss is the full batch's and three steps leave the
weights where three full-batch steps do, for a zoo model and a Keras model without batch norm.

The trainable weights agree to rtol 1e-5 with ``atol = 1e-5 · (the model's largest |weight|)``:
Adam divides by the root of the second moment, so a weight whose gradient is (near) zero (an
attention key bias's is exactly zero in exact arithmetic) moves by rounding noise, and that noise
differs when the gradient is summed in another order. The losses agree to rtol 1e-5 as they are.
"""

from __future__ import annotations

import argparse
import re
import shutil
from pathlib import Path

import numpy as np
import pytest

from jobs import JobError, load_job
from jobs.schema import micro_batches_arg
from launcher.cli import build_parser
from tests.helpers.builds import ZOO_STEPS, built

ROOT = Path(__file__).resolve().parents[2]


def test_micro_batches_default_to_one_and_come_from_the_job_file(tmp_path):
    assert load_job("word-rnn-tiny").micro_batches == 1
    assert load_job("word-rnn-tiny", {"train.micro_batches": 4}).micro_batches == 4
    with pytest.raises(JobError, match=r"train\.micro_batches = 0 \(override\): expected"):
        load_job("word-rnn-tiny", {"train.micro_batches": 0})


def test_micro_batches_may_be_auto_in_job_files_and_on_the_command_line():
    assert load_job("word-rnn-tiny", {"train.micro_batches": "auto"}).micro_batches == "auto"
    assert load_job("word-rnn-tiny", {"train.micro_batches": "AUTO"}).micro_batches == "auto"
    with pytest.raises(JobError, match=r"train\.micro_batches = 'some' \(override\): expected a whole number >= 1, "
                                       r"or 'auto'"):
        load_job("word-rnn-tiny", {"train.micro_batches": "some"})
    assert micro_batches_arg("auto") == micro_batches_arg("AUTO") == "auto"
    assert micro_batches_arg("4") == 4


@pytest.mark.parametrize("text", ["0", "-2", "two", "1.5"])
def test_micro_batches_must_be_a_whole_number_or_auto(text):
    with pytest.raises(argparse.ArgumentTypeError, match="expected a whole number >= 1, or 'auto'"):
        micro_batches_arg(text)


def test_the_launcher_takes_micro_batches():
    assert build_parser().parse_args(["word-rnn-tiny", "--micro-batches", "4"]).micro_batches == 4
    assert build_parser().parse_args(["word-rnn-tiny", "--micro-batches", "auto"]).micro_batches == "auto"


def test_capture_takes_a_number_of_micro_batches_not_auto(capsys):
    from pardnn.cli import main

    with pytest.raises(SystemExit) as stop:
        main(["capture", "word-rnn-tiny", "-o", "x.json", "--micro-batches", "auto"])
    assert stop.value.code == 2
    assert ("argument --micro-batches: 'auto' chooses M in pardnn-launch and pardnn max-batch; capture writes one "
            "graph") in capsys.readouterr().err


def test_a_single_graph_needs_a_number_of_micro_batches():
    pytest.importorskip("tensorflow")
    from jobs import build

    with pytest.raises(JobError, match="micro_batches 'auto' is chosen by pardnn-launch and pardnn max-batch"):
        build(load_job("word-rnn-tiny", {"train.micro_batches": "auto"}))


# ------------------------------------------------------------------------------- the step (TensorFlow)
def train(job, micro, steps=3):
    """Losses of ``steps`` steps and the variables after them."""
    tf = pytest.importorskip("tensorflow")
    from jobs import build

    graph = build(job, micro_batches=micro)
    with tf.compat.v1.Session(graph=graph.graph) as session:
        session.run(graph.init_op)
        losses = [session.run(graph.fetches, graph.feed_fn(i))[1] for i in range(steps)]
        weights = session.run(graph.variables)
    return graph, np.array(losses), weights


def assert_same_steps(job, micro):
    whole, losses, weights = train(job, 1)
    split, micro_losses, micro_weights = train(job, micro)
    assert [v.name for v in whole.variables] == [v.name for v in split.variables]  # shared, not copied
    assert split.samples_per_step == whole.samples_per_step
    np.testing.assert_allclose(micro_losses, losses, rtol=1e-5)
    trainable = [(var.name, got, want) for var, got, want in zip(whole.variables, micro_weights, weights, strict=True)
                 if var.trainable]
    scale = max(float(np.max(np.abs(want))) for _, _, want in trainable)
    for name, got, want in trainable:
        assert np.allclose(got, want, rtol=1e-5, atol=1e-5 * scale), name
    return whole, split


@pytest.mark.tf
@pytest.mark.slow
def test_a_micro_batched_zoo_step_is_the_full_batch_step():
    job = load_job("word-rnn-tiny")
    whole, split = assert_same_steps(job, 4)
    ops = {op.name for op in split.graph.get_operations()}
    assert {f"micro_{m}/tokens" for m in range(4)} <= ops
    assert split.inputs["micro_3/tokens"].shape.as_list() == [4, 10] and split.tokens_per_step == whole.tokens_per_step
    assert len(ops) > 2 * len(whole.graph.get_operations())
    from jobs import build

    again = build(job, micro_batches=1)  # M = 1 is the plain step, op for op
    assert [op.name for op in again.graph.get_operations()] == [op.name for op in whole.graph.get_operations()]


def _gradient_ops(graph, scope: str) -> set[tuple[str, str]]:
    """The (name, type) of the ops ``tf.gradients`` made under ``scope``, the copy's scope taken out."""
    return {(re.sub(r"(?<![^/])micro_0/", "", op.name), op.type) for op in graph.get_operations()
            if op.name.startswith(f"{scope}gradients/")}


@pytest.mark.tf
@pytest.mark.xdist_group(ZOO_STEPS)
@pytest.mark.parametrize("model", ["word-rnn-tiny", "char-crn-tiny", "wrn-tiny", "trn-tiny", "e3d-tiny"])
def test_a_micro_batch_has_the_backward_ops_of_the_plain_step(model):
    """A plan search compares M = 1 with M > 1: the same backward ops per micro-batch (no gating
    ``tuple`` of Identity and NoOp ops in one and not the other), at the same micro-batch size.
    (The steps are read, not changed: built once for this worker's tests, tests.helpers.builds.)"""
    job = load_job(model)
    plain = built(job, 2, micro_batches=1)
    split = built(job, 4, micro_batches=2)
    ops = _gradient_ops(plain.graph, "")
    assert ops and ops == _gradient_ops(split.graph, "micro_0/")
    assert not [name for name, kind in ops if "/tuple/" in name or kind == "NoOp"]


@pytest.mark.tf
def test_gradients_are_gated_only_for_reference_variables():
    import tensorflow as tf

    from jobs.training import _gating

    with tf.Graph().as_default():
        resource = tf.compat.v1.Variable(1.0, use_resource=True)
        reference = tf.compat.v1.Variable(1.0, use_resource=False)
        assert _gating([resource]) == tf.compat.v1.train.Optimizer.GATE_NONE
        assert _gating([resource, reference]) == tf.compat.v1.train.Optimizer.GATE_OP


@pytest.mark.tf
@pytest.mark.slow
def test_a_micro_batched_keras_step_is_the_full_batch_step(tmp_path):
    folder = tmp_path / "keras_transformer"
    shutil.copytree(ROOT / "examples" / "keras_transformer", folder)
    job_file = folder / "job.toml"
    job_file.write_text(job_file.read_text().replace("inner = 64\n", "inner = 64\ndropout = 0.0\n"))
    whole, split = assert_same_steps(load_job(job_file), 2)
    assert set(whole.inputs) == set(split.inputs)  # the feed is the full batch's, split in the graph


@pytest.mark.tf
def test_micro_batches_that_do_not_divide_the_batch_are_one_line():
    from jobs import build

    with pytest.raises(JobError, match=r"micro_batches 3 does not divide the batch size 16") as error:
        build(load_job("word-rnn-tiny"), micro_batches=3)
    assert "\n" not in str(error.value)


@pytest.mark.tf
def test_a_step_entry_cannot_be_micro_batched(tmp_path):
    (tmp_path / "stepnet.py").write_text(
        "import tensorflow as tf\n"
        "def step(batch_size):\n"
        "    x = tf.compat.v1.placeholder(tf.float32, [batch_size, 3], name='x')\n"
        "    w = tf.compat.v1.get_variable('w', [3, 1])\n"
        "    return {'loss': tf.reduce_mean(tf.matmul(x, w)), 'inputs': {'x': x}}\n"
        "def data(iteration, batch_size, rank, ranks):\n"
        "    return {'x': [[0.0, 1.0, 2.0]] * batch_size}\n")
    job = tmp_path / "job.toml"
    job.write_text("[model]\nentry = 'stepnet:step'\n[data]\nentry = 'stepnet:data'\n"
                   "[train]\nbatch_size = 4\nmicro_batches = 2\n")
    from jobs import build

    with pytest.raises(JobError, match=r"returned a step .* cannot be split into micro_batches = 2"):
        build(load_job(job))


@pytest.mark.tf
def test_capture_writes_the_micro_batched_graph(tmp_path, capsys):
    from pardnn.cli import EXIT_BAD_INPUT, EXIT_OK, main
    from pardnn.io import read_graph

    out = tmp_path / "micro.json"
    assert main(["capture", "word-rnn-tiny", "-o", str(out), "--estimate", "v100", "--micro-batches", "4"]) == EXIT_OK
    names = set(read_graph(out).names)
    assert {f"micro_{m}/tokens" for m in range(4)} <= names and "tokens" not in names
    capsys.readouterr()
    assert main(["capture", "word-rnn-tiny", "-o", str(out), "--micro-batches", "3"]) == EXIT_BAD_INPUT
    [line] = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert "micro_batches 3 does not divide the batch size 16" in line
