"""Keras 3 models (``import keras`` on the latest stack) train as Keras 3 trains them.

The oracle is Keras 3's own eager ``train_on_batch`` of the same model from the same initial values (the
weights, batch norm's statistics and dropout's seed state): every step's loss and every variable after
the last step equal pardnn's graph's (rtol 1e-5), on one device and with the ops spread over 4 logical
devices. Functional, Sequential (built by its first call) and subclassed models; compiled optimizers on
schedules, and the job file's. Skipped on the pinned stack, whose ``keras`` is Keras 2.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from jobs import load_job
from tests.helpers.usermodels import one_line_error, scatter, write

tf = pytest.importorskip("tensorflow")
pytest.importorskip("keras", minversion="3")
pytestmark = [pytest.mark.tf, pytest.mark.filterwarnings("ignore::DeprecationWarning")]

STEPS, BATCH = 6, 8
MODULE = """\
import numpy as np
import keras
from keras import ops

S = keras.optimizers.schedules


def functional():
    x = keras.Input((6,), name="features")
    h = keras.layers.Dense(16, activation="relu", kernel_regularizer=keras.regularizers.l2(1e-3))(x)
    h = keras.layers.BatchNormalization()(h)
    h = keras.layers.Dropout(0.25)(h)
    model = keras.Model(x, keras.layers.Dense(3, activation="softmax")(h))
    rate = S.CosineDecay(0.0, 20, warmup_target=0.01, warmup_steps=3)
    model.compile(keras.optimizers.AdamW(rate, weight_decay=0.01), "sparse_categorical_crossentropy",
                  metrics=["accuracy"], jit_compile=False)
    return model


def sequential():  # built by its first call
    model = keras.Sequential([keras.layers.Dense(8, activation="tanh"), keras.layers.LayerNormalization(),
                              keras.layers.Dense(3, activation="softmax")])
    model.compile(keras.optimizers.SGD(S.ExponentialDecay(0.1, 4, 0.5), momentum=0.9, nesterov=True),
                  "sparse_categorical_crossentropy", jit_compile=False)
    return model


class Net(keras.Model):
    def __init__(self):
        super().__init__()
        self.hidden = keras.layers.Dense(12)
        self.drop = keras.layers.Dropout(0.5)
        self.head = keras.layers.Dense(3)

    def call(self, x, training=False):
        h = self.drop(ops.relu(self.hidden(x)), training=training)
        return ops.softmax(self.head(h))


def subclassed():
    model = Net()
    model.compile(keras.optimizers.Adam(0.01, clipnorm=0.5), keras.losses.SparseCategoricalCrossentropy(),
                  jit_compile=False)
    return model


class Quieter(keras.optimizers.Adam):  # a user's subclass that keeps Keras' update
    pass


def tuned(optimizer):  # compiled with the optimizer [model.args] names
    model = plain()
    model.compile(eval(optimizer), "sparse_categorical_crossentropy", jit_compile=False)
    return model


def plain():  # not compiled: the job file's loss and optimizer
    x = keras.Input((6,), name="features")
    return keras.Model(x, keras.layers.Dense(3, activation="softmax")(keras.layers.Dense(8, activation="relu")(x)))


def application(name="MobileNetV2", **kwargs):  # keras.applications in their Keras 3 form, float64 (see the test)
    keras.config.set_floatx("float64")
    try:
        base = getattr(keras.applications, name)(weights=None, include_top=False, pooling="avg",
                                                 input_shape=(64, 64, 3), **kwargs)
        model = keras.Model(base.input, keras.layers.Dense(3, activation="softmax")(base.output))
    finally:
        keras.config.set_floatx("float32")
    model.compile(keras.optimizers.SGD(0.001, momentum=0.9), "sparse_categorical_crossentropy", jit_compile=False)
    return model


def mixed():  # float16 layers, a float32 softmax; compiled under the policy: Keras 3 wraps it for loss scaling
    keras.config.set_dtype_policy("mixed_float16")
    x = keras.Input((6,), name="features")
    h = keras.layers.Dense(8, activation="relu")(keras.layers.Dense(8, activation="relu")(x))
    model = keras.Model(x, keras.layers.Activation("softmax", dtype="float32")(keras.layers.Dense(3)(h)))
    model.compile(keras.optimizers.Adam(0.01), "sparse_categorical_crossentropy", jit_compile=False)
    return model


