"""A stand-in for the model zoo (``jobs``), implementing the jobs contract with a tiny dense model.

The launcher's tests run against it where they need things the real zoo does not offer: a model
small enough for 160 iterations in seconds on 2 cores, a job that fails on purpose (``fail_at``:
the rank given by ``fail_rank`` raises while feeding that iteration), and one whose replicas drift
apart (``skew_rank``: that rank applies its updates with twice the learning rate). Like batch norm,
the model keeps per-replica state: ``input_mean``, a non-trainable moving mean of each node's own
inputs, which differs between nodes by design.

Run under mpirun: ``python -m tests.launcher.standin --out DIR [--fail-at I] [launcher settings]``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np


@dataclass(frozen=True)
class Job:
    """The contract's ``jobs.Job`` fields (a dense model: ``layers`` widths, ``features`` inputs)."""

    name: str = "standin-tiny"
    path: Path | None = None
    model: str = "dense"
    model_params: dict[str, Any] = field(default_factory=lambda: {"features": 16, "layers": [32, 32], "classes": 4,
                                                               "clip": 5.0})
    batch_size: int = 8
    optimizer: str = "adam"
    learning_rate: float = 0.01
    seed: int = 0
    iterations: int = 150
    window: tuple[int, int] = (100, 150)
    devices_per_node: int = 2
    memory: str | None = None
    reserve: float = 0.1
    memory_heuristic: str = "overflow"
    run_order: bool = True
    costs: str = "profile"
    device_preset: str = "v100-32gb"
    profile_steps: int = 3
    stall_timeout: float | None = None
    data: dict[str, Any] = field(default_factory=dict)


@dataclass
class TrainGraph:
    graph: Any
    loss: Any
    train_op: Any
    init_op: Any
    variables: list[Any]
    feed_fn: Callable[[int], dict[Any, Any]]
    samples_per_step: int
    tokens_per_step: int | None
    fetches: list[Any]


class InjectedFailure(RuntimeError):
    """The failure a test asked for."""


def build(job: Job, batch_size: int | None = None, gradient_hook: Any = None, *,
          micro_batches: int | None = None) -> TrainGraph:
    """The contract's ``jobs.build`` for the dense stand-in (one batch per step: ``micro_batches`` 1 only)."""
    assert micro_batches in (None, 1), "the stand-in builds plain steps only"
    import tensorflow as tf

    batch = batch_size or job.batch_size
    params = job.model_params
    graph = tf.Graph()
    with graph.as_default():
        tf.keras.utils.set_random_seed(job.seed)
        tf.compat.v1.set_random_seed(job.seed)
        x = tf.compat.v1.placeholder(tf.float32, [batch, params["features"]], name="x")
        y = tf.compat.v1.placeholder(tf.int32, [batch], name="y")
        hidden = x
        widths = [*params["layers"], params["classes"]]
        width_in = params["features"]
        for index, width in enumerate(widths):
            with tf.compat.v1.variable_scope(f"dense{index}"):
                kernel = tf.compat.v1.get_variable("kernel", [width_in, width], use_resource=True)
                bias = tf.compat.v1.get_variable("bias", [width], initializer=tf.zeros_initializer(),
                                                 use_resource=True)
                hidden = tf.matmul(hidden, kernel) + bias
                if index < len(widths) - 1:
                    hidden = tf.nn.relu(hidden)
            width_in = width
        loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=hidden), name="loss")
        input_mean = tf.compat.v1.get_variable("input_mean", [params["features"]], trainable=False,
                                               initializer=tf.zeros_initializer(), use_resource=True)
        update_mean = input_mean.assign_sub(0.1 * (input_mean - tf.reduce_mean(x, axis=0))).op
        rank = os.environ.get("OMPI_COMM_WORLD_RANK", "0")
        rate = job.learning_rate * (2 if str(job.data.get("skew_rank")) == rank and gradient_hook else 1)
        optimizer = (tf.compat.v1.train.AdamOptimizer(rate) if job.optimizer == "adam"
                     else tf.compat.v1.train.MomentumOptimizer(rate, 0.9))
        grads_and_vars = optimizer.compute_gradients(loss)
        if gradient_hook is not None:
            grads_and_vars = gradient_hook(grads_and_vars)
        if params.get("clip"):  # as jobs/ does: clip_by_global_norm colocates each clipped gradient with it
            clipped, _ = tf.clip_by_global_norm([g for g, _ in grads_and_vars], params["clip"])
            grads_and_vars = list(zip(clipped, [v for _, v in grads_and_vars], strict=True))
        train_op = tf.group(optimizer.apply_gradients(grads_and_vars, name="apply"), update_mean, name="train")
        init_op = tf.compat.v1.global_variables_initializer()
        variables = tf.compat.v1.global_variables()

    fail_at = job.data.get("fail_at")
    fail_rank = str(job.data.get("fail_rank", 1))

    def feed_fn(index: int) -> dict[Any, Any]:
        rank = os.environ.get("OMPI_COMM_WORLD_RANK", "0")
        if fail_at is not None and gradient_hook is not None and rank == fail_rank and index // 2 == fail_at:
            raise InjectedFailure(f"injected failure while feeding iteration {fail_at}")
        rng = np.random.default_rng([job.seed, index])
        return {x: rng.standard_normal((batch, params["features"]), dtype=np.float32),
                y: rng.integers(0, params["classes"], batch, dtype=np.int32)}

    return TrainGraph(graph, loss, train_op, init_op, variables, feed_fn, batch, None, [train_op, loss])


def main(argv: list[str] | None = None) -> int:
    import launcher
    from launcher.cli import _configure_logging
    from launcher.env import launch_rank
    from launcher.rank.failure import exit_code
    from launcher.reporting import console

    console.start(launch_rank())  # as pardnn-launch does: rank-<r>.log and the filtered console

    parser = argparse.ArgumentParser(prog="standin")
    parser.add_argument("--out", required=True)
    parser.add_argument("--fail-at", type=int)
    parser.add_argument("--skew-rank", type=int)
    parser.add_argument("--settings", default="{}", help="JSON object of launcher settings")
    args = parser.parse_args(argv)
    _configure_logging(False)
    data: dict[str, Any] = {} if args.fail_at is None else {"fail_at": args.fail_at, "fail_rank": 1}
    if args.skew_rank is not None:
        data["skew_rank"] = args.skew_rank
    try:
        launcher.run(Job(data=data), build=build, out=args.out, **json.loads(args.settings))
    except BaseException as error:
        return exit_code(error)
    return 0


if __name__ == "__main__":
    sys.exit(main())
