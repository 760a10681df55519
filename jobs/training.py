"""Build a job's training graph (``build``) and export its cost graph (``export_graph``).

``build(job)`` creates a fresh ``tf.Graph`` with the model's forward pass (a zoo model's, or the job's
``[model] entry``: :mod:`jobs.usermodel`), its input (fed, or a ``[data] dataset``:
:mod:`jobs.datasets`), the gradients (ungated: :func:`_gating`), an optional ``gradient_hook`` (the
launcher's allreduce), clipping, the optimizer's update, the ``[eval]`` validation beside it
(:mod:`jobs.evaluation`) and the initializer. Nothing runs and no variable is allocated. Two builds
of one job have the same op names and initial weights (docs/internals.md, "The job's graph");
costing a step is :func:`jobs.costing.cost_graph`, re-exported here.
"""

from __future__ import annotations

import contextlib
import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import tensorflow as tf

from jobs.config import Job, JobError, load_job
from jobs.costing import COSTS, cost_graph
from jobs.data import batches
from jobs.datasets import Stream
from jobs.evaluation import Evaluation, evaluation
from jobs.export import describe_keras, describe_variables
from jobs.keras3 import is_keras3, reset_names, seed_keras3
from jobs.microbatch import mean_gradients, micro_size, split_feed, zoo_copies
from jobs.models import model_module
from jobs.models.layers import computing
from jobs.optimizers import keras_update, order_initializers
from jobs.precision import Scaling
from jobs.recipe import Recipe, recipe
from jobs.usermodel import build_net, entry_points, feeder
from pardnn.costs.graph import CostGraph
from pardnn.tfstack import check_keras

v1 = tf.compat.v1
logger = logging.getLogger(__name__)

__all__ = ["GradientHook", "TrainGraph", "build", "cost_graph", "export_graph"]

GradsAndVars = list[tuple[tf.Tensor, tf.Variable]]
GradientHook = Callable[[GradsAndVars], GradsAndVars]


@dataclass
class TrainGraph:
    """One training step of a job, built in its own graph (see the module docstring).

    ``feed_fn(i)`` is the feed dict of iteration ``i`` (placeholder → array); ``fetches`` is
    ``[train_op, loss]``; ``variables`` are all global variables (weights, batch-norm statistics,
    optimizer slots) for broadcasting; ``parameters`` counts the trainable weights; ``recipe`` is what
    the step trains with and where each setting came from; ``gradients``: the names of the ops whose
    outputs are the gradients the update reads (before a hook or clipping); ``learning_rate``: the rate
    a Keras optimizer's update applies (a schedule's value at the step; ``None``: a constant rate);
    ``loss_scale`` and ``finite``: with loss scaling (:mod:`jobs.precision`), the scale the step used
    and whether it applied its update (every averaged gradient finite), else ``None``; ``model``: which
    variables are the model's weights, for writing it in Keras' files (:mod:`jobs.export`); ``stream``: a
    ``[data] dataset`` read in the graph (:mod:`jobs.datasets`; ``feed_fn`` then feeds nothing);
    ``evaluation``: the ``[eval]`` validation beside the step (:mod:`jobs.evaluation`).
    """

    graph: tf.Graph
    loss: tf.Tensor
    train_op: tf.Operation
    init_op: tf.Operation
    variables: list[tf.Variable]
    feed_fn: Callable[[int], dict[tf.Tensor, np.ndarray]]
    samples_per_step: int
    tokens_per_step: int | None
    fetches: list[Any]
    inputs: dict[str, tf.Tensor]
    job: Job
    batch_size: int
    parameters: int
    build_seconds: float
    recipe: Recipe
    gradients: tuple[str, ...] = ()
    learning_rate: tf.Tensor | None = None
    loss_scale: tf.Tensor | None = None
    finite: tf.Tensor | None = None
    model: dict[str, Any] | None = None
    stream: Stream | None = None
    evaluation: Evaluation | None = None


def _no_feed(iteration: int) -> dict[str, np.ndarray]:
    """A ``[data] dataset`` step's batch: none to feed (the placeholders default to the stream's)."""
    return {}



