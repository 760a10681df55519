"""``[eval]``: validation beside the step (jobs.evaluation). The oracle is Keras' own ``evaluate`` on the
same batches with the same weights: the loss (with the model's L2 penalty, batch norm's moving statistics
and no dropout) and the compiled metrics, for a function's batches and a tf.data.Dataset's, one output
and two; every mistake is one line."""

from __future__ import annotations

import importlib
import sys

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
    h = tf.keras.layers.Dense(width, activation="relu", kernel_regularizer="l2")(x)
    h = tf.keras.layers.BatchNormalization()(h)
    h = tf.keras.layers.Dropout(0.5)(h)
    model = tf.keras.Model(x, tf.keras.layers.Dense(3, activation="softmax")(h))
    model.compile("adam", "sparse_categorical_crossentropy", metrics=["accuracy", "sparse_top_k_categorical_accuracy"])
    return model

def heads():
    x = tf.keras.Input((6,), name="features")
    h = tf.keras.layers.Dense(8, activation="relu")(x)
    model = tf.keras.Model(x, [tf.keras.layers.Dense(3, activation="softmax", name="cls")(h),
                               tf.keras.layers.Dense(1, name="reg")(h)])
    model.compile("adam", {"cls": "sparse_categorical_crossentropy", "reg": "mse"}, loss_weights=[1.0, 0.5],
                  metrics=["mae"])
    return model

def batches(iteration, batch_size, rank, ranks):
    rng = np.random.default_rng([5, iteration, rank, ranks])
    return rng.normal(size=(batch_size, 6)), rng.integers(0, 3, batch_size)

def two(iteration, batch_size, rank, ranks):
    x, y = batches(iteration, batch_size, rank, ranks)
    return x, {"cls": y, "reg": x[:, :1]}

def held_out(iteration, batch_size, rank, ranks):
    return batches(10_000 + iteration, batch_size, rank, ranks)

def held_out_two(iteration, batch_size, rank, ranks):
    return two(10_000 + iteration, batch_size, rank, ranks)

def held_out_dataset(batch_size, rank, ranks):
    x, y = zip(*(held_out(b * ranks + rank, batch_size, 0, 1) for b in range(6)))
    return tf.data.Dataset.from_tensor_slices((np.stack(x), np.stack(y)))

def no_labels(iteration, batch_size, rank, ranks):
    return {"features": held_out(iteration, batch_size, rank, ranks)[0]}

def narrow(iteration, batch_size, rank, ranks):
    x, y = held_out(iteration, batch_size, rank, ranks)
    return x[:, :4], y

def too_few(batch_size, rank, ranks):
    return held_out_dataset(batch_size, rank, ranks).take(1)
"""

JOB = ("[model]\nentry = 'evalnet:{model}'\n[data]\nentry = 'evalnet:{data}'\n[eval]\n{source}\nevery = 2\n"
       "batches = 3\nbatch_size = 5\n{metrics}[train]\nbatch_size = 8\n")


def _job(tmp_path, source, model="build", data="batches", metrics=""):
    (tmp_path / "evalnet.py").write_text(MODULE)
    path = tmp_path / f"{model}-{abs(hash(source + metrics))}.toml"
    path.write_text(JOB.format(model=model, data=data, source=source, metrics=metrics))
    return load_job(path)


def _validated_and_keras(tmp_path, job, make, held_out, shards=((0, 1),)):
    """The step trained 3 iterations; per shard (rank, ranks): our validation and Keras' evaluate."""
    trained = build(job)
    validation = trained.evaluation
    with tf.compat.v1.Session(graph=trained.graph) as session:
        session.run(trained.init_op)
        for i in range(3):
            session.run(trained.fetches, trained.feed_fn(i))
        got = [[session.run(validation.fetches, validation.feed(b, rank, ranks)) for b in range(validation.batches)]
               for rank, ranks in shards]
        values = dict(zip([v.name for v in trained.variables], session.run(trained.variables)))
    ours = [{name: float(np.mean([batch[name] for batch in part])) for name in part[0]} for part in got]
    sys.path.insert(0, str(tmp_path))
    try:
        module = importlib.reload(importlib.import_module("evalnet"))
        model = getattr(module, make)()
        model.set_weights([values[name] for name in trained.model["weights"]])
        keras = []
        for rank, ranks in shards:
            xs, ys = zip(*(getattr(module, held_out)(b * ranks + rank, 5, 0, 1) for b in range(3)))
            labels = ({k: np.concatenate([y[k] for y in ys]) for k in ys[0]} if isinstance(ys[0], dict)
                      else np.concatenate(ys))
            keras.append(model.evaluate(np.concatenate(xs), labels, batch_size=5, verbose=0, return_dict=True))
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("evalnet", None)
    return trained, ours, keras


