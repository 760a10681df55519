"""Keras models as people write them, from a job's ``[model] entry``: subclassed and unbuilt models,
several outputs (a loss table, weights, labels as a list or a dict) and compiled models (their loss,
weights and optimizer used unless the job file sets its own, and the log saying which came from where).

The oracles: a compiled model's first loss and its weights after a step equal Keras' own
``train_on_batch`` from the same weights; a weighted total equals the sum of the one-output runs."""

from __future__ import annotations

import logging
import textwrap

import numpy as np
import pytest

from jobs import load_job
from tests.helpers.usermodels import JOB, MODELS, one_line_error, write

tf = pytest.importorskip("tensorflow")
pytestmark = [pytest.mark.tf, pytest.mark.filterwarnings("ignore:non-integer arguments to randrange")]


HEADS = JOB.replace(":build", ":heads").replace(":batches", ":two")
LOSSES = "loss = { cls = 'sparse_categorical_crossentropy', reg = 'mse' }\n"


def job_file(tmp_path, model="build", data="batches", train="", args=""):
    text = JOB.replace(":build", f":{model}").replace(":batches", f":{data}") + train
    return load_job(write(tmp_path, text + (f"[model.args]\n{args}" if args else ""), MODELS))


def run(train, steps=1, fetch=None):
    """Losses of ``steps`` steps from the initial weights, and ``fetch`` (e.g. variables) after them."""
    with tf.compat.v1.Session(graph=train.graph) as session:
        session.run(train.init_op)
        losses = [session.run(train.fetches, train.feed_fn(i))[1] for i in range(steps)]
        return np.array(losses), session.run(fetch) if fetch is not None else None


# ------------------------------------------------------------------------------ subclassed, unbuilt
def test_a_subclassed_model_is_built_on_placeholders_like_batch_0(tmp_path):
    from jobs import build

    train = build(job_file(tmp_path))
    assert {k: v.shape.as_list() for k, v in train.inputs.items()} == {"input_1": [4, 5], "labels": [4]}
    assert train.inputs["input_1"].dtype == tf.float32  # float64 data, float32 placeholder
    names = {v.name for v in train.variables}
    assert {"net/dense/kernel:0", "net/batch_normalization/moving_mean:0"} <= names
    assert train.parameters == 5 * 8 + 8 + 2 * 8 + 8 * 3 + 3
    # model.losses (the l2 regulariser) and the two moving averages, as for a functional model
    assert train.graph.get_operation_by_name("loss/with_regularization")
    assert sum(op.type == "AssignSubVariableOp" for op in train.train_op.control_inputs) == 2
    losses, _ = run(train, 3)
    assert np.isfinite(losses).all() and losses[-1] < losses[0]
    again = build(job_file(tmp_path), gradient_hook=lambda grads_and_vars: grads_and_vars)
    assert sorted(op.name for op in again.graph.get_operations()) == sorted(
        op.name for op in train.graph.get_operations())


def test_dict_inputs_and_an_unbuilt_sequential(tmp_path, caplog):
    from jobs import build

    with caplog.at_level(logging.WARNING, logger="jobs"):
        pair = build(job_file(tmp_path, "pair", "pairs"))
    assert sorted(pair.inputs) == ["a", "b", "labels"] and pair.recipe.ignored == ("Pair.train_step",)
    assert "model.entry = 'usernet:pair': Pair.train_step is not run" in caplog.text
    assert np.isfinite(run(pair, 2)[0]).all()
    unbuilt = build(job_file(tmp_path, "unbuilt"))
    assert sorted(unbuilt.inputs) == ["input_1", "labels"] and unbuilt.parameters == 5 * 4 + 4 + 4 * 3 + 3


