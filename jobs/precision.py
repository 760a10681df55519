"""Mixed precision in a job's step: the Keras dtype policy a model is built under, and Keras' dynamic
loss scaling built into the graph with every op placeable (:class:`Scaling`).

Keras' ``LossScaleOptimizer`` skips a step with a non-finite gradient by a ``tf.cond`` around the
update, which would put the whole update in one op. Here every state change of the optimizer's
update (``assign``, ``assign_add``, ``assign_sub`` of weights, slots, EMA, a schedule's current rate)
is gated instead: on a skipped step it writes the value it read (or adds 0), while the step counter
goes on, as Keras' skip does. The scale's rules are Keras': 2^15 at first, halved (not below 1) on
a non-finite gradient, doubled after 2,000 finite steps. Keras 3's differ (``LossScale.keras3``): a
skipped step does not count, the scale is halved with no floor and doubled unchecked. Gradients are
checked after the allreduce, so every rank skips the same steps.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import tensorflow as tf

from pardnn.tfstack import keras3_model, keras3_module

v1 = tf.compat.v1

__all__ = ["LossScale", "Scaling", "policy"]



@dataclass(frozen=True)
class LossScale:
    """Keras' loss scale settings: the first scale, and (``dynamic``) the finite steps before it doubles."""

    initial: float = 2.0 ** 15
    growth_steps: int = 2000
    dynamic: bool = True
    keras3: bool = False  # Keras 3's LossScaleOptimizer rules (the module docstring)

    @classmethod
    def of(cls, optimizer: Any) -> LossScale | None:
        """A compiled ``LossScaleOptimizer``'s settings (``None`` for another optimizer)."""
        if not hasattr(optimizer, "inner_optimizer") or not hasattr(optimizer, "initial_scale"):
            return None
        return cls(float(optimizer.initial_scale), int(optimizer.dynamic_growth_steps or 2000),
                   bool(getattr(optimizer, "dynamic", True)), keras3_model(optimizer) is not None)

    def describe(self) -> str:
        if not self.dynamic:
            return f"fixed loss scale {self.initial:g}"
        return f"dynamic loss scaling (from {self.initial:g}, doubled after {self.growth_steps} finite steps)"


@contextlib.contextmanager
def policy(name: str) -> Iterator[None]:
    """Keras' global dtype policy ``name`` while the model is made (``auto``: the model entry's own),
    and the one before it afterwards (a model entry that sets it does not leak it into the next build)."""
    keras_policy = tf.keras.mixed_precision
    kept = keras_policy.global_policy()
    keras3 = keras3_module()
    state = None
    if keras3 is not None:
        from keras.src.backend.common import global_state as state  # read as set: dtype_policy() would fix floatx's
    kept3 = state.get_global_attribute("dtype_policy", None) if state is not None else None
    if name != "auto":
        keras_policy.set_global_policy(name)
        if state is not None:
            keras3.config.set_dtype_policy(name)
    try:
        yield
    finally:
        keras_policy.set_global_policy(kept)
        if state is not None:
            state.set_global_attribute("dtype_policy", kept3)


class Scaling:
    """The loss scale of one step, its state (``loss_scale/current``, ``loss_scale/counter``: global
    variables, so checkpoints keep them) and the gate of the update."""

    def __init__(self, settings: LossScale) -> None:
        self.settings = settings
        with v1.variable_scope("loss_scale"):
            self.current = v1.get_variable("current", [], tf.float32, v1.constant_initializer(settings.initial),
                                           trainable=False, use_resource=True)
            self.counter = v1.get_variable("counter", [], tf.int64, v1.zeros_initializer(), trainable=False,
                                           use_resource=True)
        self.scale = tf.identity(self.current.read_value(), name="loss_scale/value")  # read before the update
        self.finite: tf.Tensor | None = None

    def scale_loss(self, loss: tf.Tensor) -> tf.Tensor:
        return loss * tf.cast(self.scale, loss.dtype)

    def unscale(self, grads_and_vars: list[tuple[Any, Any]]) -> list[tuple[Any, Any]]:
        """Each gradient times 1/scale, as Keras' ``get_unscaled_gradients``."""
        with v1.name_scope("loss_scale/unscale"):
            reciprocal = 1.0 / self.scale
            return [(None if grad is None else grad * tf.cast(reciprocal, grad.dtype), var)
                    for grad, var in grads_and_vars]

    def check(self, grads_and_vars: list[tuple[Any, Any]]) -> tf.Operation:
        """Whether every (averaged) gradient is finite (:attr:`finite`), and the op updating the scale
        for the next step, after every gradient is computed."""
        grads = [grad for grad, _ in grads_and_vars if grad is not None]
        with v1.name_scope("loss_scale/check"), tf.control_dependencies(grads):
            if not self.settings.dynamic:
                self.finite = tf.constant(True)
                return tf.no_op(name="fixed")
            finite = tf.reduce_all([tf.reduce_all(tf.math.is_finite(grad)) for grad in grads])
            self.finite = tf.identity(finite, name="finite")
            grow = tf.logical_and(finite, self.counter.read_value() + 1 >= self.settings.growth_steps)
            doubled = self.scale * 2.0
            if self.settings.keras3:  # doubled as it is, halved with no floor
                halved = self.scale * 0.5
            else:
                doubled = tf.where(tf.math.is_finite(doubled), doubled, self.scale)
                halved = tf.maximum(self.scale / 2.0, 1.0)
            scale = tf.where(finite, tf.where(grow, doubled, self.scale), halved)
            counter = tf.where(tf.logical_and(finite, tf.logical_not(grow)), self.counter.read_value() + 1,
                               tf.zeros([], tf.int64))
            return tf.group(self.current.assign(scale), self.counter.assign(counter), name="update")

    @contextlib.contextmanager
    def gated(self, counters: list[Any]) -> Iterator[None]:
        """While the update is built: every variable's assignment writes only on a finite step, but
        ``counters`` (the optimizer's step) always count."""
        from tensorflow.python.ops import resource_variable_ops as ops

        finite, keep = self.finite, {id(var) for var in counters}
        assert finite is not None, "check() first"
        # ResourceVariable has its own copies of the methods (TensorFlow's dispatch): patch each class
        classes = (ops.BaseResourceVariable, ops.ResourceVariable)
        kept = {(cls, name): vars(cls)[name] for cls in classes for name in ("assign", "assign_add", "assign_sub")
                if name in vars(cls)}

        def gate(name: str, original: Any) -> Any:
            def assign(var: Any, value: Any, *args: Any, **kwargs: Any) -> Any:
                if id(var) not in keep and self.settings.dynamic:
                    value = tf.convert_to_tensor(value, dtype=var.dtype)
                    unchanged = var.read_value() if name == "assign" else tf.zeros_like(value)
                    value = tf.where(finite, value, unchanged)
                return original(var, value, *args, **kwargs)

            return assign

        for (cls, name), method in kept.items():
            setattr(cls, name, gate(name, method))
        try:
            yield
        finally:
            for (cls, name), method in kept.items():
                setattr(cls, name, method)
