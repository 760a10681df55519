"""A Keras model (tf.keras, or Keras 3) from a job's ``[model] entry`` made into a training step in the job's graph.

:func:`keras_net` makes one placeholder per model input (from the model's inputs, or from batch 0 for
a subclassed or unbuilt model), calls the model with ``training=True``, makes one labels
placeholder per output and sums each output's loss times its weight, plus the model's
regularisation; the update ops are the model's own. :func:`call_model`, :func:`model_loss` and
:func:`with_model_extras` are those steps alone (validation uses them). The rules, and why:
docs/user-models.md and docs/internals.md, "The job's graph".
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import tensorflow as tf

from jobs.config import Job, JobError
from jobs.datasets import Stream
from jobs.entrypoints import model_error, user_error
from jobs.keras3 import StateUpdates, is_keras3, spec_of
from jobs.microbatch import Copies, micro_step, scope
from jobs.models.layers import Net, keras_blocks, recomputing_now
from jobs.recipe import COMPILED, Recipe, by_output, loss_name
from jobs.userbatch import LABELS, Batch, Layout, as_dict, check_batch, dtype_of, label_key, layout_of, where

v1 = tf.compat.v1

__all__ = ["call_model", "keras_net", "model_loss", "with_model_extras"]


def _input_placeholders(job: Job, model: tf.keras.Model, first: Any, batch: int,
                        stream: Stream | None = None) -> tuple[Layout, dict[str, tf.Tensor]]:
    """The model's layout and input placeholders (see the module docstring); with a ``stream`` (a
    ``[data] dataset``) each placeholder's default is the stream's batch."""
    try:
        known = bool(getattr(model, "inputs", None))
    except (AttributeError, ValueError):  # a Keras 3 Sequential not built yet
        known = False
    symbolic_inputs: list[Any] = []
    if known:
        structure = getattr(model, "input", None) if is_keras3(model) else None
        if isinstance(structure, Mapping):  # a Keras 3 model of named inputs is called with a dict of them
            names, symbolic_inputs = list(structure), list(structure.values())
            layout = Layout(names, "dict")
        else:
            names = list(getattr(model, "input_names", None) or [tensor.name for tensor in model.inputs])
            symbolic_inputs = list(model.inputs)
            layout = Layout(names, "list" if len(names) > 1 else "one")
    else:
        layout = layout_of(job, first, batch)
    if LABELS in layout.inputs:
        fix = "rename the tf.keras.Input" if known else "rename that key of x in the data"
        raise model_error(job, f"a model input is named {LABELS!r}, the name of the batch's labels: {fix}")
    values = as_dict(job, 0, first, layout, batch)
    specs: dict[str, tf.TensorSpec] = {}
    for index, name in enumerate(layout.inputs):
        given = values.get(name)
        if known:
            symbolic = symbolic_inputs[index]
            dims, dtype = spec_of(symbolic)
            dims = dims[1:]
            if given is not None and given.ndim == len(dims) + 1:  # unknown dimensions from batch 0
                dims = [g if d is None else d for d, g in zip(dims, given.shape[1:])]
        else:  # batch 0 has every input: the layout is its own (a scalar fails check_batch)
            assert given is not None
            dims, dtype = list(given.shape[1:]), dtype_of(given)
        specs[name] = tf.TensorSpec([batch, *dims], dtype)
    check_batch(job, 0, {k: v for k, v in values.items() if k in layout.inputs}, specs)
    streamed = stream.tensors(layout) if stream is not None else {}
    with v1.name_scope("inputs"):
        placeholders = {name: _placeholder(spec, _op_name(name), streamed.get(name), stream)
                        for name, spec in specs.items()}
    return layout, placeholders


def _placeholder(spec: tf.TensorSpec, name: str, value: tf.Tensor | None, stream: Stream | None) -> tf.Tensor:
    """A placeholder, or (from a stream) one whose default is the stream's ``value``."""
    if stream is None or value is None:
        return v1.placeholder(spec.dtype, spec.shape, name=name)
    return stream.default(name, value, spec.dtype, spec.shape.as_list())


def _op_name(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.\-/]", "_", name)


