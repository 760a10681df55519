"""Users' own models for the tests: job files naming ``usernet:build`` / ``usernet:batches``, the
module behind them, and the one-line error a mistake in them gives."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from jobs import JobError, load_job

JOB = """\
[model]
entry = "usernet:build"
[data]
entry = "usernet:batches"
[train]
batch_size = 4
"""


KERAS = """\
import numpy as np
import tensorflow as tf

def build(width=4):
    x = tf.keras.Input((3,), name="features")
    h = tf.keras.layers.Dense(width, activation="relu")(x)
    h = tf.keras.layers.BatchNormalization()(h)
    return tf.keras.Model(x, tf.keras.layers.Dense(2, activation="softmax")(h))

def batches(iteration, batch_size, rank, ranks):
    rng = np.random.default_rng([iteration, rank, ranks])
    return {"features": rng.normal(size=(batch_size, 3)), "labels": rng.integers(0, 2, batch_size)}
"""


def scatter(graph: object, devices: int = 4) -> object:
    """Every op of ``graph`` on one of ``devices`` logical CPU devices, round robin (a colocation group
    together): a step's ordering must hold across devices, as a placement spreads it. Returns the
    session config with those devices."""
    from pardnn.tf import apply, colocation_groups, device_names, session_config

    groups = colocation_groups(graph)
    labels = {label: index for index, label in enumerate(dict.fromkeys(groups.values()))}
    placement = {op.name: labels[groups[op.name]] % devices if op.name in groups else index % devices
                 for index, op in enumerate(graph.get_operations())}
    apply(graph, placement, device_names(devices))
    return session_config(devices)


def write(tmp_path: Path, job: str = JOB, module: str | None = KERAS, **replace: str) -> Path:
    """``tmp_path/job.toml`` (and ``usernet.py`` from ``module``, with ``old=new`` replacements)."""
    if module is not None:
        for old, new in replace.items():
            assert old in module, old
            module = module.replace(old, new)
        (tmp_path / "usernet.py").write_text(textwrap.dedent(module))
    path = tmp_path / "job.toml"
    path.write_text(job)
    return path


def one_line_error(path: Path, *parts: str) -> str:
    """The JobError of building ``path``'s job: one line, starting with the file, holding ``parts``."""
    from jobs import build

    with pytest.raises(JobError) as caught:
        build(load_job(path)).feed_fn(1)
    message = str(caught.value)
    assert "\n" not in message and message.startswith(path.as_posix() + ": "), message
    for part in parts:
        assert part in message, f"{part!r} not in {message!r}"
    return message


