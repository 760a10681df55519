"""Run under ``mpirun -np 2`` by tests/mpi/test_recipes.py: every Keras optimizer of
tests/jobs/test_optimizers.py trained 5 steps on 2 ranks (each reads batch ``2·i + rank`` at step ``i``,
the gradients averaged by BACKEND), against Keras' own ``train_on_batch`` on the global batch.

Usage: ``python tests/mpi/every_optimizer.py BACKEND JOB_DIR OUT.json`` (BACKEND horovod or mpi4py);
rank 0 writes ``{optimizer: how far the worst weight is past rtol 1e-5, atol 1e-6}`` (<= 0: within).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

STEPS, REPLICA = 5, 4


def main(backend_name: str, job_dir: Path, out: Path) -> None:
    import tensorflow as tf

    from jobs import build, load_job
    from launcher.training.dataparallel import HorovodBackend, Mpi4pyBackend
    from tests.helpers.usermodels import JOB, MODELS, OPTIMIZERS

    if backend_name == "horovod":
        import horovod.tensorflow as hvd

        hvd.init()
        backend, rank = HorovodBackend(hvd), hvd.rank()
    else:
        from mpi4py import MPI

        backend, rank = Mpi4pyBackend(MPI.COMM_WORLD.Dup()), MPI.COMM_WORLD.Get_rank()
    folder = job_dir / f"rank{rank}"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "usernet.py").write_text(MODELS)
    sys.path.insert(0, str(folder))
    import usernet

    heads = JOB.replace(":build", ":heads").replace(":batches", ":two").replace("batch_size = 4",
                                                                                   f"batch_size = {REPLICA}")
    found = {}
    for optimizer, run_eagerly in OPTIMIZERS:
        job = folder / "job.toml"
        job.write_text(heads + f"[model.args]\noptimizer = {optimizer!r}\n")
        train = build(load_job(job), gradient_hook=backend.averager())
        with train.graph.as_default():
            broadcast = backend.broadcast(train.graph, train.variables)
        trainable = [v for v in train.variables if v.trainable][:6]
        with tf.compat.v1.Session(graph=train.graph) as session:
            session.run(train.init_op)
            session.run(broadcast)
            start = session.run(trainable)
            for step in range(STEPS):
                x, y = usernet.two(2 * step + rank, REPLICA, 0, 1)
                session.run(train.fetches, {train.inputs["features"]: x, train.inputs["labels/cls"]: y["cls"],
                                            train.inputs["labels/reg"]: y["reg"]})
            ours = session.run(trainable)
        if rank == 0:
            keras = usernet.heads(optimizer, run_eagerly=run_eagerly)
            keras.set_weights(start)
            for step in range(STEPS):
                parts = [usernet.two(2 * step + r, REPLICA, 0, 1) for r in range(2)]
                keras.train_on_batch(np.concatenate([p[0] for p in parts]),
                                     {key: np.concatenate([p[1][key] for p in parts]) for key in ("cls", "reg")})
            # how far past assert_allclose(rtol=1e-5, atol=1e-6) the worst weight is (<= 0: within it)
            found[optimizer] = max(float(np.max(np.abs(a - b) - (1e-6 + 1e-5 * np.abs(b))))
                                   for a, b in zip(ours, keras.get_weights(), strict=True))
    if rank == 0:
        out.write_text(json.dumps(found))


if __name__ == "__main__":
    main(sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3]))
