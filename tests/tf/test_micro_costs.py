"""Costs of a micro-batched step: ``estimate`` and ``profile`` cost the M-copy graph
itself, so an op of micro-batch m is costed at batch B/M (what the same op costs in the plain step
at batch B/M), never as the full-batch op's time ÷ M, and every copy's activations have their own
sizes (the memory model sees all M)."""

from __future__ import annotations

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")

from jobs import build, load_job  # noqa: E402
from pardnn.tf import profile_with_report  # noqa: E402
from tests.helpers.builds import costed  # noqa: E402

pytestmark = pytest.mark.tf

MICRO = 4


def by_name(cost):
    return {name: (float(us), int(size)) for name, us, size in zip(cost.names, cost.comp_us, cost.out_bytes,
                                                                    strict=True)}


@pytest.mark.slow
def test_an_estimate_costs_each_micro_batch_at_its_own_batch():
    job = load_job("word-rnn-tiny")  # batch 16: micro-batches of 4 (each step built once per test run)
    micro, small, full = (by_name(costed(job, batch, m, "v100-32gb").graph) for batch, m in (
        (job.batch_size, MICRO), (job.batch_size // MICRO, 1), (job.batch_size, 1)))
    for index in range(MICRO):
        prefix = f"micro_{index}/"
        pairs = [(name, small[name.replace(prefix, "")]) for name in micro
                 if name.startswith(prefix) and name.replace(prefix, "") in small]
        forward = [name for name, _ in pairs if "gradients" not in name]
        backward = [name for name, _ in pairs if "gradients" in name]
        assert len(forward) > 300 and len(backward) > 300, (len(forward), len(backward))
        for name, at_small in pairs:  # time and output size: the op at batch B/M
            assert micro[name][0] == pytest.approx(at_small[0], rel=1e-9), name
            assert micro[name][1] == at_small[1], name
    matmuls = [name for name in micro if name.startswith("micro_1/word_rnn/rnn/") and name.endswith("/MatMul")]
    assert matmuls
    for name in matmuls:  # small kernels keep their fixed cost: far above the full batch's time ÷ M
        assert micro[name][0] > 2 * full[name.replace("micro_1/", "")][0] / MICRO, name
    # Every copy's activations, each at its own size: M times the plain step's at batch B/M.
    forward = [name for name in small if not name.startswith(("gradients/", "dense_gradients/"))
               and f"micro_0/{name}" in micro]
    copies = sum(micro[f"{scope}{name}"][1] for scope in (f"micro_{i}/" for i in range(MICRO)) for name in forward)
    assert copies == MICRO * sum(small[name][1] for name in forward) > 0


@pytest.mark.slow
def test_a_profile_times_every_micro_batch():
    train = build(load_job("word-rnn-tiny"), micro_batches=MICRO)
    cost, report = profile_with_report(train.graph, train.fetches, train.feed_fn, steps=2, warmup=1,
                                       init_ops=train.init_op, name="micro")
    assert report.timed == report.ops and not report.missing, report.missing[:5]
    times = dict(zip(cost.names, np.asarray(cost.comp_us), strict=True))
    for index in range(MICRO):
        copy = [us for name, us in times.items() if name.startswith(f"micro_{index}/")]
        assert len(copy) > 600 and sum(copy) > 0
