"""A captured step with no costs (structure only) is placed, with one warning naming how to cost it."""

from __future__ import annotations

import logging

import pytest

tf = pytest.importorskip("tensorflow")

import pardnn  # noqa: E402
import pardnn.tf  # noqa: E402
from pardnn.emulation.checks import check_placement  # noqa: E402

pytestmark = [pytest.mark.tf, pytest.mark.slow]


def test_partition_a_captured_resnet50_warns_once(caplog):
    """The README's path without profile or estimate: every op costs 0 µs, which crashed the guard."""
    graph = tf.Graph()
    with graph.as_default():
        tf.keras.utils.set_random_seed(0)
        images = tf.compat.v1.placeholder(tf.float32, [2, 32, 32, 3], name="images")
        labels = tf.compat.v1.placeholder(tf.int32, [2], name="labels")
        model = tf.keras.applications.ResNet50(weights=None, input_shape=(32, 32, 3), classes=10)
        loss = tf.reduce_mean(tf.keras.losses.sparse_categorical_crossentropy(labels, model(images)), name="loss")
        train_op = tf.compat.v1.train.AdamOptimizer(1e-3).minimize(loss)
    cost = pardnn.tf.capture(graph, [loss, train_op])
    assert cost.n > 1000 and not cost.comp_us.any()
    machine = pardnn.Machine(devices=4, memory="16GiB")
    with caplog.at_level(logging.WARNING, logger="pardnn"):
        result = pardnn.partition(cost, machine)
    check_placement(cost, machine, result.placement, colocation=True)
    assert result.report.evaluation.memory_fits and result.report.ccr is None
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING and r.name.startswith("pardnn")]
    assert len(warned) == 1, warned
    assert f"({cost.n:,} ops) costs 0 us" in warned[0] and "pardnn.tf.profile or pardnn.tf.estimate" in warned[0]
