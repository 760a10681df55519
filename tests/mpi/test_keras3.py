"""pardnn-launch trains a Keras 3 model (examples/keras3_mlp: ``import keras``) on 2 emulated nodes of 2
devices with the mpi4py allreduce as Keras 3 trains it on the global batch, and saves it as a ``.keras``
file Keras 3 loads. The oracle is Keras 3's own eager ``train_on_batch`` on the batches the replicas read,
concatenated, from the run's initial values. The latest stack's; skipped where ``keras`` is Keras 2."""

from __future__ import annotations

import json
import sys

import numpy as np
import pytest

from launcher.rank.checkpoint import load as read_checkpoint
from tests.helpers.mpi import LAUNCH, ROOT, mpirun_launch, output, read_records

pytest.importorskip("keras", minversion="3")
pytestmark = [pytest.mark.mpi, pytest.mark.slow]

EXAMPLE = ROOT / "examples" / "keras3_mlp"
ITERATIONS, NODE_BATCH, RANKS = 8, 8, 2


def _keras3(job):
    """Keras 3's own training on the global batch from the values the job's graph starts with: its loss at
    each step, and its variables after the last one by their graph names."""
    import tensorflow as tf

    from jobs import build

    train = build(job, batch_size=NODE_BATCH * RANKS)
    with tf.compat.v1.Session(graph=train.graph) as session:
        session.run(train.init_op)
        start = dict(zip((v.name for v in train.variables), session.run(train.variables)))
    sys.path.insert(0, str(EXAMPLE))
    sys.modules.pop("net", None)
    try:
        import net

        model = net.build()
    finally:
        sys.path.remove(str(EXAMPLE))
        sys.modules.pop("net", None)
    model.jit_compile = False  # Keras' step as written, not XLA's fusion of it
    names = train.model["weights"]
    for variable, name in zip(model.weights, names, strict=True):
        variable.assign(start[name])
    losses = []
    for step in range(ITERATIONS):
        parts = [net.batches(step * RANKS + rank, NODE_BATCH, 0, 1) for rank in range(RANKS)]
        out = model.train_on_batch(np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts]))
        losses.append(float(out[0]))
    return losses, dict(zip(names, (v.numpy() for v in model.weights), strict=True))


def test_two_nodes_train_a_keras_3_model_as_keras_3_at_the_same_global_batch(tmp_path):
    from jobs import load_job

    saved = tmp_path / "keras3-mlp.keras"
    proc, _ = mpirun_launch([*LAUNCH, str(EXAMPLE / "job.toml"), "--devices-per-node", "2", "--allreduce", "mpi4py",
                             "--batch-size", str(NODE_BATCH), "--iterations", str(ITERATIONS), "--window", "2:8",
                             "--checkpoint-every", str(ITERATIONS), "--save-model", str(saved),
                             "--out", str(tmp_path / "runs"), "--no-progress"],
                            timeout=400, cwd=tmp_path, horovod=False)
    assert proc.returncode == 0, output(proc)
    [run_dir] = [p for p in (tmp_path / "runs").iterdir() if p.is_dir()]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "complete" and summary["allreduce"] == "mpi4py"
    assert summary["consistency"]["variables_sha256_equal"] is True
    assert (summary["training"]["optimizer"], summary["training"]["schedule"]) == ("AdamW", "CosineDecay")
    theirs, weights = _keras3(load_job(EXAMPLE / "job.toml"))
    per_rank = [[r["loss"] for r in read_records(run_dir / f"rank-{rank}.jsonl") if r["event"] == "iteration"]
                for rank in range(RANKS)]
    np.testing.assert_allclose(np.mean(per_rank, axis=0), theirs, rtol=1e-5)  # mean losses of equal halves
    _, trained = read_checkpoint(run_dir / "checkpoint" / f"ckpt-{ITERATIONS:08d}.json")
    for name, value in weights.items():
        np.testing.assert_allclose(trained[name], value, rtol=1e-5, atol=1e-6, err_msg=name)
    import keras

    loaded = keras.saving.load_model(saved)
    for variable, name in zip(loaded.weights, weights, strict=True):
        np.testing.assert_array_equal(variable.numpy(), trained[name], err_msg=name)
