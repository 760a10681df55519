"""Validation while training (``[eval]``): the model in inference mode on held-out batches.

:func:`evaluation` adds, beside the step, the model called with ``training=False`` (dropout off,
batch norm's moving statistics) on placeholders of the validation batch, the loss Keras'
``evaluate`` reports (the training loss plus the model's regularization) and the metrics by their
Keras names; :class:`Evaluation` feeds it batch ``b`` of this rank. ``pardnn-launch`` runs it every
``[eval] every`` iterations and after the last, averaging over every rank's batches.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import tensorflow as tf

from jobs.config import Job, JobError
from jobs.datasets import numpy_batches
from jobs.entrypoints import DATA_EXPECTED, call, resolve
from jobs.keras3 import StateUpdates, flavour, is_keras3
from jobs.kerasnet import call_model, model_loss, with_model_extras
from jobs.recipe import Recipe, by_output, loss_name
from jobs.userbatch import Layout, as_dict, check_batch, label_key

v1 = tf.compat.v1
logger = logging.getLogger(__name__)

__all__ = ["Evaluation", "evaluation"]


@dataclass
class Evaluation:
    """The validation ops of a step's graph: ``fetches`` ({"loss": ..., metric name: ...}, each a batch
    mean), ``feed(b, rank, ranks)`` the feed of that rank's batch ``b``, and how often and how much to validate."""

    fetches: dict[str, tf.Tensor]
    feed: Callable[[int, int, int], dict[tf.Tensor, np.ndarray]]
    every: int
    batches: int
    batch_size: int
    source: str
    metrics: list[str] = field(default_factory=list)

    def due(self, iteration: int, iterations: int) -> bool:
        """Whether to validate after iteration ``iteration`` (0-based) of ``iterations``."""
        done = iteration + 1
        return done == iterations or bool(self.every and done % self.every == 0)


def _metric_names(job: Job, model: tf.keras.Model) -> list[Any]:
    """``[eval] metrics``, else what ``model.compile(metrics=...)`` was given (Keras 2: ``compiled_metrics``)."""
    given = (job.evaluation or {}).get("metrics")
    if given is not None:
        return list(given)
    if is_keras3(model):  # Keras 3 keeps them in its CompileMetrics
        user = getattr(getattr(model, "_compile_metrics", None), "_user_metrics", None)
    else:
        compiled = getattr(model, "compiled_metrics", None)  # Keras 2 eager; in a graph, the v1 model's
        user = getattr(compiled, "_user_metrics", None) if compiled is not None else getattr(model, "_compile_metrics",
                                                                                            None)
    if not user:
        return []
    if isinstance(user, dict):
        raise JobError(f"{job.source}: model.entry = {job.entry!r}: model.compile(metrics=...) is a dict by output; "
                       "pardnn computes a list of metrics for every output: give [eval] metrics = ['accuracy', ...]")
    return list(user) if isinstance(user, (list, tuple)) else [user]


def _metric(job: Job, metric: Any, loss: Any, labels: tf.Tensor, output: tf.Tensor,
            keras: Any = tf.keras) -> tuple[str, Callable[..., Any]]:
    """A metric's Keras name and its per-sample function of (labels, output); ``accuracy`` is chosen as
    Keras chooses it (binary for one unit, sparse for integer class labels, else categorical)."""
    if isinstance(metric, str):
        if metric in ("accuracy", "acc"):
            metrics = keras.metrics
            if "binary" in loss_name(loss) or output.shape[-1] == 1:
                return metric, metrics.binary_accuracy
            if labels.shape.rank == output.shape.rank - 1 or (labels.shape[-1] == 1 and output.shape[-1] != 1):
                return metric, metrics.sparse_categorical_accuracy
            return metric, metrics.categorical_accuracy
        try:
            with tf.Graph().as_default():  # Keras 3 makes a Metric (with variables) of a name: not in the step's graph
                found = keras.metrics.get(metric)
        except ValueError:
            found = None
        if not callable(found):  # Keras 2.15 returns an unknown name as it is
            raise JobError(f"{job.source}: [eval] metrics: unknown Keras metric {metric!r}; expected a name such as "
                           "'accuracy', 'mae', 'sparse_top_k_categorical_accuracy'") from None
        if not isinstance(found, keras.metrics.Metric):
            return metric, found
        shown, metric = metric, found  # the name as given ('mae'), the function of Keras 3's Metric
        function = getattr(metric, "_fn", None)
        if function is not None:
            kwargs = dict(getattr(metric, "_fn_kwargs", {}) or {})
            return shown, lambda y, p: function(y, p, **kwargs)
    function = getattr(metric, "_fn", None)  # a MeanMetricWrapper (SparseCategoricalAccuracy(), ...)
    if function is None:
        raise JobError(f"{job.source}: the metric {getattr(metric, 'name', metric)!r} ({type(metric).__name__}) is "
                       "not a mean over samples, which pardnn averages over batches and ranks; leave it out "
                       "([eval] metrics = [...])")
    kwargs = dict(getattr(metric, "_fn_kwargs", {}) or {})
    return metric.name, lambda y, p: function(y, p, **kwargs)


@contextlib.contextmanager
def _eval_named(key: str) -> Iterator[None]:
    """A batch's one-line error names ``eval.<key>``, not the training data's key."""
    try:
        yield
    except JobError as error:
        raise JobError(str(error).replace(f": data.{key} = ", f": eval.{key} = ", 1)) from error.__cause__