def test_validation_is_what_keras_evaluate_reports_on_the_same_batches(tmp_path):
    job = _job(tmp_path, "entry = 'evalnet:held_out'")
    # Rank 1 of 2 reads its own batches (b·2 + 1), as the training batches are shared out.
    trained, [ours, rank_1], [keras, keras_1] = _validated_and_keras(tmp_path, job, "build", "held_out",
                                                                     shards=((0, 1), (1, 2)))
    assert trained.evaluation.metrics == ["accuracy", "sparse_top_k_categorical_accuracy"]
    assert (trained.evaluation.every, trained.evaluation.batches, trained.evaluation.batch_size) == (2, 3, 5)
    assert set(ours) == set(keras) and ours["loss"] > 0
    for name, value in keras.items():
        assert ours[name] == pytest.approx(value, rel=1e-5), name
    assert rank_1["loss"] == pytest.approx(keras_1["loss"], rel=1e-5)


def test_a_datasets_validation_and_a_two_output_models_metrics_by_keras_names(tmp_path):
    job = _job(tmp_path, "dataset = 'evalnet:held_out_dataset'", metrics="metrics = ['accuracy']\n")
    trained, [ours], [keras] = _validated_and_keras(tmp_path, job, "build", "held_out")
    assert trained.evaluation.metrics == ["accuracy"] and trained.evaluation.source == "dataset"
    assert ours["loss"] == pytest.approx(keras["loss"], rel=1e-5)
    assert ours["accuracy"] == pytest.approx(keras["accuracy"], rel=1e-6)
    job = _job(tmp_path, "entry = 'evalnet:held_out_two'", model="heads", data="two")
    trained, [ours], [keras] = _validated_and_keras(tmp_path, job, "heads", "held_out_two")
    assert trained.evaluation.metrics == ["cls_mae", "reg_mae"]
    for name in ("loss", "cls_mae", "reg_mae"):
        assert ours[name] == pytest.approx(keras[name], rel=1e-5), name


@pytest.mark.parametrize(("section", "message"), [
    ("[eval]\nevery = 2\n", "[eval]: expected one of entry = 'module:function'"),
    ("[eval]\nentry = 'evalnet:held_out'\ndataset = 'evalnet:held_out_dataset'\n", "got both"),
    ("[eval]\nentry = 'evalnet:held_out'\nevery = -1\n", "eval.every = -1: expected a whole number >= 0"),
    ("[eval]\nentry = 'evalnet:held_out'\nmetrics = 'accuracy'\n", "eval.metrics = 'accuracy': expected a list"),
    ("[eval]\nentry = 'evalnet:held_out'\ncolour = 1\n", "unknown key eval.colour; [eval] allows: batch_size, batches"),
])
def test_a_bad_eval_table_is_one_line(tmp_path, section, message):
    (tmp_path / "job.toml").write_text("[model]\nentry = 'evalnet:build'\n[data]\nentry = 'evalnet:batches'\n"
                                       f"{section}[train]\nbatch_size = 8\n")
    with pytest.raises(JobError, match=message.replace("[", r"\[").replace("]", r"\]")):
        load_job(tmp_path / "job.toml")
    (tmp_path / "zoo.toml").write_text("[model]\ntype = 'wrn'\n[eval]\nentry = 'm:f'\n[train]\nbatch_size = 2\n")
    with pytest.raises(JobError, match="validation is for a \\[model\\] entry"):
        load_job(tmp_path / "zoo.toml")


@pytest.mark.parametrize(("source", "metrics", "message"), [
    ("entry = 'evalnet:held_out'", "metrics = ['no_such_metric']\n", "unknown Keras metric 'no_such_metric'"),
    ("entry = 'evalnet:held_out'", "metrics = ['AUC']\n", "is not a mean over samples"),
    ("dataset = 'evalnet:too_few'", "", "eval.dataset = 'evalnet:too_few': fn(5, 0, 1) gives 1 batches; [eval] "
                                        "batches = 3 asks for more"),
    ("entry = 'evalnet:missing'", "", "has no attribute 'missing'"),
    ("entry = 'evalnet:no_labels'", "", "eval.entry = 'evalnet:no_labels': batch 0 has no key 'labels'"),
    ("entry = 'evalnet:narrow'", "", "eval.entry = 'evalnet:narrow': batch 0: 'features' has shape [5, 4]; expected "
                                    "[5, 6]"),
])
def test_a_bad_validation_source_or_metric_is_one_line(tmp_path, source, metrics, message):
    job = _job(tmp_path, source, metrics=metrics)
    with pytest.raises(JobError) as caught:
        build(job)
    text = str(caught.value)
    assert "\n" not in text and message in text, text


def test_eval_every_on_the_command_line_needs_an_eval_table(tmp_path):
    from launcher.core import _eval_every
    from launcher.errors import LaunchError

    job = _job(tmp_path, "entry = 'evalnet:held_out'")
    assert _eval_every(job, 7).evaluation["every"] == 7 and job.evaluation["every"] == 2
    with pytest.raises(LaunchError, match=r"--eval-every 3: .* has no \[eval\] table; add one"):
        _eval_every(load_job("wrn-tiny"), 3)
    with pytest.raises(LaunchError, match="--eval-every -1: expected a whole number >= 0"):
        _eval_every(job, -1)
