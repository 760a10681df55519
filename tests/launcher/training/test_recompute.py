"""--recompute: the blocks tf.recompute_grad wraps, and the same training as without it."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from launcher.errors import LaunchError

ROOT = Path(__file__).resolve().parents[3]

pytestmark = [pytest.mark.tf, pytest.mark.slow]


def _losses(job, recompute: bool, steps: int = 3) -> tuple[int, list[float]]:
    import tensorflow as tf

    from jobs import build
    from jobs.models.layers import recomputing
    from launcher.training.recompute import count_blocks

    if recompute:
        with recomputing():
            trained = build(job, batch_size=8)
    else:
        trained = build(job, batch_size=8)
    with tf.compat.v1.Session(graph=trained.graph) as session:
        session.run(trained.init_op)
        losses = [float(session.run(trained.fetches, feed_dict=trained.feed_fn(i))[1]) for i in range(steps)]
    return count_blocks(trained.graph), losses


@pytest.mark.parametrize(("job", "blocks"), [
    pytest.param("word-rnn-tiny", 2 * 10, id="word-rnn-tiny"),  # 2 LSTM layers × 10 time steps
    # Conv2D, BatchNormalization, ReLU, MaxPooling2D twice, Flatten, Dense twice; not the Dropout
    pytest.param(str(ROOT / "examples" / "keras_cnn" / "job.toml"), 2 * 4 + 3, id="keras-cnn"),
])
def test_recompute_wraps_the_blocks_and_trains_the_same_losses(job, blocks):
    from jobs import load_job

    loaded = load_job(job)
    plain_blocks, plain = _losses(loaded, False)
    wrapped_blocks, wrapped = _losses(loaded, True)
    assert (plain_blocks, wrapped_blocks) == (0, blocks)
    np.testing.assert_allclose(wrapped, plain, rtol=1e-5)


def test_a_graph_without_blocks_is_refused_naming_why():
    import tensorflow as tf

    from launcher.training.recompute import check_blocks

    with pytest.raises(LaunchError, match="has no blocks to recompute"):
        check_blocks(type("Job", (), {"name": "mine"})(), tf.Graph())
