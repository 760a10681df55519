"""Functional control flow: function bodies, static integers, trip counts and loop accumulators.

:func:`function_graph`, :func:`static_int`, :class:`LoopTrips` and :func:`accumulated_element`, shared by
:mod:`pardnn.tf.sizing` and :mod:`pardnn.tf.estimate` so both count the same iterations. Rules:
docs/notes-partitioner.md.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import tensorflow as tf

__all__ = ["LOOP_OPS", "LoopTrips", "accumulated_element", "function_graph", "static_int"]

LOOP_OPS = frozenset({"While", "StatelessWhile"})
_GROWING_LISTS = {"TensorListPushBack": 1, "TensorListSetItem": 2}  # op type → index of the element input


def function_graph(op: tf.Operation, name: str) -> Any:
    """The ``FuncGraph`` of function ``name`` as seen from ``op``'s graph, or ``None``."""
    graph: Any = op.graph
    while graph is not None:
        function = graph._get_function(name)
        if function is not None:
            return getattr(function, "graph", None)
        graph = getattr(graph, "outer_graph", None)
    return None


def static_int(tensor: tf.Tensor) -> int | None:
    """The value of a scalar int known at graph construction (constants, shapes, ``shape[i]``)."""
    value = tf.get_static_value(tensor)
    op = tensor.op
    if value is None and op.type == "StridedSlice" and not any(
            op.get_attr(mask) for mask in ("ellipsis_mask", "new_axis_mask")):
        # Keras RNNs take the number of time steps as ``tf.shape(inputs)[0]``.
        vector, begin, end, strides = (tf.get_static_value(t) for t in op.inputs)
        if all(v is not None and np.ndim(v) == 1 for v in (vector, begin, end, strides)) and len(begin) == 1:
            if op.get_attr("shrink_axis_mask") & 1:
                value = vector[begin[0]]
    if value is None or np.size(value) != 1:
        return None
    return int(np.reshape(value, ()))


class LoopTrips:
    """Trip counts of ``While`` ops (see the module docstring), cached per op; ``default`` when unknown."""

    def __init__(self, default: int = 1) -> None:
        if default < 0:
            raise ValueError(f"loop_trips={default}: need a count >= 0 (iterations of a loop of unknown length)")
        self.default = default
        self._trips: dict[str, int] = {}

    def __call__(self, op: tf.Operation) -> int:
        if op.name in self._trips:
            return self._trips[op.name]
        self._trips[op.name] = self.default  # a loop bounded by itself
        known: list[int] = []
        cap = static_int(op.inputs[1]) if len(op.inputs) > 1 else None
        if cap is not None and cap >= 0:
            known.append(cap)
        cond = function_graph(op, op.get_attr("cond").name)
        if cond is not None:
            slot = {t.name: k for k, t in enumerate(cond.inputs) if k < len(op.inputs)}
            for inner in cond.get_operations():
                if inner.type not in ("Less", "LessEqual"):
                    continue
                counter, limit = (slot.get(t.name) for t in inner.inputs)
                if counter is None:
                    continue
                start = static_int(op.inputs[counter])
                stop = self._bound(op.inputs[limit]) if limit is not None else static_int(inner.inputs[1])
                if start is not None and stop is not None:
                    known.append(max(stop - start + (inner.type == "LessEqual"), 0))
                    break
        self._trips[op.name] = min(known) if known else self.default
        return self._trips[op.name]

    def _bound(self, tensor: tf.Tensor) -> int | None:
        # A gradient loop runs as often as its forward loop, whose counter (output 0) it receives.
        if tensor.op.type in LOOP_OPS and tensor.value_index == 0:
            return self(tensor.op)
        return static_int(tensor)


def accumulated_element(op: tf.Operation, slot: int) -> tf.Tensor | None:
    """The element a ``While``'s variant output ``slot`` gains per iteration, or ``None`` if it gains none."""
    if op.type not in LOOP_OPS or op.outputs[slot].dtype != tf.variant:
        return None
    body = function_graph(op, op.get_attr("body").name)
    if body is None or slot >= len(body.outputs):
        return None
    producer = body.outputs[slot].op
    while producer.type == "Identity":
        producer = producer.inputs[0].op
    index = _GROWING_LISTS.get(producer.type)
    return None if index is None else producer.inputs[index]
