"""Mixed precision: a Keras model made under ``mixed_float16`` trains as Keras' own float16
``train_on_batch`` does (its loss scale, a step with a non-finite gradient skipped and the scale
halved), and float16 never trains without loss scaling."""

from __future__ import annotations

import logging

import numpy as np
import pytest

from jobs import load_job
from tests.helpers.usermodels import JOB, KERAS, MODELS, one_line_error, write

tf = pytest.importorskip("tensorflow")
pytestmark = [pytest.mark.tf, pytest.mark.filterwarnings("ignore:non-integer arguments to randrange")]

@pytest.fixture(autouse=True)
def _float32_after():
    """Keras' oracle models set the global policy as users do; the next test starts in float32."""
    yield
    tf.keras.mixed_precision.set_global_policy("float32")


MIXED = JOB.replace(":build", ":mixed").replace(":batches", ":overflowing")
STEPS = 6


def _ours(tmp_path, text):
    from jobs import build

    train = build(load_job(write(tmp_path, text, MODELS)))
    trainable = [v for v in train.variables if v.trainable]
    with tf.compat.v1.Session(graph=train.graph) as session:
        session.run(train.init_op)
        start = session.run(trainable)
        steps = [session.run([*train.fetches, train.loss_scale, train.finite], train.feed_fn(i)) for i in range(STEPS)]
        return train, start, session.run(trainable), steps


def test_a_float16_model_trains_as_keras_float16_does_skipping_overflowing_steps(tmp_path, caplog):
    with caplog.at_level(logging.INFO, logger="jobs"):
        train, start, ours, steps = _ours(tmp_path, MIXED)
    assert (train.recipe.precision, train.recipe.optimizer) == ("mixed_float16", "Adam")
    assert "precision mixed_float16 (the model's dtype policy); dynamic loss scaling (from 32768" in caplog.text
    assert tf.keras.mixed_precision.global_policy().name == "float32"  # the entry's policy did not leak
    scales = [float(step[2]) for step in steps]
    applied = [bool(step[3]) for step in steps]
    assert applied == [True, True, False, True, True, False]  # iterations 2 and 5 overflow float16
    assert scales == [32768.0, 32768.0, 32768.0, 16384.0, 16384.0, 16384.0]

    import usernet

    keras = usernet.mixed()
    keras.set_weights(start)
    losses = []
    for step in range(STEPS):
        losses.append(keras.train_on_batch(*usernet.overflowing(step, 4, 0, 1)))
    assert float(keras.optimizer.loss_scale) == 8192.0  # Keras halved twice too
    for mine, their in zip(ours, keras.get_weights(), strict=True):
        np.testing.assert_allclose(mine, their, rtol=1e-3, atol=1e-4)  # float16's tolerance
    finite = [i for i in range(STEPS) if applied[i]]
    np.testing.assert_allclose([steps[i][1] for i in finite], [losses[i] for i in finite], rtol=1e-3)


def test_the_job_file_asks_for_mixed_float16_and_gets_loss_scaling(tmp_path, caplog):
    """precision = 'mixed_float16' on an uncompiled float32 model with the job file's fused Adam: the
    layers compute in float16, and the update is Keras' Adam behind dynamic loss scaling."""
    from jobs import build

    text = JOB + "precision = 'mixed_float16'\noptimizer = 'adam'\nloss = 'sparse_categorical_crossentropy'\n"
    with caplog.at_level(logging.INFO, logger="jobs"):
        train = build(load_job(write(tmp_path, text, MODELS.replace("def build():", "def build(unused=None):"))))
    assert train.recipe.loss_scale is not None and train.recipe.keras is not None
    assert "precision mixed_float16 (job file); dynamic loss scaling" in caplog.text
    kinds = {op.type for op in train.graph.get_operations() if op.name.startswith("net/dense/")}
    assert any(op.get_attr("T") == tf.float16 for op in train.graph.get_operations()
               if op.type == "MatMul" and op.name.startswith("net/"))
    assert "ResourceApplyAdam" not in {op.type for op in train.graph.get_operations()} and kinds
    with tf.compat.v1.Session(graph=train.graph) as session:
        session.run(train.init_op)
        out = [session.run([*train.fetches, train.loss_scale, train.finite], train.feed_fn(i)) for i in range(4)]
    # float16 gradients of a float16 softmax overflow at 2^15: the scale halves until a step applies
    scale = 2.0 ** 15
    for _, loss, used, applied in out:
        assert np.isfinite(loss) and used == scale
        scale = scale if applied else scale / 2
    assert out[-1][3]


def test_max_batch_prints_float32_beside_the_precision_asked(tmp_path, capsys):
    """pardnn max-batch --precision mixed_float16 on a Keras job: float32's table, then float16's, whose
    one-device batch is larger (its float16 activations take 2 bytes)."""
    from pardnn.cli import main

    path = write(tmp_path, JOB.replace("batch_size = 4", "batch_size = 8") + "[model.args]\nwidth = 64\n", KERAS)
    assert main(["max-batch", str(path), "--precision", "mixed_float16", "--devices", "1", "--memory", "1MiB",
                 "--cache", "", "-q"]) == 0
    out = capsys.readouterr().out
    tables = out.split("; precision ")[1:]
    assert [table.split("\n")[0] for table in tables] == ["float32", "mixed_float16"]
    batches = [int(table.split("\n")[2].split()[1]) for table in tables]
    assert batches[1] > batches[0] > 0


def test_a_new_optimizer_compiled_under_mixed_float16_fails_in_one_line_saying_what_to_do(tmp_path):
    text = MIXED.replace(":overflowing", ":batches") + "[model.args]\noptimizer = 'tf.keras.optimizers.Adam(0.01)'\n"
    one_line_error(write(tmp_path, text, MODELS), "model.entry = 'usernet:mixed': ",
                   "under mixed_float16, Keras 2.15's compile in a graph takes only tf.keras.optimizers.legacy "
                   "optimizers: compile with tf.keras.optimizers.legacy.<Name>(...)")