def call_model(job: Job, model: tf.keras.Model, layout: Layout, inputs: dict[str, tf.Tensor], *,
               training: bool = True) -> list[tuple[str, tf.Tensor]]:
    """Call the model on ``inputs``; its outputs by name, in order."""
    x = [inputs[name] for name in layout.inputs]
    argument: Any = dict(inputs) if layout.call == "dict" else x if layout.call == "list" else x[0]
    if training and is_keras3(model) and recomputing_now():
        raise JobError(f"{job.source}: model.entry = {job.entry!r}: --recompute wraps the layers of tf.keras models; "
                       "a Keras 3 model's are not wrapped: train it without --recompute, or build it with tf.keras")
    try:
        if training:
            keras_blocks(model)  # with pardnn-launch --recompute: each layer's activations recomputed
        result = model(argument, training=training)
    except Exception as error:
        raise model_error(job, f"calling the model on placeholders {[t.shape.as_list() for t in x]} raised "
                           f"{user_error(error, job)}") from error
    if isinstance(result, Mapping):
        named = [(str(key), result[key]) for key in sorted(result)]
    else:
        tensors = list(result) if isinstance(result, (list, tuple)) else [result]
        names = list(getattr(model, "output_names", None) or [])
        if len(names) != len(tensors) or len(set(names)) != len(names):
            names = [f"output_{i + 1}" for i in range(len(tensors))]
        named = list(zip(names, tensors))
    bad = [name for name, tensor in named if not isinstance(tensor, tf.Tensor)]
    if bad:
        raise model_error(job, f"the model's output {bad[0]!r} is {type(dict(named)[bad[0]]).__name__}, not a "
                           "tensor (nested outputs are not supported)")
    return named


def _label_placeholders(job: Job, values: Batch, layout: Layout, batch: int,
                        stream: Stream | None = None) -> dict[str, tf.Tensor]:
    assert layout.outputs is not None
    streamed = stream.tensors(layout) if stream is not None else {}
    placeholders = {}
    with v1.name_scope("inputs/"):  # the input placeholders' scope, entered again
        for output in layout.outputs:
            key = label_key(layout.outputs, output)
            labels = values.get(key)
            if labels is None or labels.ndim == 0 or labels.shape[0] != batch:
                shown = "none" if labels is None else f"shape {list(labels.shape)}"
                raise JobError(f"{job.source}: {where(job, 0)} has {key} {shown}; expected "
                               f"{key!r} (or y of (x, y)) with batch dimension {batch}, the batch size")
            spec = tf.TensorSpec([batch, *labels.shape[1:]], dtype_of(labels))
            placeholders[key] = _placeholder(spec, _op_name(key), streamed.get(key), stream)
    return placeholders


def model_loss(job: Job, recipe: Recipe, outputs: list[tuple[str, tf.Tensor]], labels: dict[str, tf.Tensor],
          values: Batch) -> tf.Tensor:
    names = [name for name, _ in outputs]
    where = (f"model.entry = {job.entry!r}: model.compile(loss=...)" if recipe.sources["loss"] == COMPILED
             else f"train.loss = {recipe.loss!r}")
    terms = []
    with v1.name_scope("loss"):
        for (name, output), (loss, weight) in zip(outputs, by_output(job, recipe, names), strict=True):
            key = label_key(names, name)
            given = values[key]
            try:
                term = tf.reduce_mean(recipe.losses.get(loss)(labels[key], output))
            except Exception as error:
                which = f", for the output {name!r} ({loss_name(loss)})," if len(names) > 1 else ""
                raise JobError(f"{job.source}: {where}{which} of labels {given.shape[1:]} {given.dtype} (per sample) "
                               f"and the model's output {output.shape.as_list()[1:]} raised {user_error(error, job)}; "
                               "expected a loss and labels that fit the output") from error
            term = tf.cast(term, tf.float32) if term.dtype != tf.float32 else term
            terms.append(term if weight == 1.0 else tf.multiply(term, weight, name=f"weighted_{_op_name(name)}"))
        return terms[0] if len(terms) == 1 else tf.add_n(terms, name="total")


