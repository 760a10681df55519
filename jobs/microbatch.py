"""Micro-batched steps: ``[train] micro_batches = M`` (``jobs.build(..., micro_batches=M)``).

The node's batch B is split into M micro-batches of B/M samples. The forward and backward ops exist
once per micro-batch, under the name scopes ``micro_0/`` ... ``micro_{M-1}/``, and share the
variables; each micro-batch's gradients (``tf.gradients(loss_m, variables)``) are summed
(``tf.add_n``) and scaled by 1/M, which is the full batch's mean gradient when the loss is a mean
over the samples; one optimizer update applies them, and the launcher's Horovod hook allreduces the
summed gradient, once per variable. The step's ``loss`` is the mean of the M losses.

- A zoo model is built M times at batch B/M (the copies after the first reuse the first's
  variables, :func:`zoo_copies`); the feed splits each full-batch array along its first axis
  (:func:`split_feed`).
- A Keras model keeps its full-batch placeholders (and its feed); each is split in the graph
  (``tf.split``) and the model is called on each slice (:mod:`jobs.kerasnet`).
- A model entry returning a step (loss and placeholders) cannot be copied: M > 1 is an error.

Batch norm: the statistics of a training step are the micro-batch's (as in GPipe), and only the
last micro-batch's moving-average updates run. Running all M would move the averages M times per
step (momentum^M where the full batch moves them once) and write one variable from M unordered ops;
the last micro-batch's keep the averages' decay per step what it is with M = 1.

Copy metadata: while building, each copy's ops are recorded as they are created (the forward when the
model is built or called, the gradients in :func:`mean_gradients`), and :func:`record_copies` marks
them for the capture (:func:`pardnn.tf.capture.mark_copies`): copy m's op copies the op of copy 0
created under the same name with ``micro_m`` in place of ``micro_0`` (the scopes this module made;
``tf.gradients`` repeats the forward op's name in its gradient's). An op of copy 0 that no other
copy repeats, and every op made outside the copies (variables, summed gradients, the mean loss), is
of no micro-batch. The graph file then says which op copies which (native format version 2).

M = 1 builds exactly the graph of a job without ``micro_batches``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager

import numpy as np
import tensorflow as tf

from jobs.config import Job, JobError
from jobs.models.layers import Net
from pardnn.tf.capture import mark_copies

v1 = tf.compat.v1

__all__ = ["Copies", "mean_gradients", "micro_size", "micro_step", "scope", "split_feed", "zoo_copies"]


class Copies:
    """The ops each micro-batch copy creates, in creation order, marked for the capture by :meth:`record`."""

    def __init__(self) -> None:
        self.made: dict[int, list[str]] = {}

    @contextmanager
    def copy(self, index: int) -> Iterator[None]:
        """Record the ops created in the block as copy ``index``'s."""
        graph = v1.get_default_graph()
        before = len(graph.get_operations())
        yield
        self.made.setdefault(index, []).extend(op.name for op in graph.get_operations()[before:])

    def record(self) -> None:
        """Mark the copies in the default graph (module docstring, "Copy metadata")."""
        first = set(self.made.get(0, ()))
        marks: dict[str, tuple[int, str]] = {}
        for index, names in self.made.items():
            if index == 0:
                continue
            own = re.compile(rf"(?<![^/]){scope(index)}(?=/|$)")
            for name in names:
                original = own.sub(scope(0), name)
                if original in first:
                    marks[name] = (index, original)
                    marks[original] = (0, original)
        if marks:
            mark_copies(v1.get_default_graph(), marks)


def micro_size(job: Job, batch: int, micro: object) -> int:
    """B/M, the samples of one micro-batch; a one-line JobError when M is not a whole number >= 1
    or does not divide the batch B."""
    if isinstance(micro, bool) or not isinstance(micro, int) or micro < 1:
        raise JobError(f"{job.source}: micro_batches {micro!r}: expected a whole number >= 1")
    if batch % micro:
        raise JobError(f"{job.source}: micro_batches {micro} does not divide the batch size {batch}: a step splits "
                       f"its batch into {micro} equal micro-batches; choose a batch that is a multiple of {micro}")
    return batch // micro


def scope(index: int) -> str:
    """The name scope of micro-batch ``index``'s ops."""
    return f"micro_{index}"


def micro_step(nets: Sequence[Net], inputs: Mapping[str, tf.Tensor]) -> Net:
    """One :class:`Net` over the micro-batches' ``nets``: the mean loss, ``inputs``, the last
    micro-batch's update ops (see the module docstring) and every micro-batch's loss."""
    with v1.name_scope("micro_batches"):
        loss = tf.multiply(tf.add_n([net.loss for net in nets]), 1.0 / len(nets), name="loss")
    tokens = [net.tokens_per_step for net in nets]
    total = None if any(count is None for count in tokens) else sum(t for t in tokens if t is not None)
    return Net(loss, dict(inputs), list(nets[-1].update_ops), total, [net.loss for net in nets])


def zoo_copies(build_one: Callable[[int], Net], micro: int, size: int) -> Net:
    """A zoo model built ``micro`` times at batch ``size``, the copies sharing the first's variables;
    the inputs are named ``micro_m/name``."""
    nets = []
    root = v1.get_variable_scope()
    copies = Copies()
    for index in range(micro):
        with copies.copy(index), v1.variable_scope(root, reuse=True if index else None), v1.name_scope(scope(index)):
            nets.append(build_one(size))
    copies.record()
    inputs = {f"{scope(index)}/{name}": tensor for index, net in enumerate(nets) for name, tensor in net.inputs.items()}
    return micro_step(nets, inputs)


def split_feed(values: Mapping[str, np.ndarray], micro: int) -> dict[str, np.ndarray]:
    """A full batch's arrays by input name, as the micro-batches' (``micro_m/name``: the m-th slice of
    the first axis)."""
    out = {}
    for name, value in values.items():
        for index, part in enumerate(np.split(np.asarray(value), micro)):
            out[f"{scope(index)}/{name}"] = part
    return out


def mean_gradients(losses: Sequence[tf.Tensor], variables: Sequence[tf.Variable],
                   dense: Callable[[list[tuple[tf.Tensor, tf.Variable]]], list[tuple[tf.Tensor, tf.Variable]]]
                   ) -> list[tuple[tf.Tensor | None, tf.Variable]]:
    """Each variable's gradient summed over the micro-batches' ``losses`` and scaled by 1/M (``None``
    when no loss depends on it); ``dense`` makes a micro-batch's embedding gradients dense first."""
    per_micro = []
    copies = Copies()
    for index, loss in enumerate(losses):
        with copies.copy(index), v1.name_scope(f"{scope(index)}/"):  # micro_m/gradients/..., .../dense_gradients/...
            grads = tf.gradients(loss, list(variables))
            used = [(grad, var) for grad, var in zip(grads, variables, strict=True) if grad is not None]
            made = dict(zip((id(var) for _, var in used), (grad for grad, _ in dense(used)), strict=True))
        per_micro.append([made.get(id(var)) for var in variables])
    copies.record()
    out: list[tuple[tf.Tensor | None, tf.Variable]] = []
    with v1.name_scope("micro_batches/gradients"):
        for position, var in enumerate(variables):
            grads = [grads[position] for grads in per_micro if grads[position] is not None]
            if not grads:
                out.append((None, var))
                continue
            total = tf.add_n(grads) if len(grads) > 1 else grads[0]
            out.append((tf.multiply(total, 1.0 / len(losses), name=f"mean_{position}"), var))
    return out