def dropped():  # dropout in every micro-batch
    x = keras.Input((6,), name="features")
    h = keras.layers.Dropout(0.5)(keras.layers.Dense(16, activation="relu")(x))
    model = keras.Model(x, keras.layers.Dense(3, activation="softmax")(h))
    model.compile(keras.optimizers.SGD(0.1), "sparse_categorical_crossentropy", jit_compile=False)
    return model


def named():  # inputs by name (a dict), two outputs with their own losses and weights
    a, b = keras.Input((3,), name="a"), keras.Input((2,), name="b")
    h = keras.layers.Dense(8, activation="tanh")(keras.layers.Concatenate()([a, b]))
    score = keras.layers.Dense(1, name="score")(h)
    kind = keras.layers.Dense(3, activation="softmax", name="kind")(h)
    model = keras.Model({"a": a, "b": b}, {"score": score, "kind": kind})
    model.compile(keras.optimizers.Adam(0.02), loss={"score": "mse", "kind": "sparse_categorical_crossentropy"},
                  loss_weights={"score": 0.5, "kind": 2.0}, jit_compile=False)
    return model


def batches(iteration, batch_size, rank, ranks):
    r = np.random.default_rng([iteration, rank, ranks])
    return r.normal(size=(batch_size, 6)).astype(np.float32), r.integers(0, 3, batch_size)


def pairs(iteration, batch_size, rank, ranks):
    x, y = batches(iteration, batch_size, rank, ranks)
    return {"a": x[:, :3], "b": x[:, 3:5]}, {"score": x[:, 5:], "kind": y}


def overflowing(iteration, batch_size, rank, ranks):  # the last rank's batches 2 and 5 overflow float16
    x, y = batches(iteration, batch_size, rank, ranks)
    return (x * 1e6 if iteration in (2, 5) and rank == ranks - 1 else x), y


def images(iteration, batch_size, rank, ranks):
    r = np.random.default_rng([iteration, rank, ranks])
    return r.random((batch_size, 64, 64, 3)), r.integers(0, 3, batch_size)