MODELS = """\
import numpy as np
import tensorflow as tf

class Net(tf.keras.Model):
    def __init__(self):
        super().__init__()
        self.hidden = tf.keras.layers.Dense(8, activation="relu", kernel_regularizer="l2")
        self.norm = tf.keras.layers.BatchNormalization()
        self.out = tf.keras.layers.Dense(3, activation="softmax")

    def call(self, x, training=None):
        return self.out(self.norm(self.hidden(x), training=training))

class Pair(Net):
    def call(self, inputs):
        return self.out(self.hidden(tf.concat([inputs["a"], inputs["b"]], -1)))

    def train_step(self, data):
        return {}

def build():
    return Net()

def pair():
    return Pair()

def compiled_net(losses):
    model = Net()
    model.compile(optimizer="sgd", loss=losses)
    return model

def unbuilt():
    return tf.keras.Sequential([tf.keras.layers.Dense(4, activation="relu"), tf.keras.layers.Dense(3)])

def heads(optimizer=None, weights=None, run_eagerly=False):
    x = tf.keras.Input((5,), name="features")
    h = tf.keras.layers.Dense(8, activation="relu")(x)
    model = tf.keras.Model(x, [tf.keras.layers.Dense(3, activation="softmax", name="cls")(h),
                               tf.keras.layers.Dense(1, name="reg")(h)])
    if optimizer is not None:
        optimizers = {"adam": lambda: tf.keras.optimizers.Adam(0.01, epsilon=1e-6),
                      "legacy_sgd": lambda: tf.keras.optimizers.legacy.SGD(0.05, momentum=0.5, nesterov=True),
                      "rmsprop": lambda: tf.keras.optimizers.RMSprop(),
                      "amsgrad": lambda: tf.keras.optimizers.Adam(amsgrad=True),
                      "schedule": lambda: tf.keras.optimizers.SGD(
                          tf.keras.optimizers.schedules.ExponentialDecay(0.1, 10, 0.9))}
        schedules = tf.keras.optimizers.schedules  # for an optimizer given as an expression
        made = optimizers[optimizer]() if optimizer in optimizers else eval(optimizer)
        model.compile(optimizer=made, run_eagerly=run_eagerly and tf.executing_eagerly(),
                      loss={"cls": "sparse_categorical_crossentropy", "reg": tf.keras.losses.MeanSquaredError()},
                      loss_weights=weights or {"cls": 1.0, "reg": 0.5})
    return model

def batches(iteration, batch_size, rank, ranks):
    rng = np.random.default_rng([iteration, rank, ranks])
    return rng.normal(size=(batch_size, 5)), rng.integers(0, 3, batch_size)

def mixed(optimizer="tf.keras.optimizers.legacy.Adam(0.01)", policy="mixed_float16", run_eagerly=False):
    # float16 layers, a float32 softmax (as Keras' guide has it); compiled: Keras wraps it for loss scaling
    tf.keras.mixed_precision.set_global_policy(policy)
    x = tf.keras.Input((5,), name="features")
    h = tf.keras.layers.Dense(8, activation="relu")(x)
    h = tf.keras.layers.Dense(3)(h)
    model = tf.keras.Model(x, tf.keras.layers.Activation("softmax", dtype="float32")(h))
    if optimizer is not None:
        model.compile(eval(optimizer), "sparse_categorical_crossentropy",
                      run_eagerly=run_eagerly and tf.executing_eagerly())
    return model

def overflowing(iteration, batch_size, rank, ranks):
    # rank 1's (or the only rank's) batch of iteration 2 overflows float16
    x, y = batches(iteration, batch_size, rank, ranks)
    if iteration in (2, 5) and rank == ranks - 1:
        x = x * 1e6
    return x.astype(np.float32), y

class Warmup(tf.keras.optimizers.schedules.LearningRateSchedule):
    # a user's own schedule: linear warmup to 0.05 over 3 steps, then 1/sqrt decay (no get_config)

    def __call__(self, step):
        step = tf.cast(step, tf.float32) + 1.0
        return 0.05 * tf.minimum(step / 3.0, tf.math.rsqrt(step / 3.0))

class PythonIf(tf.keras.optimizers.schedules.LearningRateSchedule):
    # a schedule that branches in Python on the step: it cannot run in a graph
    def __call__(self, step):
        return 0.1 if step < 10 else 0.01

class OwnUpdate(tf.keras.optimizers.SGD):
    def update_step(self, gradient, variable):
        variable.assign_sub(gradient * 0.5)

class Quieter(tf.keras.optimizers.Adam):
    # a subclass that only changes a default: Keras' update

    def __init__(self, learning_rate=0.02, **kwargs):
        super().__init__(learning_rate, **kwargs)

def pairs(iteration, batch_size, rank, ranks):
    rng = np.random.default_rng([iteration, rank, ranks])
    return {"a": rng.normal(size=(batch_size, 2)), "b": rng.normal(size=(batch_size, 3)),
            "labels": rng.integers(0, 3, batch_size)}

def two(iteration, batch_size, rank, ranks):
    rng = np.random.default_rng([iteration, rank, ranks])
    return (rng.normal(size=(batch_size, 5)).astype(np.float32),
            {"cls": rng.integers(0, 3, batch_size), "reg": rng.normal(size=(batch_size, 1)).astype(np.float32)})

def two_as_list(iteration, batch_size, rank, ranks):
    x, y = two(iteration, batch_size, rank, ranks)
    return x, [y["cls"], y["reg"]]
"""


# Every built-in Keras optimizer class, new and legacy, with settings and schedules (expressions
# evaluated in the MODELS module), and whether Keras' oracle runs eagerly step by step: Keras 2.15's
# Nadam keys a cache on a Python counter that its traced train_function fixes at trace time, twice.
K, L, S = "tf.keras.optimizers.", "tf.keras.optimizers.legacy.", "schedules."
OPTIMIZERS = [
    (K + "SGD(0.05, momentum=0.9, nesterov=True, clipnorm=0.5)", False),
    (K + "SGD(0.1, weight_decay=0.05, global_clipnorm=1.0)", False),
    (K + "Adam(0.02, amsgrad=True, clipvalue=0.05)", False),
    (K + "AdamW(" + S + "CosineDecay(0.0, 10, warmup_target=0.05, warmup_steps=3), weight_decay=0.02)", False),
    (K + "Adamax(0.02, use_ema=True, ema_momentum=0.9)", False),
    (K + "Nadam(0.01)", True),
    (K + "RMSprop(0.01, momentum=0.3, centered=True)", False),
    (K + "Adagrad(" + S + "ExponentialDecay(0.1, 2, 0.5))", False),
    (K + "Adadelta(1.0, rho=0.9)", False),
    (K + "Ftrl(0.1, l1_regularization_strength=0.01, l2_regularization_strength=0.01)", False),
    (K + "Lion(0.005, beta_1=0.8)", False),
    (L + "SGD(" + S + "PiecewiseConstantDecay([2], [0.1, 0.01]), momentum=0.5)", False),
    (L + "Adam(0.05, amsgrad=True, decay=0.01)", False),
    (L + "Adamax(0.02)", False),
    (L + "Nadam(0.01)", False),
    (L + "RMSprop(" + S + "CosineDecayRestarts(0.02, 2), momentum=0.5, centered=True)", False),
    (L + "Adagrad(0.1)", False),
    (L + "Adadelta(1.0)", False),
    (L + "Ftrl(0.1, l2_shrinkage_regularization_strength=0.01)", False),
    ("Quieter(epsilon=1e-4)", False),  # a user's subclass that keeps Keras' update
]
