"""The batches of a job's ``[data] entry``: one raw batch read as ``{name: array}`` and checked.

For a step the function returns ``{input name: array}``, the step's placeholders' names. For a Keras
model it returns ``{input name: array, "labels": y}`` or ``(x, y)``, read by the model's
:class:`Layout`:

- ``x``: an array (one input), a list of arrays in the model's input order, or a dict by input name.
  A model without known inputs (subclassed, or Sequential without an ``Input``) takes its inputs
  from batch 0 (:func:`layout_of`): the dict's keys, ``input_1, input_2, ...`` for a list, or
  ``input_1`` for an array; it is called with one tensor, a list, or a dict (several dict keys) to
  match.
- ``y``: for one output, an array (key ``labels``); for several, a list of arrays in output order or
  a dict by output name (keys ``labels/<output>``).

Every mistake is a one-line :class:`~jobs.config.JobError` naming the file, the batch and the input
or output.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import tensorflow as tf

from jobs.config import Job, JobError

__all__ = ["LABELS", "Batch", "Layout", "as_dict", "check_batch", "dtype_of", "label_key", "layout_of"]

LABELS = "labels"

Batch = dict[str, np.ndarray]


@dataclass
class Layout:
    """A Keras model's batch: its input names in call order, how it is called (``one`` tensor, a
    ``list`` or a ``dict``), and its output names once known (``None`` before the model is called)."""

    inputs: list[str]
    call: str = "list"
    outputs: list[str] | None = None


def label_key(outputs: list[str] | None, output: str) -> str:
    """The batch key of ``output``'s labels: ``labels`` for a model with one output, else ``labels/<output>``."""
    return LABELS if outputs is None or len(outputs) == 1 else f"{LABELS}/{output}"


def where(job: Job, iteration: int) -> str:
    """``data.entry = 'm:f': batch 3`` (or the dataset's, whose batch 0 is its first element)."""
    if job.dataset is not None:
        return f"data.dataset = {job.dataset!r}: " + ("its first batch" if iteration == 0 else f"batch {iteration}")
    return f"data.entry = {job.data_entry!r}: batch {iteration}"


def _failer(job: Job, iteration: int, batch: int, keras: bool) -> Callable[[str], JobError]:
    def fail(problem: str) -> JobError:
        tuple_form = " or (x, y) with x an array, a list of arrays in model input order or a dict" if keras else ""
        called = "" if job.dataset is not None else f" (fn({iteration}, {batch}, ...))"
        return JobError(f"{job.source}: {where(job, iteration)}{called} {problem}; expected a dict "
                        f"{{input name: array}}{tuple_form}")
    return fail


def layout_of(job: Job, raw: Any, batch: int) -> Layout:
    """The inputs of a model without known inputs, from its batch 0 (see the module docstring)."""
    if isinstance(raw, Mapping):
        names = [key for key in raw if key != LABELS]
        return Layout(names, "one" if len(names) == 1 else "dict")
    if isinstance(raw, (tuple, list)) and len(raw) == 2:
        x = raw[0]
        if isinstance(x, Mapping):
            return Layout(list(x), "dict")
        if isinstance(x, (tuple, list)):
            return Layout([f"input_{i + 1}" for i in range(len(x))], "list")
        return Layout(["input_1"], "one")
    raise _failer(job, 0, batch, True)(f"is {type(raw).__name__}")


def _labels(job: Job, iteration: int, y: Any, outputs: list[str], fail: Callable[[str], JobError]) -> dict[str, Any]:
    """``y`` by label key (see :func:`label_key`)."""
    if len(outputs) == 1:
        if isinstance(y, Mapping):
            if list(y) != outputs:
                raise fail(f"has labels for {', '.join(map(repr, y))}; expected labels for the model's one output "
                           f"{outputs[0]!r} (or an array)")
            y = y[outputs[0]]
        return {LABELS: y}
    shown = ", ".join(map(repr, outputs))
    if isinstance(y, Mapping):
        unknown, absent = [k for k in y if k not in outputs], [o for o in outputs if o not in y]
        if unknown or absent:
            problem = (f"labels for {unknown[0]!r}, not an output" if unknown
                       else f"no labels for the output {absent[0]!r}")
            raise fail(f"has {problem}; expected labels for the outputs {shown} (a dict by output name or a list)")
        return {label_key(outputs, o): y[o] for o in outputs}
    arrays = isinstance(y, (list, tuple)) and not all(np.isscalar(v) for v in y)  # not one array as a list
    if arrays and len(y) == len(outputs):
        return {label_key(outputs, o): v for o, v in zip(outputs, y)}
    count = f"{len(y)} label arrays" if arrays else "one labels array"
    raise JobError(f"{job.source}: model.entry = {job.entry!r}: the model has {len(outputs)} outputs ({shown}) but "
                   f"{where(job, iteration).replace(': ', ' gives ' + count + ' (', 1)}); expected labels as a list of "
                   "arrays in output order or a dict by output name")


def as_dict(job: Job, iteration: int, raw: Any, layout: Layout | None, batch: int, *, arrays: bool = True) -> Batch:
    """A raw batch as {name: array}: a step's dict as it is, a Keras model's by its ``layout`` (its
    labels by :func:`label_key` once ``layout.outputs`` is known, left out before); ``arrays=False``
    keeps the values as they are (a dataset's tensors)."""
    fail = _failer(job, iteration, batch, layout is not None)
    if isinstance(raw, Mapping):
        out = dict(raw)
        y = out.pop(LABELS, None) if layout is not None else None
    elif layout is not None and isinstance(raw, (tuple, list)) and len(raw) == 2:
        x, y = raw
        names = layout.inputs
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
    else:
        raise fail(f"is {type(raw).__name__}")
    if y is not None and layout is not None and layout.outputs is not None:
        out.update(_labels(job, iteration, y, layout.outputs, fail))
    bad = [key for key in out if not isinstance(key, str)]
    if bad:
        raise fail(f"has the key {bad[0]!r}, not a name")
    if not arrays:
        return out
    try:
        return {key: np.asarray(value) for key, value in out.items()}
    except Exception as error:
        raise fail(f"has a value NumPy cannot make an array of ({type(error).__name__}: {error})") from None


def dtype_of(value: np.ndarray) -> tf.DType:
    """A placeholder's dtype for ``value``: its own, float64 (NumPy's default) as float32."""
    return tf.float32 if value.dtype == np.float64 else tf.as_dtype(value.dtype)


def _shape(tensor: tf.Tensor) -> str:
    if tensor.shape.rank is None:
        return "any shape"
    return "[" + ", ".join("?" if d is None else str(d) for d in tensor.shape.as_list()) + "]"


def check_batch(job: Job, iteration: int, values: Batch, inputs: Mapping[str, tf.Tensor]) -> None:
    """Raise a one-line JobError unless ``values`` has exactly the keys of ``inputs``, each of a fitting
    shape and of a dtype that casts to the placeholder's (``np.can_cast``, ``same_kind``)."""
    prefix = f"{job.source}: {where(job, iteration)}"
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