"""


def _job(entry: str, train: str = "", extra: str = "", data: str = "batches") -> str:
    return (f'[model]\nentry = "usernet:{entry}"\n[data]\nentry = "usernet:{data}"\n'
            f"[train]\nbatch_size = {BATCH}\n{train}{extra}")


def _ours(tmp_path, entry, train="", devices=1, extra="", data="batches", placed=False, steps=STEPS):
    """pardnn's graph of the job: its build, the values of every variable before and after STEPS steps
    (by graph name), and the losses. ``devices`` > 1: its ops spread round robin, or (``placed``) placed by
    ParDNN from the estimated costs."""
    from jobs import build, cost_graph
    from pardnn import partition
    from pardnn.costs.machine import Machine
    from pardnn.tf import apply, device_names, session_config

    graph = build(load_job(write(tmp_path, _job(entry, train, extra, data), MODULE)))
    config = scatter(graph.graph, devices) if devices > 1 and not placed else None
    if placed:
        cost = cost_graph(graph, "estimate")
        placement = partition(cost, Machine(devices, latency=0)).placement
        assert len(set(placement.tolist())) > 1
        apply(graph.graph, placement, device_names(devices), names=cost.names)
        config = session_config(devices, optimize=False)  # Keras' kernels, not Grappler's fusions of them
    with tf.compat.v1.Session(graph=graph.graph, config=config) as session:
        session.run(graph.init_op)
        start = dict(zip((v.name for v in graph.variables), session.run(graph.variables)))
        losses = [session.run(graph.fetches, graph.feed_fn(i))[1] for i in range(steps)]
        after = dict(zip((v.name for v in graph.variables), session.run(graph.variables)))
    return graph, start, after, losses


def _keras(graph, entry, start, compile_as=None, data="batches", eagerly=False, steps=STEPS, args=(), kwargs=None):
    """Keras 3's own training of the same model from ``start``: the losses, and each of its variables
    with the graph name it has in ``graph``."""
    import keras
    import usernet  # the job's module, imported by jobs.build from tmp_path

    model = getattr(usernet, entry)(*args, **(kwargs or {}))
    if compile_as is not None:
        model.compile(*compile_as, jit_compile=False)
    model.run_eagerly = eagerly  # op by op, as the graph runs without Grappler's fusions
    if not model.built:
        model(np.zeros((1, 6), np.float32))  # a Sequential or subclassed model makes its weights
    names = dict(zip((id(w) for w in model.weights), graph.model["weights"]))
    seeds = [name for name in start if "seed_generator_state" in name]  # in the order the graph made them
    named = [(v, names.get(id(v)) or seeds.pop(0)) for v in model.variables]
    assert not seeds
    for variable, name in named:
        variable.assign(start[name])
    losses = []
    for step in range(steps):
        out = model.train_on_batch(*getattr(usernet, data)(step, BATCH, 0, 1))
        losses.append(float(out[0] if isinstance(out, (list, tuple)) else out))
    assert isinstance(model, keras.Model)
    return losses, named, model


def _check(ours, theirs, after, named):
    np.testing.assert_allclose(ours, theirs, rtol=1e-5)
    for variable, name in named:
        np.testing.assert_allclose(after[name], variable.numpy(), rtol=1e-5, atol=1e-6, err_msg=name)


@pytest.mark.parametrize("devices", [1, 4])
def test_a_functional_model_with_batch_norm_and_dropout_trains_as_keras_3(tmp_path, devices):
    """AdamW on a warmup cosine schedule, L2 regularization, batch norm's statistics and dropout's seed:
    the same losses and variables as Keras 3's own steps, the ops on one device or spread over four."""
    graph, start, after, ours = _ours(tmp_path, "functional", devices=devices)
    assert graph.recipe.optimizer == "AdamW" and graph.recipe.keras3
    theirs, named, _ = _keras(graph, "functional", start)
    assert any("moving_mean" in name for _, name in named) and any("seed" in name for _, name in named)
    assert not np.allclose(start[named[4][1]], after[named[4][1]])  # the moving mean moved
    _check(ours, theirs, after, named)


@pytest.mark.parametrize("entry", ["sequential", "subclassed"])
def test_sequential_and_subclassed_models_train_as_keras_3(tmp_path, entry):
    graph, start, after, ours = _ours(tmp_path, entry)
    theirs, named, _ = _keras(graph, entry, start)
    _check(ours, theirs, after, named)


K3, S3 = "keras.optimizers.", "keras.optimizers.schedules."
OPTIMIZERS = [
    K3 + "SGD(0.05, momentum=0.9, nesterov=True, clipnorm=0.5)",
    K3 + "SGD(0.1, weight_decay=0.05, global_clipnorm=1.0)",
    K3 + "Adam(0.02, amsgrad=True, clipvalue=0.05)",
    K3 + "AdamW(" + S3 + "CosineDecay(0.0, 10, warmup_target=0.05, warmup_steps=3), weight_decay=0.02)",
    K3 + "Adamax(0.02, use_ema=True, ema_momentum=0.9)",
    K3 + "Nadam(0.01)",
    K3 + "RMSprop(0.01, momentum=0.3, centered=True)",
    K3 + "Adagrad(" + S3 + "ExponentialDecay(0.1, 2, 0.5))",
    K3 + "Adadelta(1.0, rho=0.9)",
    K3 + "Ftrl(0.1, l1_regularization_strength=0.01, l2_regularization_strength=0.01)",
    K3 + "Lion(0.005, beta_1=0.8)",
    K3 + "Adafactor(0.05)",
    K3 + "Lamb(0.01)",
    K3 + "SGD(" + S3 + "PiecewiseConstantDecay([2], [0.1, 0.01]), momentum=0.5)",
    "Quieter(0.01, epsilon=1e-4)",
]


@pytest.mark.parametrize("optimizer", OPTIMIZERS, ids=[o.removeprefix(K3).split("(")[0] for o in OPTIMIZERS])
def test_every_keras_3_optimizer_trains_as_keras_3_trains_it(tmp_path, optimizer):
    """Each Keras 3 optimizer class with its settings (clipping, weight decay, EMA, schedules, a user's subclass):
    the same losses and variables as Keras 3's own steps."""
    graph, start, after, ours = _ours(tmp_path, "tuned", extra=f"[model.args]\noptimizer = {optimizer!r}\n")
    theirs, named, _ = _keras(graph, "tuned", start, args=(optimizer,))
    _check(ours, theirs, after, named)


