"""Run under ``mpirun -np 2`` by tests/mpi/test_recipes.py: every Keras optimizer of
tests/jobs/test_optimizers.py trained 5 steps on 2 ranks (each reads batch ``2·i + rank`` at step ``i``,
the gradients averaged by each of BACKENDS in turn), against Keras' own ``train_on_batch`` on the global
batch.

Usage: ``python tests/mpi/every_optimizer.py BACKENDS JOB_DIR OUT.json ORACLES_DIR`` (BACKENDS: horovod,
mpi4py, or both, comma-separated: one launch for both, as the launcher has them, mpi4py's MPI first and
Horovod started on it). The replicas hold the same weights, so rank r checks the optimizers
``i % 2 == r`` and writes ``OUT.json.<r>``: ``{backend: {optimizer: how far the worst weight is past rtol
1e-5, atol 1e-6}}`` (<= 0: within). Keras' weights are kept in ORACLES_DIR, keyed by the optimizer and
the starting weights, so the second backend reads what the first one trained.
"""

from __future__ import annotations

import hashlib
import json
import pickle
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

STEPS, REPLICA = 5, 4


def main(backend_names: str, job_dir: Path, out: Path, oracles: Path) -> None:
    import tensorflow as tf
    from mpi4py import MPI  # MPI first, with threads, as the launcher's topology starts it; Horovod joins it

    from jobs import build, load_job
    from launcher.training.dataparallel import HorovodBackend, Mpi4pyBackend
    from tests.helpers.usermodels import JOB, MODELS, OPTIMIZERS

    rank, backends = MPI.COMM_WORLD.Get_rank(), {}
    for name in backend_names.split(","):
        if name == "horovod":
            import horovod.tensorflow as hvd

            hvd.init()
            backends[name] = HorovodBackend(hvd)
        elif name == "mpi4py":
            backends[name] = Mpi4pyBackend(MPI.COMM_WORLD.Dup())
        else:
            raise SystemExit(f"every_optimizer.py: unknown backend {name!r}; expected horovod or mpi4py")
    folder = job_dir / f"rank{rank}"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "usernet.py").write_text(MODELS)
    sys.path.insert(0, str(folder))
    import usernet

    heads = JOB.replace(":build", ":heads").replace(":batches", ":two").replace("batch_size = 4",
                                                                                   f"batch_size = {REPLICA}")
    found: dict[str, dict[str, float]] = {name: {} for name in backends}
    for name, backend in backends.items():
        for index, (optimizer, run_eagerly) in enumerate(OPTIMIZERS):
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
            if index % 2 == rank:
                expected = _keras(usernet, optimizer, run_eagerly, start, oracles)
                # how far past assert_allclose(rtol=1e-5, atol=1e-6) the worst weight is (<= 0: within it)
                found[name][optimizer] = max(float(np.max(np.abs(a - b) - (1e-6 + 1e-5 * np.abs(b))))
                                             for a, b in zip(ours, expected, strict=True))
    out.with_name(f"{out.name}.{rank}").write_text(json.dumps(found))


def _keras(usernet, optimizer: str, run_eagerly: bool, start: list[np.ndarray], oracles: Path) -> list[np.ndarray]:
    """Keras' weights after STEPS steps on the global batch from ``start`` (read from ``oracles`` when a
    run before this one trained them from the same weights)."""
    key = hashlib.sha256(repr(optimizer).encode() + b"".join(w.tobytes() for w in start)).hexdigest()[:24]
    path = oracles / f"{key}.pkl"
    if path.exists():
        return pickle.loads(path.read_bytes())
    keras = usernet.heads(optimizer, run_eagerly=run_eagerly)
    keras.set_weights(start)
    for step in range(STEPS):
        parts = [usernet.two(2 * step + r, REPLICA, 0, 1) for r in range(2)]
        keras.train_on_batch(np.concatenate([p[0] for p in parts]),
                             {key: np.concatenate([p[1][key] for p in parts]) for key in ("cls", "reg")})
    weights = keras.get_weights()
    oracles.mkdir(parents=True, exist_ok=True)
    path.with_suffix(".part").write_bytes(pickle.dumps(weights))
    path.with_suffix(".part").replace(path)
    return weights


if __name__ == "__main__":
    main(sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3]), Path(sys.argv[4]))
