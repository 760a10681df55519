"""Keras 3 models (``import keras`` on TensorFlow >= 2.16) in the job's graph, beside tf.keras ones.

:func:`is_keras3` tells a model's Keras; :func:`flavour` is the module its losses and metrics come
from; :class:`StateUpdates` collects the state a Keras 3 call assigns (batch-norm statistics, dropout's
seed), which nothing in a v1 graph runs otherwise. Rules: docs/user-models.md, "Keras 3".
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import tensorflow as tf

from pardnn.tfstack import keras3_model, keras3_module

__all__ = ["StateUpdates", "flavour", "graph_variable", "is_keras3", "is_model", "reset_names", "seed_keras3",
           "spec_of"]


def is_keras3(value: Any) -> bool:
    """Whether ``value`` (a model, layer, optimizer, variable) is an object of Keras 3."""
    return keras3_model(value) is not None


def is_model(value: Any) -> bool:
    """A tf.keras model or a Keras 3 one."""
    if isinstance(value, tf.keras.Model):
        return True
    return is_keras3(value) and isinstance(value, getattr(keras3_module(), "Model", ()))


def flavour(model: Any) -> Any:
    """The Keras module of ``model``: ``keras`` (3) or ``tf.keras``."""
    return keras3_module() if is_keras3(model) else tf.keras


def graph_variable(variable: Any) -> tf.Variable:
    """The ``tf.Variable`` behind a Keras 3 variable (``variable.value``); a tf.Variable as it is."""
    if isinstance(variable, tf.Variable):
        return variable
    return variable.value


def spec_of(symbolic: Any) -> tuple[list[int | None], tf.DType]:
    """A symbolic input's dimensions and dtype (a tf.keras tensor or a Keras 3 ``KerasTensor``)."""
    shape = symbolic.shape
    dims = shape.as_list() if hasattr(shape, "as_list") else list(shape)
    return dims, tf.as_dtype(symbolic.dtype)


def reset_names() -> None:
    """Start Keras 3's automatic names afresh (``dense``, not ``dense_2``), so two builds of one job name
    their ops alike; the rest of Keras 3's global state (a policy the user's module set) is kept. Nothing
    when Keras 3 is not imported."""
    if keras3_module() is not None:
        from keras.src.utils import naming

        naming.reset_uids()


def seed_keras3(seed: int) -> None:
    """Keras 3's seeds too (``keras.utils.set_random_seed``), when it is imported: every rank's weights alike."""
    keras = keras3_module()
    if keras is not None:
        keras.utils.set_random_seed(seed)


class StateUpdates:
    """The state assignments of the Keras 3 calls made inside :meth:`collect`, in program order.

    A Keras 3 layer assigns its state in ``call`` (``moving_mean.assign(...)``, a seed generator's
    next state); inside a ``tf.function`` automatic control dependencies run them, in a v1 graph nothing
    does. Collected under TensorFlow's automatic control dependencies, each resource's reads and writes
    are ordered as written, and :attr:`ops` are the writes the step must run. The initialisation of a
    weight the call makes (a Sequential built by it) is the init op's, not ordered before its reads.
    """

    def __init__(self) -> None:
        self.ops: list[tf.Operation] = []

    @contextmanager
    def collect(self, model: Any = None) -> Iterator[StateUpdates]:
        """Collect the writes of the calls inside; for a ``model`` that is not Keras 3's, nothing (tf.keras
        models say their updates themselves)."""
        if model is not None and not is_keras3(model):
            yield self
            return
        from tensorflow.python.framework import auto_control_deps
        from tensorflow.python.framework.auto_control_deps_utils import RESOURCE_READ_OPS

        graph = tf.compat.v1.get_default_graph()
        first = len(graph.get_operations())
        with auto_control_deps.AutomaticControlDependencies() as ordered:
            yield self
        made = graph.get_operations()[first:]
        initializers = _initializers(graph)
        for op in made:  # a weight made by the call (a Sequential's first call): its reads are not behind its init
            kept = [c for c in op.control_inputs if c not in initializers]
            if len(kept) != len(op.control_inputs):
                op._remove_all_control_inputs()
                op._add_control_inputs(kept)
        self.ops += [op for op in ordered.ops_which_must_run
                     if op.type not in RESOURCE_READ_OPS and op not in initializers]


def _initializers(graph: tf.Graph) -> set[tf.Operation]:
    """The initializer ops of the graph's variables (run by the step's init op, never by the step)."""
    with graph.as_default():
        variables = [*tf.compat.v1.global_variables(), *tf.compat.v1.local_variables()]
    return {v.initializer for v in variables if getattr(v, "initializer", None) is not None}