def test_overwriting_the_weights_by_their_averages_is_one_line(tmp_path):
    optimizer = K3 + "Adamax(0.02, use_ema=True, ema_overwrite_frequency=2)"
    path = write(tmp_path, _job("tuned", extra=f"[model.args]\noptimizer = {optimizer!r}\n"), MODULE)
    one_line_error(path, "compiled with Adamax(ema_overwrite_frequency=2)", "compile with ema_overwrite_frequency=None")


def test_the_job_files_loss_and_optimizer_are_the_models_keras(tmp_path):
    """An uncompiled Keras 3 model: the job file's AdamW on a cosine schedule is Keras 3's class."""
    import keras

    train = 'loss = "sparse_categorical_crossentropy"\noptimizer = "adamw"\nlearning_rate = 0.02\n' \
            'weight_decay = 0.01\nschedule = "cosine"\ndecay_steps = 10\n'
    graph, start, after, ours = _ours(tmp_path, "plain", train)
    assert graph.recipe.optimizer == "adamw" and type(graph.recipe.make_optimizer()).__module__.startswith("keras.")
    rate = keras.optimizers.schedules.CosineDecay(0.02, 10, alpha=0.0)
    theirs, named, _ = _keras(graph, "plain", start, (keras.optimizers.AdamW(rate, weight_decay=0.01),
                                                   "sparse_categorical_crossentropy"))
    _check(ours, theirs, after, named)


def test_named_inputs_and_weighted_outputs_train_as_keras_3(tmp_path):
    """A dict of named inputs (called with a dict, as Keras 3 wants) and two outputs with their compiled losses
    and loss weights."""
    graph, start, after, ours = _ours(tmp_path, "named", data="pairs")
    assert graph.recipe.loss_weights == {"score": 0.5, "kind": 2.0}
    theirs, named, _ = _keras(graph, "named", start, data="pairs")
    _check(ours, theirs, after, named)


def test_micro_batches_draw_their_own_dropout_and_train_as_keras_3_accumulating(tmp_path):
    """M = 2 with dropout: each micro-batch draws its own mask (the seed read after the micro-batch before
    wrote it), as Keras 3's own steps over the two halves with gradient accumulation; one update of the mean."""
    import keras
    import usernet

    graph, start, after, ours = _ours(tmp_path, "dropped", "micro_batches = 2\n")
    model = usernet.dropped()
    model.compile(keras.optimizers.SGD(0.1, gradient_accumulation_steps=2), "sparse_categorical_crossentropy",
                  jit_compile=False)
    names = dict(zip((id(w) for w in model.weights), graph.model["weights"]))
    [seed] = [name for name in start if "seed_generator_state" in name]
    named = [(v, names.get(id(v), seed)) for v in model.variables]
    for variable, name in named:
        variable.assign(start[name])
    theirs = []
    for step in range(STEPS):
        x, y = usernet.batches(step, BATCH, 0, 1)
        halves = [float(model.train_on_batch(x[h * 4:(h + 1) * 4], y[h * 4:(h + 1) * 4])) for h in (0, 1)]
        theirs.append(np.mean(halves))
    assert not np.array_equal(start[seed], after[seed])
    _check(ours, theirs, after, named)


def test_micro_batches_apply_one_update_of_the_mean_gradient(tmp_path):
    """M = 2 (a model without batch statistics): one update, Keras 3's on the whole batch."""
    graph, start, after, ours = _ours(tmp_path, "sequential", "micro_batches = 2\n")
    theirs, named, _ = _keras(graph, "sequential", start)
    _check(ours, theirs, after, named)