def _gating(variables: list[tf.Variable]) -> int:
    """The gradients' gating: none (``GATE_NONE``) when every variable is a resource variable, as the
    micro-batched step's ``tf.gradients`` (:func:`jobs.microbatch.mean_gradients`).

    The optimizer's default (``GATE_OP``) wraps each op's input gradients in ``tuple``: an ``Identity``
    per gradient and a ``NoOp`` per op, 44 % of a paper LSTM's step (char-crn-2: 106,045 ops gated,
    59,769 not) and 40 % of its build time, for a guard that resource variables do not need (a gradient
    reads the forward's snapshot of a variable, made before any update can run). The steps with M = 1
    and M > 1 micro-batches are then the same ops per micro-batch, so a plan search compares like with
    like. A reference variable (``VariableV2``, which a gradient reads live) keeps ``GATE_OP``.
    """
    from tensorflow.python.ops.resource_variable_ops import is_resource_variable

    if all(is_resource_variable(var) for var in variables):
        return v1.train.Optimizer.GATE_NONE
    return v1.train.Optimizer.GATE_OP


def _zoo_precision(job: Job, module: Any) -> Any:
    """The zoo model's layers computing in the job's precision (:func:`jobs.models.layers.computing`)."""
    if job.precision in ("auto", "float32"):
        return contextlib.nullcontext()
    if job.precision not in getattr(module, "PRECISIONS", ("float32",)):
        raise JobError(f"{job.source}: train.precision = {job.precision!r}: the zoo model {job.model!r} computes "
                       "in float32 only (the transformer computes in any); mixed precision is also for a Keras "
                       "[model] entry")
    return computing({"mixed_float16": tf.float16, "mixed_bfloat16": tf.bfloat16}[job.precision])


def keras_variables(optimizer: Any, user: Any, grads_and_vars: GradsAndVars) -> list[tuple[tf.Tensor, Any]]:
    """``grads_and_vars`` with a Keras 3 optimizer's variables as Keras 3 variables (its slots are named by their
    paths, AdamW's exclusions match them); a tf.keras optimizer's as they are."""
    if not is_keras3(optimizer) or user is None or user.keras is None or not is_keras3(user.keras):
        return grads_and_vars
    own = {id(v.value): v for v in user.keras.variables}
    return [(grad, own.get(id(var), var)) for grad, var in grads_and_vars]


def _dense_gradients(grads_and_vars: GradsAndVars) -> GradsAndVars:
    out: GradsAndVars = []
    with v1.name_scope("dense_gradients"):
        for grad, var in grads_and_vars:
            if isinstance(grad, tf.IndexedSlices):
                shape = var.shape.as_list()
                values = tf.reshape(grad.values, [-1, *shape[1:]])
                grad = tf.math.unsorted_segment_sum(values, grad.indices, shape[0])
            out.append((grad, var))
    return out


