"""Keras optimizers and schedules train as Keras trains them.

The oracle is Keras' own ``train_on_batch`` (eager, outside any graph) of the same compiled model from
the same initial weights: after 5 steps every weight equals pardnn's graph's (rtol 1e-5), for every
built-in class, new and legacy, with their settings, its ops spread over 4 logical devices, and the
rate each step applied equals the schedule's value at that step. (One device: the schedule and job
file tests here; every class on 2 ranks with both allreduce backends: tests/mpi/test_recipes.py.)"""

from __future__ import annotations

import logging

import numpy as np
import pytest

from jobs import load_job
from tests.helpers.usermodels import JOB, KERAS, MODELS, OPTIMIZERS, K, S, one_line_error, scatter, write

tf = pytest.importorskip("tensorflow")
pytestmark = [pytest.mark.tf, pytest.mark.filterwarnings("ignore:non-integer arguments to randrange")]

HEADS = JOB.replace(":build", ":heads").replace(":batches", ":two")
STEPS = 5


def _train(tmp_path, optimizer, train_text="", devices=1):
    """pardnn's graph (its ops spread over ``devices`` logical devices): the initial trainable weights,
    the weights after STEPS steps, the rates applied."""
    from jobs import build

    text = HEADS + train_text + f"[model.args]\noptimizer = {optimizer!r}\n"
    train = build(load_job(write(tmp_path, text, MODELS)))
    trainable = [v for v in train.variables if v.trainable][:6]  # the model's (Nadam makes a trainable one)
    config = scatter(train.graph, devices) if devices > 1 else None
    with tf.compat.v1.Session(graph=train.graph, config=config) as session:
        session.run(train.init_op)
        start = session.run(trainable)
        rates = [session.run([*train.fetches, train.learning_rate], train.feed_fn(i))[-1] for i in range(STEPS)]
        return train, start, session.run(trainable), rates


def _keras(start, optimizer, run_eagerly=False):
    """Keras' own training of the same model from ``start``: its weights after STEPS steps."""
    import usernet  # the job's module, imported by jobs.build from tmp_path

    keras = usernet.heads(optimizer, run_eagerly=run_eagerly)
    keras.set_weights(start)
    for step in range(STEPS):
        keras.train_on_batch(*usernet.two(step, 4, 0, 1))
    return keras.get_weights(), keras.optimizer


@pytest.mark.parametrize(("optimizer", "run_eagerly"), OPTIMIZERS, ids=[o.split("(")[0] for o, _ in OPTIMIZERS])
def test_every_keras_optimizer_trains_as_keras_trains_it_on_4_devices(tmp_path, optimizer, run_eagerly):
    train, start, ours, rates = _train(tmp_path, optimizer, devices=4)
    theirs, keras = _keras(start, optimizer, run_eagerly)
    assert len(ours) == len(theirs) == 6  # three Dense layers
    for mine, their in zip(ours, theirs, strict=True):
        np.testing.assert_allclose(mine, their, rtol=1e-5, atol=1e-7)
    assert not any(np.array_equal(a, b) for a, b in zip(start, ours, strict=True))  # it trained
    # the rate each step applied: the schedule (or the legacy decay) at that step, as Keras computes it
    rate = keras._hyper["learning_rate"] if hasattr(keras, "_hyper") else keras._learning_rate
    if isinstance(rate, tf.keras.optimizers.schedules.LearningRateSchedule):
        expected = [float(rate(step)) for step in range(STEPS)]
    else:
        decay = getattr(keras, "decay", 0.0) if hasattr(keras, "_hyper") else 0.0
        expected = [float(tf.keras.backend.get_value(rate)) / (1 + decay * step) for step in range(STEPS)]
    np.testing.assert_allclose(rates, expected, rtol=1e-6)
    assert train.recipe.sources["optimizer"] == "model.compile"