def test_validation_is_keras_3s_evaluate(tmp_path):
    """[eval] after training: the loss (regularization included) and the compiled accuracy equal Keras 3's
    ``evaluate`` of its own trained model on the same batch."""
    import usernet

    graph, start, after, ours = _ours(tmp_path, "functional", extra='[eval]\nentry = "usernet:batches"\nbatches = 1\n')
    theirs, named, model = _keras(graph, "functional", start)
    _check(ours, theirs, after, named)
    with tf.compat.v1.Session(graph=graph.graph) as session:
        session.run(graph.init_op)
        for variable in graph.variables:
            variable.load(after[variable.name], session)
        validated = session.run(graph.evaluation.fetches, graph.evaluation.feed(0))
    expected = model.evaluate(*usernet.batches(0, BATCH, 0, 1), batch_size=BATCH, return_dict=True, verbose=0)
    assert sorted(validated) == ["accuracy", "loss"]
    np.testing.assert_allclose([validated["loss"], validated["accuracy"]], [expected["loss"], expected["accuracy"]],
                               rtol=1e-5)


def test_a_validation_metric_named_in_the_job_file_is_keras_3s_function(tmp_path):
    """[eval] metrics = ['mae'] on Keras 3: the mean absolute error under the name given, computed by Keras 3's
    function, and no metric variables in the step's graph."""
    import usernet

    extra = '[eval]\nentry = "usernet:batches"\nbatches = 1\nmetrics = ["mae"]\n'
    graph, _, after, _ = _ours(tmp_path, "plain", 'loss = "sparse_categorical_crossentropy"\n', extra=extra)
    assert sorted(graph.evaluation.fetches) == ["loss", "mae"]
    assert not [v.name for v in graph.variables if "mean_absolute_error" in v.name or v.name.startswith("mae")]
    with tf.compat.v1.Session(graph=graph.graph) as session:
        session.run(graph.init_op)
        for variable in graph.variables:
            variable.load(after[variable.name], session)
        validated = session.run(graph.evaluation.fetches, graph.evaluation.feed(0))
    model = usernet.plain()
    for variable, name in zip(model.weights, graph.model["weights"], strict=True):
        variable.assign(after[name])
    x, y = usernet.batches(0, BATCH, 0, 1)
    expected = np.mean(np.abs(y[:, None].astype(np.float32) - model.predict(x, verbose=0)))
    np.testing.assert_allclose(validated["mae"], expected, rtol=1e-5)


def test_the_trained_model_is_a_file_keras_3_loads(tmp_path):
    """--save-model's writer: a .weights.h5 that the user's own build() loads and a .keras that Keras 3
    loads whole, each holding the trained values; .h5 (Keras 2's) is one line."""
    import keras
    import usernet

    from jobs import JobError
    from jobs.export import save_model

    graph, _, after, _ = _ours(tmp_path, "functional")
    weights = save_model(graph.job, graph.model, after, tmp_path / "out" / "model.weights.h5")
    whole = save_model(graph.job, graph.model, after, tmp_path / "out" / "model.keras")
    fresh = usernet.functional()
    fresh.load_weights(weights)
    loaded = keras.saving.load_model(whole)
    for model in (fresh, loaded):
        for variable, name in zip(model.weights, graph.model["weights"], strict=True):
            np.testing.assert_array_equal(variable.numpy(), after[name], err_msg=name)
    with pytest.raises(JobError, match=r"trains a Keras 3\.\S+ model, which Keras writes as \.weights\.h5"):
        save_model(graph.job, graph.model, after, tmp_path / "out" / "model.h5")


APPLICATIONS = {"MobileNetV2": {"alpha": 0.35}, "EfficientNetB0": {}}


@pytest.mark.slow
@pytest.mark.parametrize("name", list(APPLICATIONS))
def test_a_keras_application_placed_by_pardnn_on_4_devices_trains_as_keras_3(tmp_path, name):
    """keras.applications (Keras 3, weights=None, 64x64, batch norm everywhere; EfficientNet's stochastic depth
    draws from its seeds): estimated, placed by ParDNN over 4 logical devices, and trained two steps as Keras 3's
    own eager steps train it. In float64 and for two steps, as the zoo test trains: batch norm over the 2x2
    maps of 8 samples cancels so much that float32 rounding (and, after a few steps, float64's) grows into
    different trajectories, whoever runs it."""
    args = f"[model.args]\nname = {name!r}\n" + "".join(f"{k} = {v}\n" for k, v in APPLICATIONS[name].items())
    graph, start, after, ours = _ours(tmp_path, "application", devices=4, data="images", placed=True, steps=2,
                                      extra=args)
    assert graph.model["inputs"][0]["dtype"] == "float64"  # the floatx the entry set, not float32's policy
    theirs, named, _ = _keras(graph, "application", start, data="images", eagerly=True, steps=2,
                              args=(name,), kwargs=APPLICATIONS[name])
    assert sum("moving_mean" in name for _, name in named) > 10
    _check(ours, theirs, after, named)