# ------------------------------------------------------------------------------------ several outputs
def test_two_outputs_take_a_loss_table_weights_and_labels_as_a_dict_or_a_list(tmp_path):
    from jobs import build

    def first_loss(weights, data="two"):
        job = job_file(tmp_path, "heads", data, LOSSES + (f"loss_weights = {weights}\n" if weights else ""))
        with tf.compat.v1.Session(graph=(train := build(job)).graph) as session:
            session.run(train.init_op)
            return session.run(train.loss, train.feed_fn(0)), train

    total, train = first_loss("{ cls = 1.0, reg = 0.5 }")
    assert {k: v.shape.as_list() for k, v in train.inputs.items()} == {
        "features": [4, 5], "labels/cls": [4], "labels/reg": [4, 1]}
    assert train.recipe.sources["loss"] == train.recipe.sources["loss_weights"] == "job file"
    cls, reg = first_loss("{ cls = 1.0, reg = 0.0 }")[0], first_loss("{ cls = 0.0, reg = 1.0 }")[0]
    assert total == pytest.approx(cls + 0.5 * reg, rel=1e-6) and cls > 0 and reg > 0
    assert first_loss(None)[0] == pytest.approx(cls + reg, rel=1e-6)  # a missing weight is 1
    assert first_loss("{ cls = 1.0, reg = 0.5 }", "two_as_list")[0] == total


BAD_OUTPUTS = [
    (HEADS + "loss = { cls = 'mse', value = 'mse' }\n",
     ("train.loss = {cls: 'mse', value: 'mse'}: the model has no output 'value'; expected keys among its outputs "
      "'cls', 'reg'",)),
    (HEADS + "loss = { cls = 'mse' }\n", ("train.loss = {cls: 'mse'}: no loss for the output 'reg'; expected one for "
                                         "each of the outputs 'cls', 'reg'",)),
    (HEADS + LOSSES + "loss_weights = { cls = 1.0, size = 2.0 }\n", ("train.loss_weights = {cls: 1, size: 2}: the "
                                                                   "model has no output 'size'",)),
    (HEADS.replace(":two", ":batches") + LOSSES, ("model.entry = 'usernet:heads': the model has 2 outputs ('cls', "
                                                  "'reg') but data.entry = 'usernet:batches' gives one labels array",
                                                  "expected labels as a list of arrays in output order or a dict")),
    (HEADS + "loss = { cls = 'mse', reg = 'mse' }\n",
     ("train.loss = {'cls': 'mse', 'reg': 'mse'}, for the output 'cls' (mse), of labels () int64 (per sample) and the "
      "model's output [3] raised",
      "expected a loss and labels that fit the output")),
]


@pytest.mark.parametrize(("text", "parts"), BAD_OUTPUTS)
def test_a_mistake_about_an_output_fails_in_one_line_naming_it(tmp_path, text, parts):
    one_line_error(write(tmp_path, text, MODELS), *parts)


def test_labels_that_miss_an_output_fail_in_one_line(tmp_path):
    module = MODELS + textwrap.dedent("""
        def wrong(iteration, batch_size, rank, ranks):
            x, y = two(iteration, batch_size, rank, ranks)
            return x, {"cls": y["cls"], "size": y["reg"]}
    """)
    one_line_error(write(tmp_path, HEADS.replace(":two", ":wrong") + LOSSES, module),
                   "data.entry = 'usernet:wrong': batch 0 (fn(0, 4, ...)) has labels for 'size', not an output; "
                   "expected labels for the outputs 'cls', 'reg'")


