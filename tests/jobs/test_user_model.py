"""Your own model in a job: ``[model] entry`` / ``[data] entry`` files, every mistake as one line naming
the file, the key and the value, and the two examples' training graphs (one step each, batch norm's
moving averages updated)."""

from __future__ import annotations

import contextlib
import re
import textwrap
from pathlib import Path

import numpy as np
import pytest

from jobs import JobError, load_job
from jobs.schema import KERAS_LOSSES
from tests.helpers.usermodels import JOB, KERAS, one_line_error, write

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = {"keras_cnn": ROOT / "examples" / "keras_cnn" / "job.toml",
            "keras_transformer": ROOT / "examples" / "keras_transformer" / "job.toml"}


# The small Keras model and its data (tests.helpers.usermodels); tests replace parts of it. Every test's
# module is called usernet, so each build also checks that a job gets its own folder's module, not the
# last one imported.






# ------------------------------------------------------------------------ job files (no TensorFlow)
def test_the_examples_load_with_their_entries():
    for name, path in EXAMPLES.items():
        job = load_job(path)
        assert job.entry == job.model == "net:build" and job.data_entry == "net:batches" and job.data == {
            "entry": "net:batches"}
        assert job.loss == "sparse_categorical_crossentropy" and job.batch_size == 16
        assert (job.iterations, job.window, job.devices_per_node, job.costs) == (30, (10, 30), 4, "profile")
        assert job.model_params and "batch_size" not in job.model_params
        assert job.describe().startswith(f"{job.name}: net:build(") and "data net:batches" in job.describe(), name


def test_an_entry_job_takes_defaults_and_args(tmp_path):
    job = load_job(write(tmp_path, JOB + "[model.args]\nwidth = 8\nsizes = [1, 2]\n", module=None))
    assert job.model_params == {"width": 8, "sizes": [1, 2]} and job.loss == "sparse_categorical_crossentropy"
    assert load_job(write(tmp_path, JOB.replace("[train]", "[train]\nloss = 'mse'"), module=None)).loss == "mse"
    zoo = load_job("wrn-tiny")
    assert zoo.entry is None and zoo.data_entry is None and "data synthetic" in zoo.describe()


BAD_FILES = [
    (JOB.replace('entry = "usernet:build"', 'entry = "usernet:build"\ntype = "wrn"'),
     "model.type = 'wrn' and model.entry = 'usernet:build': expected one of them"),
    (JOB.replace('"usernet:build"', '"usernet.build"'), "model.entry = 'usernet.build': expected 'module:function'"),
    (JOB.replace('"usernet:build"', '"usernet:"'), "model.entry = 'usernet:': expected 'module:function'"),
    (JOB.replace('"usernet:build"', "3"), "model.entry = 3: expected 'module:function'"),
    (JOB.replace("[data]", "width = 3\n[data]"),
     "unknown key model.width; [model] with entry allows: args, entry (your function's keyword arguments go in"),
    (JOB.replace("[data]", "args = 3\n[data]"), "model.args = 3: expected a table [model.args]"),
    (JOB + "[model.args]\nbatch_size = 8\n", "model.args.batch_size = 8: expected no batch_size here: set "
     "train.batch_size"),
    (JOB.replace('[data]\nentry = "usernet:batches"\n', ""),
     "missing key data.entry: expected 'module:function' (e.g. 'mypkg.net:build'), a function fn(iteration, "
     "batch_size, rank, ranks) giving the batches of model.entry = 'usernet:build'"),
    (JOB.replace("[data]", "[data]\nsource = 'synthetic'"), "data.entry and data.source: expected one of them"),
    (JOB.replace('"usernet:batches"', "'batches'"), "data.entry = 'batches': expected 'module:function'"),
    (JOB.replace("[train]", "[train]\nloss = 'l2'"), "train.loss = 'l2': expected one of "
     "'sparse_categorical_crossentropy', 'categorical_crossentropy'"),
    ("[model]\ntype = 'wrn'\n[train]\nbatch_size = 2\nloss = 'mse'\n",
     "train.loss = 'mse': expected no train.loss: the zoo model 'wrn' has its own loss"),
    ("[model]\nlayers = 1\n[train]\nbatch_size = 1\n",
     "missing key model.type: expected one of 'word_rnn', 'char_crn', 'wrn', 'transformer', 'e3d_lstm' (a zoo "
     "model), or give model.entry = 'module:function'"),
]