def test_recompute_is_one_line(tmp_path):
    from jobs import JobError, build
    from jobs.models.layers import recomputing

    with recomputing(), pytest.raises(JobError, match=r"job\.toml: model\.entry = 'usernet:functional': --recompute "
                                                       r"wraps the layers of tf\.keras models; a Keras 3 model's"):
        build(load_job(write(tmp_path, _job("functional"), MODULE)))


def test_a_float16_model_trains_as_keras_3_does_skipping_overflowing_steps(tmp_path):
    """mixed_float16 with Keras 3's LossScaleOptimizer rules: the steps of batches 2 and 5 (overflowing float16)
    skipped and the scale halved each time, as Keras 3's own float16 steps; float16's tolerance."""
    import keras
    import usernet

    from jobs import build

    try:
        graph = build(load_job(write(tmp_path, _job("mixed", data="overflowing"), MODULE)))
        assert keras.config.dtype_policy().name == "float32"  # the entry's policy did not leak
        assert graph.recipe.precision == "mixed_float16" and graph.recipe.loss_scale.keras3
        trainable = [v for v in graph.variables if v.trainable]
        with tf.compat.v1.Session(graph=graph.graph) as session:
            session.run(graph.init_op)
            start = session.run(trainable)
            steps = [session.run([*graph.fetches, graph.loss_scale, graph.finite], graph.feed_fn(i))
                     for i in range(STEPS)]
            ours = session.run(trainable)
            iterations = session.run([v for v in graph.variables if v.name.endswith("iteration:0")])
        assert [bool(step[3]) for step in steps] == [True, True, False, True, True, False]
        assert [float(step[2]) for step in steps] == [32768.0, 32768.0, 32768.0, 16384.0, 16384.0, 16384.0]
        assert max(iterations) == 4  # a skipped step does not count, as Keras 3 has it
        model = usernet.mixed()
        for variable, value in zip(model.trainable_variables, start, strict=True):
            variable.assign(value)
        losses = [float(model.train_on_batch(*usernet.overflowing(i, BATCH, 0, 1))) for i in range(STEPS)]
        assert float(model.optimizer.dynamic_scale.numpy()) == 8192.0 and int(model.optimizer.iterations) == 4
    finally:
        keras.config.set_dtype_policy("float32")
    for mine, their in zip(ours, model.trainable_variables, strict=True):
        np.testing.assert_allclose(mine, their.numpy(), rtol=1e-3, atol=1e-4)
    finite = [i for i in range(STEPS) if steps[i][3]]
    np.testing.assert_allclose([steps[i][1] for i in finite], [losses[i] for i in finite], rtol=1e-3)


def test_capture_max_batch_and_plan_take_a_keras_3_model(tmp_path, capsys):
    """The example Keras 3 job through pardnn capture, max-batch (its graphs computed from two builds and
    checked against a third) and plan, as a tf.keras job goes."""
    from pardnn.cli import main
    from pardnn.io import read_graph

    job = str(Path(__file__).resolve().parents[2] / "examples" / "keras3_mlp" / "job.toml")
    assert main(["capture", job, "-o", str(tmp_path / "mlp.json")]) == 0
    assert capsys.readouterr().out.startswith("wrote ")
    graph = read_graph(tmp_path / "mlp.json")
    assert graph.n > 100 and any("adam_w" in name for name in graph.names)
    assert main(["max-batch", job, "--devices", "1,2", "--memory", "4MiB", "--cache", "", "--json", "-q"]) == 0
    rows = json.loads(capsys.readouterr().out)["rows"]
    assert [row["devices"] for row in rows] == [1, 2] and all(row["pardnn_batch"] > 0 for row in rows)
    assert main(["plan", job, "--nodes", "2", "--devices-per-node", "2", "--node", "dgx-a100", "--json", "-q"]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert plan["chosen"]["step_us"] > 0
