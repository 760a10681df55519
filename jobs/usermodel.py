"""The user's own model and data in a job: ``[model] entry`` and ``[data] entry`` (TensorFlow side).

:func:`jobs.build` calls :func:`entry_points` (import the functions, read batch 0), then, inside its fresh
``tf.Graph`` and after seeding, :func:`build_net`, and :func:`feeder` for the batches. The model entry
(called with ``[model.args]``, plus ``batch_size=`` when it takes it) returns a Keras model (tf.keras or
Keras 3: :mod:`jobs.kerasnet`, :mod:`jobs.recipe`) or a step (``loss``, ``inputs`` and optionally
``update_ops``, ``tokens_per_step``); the data entry ``fn(iteration, batch_size, rank, ranks)`` is read and
checked by :mod:`jobs.userbatch`. Every mistake is a one-line JobError; the rules: docs/user-models.md.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import tensorflow as tf

from jobs.config import Job, JobError
from jobs.datasets import Stream, first_batch
from jobs.entrypoints import DATA_EXPECTED, MODEL_EXPECTED, call, model_error, resolve, takes
from jobs.keras3 import graph_variable, is_keras3, is_model
from jobs.kerasnet import keras_net
from jobs.models.layers import Net
from jobs.precision import policy
from jobs.recipe import Recipe, recipe
from jobs.userbatch import Batch, Layout, as_dict, check_batch

__all__ = ["Entries", "build_net", "entry_points", "feeder"]

logger = logging.getLogger(__name__)


@dataclass
class Entries:
    """A job's entry points: the model function, the raw batch of an iteration, batch 0, and (for a
    Keras model) the layout its batches are read by."""

    model: Callable[..., Any] | None
    data: Callable[[int], Any] | None
    first: Any = None
    layout: Layout | None = None
    keras: Any = None  # the tf.keras.Model built in the graph, once build_net made it
    dataset: Callable[..., Any] | None = None  # [data] dataset: fn(batch_size, rank, ranks) -> tf.data.Dataset
    stream: Stream | None = None  # that dataset in the step's graph (jobs.datasets), once made


def entry_points(job: Job, batch: int, shard: tuple[int, int]) -> Entries | None:
    """Import the job's entry functions and read batch 0 (``None``: a zoo model on the zoo's data)."""
    if job.entry is None and job.data_entry is None:
        return None
    model = resolve(job, "model.entry", job.entry) if job.entry is not None else None
    if job.dataset is not None:
        function = resolve(job, "data.dataset", job.dataset)
        return Entries(model, None, first_batch(job, function, batch, shard), dataset=function)
    data: Callable[[int], Any] | None = None
    first = None
    if job.data_entry is not None:
        entry = job.data_entry
        function = resolve(job, "data.entry", entry)
        rank, ranks = shard

        def data(iteration: int) -> Any:
            return call(job, "data.entry", entry, function, (iteration, batch, rank, ranks), {}, DATA_EXPECTED)

        first = data(0)
    return Entries(model, data, first)


def _quiet() -> contextlib.AbstractContextManager[Any]:
    """Silence TensorFlow's deprecation notices: Keras in graph mode calls deprecated internals
    (batch norm's ``_colocate_with``), which nobody running a job can act on."""
    try:
        from tensorflow.python.util import deprecation

        return deprecation.silence()
    except (ImportError, AttributeError):
        return contextlib.nullcontext()


def build_net(job: Job, entries: Entries, batch: int, graph: tf.Graph, micro: int = 1) -> tuple[Net, Recipe]:
    """Call the model entry inside ``graph``; its :class:`Net` and what it trains with (see the module docstring).
    ``micro`` > 1: a Keras model is called once per micro-batch (:mod:`jobs.microbatch`); a step cannot be."""
    assert entries.model is not None and job.entry is not None
    kwargs = dict(job.model_params)
    if takes(entries.model, "batch_size"):
        kwargs["batch_size"] = batch
    with _quiet(), policy(job.precision):
        result = call(job, "model.entry", job.entry, entries.model, (), kwargs, MODEL_EXPECTED)
        if is_model(result):
            if _made_elsewhere(result, graph):
                raise model_error(job, "it returned a tf.keras.Model made outside the graph of jobs.build (at import "
                                  "time?): create the model inside the function")
            made = recipe(job, result)
            for method in made.ignored:
                logger.warning("%s: model.entry = %r: %s is not run: pardnn builds the step from the loss, the "
                               "optimizer and the model's update ops", job.source, job.entry, method)
            net, entries.layout = keras_net(job, result, made, entries.first, batch, micro, entries.stream)
            entries.keras = result
            return net, made
    if entries.stream is not None:
        raise JobError(f"{job.source}: model.entry = {job.entry!r}: it returned a step (loss and inputs), whose "
                       f"placeholders data.dataset = {job.dataset!r} cannot feed; return the tf.keras.Model, or give "
                       "the batches with data.entry = 'module:function'")
    if micro > 1:
        raise JobError(f"{job.source}: model.entry = {job.entry!r}: it returned a step (loss and inputs), which "
                       f"cannot be split into micro_batches = {micro}; "
                       "return the tf.keras.Model, or set micro_batches = 1")
    return _step_net(job, result, graph), recipe(job)


def _made_elsewhere(model: Any, graph: tf.Graph) -> bool:
    """Whether ``model`` was made outside ``graph`` (at import time, eagerly): its variables are not the graph's."""
    if not is_keras3(model):
        return not hasattr(model, "get_updates_for")  # Keras 2's v1 model class, made in a graph
    return any(getattr(graph_variable(v), "graph", None) is not graph for v in model.variables)


def _field(result: Any, name: str) -> Any:
    return result.get(name) if isinstance(result, Mapping) else getattr(result, name, None)


def _step_net(job: Job, result: Any, graph: tf.Graph) -> Net:
    loss, inputs = _field(result, "loss"), _field(result, "inputs")
    if loss is None or inputs is None:
        raise model_error(job, f"it returned {type(result).__name__}" + (
            " without loss and inputs" if isinstance(result, Mapping) or hasattr(result, "__dict__") else ""))
    if not isinstance(loss, tf.Tensor) or loss.graph is not graph:
        raise model_error(job, f"loss is {type(loss).__name__}, not a tensor of the graph jobs.build made "
                           "(create everything inside the function)")
    if loss.shape.rank != 0:
        raise model_error(job, f"loss has shape {loss.shape.as_list()}, not a scalar (reduce it: tf.reduce_mean)")
    if (not isinstance(inputs, Mapping) or not inputs
            or not all(isinstance(k, str) and isinstance(v, tf.Tensor) and v.graph is graph
                       for k, v in inputs.items())):
        raise model_error(job, "inputs is not a non-empty dict {name: placeholder} of the graph jobs.build made")
    updates = []
    for update in _field(result, "update_ops") or []:
        update = update.op if isinstance(update, tf.Tensor) else update
        if not isinstance(update, tf.Operation) or update.graph is not graph:
            raise model_error(job, f"update_ops holds {type(update).__name__}, not an op of the graph")
        updates.append(update)
    tokens = _field(result, "tokens_per_step")
    return Net(loss, dict(inputs), updates, None if tokens is None else int(tokens))


def feeder(job: Job, entries: Entries, inputs: Mapping[str, tf.Tensor], batch: int) -> Callable[[int], Batch]:
    """The job's batch function over its data entry: each batch checked against ``inputs`` (batch 0 now)."""
    assert entries.data is not None
    data, layout = entries.data, entries.layout

    def feed(iteration: int) -> Batch:
        values = as_dict(job, iteration, entries.first if iteration == 0 else data(iteration), layout, batch)
        check_batch(job, iteration, values, inputs)
        return values

    feed(0)
    return feed