@pytest.mark.parametrize(("text", "message"), BAD_FILES)
def test_a_bad_entry_job_file_fails_in_one_line(tmp_path, text, message):
    path = write(tmp_path, text, module=None)
    with pytest.raises(JobError, match=re.escape(message)) as caught:
        load_job(path)
    assert str(caught.value).startswith(path.as_posix() + ": ") and "\n" not in str(caught.value)


def test_every_loss_name_is_a_keras_loss():
    tf = pytest.importorskip("tensorflow")
    for name in KERAS_LOSSES:
        assert callable(tf.keras.losses.get(name)), name


# ------------------------------------------------------------------------------- build (TensorFlow)
@pytest.fixture
def tf():
    return pytest.importorskip("tensorflow")


def one_step(train, tf, iteration=0):
    with tf.compat.v1.Session(graph=train.graph) as session:
        session.run(train.init_op)
        _, loss = session.run(train.fetches, train.feed_fn(iteration))
    return loss


@pytest.mark.tf
@pytest.mark.parametrize("name", list(EXAMPLES))
def test_an_example_builds_and_runs_a_step(tf, name):
    from jobs import TrainGraph, build
    from pardnn.tf import capture

    job = load_job(EXAMPLES[name])
    train = build(job)
    assert isinstance(train, TrainGraph) and train.fetches == [train.train_op, train.loss]
    assert train.samples_per_step == train.batch_size == 16 and train.parameters > 1000
    assert "labels" in train.inputs and all(t.shape.is_fully_defined() for t in train.inputs.values())
    assert capture(train.graph, train.fetches).n > 100  # static shapes everywhere
    assert np.isfinite(one_step(train, tf))
    again = build(job, gradient_hook=lambda grads_and_vars: grads_and_vars)  # the launcher's second build
    assert sorted(op.name for op in again.graph.get_operations()) == sorted(
        op.name for op in train.graph.get_operations())


@pytest.mark.tf
def test_batch_norm_moving_averages_are_updated_by_a_step(tf):
    from jobs import build

    train = build(load_job(EXAMPLES["keras_cnn"]))
    moving = [v for v in train.variables if "moving_mean" in v.name or "moving_variance" in v.name]
    assert len(moving) == 4
    updates = [op for op in train.train_op.control_inputs if op.type == "AssignSubVariableOp"]
    assert len(updates) == 4  # one per moving average, all run by the train op
    with tf.compat.v1.Session(graph=train.graph) as session:
        session.run(train.init_op)
        before = session.run(moving)
        session.run(train.fetches, train.feed_fn(0))
        after = session.run(moving)
    assert all(not np.allclose(b, a) for b, a in zip(before, after))


@pytest.mark.tf
def test_a_step_entry_and_a_data_entry_for_a_zoo_model(tf, tmp_path):
    from jobs import build

    step = KERAS + textwrap.dedent("""
        def step(batch_size):
            v1 = tf.compat.v1
            x = v1.placeholder(tf.float32, [batch_size, 3], name="features")
            y = v1.placeholder(tf.int64, [batch_size], name="labels")
            layer = tf.keras.layers.BatchNormalization()
            h = layer(tf.keras.layers.Dense(4)(x), training=True)
            logits = tf.keras.layers.Dense(2)(h)
            loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits))
            return {"loss": loss, "inputs": {"features": x, "labels": y}, "update_ops": layer.get_updates_for(x),
                    "tokens_per_step": 7}

        def words(iteration, batch_size, rank, ranks):
            tokens = np.random.default_rng([iteration, rank]).integers(0, 200, (batch_size, 11))
            return {"tokens": tokens[:, :-1], "targets": tokens[:, 1:]}
    """)
    train = build(load_job(write(tmp_path, JOB.replace(":build", ":step"), step)))
    assert train.tokens_per_step == 7 and len(train.train_op.control_inputs) == 3
    assert np.isfinite(one_step(train, tf, 3))
    zoo = "[model]\ntype = 'word_rnn'\nvocab_size = 200\nhidden_size = 8\nlayers = 1\nseq_length = 10\n" \
          "[data]\nentry = 'usernet:words'\n[train]\nbatch_size = 4\n"
    assert np.isfinite(one_step(build(load_job(write(tmp_path, zoo, step))), tf, 2))


