"""Gradient checkpointing for ``--parallelism data --recompute``: which models can be wrapped, and how.

A model marks its blocks with :func:`jobs.models.layers.block`; built inside
:func:`jobs.models.layers.recomputing`, each block goes through ``tf.recompute_grad``: its
activations are dropped after the forward pass and recomputed from the block's inputs when the
backward pass needs them, so a device holds one block's activations at a time instead of all of
them, for one more forward pass of compute. The gradients are the same (up to the order of float
sums); a block must take its weights as inputs and create no variables, or the recomputation would
create them again or cut the weights' gradients off.

=================  =================================================================================
model              wrapped
=================  =================================================================================
``word_rnn``       each LSTM layer at each time step (its weights are the block's inputs)
``char_crn``       the same; the character CNN and highway layers run as they are
``wrn``            not: each unit creates its variables and its batch-norm moving-average updates
                   inside itself, which a recomputation would create twice
``transformer``    not: each sub-layer creates its projection variables inside itself
``e3d_lstm``       not: its cells read their weights from the enclosing graph, not as inputs, so a
                   recomputed cell would give them no gradient
your own model     a Keras model: each layer called on one tensor (:func:`jobs.models.layers.keras_blocks`;
                   dropout and noise layers run as they are: a recomputation would draw other random
                   numbers); a model function returning a step has no blocks, which the run finds
                   after building and reports
=================  =================================================================================

After building, the run counts the blocks in the graph (:func:`check_blocks`) and says how many.
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
