"""Estimate: analytic per-op costs from static shapes, for a GPU the code is not running on.

The model is a roofline per op::

    time_us = max(flops / peak_flops, bytes / memory_bandwidth) × 1e6 + launch_us

with the rates of a :class:`~pardnn.presets.DevicePreset` (``v100-32gb``, ``a100-80gb``,
``h100-80gb``). FLOPs count a multiply-add as 2:

- ``MatMul``: ``2 × |out| × K``, K the inner dimension after ``transpose_a``; ``BatchMatMul``,
  ``BatchMatMulV2``/``V3`` the same per batch (``adj_x``). Gradients of a MatMul are MatMuls with
  transpose attributes, so they are covered.
- ``Conv2D``/``Conv3D``: ``2 × |out| × (kernel volume × input channels per group)``;
  ``Conv2DBackpropInput``/``Filter`` and ``Conv3DBackpropInputV2``/``FilterV2``: the same with
  ``out_backprop`` in place of the output (each does the forward's work once).
  ``DepthwiseConv2dNative`` and its gradients: ``2 × |out| × kernel area``.
- Any other op: one FLOP per element of its largest input or output (elementwise ops, reductions).

Bytes moved are the op's input plus output bytes (a handle moves none). An optimizer update
(``ApplyAdam``, ``ResourceApplyAdam``...) also reads and writes each variable it updates (the
variable and its slots, each the size of the gradient).

Functional ops are costed from their function bodies. A ``While`` costs ``trips × (body + cond)``:
``trips`` is the smaller of its ``maximum_iterations`` and of ``limit - start`` of a
``counter < limit`` test in its cond, where these are known statically (Keras RNNs loop to
``tf.shape(x)[0]``; their gradient loops run to the forward loop's final counter), else
``loop_trips``. ``If``/``Case`` cost their most expensive branch, calls their function. Inside a
body, a tensor of unknown shape counts 0 bytes and 0 FLOPs (the top level raises as capture does).

Metadata-only ops (``Const``, ``Identity``, ``Reshape``, ``Shape``, ``ReadVariableOp``,
``VarHandleOp``, ``NoOp``, control-flow plumbing...) cost 0: they launch no kernel.

Limits: no kernel efficiency (peak is an upper bound, so times are optimistic, most for small ops);
no fusion, tensor cores or mixed precision; sparse and data-dependent ops are costed by their dense
shapes; host-side ops are costed as if on the GPU. Relative costs are what the partitioner needs, and
:func:`pardnn.tf.profile.profile` measures real ones where the hardware is at hand.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import tensorflow as tf

from pardnn.batchscale import CostParts, largest_term
from pardnn.graph import CostGraph, Kind
from pardnn.presets import DevicePreset, preset
from pardnn.tf.capture import cost_graph, op_kind, static_sizes, trace_step

__all__ = ["OpCost", "estimate", "estimate_parts", "op_bytes", "op_cost", "op_flop_terms", "op_flops"]

FREE_OPS = frozenset({
    "NoOp", "Const", "HostConst", "Identity", "IdentityN", "Placeholder", "PlaceholderWithDefault",
    "VarHandleOp", "VariableV2", "Variable", "ReadVariableOp", "VarIsInitializedOp", "Reshape", "Shape",
    "ShapeN", "Size", "Rank", "ExpandDims", "Squeeze", "StopGradient", "PreventGradient", "ControlTrigger",
    "Enter", "RefEnter", "Exit", "RefExit", "Merge", "RefMerge", "Switch", "RefSwitch", "NextIteration",
    "RefNextIteration", "LoopCond", "BroadcastGradientArgs", "VariableShape", "_Arg", "_Retval",
})
_MATMUL = frozenset({"MatMul", "BatchMatMul", "BatchMatMulV2", "BatchMatMulV3"})
# op type → (index of the filter among inputs, or -1 for the output; index of the tensor whose
# elements each take one filter pass: -1 output, else an input)
_CONV = {
    "Conv2D": (1, -1), "Conv3D": (1, -1),
    "Conv2DBackpropInput": (1, 2), "Conv3DBackpropInputV2": (1, 2), "Conv3DBackpropInput": (1, 2),
    "Conv2DBackpropFilter": (-1, 2), "Conv3DBackpropFilterV2": (-1, 2), "Conv3DBackpropFilter": (-1, 2),
}
_DEPTHWISE = {
    "DepthwiseConv2dNative": (1, -1),
    "DepthwiseConv2dNativeBackpropInput": (1, 2),
    "DepthwiseConv2dNativeBackpropFilter": (-1, 2),
}
_FUNCTION_ATTRS = {
    "While": ("body", "cond"), "StatelessWhile": ("body", "cond"),
    "If": ("then_branch", "else_branch"), "StatelessIf": ("then_branch", "else_branch"),
    "Case": ("branches",), "StatelessCase": ("branches",),
    "PartitionedCall": ("f",), "StatefulPartitionedCall": ("f",),
}


@dataclass(frozen=True)
class OpCost:
    """FLOPs and bytes moved by one op, and its estimated time in µs."""

    flops: int
    bytes: int
    us: float


def _dims(tensor: tf.Tensor, unknown_dim: int | None) -> list[int] | None:
    if tensor.shape.rank is None:
        return None
    dims = tensor.shape.as_list()
    if any(d is None for d in dims):
        if unknown_dim is None:
            return None
        dims = [unknown_dim if d is None else d for d in dims]
    return [int(d) for d in dims]


def _elements(tensor: tf.Tensor, unknown_dim: int | None) -> int:
    dims = _dims(tensor, unknown_dim)
    return 0 if dims is None else math.prod(dims)


def _bytes(tensor: tf.Tensor, unknown_dim: int | None) -> int:
    return _elements(tensor, unknown_dim) * int(tensor.dtype.base_dtype.size)


def _tensor_at(op: tf.Operation, index: int) -> tf.Tensor:
    return op.outputs[0] if index < 0 else op.inputs[index]


def op_flops(op: tf.Operation, *, unknown_dim: int | None = None) -> int:
    """FLOPs of one execution of ``op`` (multiply-add = 2), from static shapes; 0 for free ops."""
    return max(op_flop_terms(op, unknown_dim=unknown_dim), default=0)


def op_flop_terms(op: tf.Operation, *, unknown_dim: int | None = None) -> list[int]:
    """The candidates whose largest is :func:`op_flops`: one for MatMuls and convolutions, the element
    count of each input and output for the one-FLOP-per-element rule, none for free ops.

    Kept apart because each candidate grows linearly with the batch while their maximum need not
    (an embedding gradient's segment sum: its output at a small batch, its input at a large one);
    :mod:`pardnn.batchscale` extends each candidate and then takes the maximum.
    """
    if op.type in FREE_OPS:
        return []
    if op.type in _MATMUL:
        a = _dims(op.inputs[0], unknown_dim)
        if a is None:
            return [0]
        if op.type == "MatMul":
            inner = a[0] if op.get_attr("transpose_a") else a[1]
        else:
            inner = a[-2] if op.get_attr("adj_x") else a[-1]
        return [2 * _elements(op.outputs[0], unknown_dim) * inner]
    if op.type in _CONV or op.type in _DEPTHWISE:
        filter_index, work_index = _CONV.get(op.type) or _DEPTHWISE[op.type]
        kernel = _dims(_tensor_at(op, filter_index), unknown_dim)
        if kernel is None:
            return [0]
        # Filter layout [spatial..., in, out] (depthwise: [spatial..., in, multiplier]).
        per_element = math.prod(kernel[:-1] if op.type in _CONV else kernel[:-2])
        return [2 * _elements(_tensor_at(op, work_index), unknown_dim) * per_element]
    tensors = [t for t in list(op.inputs) + list(op.outputs) if t.dtype.base_dtype.size > 0]
    return [_elements(t, unknown_dim) for t in tensors]


def op_bytes(op: tf.Operation, *, unknown_dim: int | None = None) -> int:
    """Bytes ``op`` reads and writes in device memory, from static shapes; 0 for free ops."""
    if op.type in FREE_OPS:
        return 0
    moved = sum(_bytes(t, unknown_dim) for t in op.inputs) + sum(_bytes(t, unknown_dim) for t in op.outputs)
    if op_kind(op.type) == Kind.REFERENCE:
        variables = sum(1 for t in op.inputs if t.dtype == tf.resource or t.dtype._is_ref_dtype)
        largest = max((_bytes(t, unknown_dim) for t in op.inputs if t.dtype.base_dtype.size > 0), default=0)
        moved += 2 * variables * largest
    return moved


def _function_graph(op: tf.Operation, name: str) -> Any:
    graph: Any = op.graph
    while graph is not None:
        function = graph._get_function(name)
        if function is not None:
            return getattr(function, "graph", None)
        graph = getattr(graph, "outer_graph", None)
    return None


def _static_int(tensor: tf.Tensor) -> int | None:
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


class _Estimator:
    def __init__(self, spec: DevicePreset, unknown_dim: int | None, loop_trips: int) -> None:
        self.spec = spec
        self.unknown_dim = unknown_dim
        self.loop_trips = loop_trips
        self.function_us: dict[str, float] = {}
        self.trips: dict[str, int] = {}

    def cost(self, op: tf.Operation) -> OpCost:
        if op.type in _FUNCTION_ATTRS:
            return OpCost(0, 0, self._functional_us(op))
        if op.type in FREE_OPS:
            return OpCost(0, 0, 0.0)
        flops = op_flops(op, unknown_dim=self.unknown_dim)
        moved = op_bytes(op, unknown_dim=self.unknown_dim)
        return OpCost(flops, moved, float(self.spec.kernel_us(flops, moved)))

    def _body_us(self, op: tf.Operation, name: str) -> float:
        if name not in self.function_us:
            self.function_us[name] = 0.0  # a recursive function costs its body once
            body = _function_graph(op, name)
            self.function_us[name] = 0.0 if body is None else sum(self.cost(inner).us
                                                                  for inner in body.get_operations())
        return self.function_us[name]

    def _trips(self, op: tf.Operation) -> int:
        """Iterations of a ``While``: ``maximum_iterations`` and the ``counter < limit`` of its cond."""
        if op.name in self.trips:
            return self.trips[op.name]
        self.trips[op.name] = self.loop_trips  # a loop bounded by itself
        known: list[int] = []
        cap = _static_int(op.inputs[1]) if len(op.inputs) > 1 else None
        if cap is not None and cap >= 0:
            known.append(cap)
        cond = _function_graph(op, op.get_attr("cond").name)
        if cond is not None:
            slot = {t.name: k for k, t in enumerate(cond.inputs) if k < len(op.inputs)}
            for inner in cond.get_operations():
                if inner.type not in ("Less", "LessEqual"):
                    continue
                counter, limit = (slot.get(t.name) for t in inner.inputs)
                if counter is None or limit is None:
                    continue
                start, stop = _static_int(op.inputs[counter]), self._bound(op.inputs[limit])
                if start is not None and stop is not None:
                    known.append(max(stop - start + (inner.type == "LessEqual"), 0))
                    break
        self.trips[op.name] = min(known) if known else self.loop_trips
        return self.trips[op.name]

    def _bound(self, tensor: tf.Tensor) -> int | None:
        # A gradient loop runs as often as its forward loop, whose counter (output 0) it receives.
        if tensor.op.type in ("While", "StatelessWhile") and tensor.value_index == 0:
            return self._trips(tensor.op)
        return _static_int(tensor)

    def _functional_us(self, op: tf.Operation) -> float:
        names: list[str] = []
        for attr in _FUNCTION_ATTRS[op.type]:
            value = op.get_attr(attr)
            names.extend(f.name for f in (value if isinstance(value, list) else [value]))
        costs = [self._body_us(op, name) for name in names]
        if op.type in ("While", "StatelessWhile"):
            return self._trips(op) * sum(costs)
        return max(costs, default=0.0) + (0.0 if op.type.endswith("PartitionedCall") else self.spec.launch_us)


def op_cost(op: tf.Operation, device: str | DevicePreset = "v100-32gb", *, unknown_dim: int | None = None,
            loop_trips: int = 1) -> OpCost:
    """Estimated cost of one op on ``device`` (see the module docstring for the model)."""
    return _Estimator(preset(device), unknown_dim, loop_trips).cost(op)


def estimate(graph: tf.Graph, fetches: Any, device: str | DevicePreset = "v100-32gb", *,
             unknown_dim: int | None = None, loop_trips: int = 1, name: str = "tf-step") -> CostGraph:
    """The step's :class:`CostGraph` (as :func:`~pardnn.tf.capture.capture`) with roofline times.

    Parameters
    ----------
    graph, fetches, unknown_dim, name:
        As for :func:`~pardnn.tf.capture.capture`.
    device:
        A preset name (``v100-32gb``, ``a100-80gb``, ``h100-80gb``) or a :class:`DevicePreset`.
    loop_trips:
        Iterations assumed for a ``While`` whose ``maximum_iterations`` is not a constant.

    Notes
    -----
    O(|V| + |E|) plus the ops of each function body once.
    """
    return estimate_parts(graph, fetches, device, unknown_dim=unknown_dim, loop_trips=loop_trips, name=name).graph


def estimate_parts(graph: tf.Graph, fetches: Any, device: str | DevicePreset = "v100-32gb", *,
                   unknown_dim: int | None = None, loop_trips: int = 1, name: str = "tf-step") -> CostParts:
    """:func:`estimate`, with each op's FLOPs and bytes moved beside the graph.

    What :class:`pardnn.batchscale.BatchScaling` needs to give the graph at other batch sizes
    without building it again. Arguments as for :func:`estimate`; ``.graph`` is what it returns.
    """
    step = trace_step(graph, fetches)
    sizes = static_sizes(step, unknown_dim)
    spec = preset(device)
    estimator = _Estimator(spec, unknown_dim, loop_trips)
    kernel = np.array([op.type not in FREE_OPS and op.type not in _FUNCTION_ATTRS for op in step.ops], bool)
    terms: list[int] = []
    counts: list[int] = []
    moved: list[int] = []
    other_us: list[float] = []
    for op, launches in zip(step.ops, kernel.tolist(), strict=True):
        if launches:
            own = op_flop_terms(op, unknown_dim=unknown_dim)
            terms.extend(own)
            counts.append(len(own))
            moved.append(op_bytes(op, unknown_dim=unknown_dim))
            other_us.append(0.0)
        else:
            counts.append(0)
            moved.append(0)
            other_us.append(estimator.cost(op).us)
    flop_ptr = np.concatenate(([0], np.cumsum(counts))).astype(np.int64)
    flop_terms = np.array(terms, np.float64)
    moved_bytes = np.array(moved, np.float64)
    comp_us = np.where(kernel, spec.kernel_us(largest_term(flop_terms, flop_ptr), moved_bytes), other_us)
    return CostParts(cost_graph(step, sizes, comp_us, name=name), flop_ptr, flop_terms, moved_bytes, kernel)