@pytest.mark.tf
def test_tuple_batches_and_unknown_dimensions_from_the_first_batch(tf, tmp_path):
    from jobs import build

    module = KERAS.replace("(3,)", "(None, 3)").replace("Dense(2, activation=\"softmax\")(h)",
                                                       "Dense(2, activation=\"softmax\")(h[:, 0])").replace(
        'return {"features": rng.normal(size=(batch_size, 3)), "labels": rng.integers(0, 2, batch_size)}',
        'return [rng.normal(size=(batch_size, 5, 3))], rng.integers(0, 2, batch_size)')
    train = build(load_job(write(tmp_path, JOB, module)))
    assert train.inputs["features"].shape.as_list() == [4, 5, 3] and train.inputs["labels"].dtype == tf.int64
    assert np.isfinite(one_step(train, tf))


BAD_ENTRIES = [
    ({"module": None}, JOB, ("model.entry = 'usernet:build': no module 'usernet' in ", "expected 'module:function'")),
    ({}, JOB.replace("usernet:build", "usernet:nope"),
     ("model.entry = 'usernet:nope': module 'usernet' (", "has no attribute 'nope'")),
    ({"import numpy as np": "import numpy as np\nwidth = 3"}, JOB.replace("usernet:build", "usernet:width"),
     ("model.entry = 'usernet:width': usernet.width is int, not callable; expected a function",)),
    ({"import numpy as np": "import numpy as np\nimport no_such_package_xyz"}, JOB,
     ("model.entry = 'usernet:build': importing 'usernet' raised ModuleNotFoundError: No module named "
      "'no_such_package_xyz' (usernet.py:2)",)),
    ({"import numpy as np": "import numpy as np\n1 / 0"}, JOB,
     ("model.entry = 'usernet:build': importing 'usernet' raised ZeroDivisionError: division by zero (usernet.py:2)",)),
    ({"def build(width=4):": "def build(width=4)"}, JOB,
     ("model.entry = 'usernet:build': importing 'usernet' raised SyntaxError: ", "(usernet.py:4)")),
    ({"def build(width=4):": "def build(width=4):\n    return 3"}, JOB,
     ("model.entry = 'usernet:build': it returned int; expected a function returning a tf.keras.Model, or a step",)),
    ({"def build(width=4):": "def build(width=4):\n    raise ValueError('no such width')"}, JOB,
     ("model.entry = 'usernet:build': build() raised ValueError: no such width (usernet.py:5)",)),
    ({}, JOB + "[model.args]\nwidht = 3\n",
     ("model.entry = 'usernet:build': cannot call build(widht=3): got an unexpected keyword argument 'widht'",)),
    ({"def build(width=4):": "def build(width=4):\n    return {'loss': tf.zeros([2]), 'inputs': {}}"}, JOB,
     ("model.entry = 'usernet:build': loss has shape [2], not a scalar",)),
    ({"return tf.keras.Model(x, tf.keras.layers.Dense(2, activation=\"softmax\")(h))":
      "return tf.keras.Model(x, [h, h])"}, JOB, ("model.entry = 'usernet:build': the model has 2 outputs",)),
    ({"return tf.keras.Model(x,": "tf.Variable(1.0)\n    return tf.keras.Model(x,"}, JOB,
     ("model.entry = 'usernet:build': trainable variables without a gradient from the loss: Variable:0",)),
    ({"def batches(iteration, batch_size, rank, ranks):": "def batches(iteration):"}, JOB,
     ("data.entry = 'usernet:batches': cannot call batches(0, 4, 0, 1): too many positional arguments; expected a "
      "function fn(iteration, batch_size, rank, ranks)",)),
    ({"rng = np.random": "raise OSError('disk gone')\n    rng = np.random"}, JOB,
     ("data.entry = 'usernet:batches': batches(0, 4, 0, 1) raised OSError: disk gone (usernet.py:",)),
    ({"rng = np.random": "return 7\n    rng = np.random"}, JOB,
     ("data.entry = 'usernet:batches': batch 0 (fn(0, 4, ...)) is int; expected a dict {input name: array} or "
      "(x, y)",)),
    ({'"labels": rng': '"targets": rng'}, JOB,
     ("data.entry = 'usernet:batches': batch 0 has labels none; expected 'labels' (or y of (x, y))",)),
    ({"size=(batch_size, 3)": "size=(batch_size - 1, 3)"}, JOB,
     ("data.entry = 'usernet:batches': batch 0: 'features' has shape [3, 3]; expected [4, 3] (the first "
      "dimension is the batch size)",)),
    ({"(3,), name": "(3,), dtype='int32', name"}, JOB,
     ("data.entry = 'usernet:batches': batch 0: 'features' has dtype float64; expected int32",)),
    ({'"labels": rng': '"extra": 1, "labels": rng'}, JOB,
     ("data.entry = 'usernet:batches': batch 0 has unknown key 'extra'; expected the keys 'features', 'labels'",)),
    ({"size=(batch_size, 3)": "size=(batch_size, 3 + iteration)"}, JOB,
     ("data.entry = 'usernet:batches': batch 1: 'features' has shape [4, 4]; expected [4, 3]",)),
    ({"rng.integers(0, 2, batch_size)": "rng.integers(0, 2, (batch_size, 5))"}, JOB,
     ("train.loss = 'sparse_categorical_crossentropy' of labels", "raised ValueError", "expected a loss and labels "
      "that fit the output")),
]