def _aligned(labels: tf.Tensor, output: tf.Tensor) -> tf.Tensor:
    """Labels as Keras' metrics see them: float labels in the output's dtype, one axis added (or dropped)
    where they have one fewer (or one more, of size 1) than the output."""
    if labels.dtype.is_floating and labels.dtype != output.dtype:
        labels = tf.cast(labels, output.dtype)
    if labels.shape.rank == output.shape.rank - 1:
        return tf.expand_dims(labels, -1)
    if labels.shape.rank == output.shape.rank + 1 and labels.shape[-1] == 1:
        return tf.squeeze(labels, -1)
    return labels


def _placeholders(job: Job, values: dict[str, np.ndarray], names: list[str], trained: dict[str, tf.Tensor],
                  size: int) -> dict[str, tf.Tensor]:
    """Validation placeholders shaped like the step's, with ``size`` samples."""
    out = {}
    for name in names:
        like = trained[name]
        out[name] = v1.placeholder(like.dtype, [size, *like.shape.as_list()[1:]], name=name.replace("/", "_"))
    check_batch(job, 0, {k: v for k, v in values.items() if k in out}, out)
    return out


def evaluation(job: Job, model: tf.keras.Model, recipe: Recipe, layout: Layout, step_inputs: dict[str, tf.Tensor],
               batch: int) -> Evaluation:
    """The validation of ``job`` for the Keras ``model`` the step trains (see the module docstring).

    Raises
    ------
    JobError
        The ``[eval]`` function failing or giving batches that do not fit the model, or an unknown metric.
    """
    settings = dict(job.evaluation or {})
    size = settings.get("batch_size") or batch
    batches = source_batches(job, size, settings["batches"])
    layout = Layout(list(layout.inputs), layout.call, layout.outputs)
    key = "dataset" if settings.get("dataset") else "entry"
    named = dataclasses.replace(job, data={key: settings[key]})  # the batches' messages name eval.<key>
    with _eval_named(key):
        first = as_dict(named, 0, batches(0, 0, 1), layout, size)
    with v1.name_scope("evaluation"), _eval_named(key):
        inputs = _placeholders(named, first, list(layout.inputs), step_inputs, size)
        labels = _placeholders(named, first, [label_key(layout.outputs, n) for n in layout.outputs or []],
                               step_inputs, size)
    with v1.name_scope("evaluation/"):
        with StateUpdates().collect(model):
            outputs = call_model(job, model, layout, inputs, training=False)
            own = list(model.losses) if is_keras3(model) else None
        loss = model_loss(job, recipe, outputs, labels, first)
        loss, _ = with_model_extras(model, [inputs[name] for name in layout.inputs], loss, own)
        fetches: dict[str, tf.Tensor] = {"loss": loss}
        losses = by_output(job, recipe, [name for name, _ in outputs])
        for metric in _metric_names(job, model):
            for (name, output), (output_loss, _) in zip(outputs, losses, strict=True):
                key = label_key(layout.outputs, name)
                shown, function = _metric(job, metric, output_loss, labels[key], output, flavour(model))
                label = shown if len(outputs) == 1 else f"{name}_{shown}"
                value = function(_aligned(labels[key], output), output)
                fetches[label] = tf.reduce_mean(tf.cast(value, tf.float32), name=f"metric_{len(fetches)}")
    placeholders = {**inputs, **labels}

    def feed(index: int, rank: int = 0, ranks: int = 1) -> dict[tf.Tensor, np.ndarray]:
        with _eval_named(key):
            values = as_dict(named, index, batches(index, rank, ranks), layout, size)
            check_batch(named, index, values, placeholders)
        return {placeholders[name]: value for name, value in values.items()}

    return Evaluation(fetches, feed, settings["every"], settings["batches"], size,
                      "dataset" if settings.get("dataset") else "entry", [k for k in fetches if k != "loss"])


def source_batches(job: Job, size: int, count: int) -> Callable[[int, int, int], Any]:
    """``read(b, rank, ranks)``: that rank's raw validation batch ``b`` (``b`` < ``count``): ``[eval] entry``'s
    ``fn(b·ranks + rank, size, 0, 1)`` (a rank's share, as the training batches), or the ``b``-th batch of
    ``[eval] dataset``'s ``fn(size, rank, ranks)`` (read once, and kept)."""
    settings = dict(job.evaluation or {})
    if settings.get("entry"):
        entry = settings["entry"]
        function = resolve(job, "eval.entry", entry)
        return lambda b, rank, ranks: call(job, "eval.entry", entry, function, (b * ranks + rank, size, 0, 1), {},
                                           DATA_EXPECTED)
    entry = settings["dataset"]
    function = resolve(job, "eval.dataset", entry)
    kept: dict[tuple[int, int], list[Any]] = {}

    def read(b: int, rank: int, ranks: int) -> Any:
        if (rank, ranks) not in kept:
            elements = numpy_batches(job, function, size, (rank, ranks), count, "eval.dataset")
            if len(elements) < count:
                raise JobError(f"{job.source}: eval.dataset = {entry!r}: fn({size}, {rank}, {ranks}) gives "
                               f"{len(elements)} batches; [eval] batches = {count} asks for more")
            kept[(rank, ranks)] = elements
        return kept[(rank, ranks)][b]

    return read
