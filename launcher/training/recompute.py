"""Gradient checkpointing for ``--parallelism data --recompute``: which models can be wrapped, and how.

A model marks its blocks with :func:`jobs.models.layers.block`; inside :func:`recomputed` each block goes
through ``tf.recompute_grad``. :func:`check_wrappable` says what is recomputed in a job's model, or why
it cannot be (:data:`WRAPPED`, :data:`NOT_WRAPPED`), before anything starts; :func:`check_blocks` counts
the blocks in the built graph. docs/launcher.md (Gradient checkpointing) has the models and the rules.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from launcher.errors import LaunchError

__all__ = ["NOT_WRAPPED", "WRAPPED", "check_blocks", "check_wrappable", "count_blocks", "recomputed"]

WRAPPED = {"word_rnn": "each LSTM layer at each time step", "char_crn": "each LSTM layer at each time step"}
NOT_WRAPPED = {
    "wrn": "each unit creates its variables and batch-norm moving-average updates inside itself, which a "
           "recomputation would create twice",
    "transformer": "each sub-layer creates its projection variables inside itself",
    "e3d_lstm": "its cells read their weights from the enclosing graph rather than as inputs, so a recomputed cell "
                "would give them no gradient",
}
USER_MODEL = "each Keras layer called on one tensor, except dropout and noise layers"


def check_wrappable(job: Any) -> str:
    """What is recomputed in ``job``'s model; :class:`LaunchError` saying why when it cannot be wrapped."""
    model = str(getattr(job, "model", ""))
    if ":" in model or getattr(job, "entry", None):
        return USER_MODEL
    if model in WRAPPED:
        return WRAPPED[model]
    why = NOT_WRAPPED.get(model, f"model {model!r} marks no blocks")
    raise LaunchError(f"--recompute: cannot wrap {getattr(job, 'name', model)}'s model ({model}): {why}; "
                      f"models that can: {', '.join(WRAPPED)} and Keras models of your own")


def count_blocks(graph: Any) -> int:
    """The blocks ``tf.recompute_grad`` made in ``graph`` (built with its gradients): the ``IdentityN`` ops
    that carry a custom gradient, two per block (the forward outputs', the recomputation's)."""
    count = 0
    for op in graph.get_operations():
        if op.type == "IdentityN" and "_gradient_op_type" in op.node_def.attr:
            count += op.node_def.attr["_gradient_op_type"].s.decode().startswith("CustomGradient")
    return count // 2


def check_blocks(job: Any, graph: Any) -> int:
    """How many blocks ``graph`` recomputes; :class:`LaunchError` when none (a model function returning a step)."""
    blocks = count_blocks(graph)
    if not blocks:
        raise LaunchError(f"--recompute: {getattr(job, 'name', 'the job')}'s model has no blocks to recompute (a "
                          "model function returning a step, not a Keras model, marks none); drop --recompute")
    return blocks


@contextlib.contextmanager
def recomputed(on: bool) -> Iterator[None]:
    """Build inside it: with ``on``, the model's blocks are recomputed in the backward pass."""
    if not on:
        yield
        return
    from jobs.models.layers import recomputing

    with recomputing():
        yield