@pytest.mark.tf
@pytest.mark.parametrize(("replace", "job", "parts"), BAD_ENTRIES)
def test_a_bad_entry_point_fails_in_one_line(tf, tmp_path, replace, job, parts):
    replace = dict(replace)
    module = replace.pop("module", KERAS)
    one_line_error(write(tmp_path, job, module, **replace), *parts)


@pytest.mark.tf
def test_a_subclassed_model_without_inputs_is_built_from_batch_0(tf, tmp_path):
    """Once refused ("inputs are unknown"); now called on placeholders shaped like batch 0
    (tests/jobs/test_keras_forms.py has the rest)."""
    from jobs import build

    module = KERAS + textwrap.dedent("""
        class Net(tf.keras.Model):
            def __init__(self):
                super().__init__()
                self.hidden = tf.keras.layers.Dense(4, activation="relu")
                self.out = tf.keras.layers.Dense(2, activation="softmax")

            def call(self, x):
                return self.out(self.hidden(x))

        def subclassed():
            return Net()
    """)
    train = build(load_job(write(tmp_path, JOB.replace(":build", ":subclassed"), module)))
    assert train.inputs["features"].shape.as_list() == [4, 3] and train.parameters == 3 * 4 + 4 + 4 * 2 + 2
    assert np.isfinite(one_step(train, tf))




@pytest.mark.tf
def test_a_tf_keras_call_is_built_as_before_keras_3_state_collection(tf):
    """jobs.keras3.StateUpdates leaves a tf.keras model's call alone: the same ops and control inputs as a
    call made without it (its updates are its own: get_updates_for), and nothing collected."""
    from jobs.keras3 import StateUpdates

    def build(collect):
        graph = tf.Graph()
        with graph.as_default():
            tf.keras.utils.set_random_seed(1)
            x = tf.keras.Input((3,))
            h = tf.keras.layers.BatchNormalization()(tf.keras.layers.Dense(4)(x))
            model = tf.keras.Model(x, tf.keras.layers.Dropout(0.5)(h))
            placeholder = tf.compat.v1.placeholder(tf.float32, [2, 3])
            state = StateUpdates()
            with state.collect(model) if collect else contextlib.nullcontext():
                model(placeholder, training=True)
        return state.ops if collect else None, {(op.name, tuple(sorted(c.name for c in op.control_inputs)))
                                                for op in graph.get_operations()}

    collected, ops = build(True)
    assert collected == [] and ops == build(False)[1]
