"""The user's own model and data in a job: ``[model] entry`` and ``[data] entry`` (TensorFlow side).

:func:`jobs.build` calls :func:`entry_points` (import the functions, read batch 0), then, inside
its fresh ``tf.Graph`` and after seeding, :func:`build_net`, and :func:`feeder` for the batches.

The model entry is called with the ``[model.args]`` keyword arguments, plus ``batch_size=`` when it
has a parameter of that name, and returns either

- a ``tf.keras.Model`` with known inputs (functional, or ``Sequential`` starting from a
  ``tf.keras.Input``): one placeholder per model input, named after it, batch dimension fixed to
  the batch size (other unknown dimensions from batch 0); a ``labels`` placeholder with the shape
  and dtype of batch 0's labels (float64 as float32); the loss is ``train.loss`` (a Keras loss name)
  averaged over the batch, plus the model's regularisation losses. Update ops (batch-norm moving
  averages) are ``model.get_updates_for(inputs) + model.get_updates_for(None)``: in graph mode
  Keras keeps them on the model, not in ``UPDATE_OPS``, and ``model.updates`` would also hold those
  of the call made while building the model on its ``tf.keras.Input`` (which would need that
  placeholder fed);
- or a step: a dict or object with ``loss`` (a scalar tensor), ``inputs`` ({name: placeholder})
  and optionally ``update_ops`` and ``tokens_per_step``.

The data entry is called as ``fn(iteration, batch_size, rank, ranks)`` and returns a dict
{input name: array} (a Keras model's input names plus ``labels``) or, for a Keras model, a tuple
``(x, y)``: ``x`` an array, a list of arrays in model input order or a dict. Every batch is checked
(keys, shapes, dtypes that cast to the placeholder's); a mistake is a one-line JobError.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import tensorflow as tf

from jobs.config import Job, JobError
from jobs.entrypoints import call, resolve, takes, user_error
from jobs.models.layers import Net

v1 = tf.compat.v1

__all__ = ["DATA_EXPECTED", "MODEL_EXPECTED", "Entries", "build_net", "entry_points", "feeder"]

MODEL_EXPECTED = ("a function returning a tf.keras.Model, or a step: a dict or object with loss (a scalar tensor), "
                  "inputs ({name: placeholder}) and optionally update_ops")
DATA_EXPECTED = ("a function fn(iteration, batch_size, rank, ranks) returning {input name: array} or, for a "
                 "Keras model, (x, y)")
LABELS = "labels"

Batch = dict[str, np.ndarray]


@dataclass
class Entries:
    """A job's entry points: the model function, the raw batch of an iteration, batch 0, and (for a
    Keras model) its input names in order, which a tuple ``(x, y)`` is matched against."""

    model: Callable[..., Any] | None
    data: Callable[[int], Any] | None
    first: Any = None
    x_names: list[str] | None = field(default=None)


def entry_points(job: Job, batch: int, shard: tuple[int, int]) -> Entries | None:
    """Import the job's entry functions and read batch 0 (``None``: a zoo model on the zoo's data)."""
    if job.entry is None and job.data_entry is None:
        return None
    model = resolve(job, "model.entry", job.entry) if job.entry is not None else None
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


def _model_error(job: Job, problem: str) -> JobError:
    return JobError(f"{job.source}: model.entry = {job.entry!r}: {problem}; expected {MODEL_EXPECTED}")


def _quiet() -> contextlib.AbstractContextManager[Any]:
    """Silence TensorFlow's deprecation notices: Keras in graph mode calls deprecated internals
    (batch norm's ``_colocate_with``), which nobody running a job can act on."""
    try:
        from tensorflow.python.util import deprecation

        return deprecation.silence()
    except (ImportError, AttributeError):
        return contextlib.nullcontext()


def build_net(job: Job, entries: Entries, batch: int, graph: tf.Graph) -> Net:
    """Call the model entry inside ``graph`` and make its :class:`Net` (see the module docstring)."""
    assert entries.model is not None and job.entry is not None
    kwargs = dict(job.model_params)
    if takes(entries.model, "batch_size"):
        kwargs["batch_size"] = batch
    with _quiet():
        result = call(job, "model.entry", job.entry, entries.model, (), kwargs, MODEL_EXPECTED)
        if isinstance(result, tf.keras.Model):
            return _keras_net(job, entries, result, batch)
    return _step_net(job, result, graph)


def _field(result: Any, name: str) -> Any:
    return result.get(name) if isinstance(result, Mapping) else getattr(result, name, None)


def _step_net(job: Job, result: Any, graph: tf.Graph) -> Net:
    loss, inputs = _field(result, "loss"), _field(result, "inputs")
    if loss is None or inputs is None:
        raise _model_error(job, f"it returned {type(result).__name__}" + (
            " without loss and inputs" if isinstance(result, Mapping) or hasattr(result, "__dict__") else ""))
    if not isinstance(loss, tf.Tensor) or loss.graph is not graph:
        raise _model_error(job, f"loss is {type(loss).__name__}, not a tensor of the graph jobs.build made "
                           "(create everything inside the function)")
    if loss.shape.rank != 0:
        raise _model_error(job, f"loss has shape {loss.shape.as_list()}, not a scalar (reduce it: tf.reduce_mean)")
    if (not isinstance(inputs, Mapping) or not inputs
            or not all(isinstance(k, str) and isinstance(v, tf.Tensor) and v.graph is graph
                       for k, v in inputs.items())):
        raise _model_error(job, "inputs is not a non-empty dict {name: placeholder} of the graph jobs.build made")
    updates = []
    for update in _field(result, "update_ops") or []:
        update = update.op if isinstance(update, tf.Tensor) else update
        if not isinstance(update, tf.Operation) or update.graph is not graph:
            raise _model_error(job, f"update_ops holds {type(update).__name__}, not an op of the graph")
        updates.append(update)
    tokens = _field(result, "tokens_per_step")
    return Net(loss, dict(inputs), updates, None if tokens is None else int(tokens))


def _keras_net(job: Job, entries: Entries, model: tf.keras.Model, batch: int) -> Net:
    if not model.inputs:
        raise _model_error(job, "it returned a tf.keras.Model whose inputs are unknown (a subclassed or unbuilt "
                           "model): start it from tf.keras.Input(...), or return a step")
    if not hasattr(model, "get_updates_for"):
        raise _model_error(job, "it returned a tf.keras.Model made outside the graph of jobs.build (at import "
                           "time?): create the model inside the function")
    if len(model.outputs) != 1:
        raise _model_error(job, f"the model has {len(model.outputs)} outputs; train.loss needs one (or return a "
                           "step with your own loss)")
    names = list(model.input_names)
    if LABELS in names:
        raise _model_error(job, f"a model input is named {LABELS!r}, the name of the batch's labels: rename the "
                           "tf.keras.Input")
    entries.x_names = names
    values = _as_dict(job, 0, entries.first, names, batch)
    labels = values.get(LABELS)
    if labels is None or labels.ndim == 0 or labels.shape[0] != batch:
        shown = "none" if labels is None else f"shape {list(labels.shape)}"
        raise JobError(f"{job.source}: data.entry = {job.data_entry!r}: batch 0 has {LABELS} {shown}; expected "
                       f"{LABELS!r} (or y of (x, y)) with batch dimension {batch}, the batch size")
    placeholders: dict[str, tf.Tensor] = {}
    with v1.name_scope("inputs"):
        for name, symbolic in zip(names, model.inputs):
            dims = symbolic.shape.as_list()[1:]
            given = values.get(name)
            if given is not None and given.ndim == len(dims) + 1:  # unknown dimensions from batch 0
                dims = [g if d is None else d for d, g in zip(dims, given.shape[1:])]
            placeholders[name] = v1.placeholder(symbolic.dtype, [batch, *dims], name=name)
        placeholders[LABELS] = v1.placeholder(_dtype(labels), [batch, *labels.shape[1:]], name=LABELS)
    check_batch(job, 0, values, placeholders)
    x = [placeholders[name] for name in names]
    try:
        output = model(x if len(x) > 1 else x[0], training=True)
    except Exception as error:
        raise _model_error(job, f"calling the model on placeholders {[t.shape.as_list() for t in x]} raised "
                           f"{user_error(error, job)}") from error
    with v1.name_scope("loss"):
        try:
            loss = tf.reduce_mean(tf.keras.losses.get(job.loss)(placeholders[LABELS], output))
        except Exception as error:
            raise JobError(f"{job.source}: train.loss = {job.loss!r} of labels {labels.shape[1:]} {labels.dtype} "
                           f"(per sample) and the model's output {output.shape.as_list()[1:]} raised "
                           f"{user_error(error, job)}; expected a loss and labels that fit the output") from error
        extra = [*model.get_losses_for(None), *model.get_losses_for(x)]
        if extra:
            loss = tf.add(loss, tf.add_n(extra), name="with_regularization")
    updates = [u.op if isinstance(u, tf.Tensor) else u for u in [*model.get_updates_for(x),
                                                                 *model.get_updates_for(None)]]
    return Net(loss, placeholders, updates)


def _dtype(value: np.ndarray) -> tf.DType:
    """A placeholder's dtype for ``value``: its own, float64 (NumPy's default) as float32."""
    return tf.float32 if value.dtype == np.float64 else tf.as_dtype(value.dtype)


def _as_dict(job: Job, iteration: int, raw: Any, names: list[str] | None, batch: int) -> Batch:
    """A raw batch as {name: array}: a dict as it is; ``(x, y)`` by the Keras model's input names."""
    def fail(problem: str) -> JobError:
        tuple_form = " or (x, y) with x an array, a list of arrays in model input order or a dict" if names else ""
        return JobError(f"{job.source}: data.entry = {job.data_entry!r}: batch {iteration} (fn({iteration}, "
                        f"{batch}, ...)) {problem}; expected a dict {{input name: array}}{tuple_form}")

    if isinstance(raw, Mapping):
        out = dict(raw)
    elif names is not None and isinstance(raw, (tuple, list)) and len(raw) == 2:
        x, y = raw
        if isinstance(x, Mapping):
            out = dict(x)
        elif isinstance(x, (list, tuple)):
            if len(x) != len(names):
                raise fail(f"has {len(x)} arrays in x for the model's {len(names)} inputs {names}")
            out = dict(zip(names, x))
        elif len(names) == 1:
            out = {names[0]: x}
        else:
            raise fail(f"has one array as x for the model's {len(names)} inputs {names}")
        out[LABELS] = y
    else:
        raise fail(f"is {type(raw).__name__}")
    bad = [key for key in out if not isinstance(key, str)]
    if bad:
        raise fail(f"has the key {bad[0]!r}, not a name")
    try:
        return {key: np.asarray(value) for key, value in out.items()}
    except Exception as error:
        raise fail(f"has a value NumPy cannot make an array of ({type(error).__name__}: {error})") from None


def _shape(tensor: tf.Tensor) -> str:
    if tensor.shape.rank is None:
        return "any shape"
    return "[" + ", ".join("?" if d is None else str(d) for d in tensor.shape.as_list()) + "]"


def check_batch(job: Job, iteration: int, values: Batch, inputs: Mapping[str, tf.Tensor]) -> None:
    """Raise a one-line JobError unless ``values`` has exactly the keys of ``inputs``, each of a fitting
    shape and of a dtype that casts to the placeholder's (``np.can_cast``, ``same_kind``)."""
    prefix = f"{job.source}: data.entry = {job.data_entry!r}: batch {iteration}"
    if values.keys() != inputs.keys():
        missing, extra = sorted(inputs.keys() - values.keys()), sorted(values.keys() - inputs.keys())
        problem = "; ".join(part for part in (missing and f"no key {', '.join(map(repr, missing))}",
                                              extra and f"unknown key {', '.join(map(repr, extra))}") if part)
        raise JobError(f"{prefix} has {problem}; expected the keys {', '.join(map(repr, sorted(inputs)))}")
    for name, tensor in inputs.items():
        value = values[name]
        if not tensor.shape.is_compatible_with(value.shape):
            raise JobError(f"{prefix}: {name!r} has shape {list(value.shape)}; expected {_shape(tensor)} "
                           "(the first dimension is the batch size)")
        wanted = tensor.dtype.base_dtype
        if not np.can_cast(value.dtype, wanted.as_numpy_dtype, casting="same_kind"):
            raise JobError(f"{prefix}: {name!r} has dtype {value.dtype}; expected {wanted.name} (or a dtype of its "
                           "kind, which is cast)")


def feeder(job: Job, entries: Entries, inputs: Mapping[str, tf.Tensor], batch: int) -> Callable[[int], Batch]:
    """The job's batch function over its data entry: each batch checked against ``inputs`` (batch 0 now)."""
    assert entries.data is not None
    data, names = entries.data, entries.x_names

    def feed(iteration: int) -> Batch:
        values = _as_dict(job, iteration, entries.first if iteration == 0 else data(iteration), names, batch)
        check_batch(job, iteration, values, inputs)
        return values

    feed(0)
    return feed