def keras_net(job: Job, model: tf.keras.Model, recipe: Recipe, first: Any, batch: int,
              micro: int = 1, stream: Stream | None = None) -> tuple[Net, Layout]:
    """The step of a Keras ``model`` (see the module docstring) and its batch layout; ``micro`` > 1
    calls the model once per micro-batch (:func:`_micro_net`).

    Raises
    ------
    JobError
        Batch 0 that does not fit the model, calling the model failing, or a loss that does not fit an
        output or its labels; one line naming the file, the key, the input or output and what to do.
    """
    layout, inputs = _input_placeholders(job, model, first, batch, stream)
    if micro > 1:
        return _micro_net(job, model, recipe, first, batch, micro, layout, inputs, stream), layout
    state = StateUpdates()
    with state.collect(model):
        outputs = call_model(job, model, layout, inputs)
        own = list(model.losses) if is_keras3(model) else None  # this call's, read now (Keras 3 remakes them)
    layout.outputs = [name for name, _ in outputs]
    values = as_dict(job, 0, first, layout, batch)
    labels = _label_placeholders(job, values, layout, batch, stream)
    loss = model_loss(job, recipe, outputs, labels, values)
    x = [inputs[name] for name in layout.inputs]
    loss, updates = with_model_extras(model, x, loss, own, state.ops)
    return Net(loss, {**inputs, **labels}, updates), layout


def with_model_extras(model: tf.keras.Model, x: list[tf.Tensor], loss: tf.Tensor, own: list[tf.Tensor] | None = None,
                      assigned: list[tf.Operation] | None = None) -> tuple[tf.Tensor, list[Any]]:
    """The loss with the model's own losses of the call on ``x`` (regularization), and its update ops.
    A Keras 3 model's are given: ``own``, its ``model.losses`` read after the call, and ``assigned``, the
    state its call assigned (:class:`jobs.keras3.StateUpdates`)."""
    if is_keras3(model):
        extra, updates = list(own or []), list(assigned or [])
    else:
        extra = [*model.get_losses_for(None), *model.get_losses_for(x)]
        updates = [u.op if isinstance(u, tf.Tensor) else u for u in [*model.get_updates_for(x),
                                                                     *model.get_updates_for(None)]]
    if extra:
        with v1.name_scope("loss/"):
            loss = tf.add(loss, tf.add_n([tf.cast(term, loss.dtype) for term in extra]), name="with_regularization")
    return loss, updates


def _micro_net(job: Job, model: tf.keras.Model, recipe: Recipe, first: Any, batch: int, micro: int, layout: Layout,
               inputs: dict[str, tf.Tensor], stream: Stream | None = None) -> Net:
    """The model called on each of ``micro`` slices of the full-batch placeholders (``tf.split`` in the
    graph, so the feed is the plain step's), each slice's loss against its slice of the labels."""
    with v1.name_scope("micro_batches/"):
        pieces = {name: tf.split(tensor, micro, name=f"split_{_op_name(name)}") for name, tensor in inputs.items()}
    nets: list[Net] = []
    labels: dict[str, tf.Tensor] = {}
    label_pieces: dict[str, list[tf.Tensor]] = {}
    values: Batch = {}
    copies = Copies()  # which op of micro-batch 0 each op copies, for the graph file
    keras3 = is_keras3(model)
    state = StateUpdates()
    with state.collect(model):  # one scope: a Keras 3 call reads its seed after the call before wrote it
        for index in range(micro):
            with copies.copy(index), v1.name_scope(scope(index)):
                sliced = {name: parts[index] for name, parts in pieces.items()}
                outputs = call_model(job, model, layout, sliced)
                own = list(model.losses) if keras3 else None
                if index == 0:
                    layout.outputs = [name for name, _ in outputs]
                    values = as_dict(job, 0, first, layout, batch)
                    labels = _label_placeholders(job, values, layout, batch, stream)
                    with v1.name_scope("micro_batches/"):
                        label_pieces = {key: tf.split(tensor, micro, name=f"split_{_op_name(key)}")
                                        for key, tensor in labels.items()}
                loss = model_loss(job, recipe, outputs, {key: parts[index] for key, parts in label_pieces.items()},
                                  values)
                loss, updates = with_model_extras(model, [sliced[name] for name in layout.inputs], loss, own, [])
                nets.append(Net(loss, {}, updates))
    if keras3:  # every micro-batch's writes (statistics, seeds), in order: the step runs the last net's
        nets[-1].update_ops = list(state.ops)
    copies.record()
    return micro_step(nets, {**inputs, **labels})
