"""The losses a run trained, and the losses one device trains on the same global batch."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path

import numpy as np

from tests.helpers.shared import shared


def run_losses(run_dir: Path, ranks: int) -> np.ndarray:
    """The loss of every iteration of a ``pardnn-launch`` run, averaged over its replicas (each a mean
    over its own batch), from the ranks' ``rank-<r>.jsonl`` records."""
    per_rank = []
    for rank in range(ranks):
        records = [json.loads(line) for line in (run_dir / f"rank-{rank}.jsonl").read_text().splitlines()]
        per_rank.append([r["loss"] for r in records if r["event"] == "iteration"])
    return np.mean(per_rank, axis=0)


def one_device_losses(job_name: str, ranks: int, replica_batch: int, iterations: int, *,
                      recompute: bool = False) -> np.ndarray:
    """``job_name`` trained on one device at batch ``ranks × replica_batch``: at iteration ``i`` the
    batches ``i·ranks + r`` (r = 0..ranks-1) that the replicas read, concatenated. Trained once per test
    run for each set of arguments (:func:`tests.helpers.shared.shared`)."""
    return shared(("one-device losses", job_name, ranks, replica_batch, iterations, recompute),
                  lambda: _trained_losses(job_name, ranks, replica_batch, iterations, recompute))


def _trained_losses(job_name: str, ranks: int, replica_batch: int, iterations: int, recompute: bool) -> np.ndarray:
    import tensorflow as tf

    from jobs import build, load_job
    from jobs.data import batches
    from jobs.models.layers import recomputing

    job = load_job(job_name)
    with recomputing() if recompute else contextlib.nullcontext():
        trained = build(job, batch_size=ranks * replica_batch)
    replica = batches(job, replica_batch)
    losses = []
    with tf.compat.v1.Session(graph=trained.graph) as session:
        session.run(trained.init_op)
        for iteration in range(iterations):
            parts = [replica(iteration * ranks + rank) for rank in range(ranks)]
            feed = {trained.inputs[name]: np.concatenate([part[name] for part in parts]) for name in parts[0]}
            losses.append(float(session.run(trained.fetches, feed_dict=feed)[1]))
    return np.array(losses)
