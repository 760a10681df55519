"""The step of M micro-batches written down from the step built at M = 2 (pardnn/batch/replicate.py) is the
step TensorFlow builds at M, op for op: every zoo family (LSTMs with embeddings, a wide ResNet
with batch norm, whose moving averages only the last copy updates, a transformer, an
encoder-decoder of 3-D convolutions) at M = 3 and 4, estimated on a V100. A Keras model, which
splits its full batch in the graph, is refused with the op's name."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

tf = pytest.importorskip("tensorflow")

from jobs import build, load_job  # noqa: E402
from pardnn.batch.replicate import difference, replicate  # noqa: E402
from pardnn.costs.presets import preset  # noqa: E402
from pardnn.errors import ScalingError  # noqa: E402
from pardnn.tf.estimate import estimate_parts  # noqa: E402
from tests.helpers.builds import ZOO_STEPS, costed  # noqa: E402

pytestmark = [pytest.mark.tf, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
V100 = preset("v100-32gb")


def parts(job, micro_size, micro):
    tf.compat.v1.reset_default_graph()
    train = build(job, micro_size * micro, micro_batches=micro)
    return estimate_parts(train.graph, train.fetches, V100, name="step")


@pytest.mark.xdist_group(ZOO_STEPS)  # the M = 2 step: the one the micro-batch and plan tests built in this worker
@pytest.mark.parametrize("name", ["word-rnn-tiny", "char-crn-tiny", "wrn-tiny", "trn-tiny", "e3d-tiny"])
def test_replicated_steps_equal_the_built_ones(name):
    job = load_job(name)  # built and costed once per test run (the zoo's preset is the V100's)
    two = costed(job, 2 * 2, 2, V100.name)
    for micro in (3, 4):
        built = costed(job, 2 * micro, micro, V100.name).graph
        made = replicate(two, micro, V100, name=built.name)
        assert made.n == built.n > two.graph.n
        assert difference(built, made) is None


def test_a_keras_model_that_splits_its_batch_in_the_graph_is_refused(tmp_path):
    folder = tmp_path / "keras_cnn"
    shutil.copytree(ROOT / "examples" / "keras_cnn", folder)
    with pytest.raises(ScalingError, match=r"op 'micro_batches/split_images' \(Split\) of no micro-batch splits"):
        replicate(parts(load_job(folder / "job.toml"), 4, 2), 4, V100)
