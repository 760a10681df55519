"""``[data] dataset``: the user's tf.data.Dataset read inside the step's graph (jobs.datasets). The
oracle is the function form (``[data] entry``) fed the same batches: the same losses, step by step,
plain and in micro-batches, and from a skipped start (a resumed run); every mistake is one line."""

from __future__ import annotations

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")

from jobs import JobError, build, load_job  # noqa: E402

pytestmark = pytest.mark.tf

MODULE = """\
import numpy as np
import tensorflow as tf

def build(width=8):
    x = tf.keras.Input((6,), name="features")
    h = tf.keras.layers.Dense(width, activation="relu")(x)
    h = tf.keras.layers.BatchNormalization()(h)
    h = tf.keras.layers.Dropout(0.0)(h)
    return tf.keras.Model(x, tf.keras.layers.Dense(3, activation="softmax")(h))

def batches(iteration, batch_size, rank, ranks):
    rng = np.random.default_rng([5, iteration, rank, ranks])
    return rng.normal(size=(batch_size, 6)), rng.integers(0, 3, batch_size)

def data(count, batch_size, rank, ranks):
    x, y = zip(*(batches(i, batch_size, rank, ranks) for i in range(count)))
    return np.stack(x), np.stack(y)

def dataset(batch_size, rank, ranks):
    x, y = data(40, batch_size, rank, ranks)   # float64 features: cast to the model's float32
    return tf.data.Dataset.from_tensor_slices((x, y)).map(lambda a, b: (a, b), num_parallel_calls=2)

def as_dicts(batch_size, rank, ranks):
    return dataset(batch_size, rank, ranks).map(lambda a, b: {"features": a, "labels": b})

def not_a_dataset(batch_size, rank, ranks):
    return [1, 2, 3]

def wrong_width(batch_size, rank, ranks):
    x, y = data(4, batch_size, rank, ranks)
    return tf.data.Dataset.from_tensor_slices((x[..., :5], y))

def empty(batch_size, rank, ranks):
    return dataset(batch_size, rank, ranks).take(0)

def step(batch_size):
    x = tf.compat.v1.placeholder(tf.float32, [batch_size, 6], name="features")
    return {"loss": tf.reduce_mean(x), "inputs": {"features": x}}
"""


def _job(tmp_path, data, model="build", extra=""):
    (tmp_path / "streamnet.py").write_text(MODULE)
    path = tmp_path / f"{data.replace(' ', '_').replace('=', '').replace(':', '_')}-{model}.toml"
    path.write_text(f"[model]\nentry = 'streamnet:{model}'\n[data]\n{data}\n[train]\nbatch_size = 8\n"
                    f"loss = 'sparse_categorical_crossentropy'\noptimizer = 'adam'\nlearning_rate = 0.01\n{extra}")
    return load_job(path)


def _losses(trained, steps, skip=None):
    with tf.compat.v1.Session(graph=trained.graph) as session:
        session.run(trained.init_op)
        if skip is not None:
            session.run(trained.stream.initializer, {trained.stream.skip: skip})
        first = 0 if skip is None else skip
        return [float(session.run(trained.fetches, trained.feed_fn(i))[1]) for i in range(first, first + steps)]


@pytest.mark.parametrize("micro", [1, 2])
def test_a_dataset_trains_the_losses_the_function_form_trains_on_the_same_batches(tmp_path, micro):
    extra = f"micro_batches = {micro}\n"
    fed = build(_job(tmp_path, "entry = 'streamnet:batches'", extra=extra))
    for name in ("dataset", "as_dicts"):
        streamed = build(_job(tmp_path, f"dataset = 'streamnet:{name}'", extra=extra))
        assert streamed.stream is not None and streamed.feed_fn(3) == {}
        assert [t.op.type for t in streamed.inputs.values()] == ["PlaceholderWithDefault"] * 2
        assert sorted(streamed.inputs) == sorted(fed.inputs) == ["features", "labels"]
        np.testing.assert_allclose(_losses(streamed, 6), _losses(fed, 6), rtol=1e-6)
    assert fed.stream is None and all(t.op.type == "Placeholder" for t in fed.inputs.values())


def test_a_resumed_stream_skips_the_batches_already_trained(tmp_path):
    fed = build(_job(tmp_path, "entry = 'streamnet:batches'"))
    streamed = build(_job(tmp_path, "dataset = 'streamnet:dataset'"))
    # From fresh weights, batch 4 onwards: the skipped stream reads what the function gives at iteration 4.
    with tf.compat.v1.Session(graph=fed.graph) as session:
        session.run(fed.init_op)
        oracle = [float(session.run(fed.loss, fed.feed_fn(i))) for i in (4, 5, 6)]
    with tf.compat.v1.Session(graph=streamed.graph) as session:
        session.run(streamed.init_op)
        session.run(streamed.stream.initializer, {streamed.stream.skip: 4})
        got = [float(session.run(streamed.loss)) for _ in range(3)]
    np.testing.assert_allclose(got, oracle, rtol=1e-6)
    # The stream repeats: more steps than the 40 batches it holds go on into its next pass.
    assert len(_losses(streamed, 3, skip=39)) == 3


@pytest.mark.parametrize(("data", "model", "message"), [
    ("dataset = 'streamnet:not_a_dataset'", "build",
     "data.dataset = 'streamnet:not_a_dataset': fn(8, 0, 1) returned list; expected a tf.data.Dataset"),
    ("dataset = 'streamnet:wrong_width'", "build",
     "data.dataset = 'streamnet:wrong_width': its first batch: 'features' has shape [8, 5]; expected [8, 6]"),
    ("dataset = 'streamnet:empty'", "build", "data.dataset = 'streamnet:empty': the dataset is empty"),
    ("dataset = 'streamnet:missing'", "build", "has no attribute 'missing'"),
    ("dataset = 'streamnet:dataset'", "step", "whose placeholders data.dataset = 'streamnet:dataset' cannot feed"),
])
def test_a_bad_dataset_is_one_line_naming_the_file_and_what_to_do(tmp_path, data, model, message):
    job = _job(tmp_path, data, model)
    with pytest.raises(JobError) as caught:
        build(job)
    text = str(caught.value)
    assert "\n" not in text and text.startswith(str(job.path)) and message in text, text


@pytest.mark.parametrize(("data", "message"), [
    ("dataset = 'streamnet:dataset'\nentry = 'streamnet:batches'", "data.dataset and data.entry: expected one of"),
    ("dataset = 'no colon'", "data.dataset = 'no colon': expected 'module:function'"),
])
def test_a_bad_dataset_key_is_one_line(tmp_path, data, message):
    with pytest.raises(JobError, match=message):
        _job(tmp_path, data)
    (tmp_path / "zoo.toml").write_text("[model]\ntype = 'wrn'\n[data]\ndataset = 'streamnet:dataset'\n[train]\n"
                                       "batch_size = 2\n")
    with pytest.raises(JobError, match="the zoo model 'wrn' reads its own data"):
        load_job(tmp_path / "zoo.toml")