def build(job: Job, batch_size: int | None = None, gradient_hook: GradientHook | None = None, *,
          shard: tuple[int, int] = (0, 1), micro_batches: int | None = None) -> TrainGraph:
    """The training graph of ``job``.

    Parameters
    ----------
    job:
        A validated job (:func:`jobs.load_job`).
    batch_size:
        Overrides ``job.batch_size`` (samples per step on this node).
    gradient_hook:
        ``hook(grads_and_vars) -> grads_and_vars``, applied between ``compute_gradients`` and
        ``apply_gradients`` (e.g. Horovod's allreduce).
    shard:
        ``(rank, ranks)``: which part of the data this data-parallel rank reads (default all); a
        ``[data] entry`` gets them as its ``rank, ranks``. (``pardnn-launch`` keeps the default and
        shards by iteration: node ``r`` of ``N`` reads batch ``i·N + r`` at its step ``i``.)
    micro_batches:
        Overrides ``job.micro_batches``: M > 1 splits the batch into M micro-batches whose gradients
        are summed into one update (:mod:`jobs.microbatch`); 1 builds the plain step.

    Raises
    ------
    JobError
        A batch size < 1, micro-batches that do not divide it, the job's data files missing or malformed, or
        its entry points (the user's model and data functions) missing, failing or returning what they
        should not.
    """
    check_keras("jobs.build")  # Keras 2 as tf.keras (pardnn.tfstack)
    batch = job.batch_size if batch_size is None else batch_size
    if isinstance(batch, bool) or not isinstance(batch, int) or batch < 1:
        raise JobError(f"{job.source}: batch size {batch!r}: expected a whole number >= 1")
    micro = job.micro_batches if micro_batches is None else micro_batches
    if micro == "auto":
        raise JobError(f"{job.source}: micro_batches 'auto' is chosen by pardnn-launch and pardnn max-batch, which "
                       "build each M they try; a single graph needs a whole number M >= 1 (--micro-batches M)")
    size = micro_size(job, batch, micro)
    started = time.perf_counter()
    user = entry_points(job, batch, shard)  # the job's own model and data functions, if any
    streamed = user is not None and user.dataset is not None
    feed = batches(job, batch, shard=shard) if user is None or (user.data is None and not streamed) else None
    reset_names()  # Keras 3's layer names start afresh in each build, as tf.keras' do in a new graph
    graph = tf.Graph()
    with graph.as_default():
        tf.keras.utils.set_random_seed(job.seed)
        seed_keras3(job.seed)
        if user is not None and user.dataset is not None:
            user.stream = Stream(job, user.dataset, batch, shard)
        if user is not None and user.model is not None:
            net, made = build_net(job, user, batch, graph, micro)
        elif micro > 1:
            if user is not None:
                raise JobError(f"{job.source}: micro_batches {micro} with a [data] entry for the zoo model "
                               f"{job.model!r} is not built yet; use micro_batches = 1 or the zoo's data")
            module = model_module(job.model)
            with _zoo_precision(job, module):
                net = zoo_copies(lambda size: module.build(dict(job.model_params), size), micro, size)
            made = recipe(job)
        else:
            module = model_module(job.model)
            with _zoo_precision(job, module):
                net = module.build(dict(job.model_params), batch)
            made = recipe(job)
        if user is not None and user.keras is not None:
            model = describe_keras(user.keras, user.layout, net.inputs)
        else:  # the zoo's variables, or a step's: those made before the optimizer's
            model = describe_variables(v1.global_variables())
        logger.info("%s trains with %s%s", job.name, made.describe(),
                    f"; {micro} micro-batches of {size}" if micro > 1 else "")
        optimizer = made.make_optimizer()
        trainable = v1.trainable_variables()
        scaling = Scaling(made.loss_scale) if made.loss_scale is not None else None
        scaled = scaling.scale_loss if scaling is not None else (lambda loss: loss)
        if net.micro_losses:
            grads_and_vars = mean_gradients([scaled(loss) for loss in net.micro_losses], trainable, _dense_gradients)
        elif made.keras is not None:  # ungated, as _gating's GATE_NONE
            grads_and_vars = _dense_gradients(list(zip(tf.gradients(scaled(net.loss), trainable), trainable)))
        else:
            grads_and_vars = _dense_gradients(optimizer.compute_gradients(scaled(net.loss), var_list=trainable,
                                                                          gate_gradients=_gating(trainable)))
        if scaling is not None:
            grads_and_vars = scaling.unscale(grads_and_vars)
        gradients = tuple(grad.op.name for grad, _ in grads_and_vars if grad is not None)
        unused = [var.name for grad, var in grads_and_vars if grad is None]
        if unused and job.entry is not None:
            raise JobError(f"{job.source}: model.entry = {job.entry!r}: trainable variables without a gradient "
                           f"from the loss: {', '.join(unused[:5])}; expected every trainable variable to take "
                           "part in the loss (or create it with trainable=False)")
        if unused:
            raise AssertionError(f"model {job.model}: variables without a gradient: {unused[:5]}")
        if gradient_hook is not None:
            grads_and_vars = list(gradient_hook(grads_and_vars))
        scale_update = scaling.check(grads_and_vars) if scaling is not None else None  # on the averaged gradients
        if made.grad_clip > 0:
            with v1.name_scope("clip_gradients"):
                clipped, _ = tf.clip_by_global_norm([grad for grad, _ in grads_and_vars], made.grad_clip)
                grads_and_vars = list(zip(clipped, (var for _, var in grads_and_vars)))
        rate = None
        if made.keras is not None:
            # Keras 2's skipped step counts; Keras 3's does not (every assignment gated)
            counters = [] if is_keras3(optimizer) else [optimizer.iterations]
            with scaling.gated(counters) if scaling is not None else contextlib.nullcontext():
                try:
                    apply, rate = keras_update(optimizer, keras_variables(optimizer, user, grads_and_vars))
                except Exception as error:  # the user's schedule or optimizer, evaluated in a graph
                    raise JobError(f"{job.source}: the optimizer {made.optimizer} (learning_rate "
                                   f"{type(made.options.get('learning_rate')).__name__}) could not build its update in "
                                   f"the step's graph: {type(error).__name__}: {str(error).splitlines()[0]}; expected "
                                   "a schedule whose __call__(step) is TensorFlow ops (tf.where, not a Python if on "
                                   "the step)") from error
        else:
            apply = optimizer.apply_gradients(grads_and_vars, name="apply_gradients")
        extras = [] if scale_update is None else [scale_update]
        train_op = tf.group(apply, *net.update_ops, *extras, name="train_step")
        validation = None
        if job.evaluation is not None:  # beside the step, after it, so the step's op names are a build's without
            if user is None or user.keras is None or user.layout is None:
                raise JobError(f"{job.source}: [eval] validates a Keras model; model.entry = {job.entry!r} returned "
                               "a step (loss and inputs)")
            validation = evaluation(job, user.keras, made, user.layout, net.inputs, batch)
        if made.keras is not None:
            order_initializers(v1.global_variables())
        init_op = v1.global_variables_initializer()
        stream = user.stream if user is not None else None
        if stream is not None:
            init_op = tf.group(init_op, stream.initializer, name="init_with_input")
        variables = v1.global_variables()
    inputs = net.inputs
    if stream is not None:
        feed = _no_feed
    elif feed is None:
        assert user is not None
        feed = feeder(job, user, inputs, batch)

    split = micro > 1 and (user is None or user.model is None)  # a zoo model's copies have their own inputs

    def feed_fn(iteration: int) -> dict[tf.Tensor, np.ndarray]:
        values = feed(iteration)
        return {inputs[name]: value for name, value in (split_feed(values, micro) if split else values).items()}

    parameters = sum(math.prod(var.shape.as_list()) for var in trainable)
    return TrainGraph(graph, net.loss, train_op, init_op, variables, feed_fn, batch, net.tokens_per_step,
                      [train_op, net.loss], inputs, job, batch, parameters, time.perf_counter() - started, made,
                      gradients, rate, None if scaling is None else scaling.scale,
                      None if scaling is None else scaling.finite, model, stream, validation)


def export_graph(job: Job | str | Path, path: str | Path, *, costs: str = "estimate", preset: str | None = None,
                 batch_size: int | None = None, steps: int | None = None) -> CostGraph:
    """Build ``job``'s training graph, cost it and write the native graph file ``path``.

    Parameters
    ----------
    job:
        A :class:`Job`, a job file or a preset name.
    path:
        ``.json`` or ``.json.gz`` file to write.
    costs, preset, steps:
        As ``costs``, ``device_preset`` and ``profile_steps`` of :func:`jobs.costing.cost_graph`:
        ``estimate`` (default; builds only, allocates nothing), ``profile`` or ``capture``.
    batch_size:
        Overrides the job's batch size.

    Returns
    -------
    CostGraph
        What was written; ``memory_limit_bytes`` is the job's ``[placement] memory``.
    """
    from pardnn.io import write_graph

    if costs not in COSTS:
        raise ValueError(f"costs={costs!r}: expected one of {', '.join(COSTS)}")
    loaded = job if isinstance(job, Job) else load_job(job)
    cost = cost_graph(build(loaded, batch_size), costs, device_preset=preset, profile_steps=steps)
    write_graph(cost, path)
    return cost