# ------------------------------------------------------------------------------------------- compiled
def test_a_compiled_model_trains_as_keras_trains_it(tmp_path, caplog):
    """The job file names the entries only: loss, weights and Adam (lr 0.01, epsilon 1e-6) come from
    ``compile``. Keras' own ``train_on_batch`` (eager), from the same initial weights, gives the same
    first loss and the same weights after the step."""
    from jobs import build

    with caplog.at_level(logging.INFO, logger="jobs"):
        train = build(job_file(tmp_path, "heads", "two", args="optimizer = 'adam'\n"))
    recipe = train.recipe
    assert (recipe.optimizer, recipe.learning_rate, recipe.options["epsilon"]) == ("Adam", 0.01, 1e-6)
    assert {key: recipe.sources[key] for key in ("loss", "loss_weights", "optimizer", "learning_rate", "grad_clip")} \
        == {"loss": "model.compile", "loss_weights": "model.compile", "optimizer": "model.compile",
            "learning_rate": "model.compile", "grad_clip": "default"}
    assert ("trains with loss {cls: 'sparse_categorical_crossentropy', reg: MeanSquaredError} (model.compile); "
            "loss_weights {cls: 1, reg: 0.5} (model.compile); optimizer Adam (model.compile); learning_rate 0.01 "
            "(model.compile); beta_1 0.9; beta_2 0.999; epsilon 1e-06") in caplog.text
    trainable = [v for v in train.variables if v.trainable]
    with tf.compat.v1.Session(graph=train.graph) as session:
        session.run(train.init_op)
        start = session.run(trainable)
        _, loss = session.run(train.fetches, train.feed_fn(0))
        after = session.run(trainable)

    import usernet  # the job's module, imported by jobs.build from tmp_path

    keras = usernet.heads("adam")  # eager, outside any graph: Keras' own training
    keras.set_weights(start)
    x, y = usernet.two(0, 4, 0, 1)
    total, cls, reg = keras.train_on_batch(x, y)  # the total, then each output's loss
    assert total == pytest.approx(loss, rel=1e-6) and total == pytest.approx(cls + 0.5 * reg, rel=1e-6)
    for ours, theirs in zip(after, keras.get_weights(), strict=True):
        np.testing.assert_allclose(ours, theirs, rtol=1e-5, atol=1e-6)


def test_the_job_file_overrides_what_the_model_was_compiled_with(tmp_path):
    from jobs import build

    sgd = build(job_file(tmp_path, "heads", "two", "learning_rate = 0.2\n", "optimizer = 'legacy_sgd'\n")).recipe
    assert (sgd.optimizer, sgd.learning_rate, sgd.options["momentum"], sgd.options["nesterov"]) == ("SGD", 0.2, 0.5,
                                                                                                   True)
    assert (sgd.sources["learning_rate"], sgd.sources["optimizer"]) == ("job file", "model.compile")
    # The job file's optimizer drops the compiled one whole.
    own = build(job_file(tmp_path, "heads", "two", "optimizer = 'momentum'\nloss_weights = { reg = 2.0 }\n",
                         "optimizer = 'rmsprop'\n")).recipe
    assert (own.optimizer, own.learning_rate, own.momentum, own.options, own.keras) == ("momentum", 1e-3, 0.9, {},
                                                                                        None)
    assert (own.sources["optimizer"], own.sources["learning_rate"], own.sources["loss"], own.sources["loss_weights"]) \
        == ("job file", "default", "model.compile", "job file")
    assert own.loss_weights == {"reg": 2.0}
    # The job file's rate replaces a compiled schedule.
    fixed = build(job_file(tmp_path, "heads", "two", "learning_rate = 0.1\n", "optimizer = 'schedule'\n")).recipe
    assert (fixed.optimizer, fixed.learning_rate, fixed.schedule) == ("SGD", 0.1, "constant")


def test_a_compiled_weight_list_is_matched_in_output_order(tmp_path):
    from jobs import build

    train = build(job_file(tmp_path, "heads", "two", args="optimizer = 'adam'\nweights = [1.0, 0.0]\n"))
    alone = build(job_file(tmp_path, "heads", "two", "loss_weights = { cls = 1.0, reg = 0.0 }\n",
                           "optimizer = 'adam'\n"))
    assert run(train)[0] == run(alone)[0]
    # Keras checks a functional model's lists in compile; a subclassed model's outputs are known later.
    text = JOB.replace(":build", ":compiled_net") + "[model.args]\nlosses = ['mse', 'mse']\n"
    one_line_error(write(tmp_path, text, MODELS), "model.entry = 'usernet:compiled_net': model.compile(loss=['mse', "
                   "'mse']): 2 values for the model's 1 outputs 'output_1'; expected one per output, in that order")