def test_a_users_own_schedule_is_evaluated_on_the_step(tmp_path):
    """A LearningRateSchedule subclass whose __call__ is TensorFlow ops (and has no get_config)."""
    optimizer = K + "Adam(Warmup())"
    train, start, ours, rates = _train(tmp_path, optimizer)
    theirs, _ = _keras(start, optimizer)
    for mine, their in zip(ours, theirs, strict=True):
        np.testing.assert_allclose(mine, their, rtol=1e-5, atol=1e-7)
    steps = np.arange(STEPS) + 1.0
    np.testing.assert_allclose(rates, 0.05 * np.minimum(steps / 3, 1 / np.sqrt(steps / 3)), rtol=1e-6)
    assert train.recipe.schedule == "Warmup"


def test_the_job_file_names_a_keras_optimizer_and_a_warmup_cosine_schedule(tmp_path, caplog):
    """[train] optimizer = 'adamw', weight_decay, schedule = 'cosine' with warmup on an uncompiled model
    equals Keras' AdamW on the CosineDecay it describes."""
    from jobs import build

    text = JOB + ("optimizer = 'adamw'\nlearning_rate = 0.05\nweight_decay = 0.1\nschedule = 'cosine'\n"
                  "warmup_steps = 2\ndecay_steps = 8\nmin_learning_rate = 0.005\n"
                  "loss = 'sparse_categorical_crossentropy'\n")
    with caplog.at_level(logging.INFO, logger="jobs"):
        train = build(load_job(write(tmp_path, text, KERAS)))
    assert (train.recipe.optimizer, train.recipe.schedule) == ("adamw", "CosineDecay")
    assert ("optimizer adamw (job file); learning_rate CosineDecay(initial_learning_rate=0, decay_steps=8, "
            "alpha=0.1, warmup_target=0.05, warmup_steps=2) (job file); weight_decay 0.1") in caplog.text
    trainable = [v for v in train.variables if v.trainable]
    with tf.compat.v1.Session(graph=train.graph) as session:
        session.run(train.init_op)
        start = session.run(trainable)
        for step in range(STEPS):
            session.run(train.fetches, train.feed_fn(step))
        ours = session.run(trainable)
    import usernet

    keras = usernet.build()
    schedule = tf.keras.optimizers.schedules.CosineDecay(0.0, 8, alpha=0.1, warmup_target=0.05, warmup_steps=2)
    keras.compile(tf.keras.optimizers.AdamW(schedule, weight_decay=0.1), "sparse_categorical_crossentropy")
    for variable, value in zip(keras.trainable_weights, start, strict=True):
        variable.assign(value)
    for step in range(STEPS):
        batch = usernet.batches(step, 4, 0, 1)
        keras.train_on_batch(batch["features"].astype(np.float32), batch["labels"])
    for mine, their in zip(ours, keras.trainable_weights, strict=True):
        np.testing.assert_allclose(mine, their.numpy(), rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize(("train_text", "expected"), [
    ("optimizer = 'adam'\n", ("adam", "constant", False)),  # pardnn's fused Adam, as before
    ("optimizer = 'momentum'\nschedule = 'step'\ndecay_steps = 100\ndecay_rate = 0.2\n",
     ("momentum", "ExponentialDecay", True)),
    ("optimizer = 'adam'\nweight_decay = 0.01\n", ("adam", "constant", True)),  # Keras' AdamW
    ("optimizer = 'rmsprop'\nschedule = 'polynomial'\n", ("rmsprop", "PolynomialDecay", True)),
])
def test_the_job_files_names_make_the_optimizer_they_say(tmp_path, train_text, expected):
    from jobs.recipe import recipe

    made = recipe(load_job(write(tmp_path, JOB + train_text, None)))
    assert (made.optimizer, made.schedule, made.keras is not None) == expected
    if made.keras is not None:
        with tf.Graph().as_default():
            optimizer = made.make_optimizer()
        assert type(optimizer).__name__ == {"momentum": "SGD", "adam": "AdamW", "rmsprop": "RMSprop"}[expected[0]]


@pytest.mark.parametrize("schedule", ["exponential", "constant"])
def test_warmup_without_cosine_fails_in_one_line(tmp_path, schedule):
    one_line_error(write(tmp_path, JOB + f"schedule = '{schedule}'\nwarmup_steps = 10\n", KERAS),
                   f"train.warmup_steps = 10 with train.schedule = '{schedule}': expected schedule = 'cosine'")


def test_a_schedule_for_a_compiled_optimizer_fails_in_one_line_instead_of_being_ignored(tmp_path):
    one_line_error(write(tmp_path, HEADS + "schedule = 'cosine'\n[model.args]\noptimizer = 'adam'\n", MODELS),
                   "train.schedule is a setting of the job file's optimizer, but the model is compiled with its own "
                   "(Adam); set [train] optimizer too")


def test_an_optimizer_with_its_own_update_fails_in_one_line(tmp_path):
    one_line_error(write(tmp_path, HEADS + "[model.args]\noptimizer = 'OwnUpdate()'\n", MODELS),
                   "model.entry = 'usernet:heads': the model is compiled with usernet.OwnUpdate, whose own "
                   "update_step pardnn does not run as Keras would", "or set [train] optimizer in the job file")


def test_slots_count_in_the_cost_graph_with_their_variable(tmp_path):
    """AdamW's two slots per weight are variables of the step: ParDNN's cost graph holds them (twice the
    weights' bytes) in the colocation group of their weight, so they are placed on its device."""
    from jobs import build
    from jobs.costing import cost_graph

    text = HEADS + f"[model.args]\noptimizer = {K + 'AdamW(0.01)'!r}\n"
    train = build(load_job(write(tmp_path, text, MODELS)))
    graph = cost_graph(train, "estimate", device_preset="v100-32gb")
    index = {name: i for i, name in enumerate(graph.names)}
    weights = [v.handle.op.name for v in train.variables if v.trainable][:6]
    slots = {name: [f"{kind}/{name}" for kind in ("m", "v")] for name in weights}
    assert all(slot in index for pair in slots.values() for slot in pair), sorted(graph.names)[:20]
    weight_bytes = sum(int(graph.out_bytes[index[name]]) for name in weights)
    slot_bytes = sum(int(graph.out_bytes[index[slot]]) for pair in slots.values() for slot in pair)
    assert weight_bytes > 0 and slot_bytes == 2 * weight_bytes
    for name, pair in slots.items():
        assert {int(graph.colocation[index[slot]]) for slot in pair} == {int(graph.colocation[index[name]])} != {-1}


def test_a_schedule_that_cannot_run_in_a_graph_fails_in_one_line(tmp_path):
    """A schedule branching in Python on the step: the new optimizers evaluate it in compile, the legacy
    ones in the update; either way one line says what to do."""
    for optimizer, part in (("SGD", "raised OperatorNotAllowedInGraphError: "),
                            ("legacy.SGD", "the optimizer SGD (learning_rate PythonIf) could not build its update "
                                           "in the step's graph: OperatorNotAllowedInGraphError")):
        text = HEADS + f"[model.args]\noptimizer = 'tf.keras.optimizers.{optimizer}(PythonIf())'\n"
        one_line_error(write(tmp_path, text, MODELS), part, "TensorFlow ops (tf.where")


def test_micro_batches_apply_one_keras_update_of_the_mean_gradient(tmp_path):
    """M = 2 micro-batches: the Keras optimizer applies the mean of their gradients once, so the weights
    equal Keras' own steps on the whole batch (AdamW on a warmup cosine schedule)."""
    optimizer = K + "AdamW(" + S + "CosineDecay(0.0, 10, warmup_target=0.05, warmup_steps=3), weight_decay=0.02)"
    train, start, ours, _ = _train(tmp_path, optimizer, "micro_batches = 2\n")
    assert train.recipe.optimizer == "AdamW"
    theirs, _ = _keras(start, optimizer)
    for mine, their in zip(ours, theirs, strict=True):
        np.testing.assert_allclose(mine, their, rtol=1e-5, atol=1e-6)
