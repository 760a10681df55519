"""Estimate: analytic per-op costs from static shapes, for a GPU the code is not running on.

:func:`estimate` gives each op ``max(flops / peak_flops, bytes / memory_bandwidth) × 1e6 + launch_us``
with a :class:`~pardnn.costs.presets.DevicePreset`'s rates; :func:`estimate_parts` keeps the FLOPs and
bytes apart for batch scaling. FLOP counts and limits: docs/notes-partitioner.md; :func:`pardnn.tf.profile.profile`
measures real costs.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import tensorflow as tf

from pardnn.batch.batchscale import CostParts, largest_term
from pardnn.costs.graph import CostGraph, Kind
from pardnn.costs.presets import DevicePreset, preset
from pardnn.tf.capture import cost_graph, op_kind, trace_step
from pardnn.tf.loops import LOOP_OPS, LoopTrips, function_graph
from pardnn.tf.sizing import SizingReport, size_step

__all__ = ["EstimateParts", "OpCost", "estimate", "estimate_parts", "estimate_with_report", "op_bytes", "op_cost",
           "op_flop_terms", "op_flops"]

Sizes = Mapping[str, int] | None  # tensor name → bytes, for top-level tensors sized by rule

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


def _dim(tensor: tf.Tensor, index: int, unknown_dim: int | None) -> int | None:
    """One dimension of ``tensor`` (``unknown_dim`` if unknown), or ``None`` for an unknown rank."""
    if tensor.shape.rank is None:
        return None
    value = tensor.shape.as_list()[index]
    return unknown_dim if value is None else int(value)


def _elements(tensor: tf.Tensor, unknown_dim: int | None, sizes: Sizes = None) -> int:
    if sizes is not None and tensor.name in sizes and tensor.dtype.base_dtype.size > 0:
        return sizes[tensor.name] // tensor.dtype.base_dtype.size
    dims = _dims(tensor, unknown_dim)
    return 0 if dims is None else math.prod(dims)


def _bytes(tensor: tf.Tensor, unknown_dim: int | None, sizes: Sizes = None) -> int:
    if sizes is not None and tensor.name in sizes:
        return sizes[tensor.name]
    return _elements(tensor, unknown_dim) * int(tensor.dtype.base_dtype.size)


def _tensor_at(op: tf.Operation, index: int) -> tf.Tensor:
    return op.outputs[0] if index < 0 else op.inputs[index]


def op_flops(op: tf.Operation, *, unknown_dim: int | None = None, sizes: Sizes = None) -> int:
    """FLOPs of one execution of ``op`` (multiply-add = 2), from static shapes; 0 for free ops.

    ``sizes`` (tensor name → bytes) gives the sizes of tensors whose static shape is not known, as
    :func:`pardnn.tf.sizing.size_step` found them; they replace the static shape wherever given.
    """
    return max(op_flop_terms(op, unknown_dim=unknown_dim, sizes=sizes), default=0)


def op_flop_terms(op: tf.Operation, *, unknown_dim: int | None = None, sizes: Sizes = None) -> list[int]:
    """The candidates whose largest is :func:`op_flops`: one for MatMuls and convolutions, the element
    count of each input and output for the one-FLOP-per-element rule, none for free ops.

    Kept apart because each candidate grows linearly with the batch while their maximum need not
    (an embedding gradient's segment sum: its output at a small batch, its input at a large one);
    :mod:`pardnn.batch.batchscale` extends each candidate and then takes the maximum.
    """
    if op.type in FREE_OPS:
        return []
    if op.type in _MATMUL:
        if op.type == "MatMul":
            inner = _dim(op.inputs[0], 0 if op.get_attr("transpose_a") else 1, unknown_dim)
        else:
            inner = _dim(op.inputs[0], -2 if op.get_attr("adj_x") else -1, unknown_dim)
        return [2 * _elements(op.outputs[0], unknown_dim, sizes) * (inner or 0)]
    if op.type in _CONV or op.type in _DEPTHWISE:
        filter_index, work_index = _CONV.get(op.type) or _DEPTHWISE[op.type]
        kernel = _dims(_tensor_at(op, filter_index), unknown_dim)
        if kernel is None:
            return [0]
        # Filter layout [spatial..., in, out] (depthwise: [spatial..., in, multiplier]).
        per_element = math.prod(kernel[:-1] if op.type in _CONV else kernel[:-2])
        return [2 * _elements(_tensor_at(op, work_index), unknown_dim, sizes) * per_element]
    tensors = [t for t in list(op.inputs) + list(op.outputs) if t.dtype.base_dtype.size > 0]
    return [_elements(t, unknown_dim, sizes) for t in tensors]


def op_bytes(op: tf.Operation, *, unknown_dim: int | None = None, sizes: Sizes = None) -> int:
    """Bytes ``op`` reads and writes in device memory, from static shapes (and ``sizes``, as for
    :func:`op_flops`); 0 for free ops."""
    if op.type in FREE_OPS:
        return 0
    moved = sum(_bytes(t, unknown_dim, sizes) for t in list(op.inputs) + list(op.outputs))
    if op_kind(op.type) == Kind.REFERENCE:
        variables = sum(1 for t in op.inputs if t.dtype == tf.resource or t.dtype._is_ref_dtype)
        largest = max((_bytes(t, unknown_dim, sizes) for t in op.inputs if t.dtype.base_dtype.size > 0), default=0)
        moved += 2 * variables * largest
    return moved


class _Estimator:
    def __init__(self, spec: DevicePreset, unknown_dim: int | None, loop_trips: int) -> None:
        self.spec = spec
        self.unknown_dim = unknown_dim
        self.trips = LoopTrips(loop_trips)
        self.function_us: dict[str, float] = {}

    def cost(self, op: tf.Operation, sizes: Sizes = None) -> OpCost:
        if op.type in _FUNCTION_ATTRS:
            return OpCost(0, 0, self._functional_us(op))
        if op.type in FREE_OPS:
            return OpCost(0, 0, 0.0)
        flops = op_flops(op, unknown_dim=self.unknown_dim, sizes=sizes)
        moved = op_bytes(op, unknown_dim=self.unknown_dim, sizes=sizes)
        return OpCost(flops, moved, float(self.spec.kernel_us(flops, moved)))

    def _body_us(self, op: tf.Operation, name: str) -> float:
        if name not in self.function_us:
            self.function_us[name] = 0.0  # a recursive function costs its body once
            body = function_graph(op, name)
            self.function_us[name] = 0.0 if body is None else sum(self.cost(inner).us
                                                                  for inner in body.get_operations())
        return self.function_us[name]

    def _functional_us(self, op: tf.Operation) -> float:
        names: list[str] = []
        for attr in _FUNCTION_ATTRS[op.type]:
            value = op.get_attr(attr)
            names.extend(f.name for f in (value if isinstance(value, list) else [value]))
        costs = [self._body_us(op, name) for name in names]
        if op.type in LOOP_OPS:
            return self.trips(op) * sum(costs)
        return max(costs, default=0.0) + (0.0 if op.type.endswith("PartitionedCall") else self.spec.launch_us)


def op_cost(op: tf.Operation, device: str | DevicePreset = "v100-32gb", *, unknown_dim: int | None = None,
            loop_trips: int = 1, sizes: Sizes = None) -> OpCost:
    """Estimated cost of one op on ``device`` (see the module docstring for the model; ``sizes`` as
    for :func:`op_flops`)."""
    return _Estimator(preset(device), unknown_dim, loop_trips).cost(op, sizes)


@dataclass(frozen=True)
class EstimateParts(CostParts):
    """:class:`~pardnn.batch.batchscale.CostParts` with the :class:`~pardnn.tf.sizing.SizingReport` of its graph."""

    sizing: SizingReport | None = None


def estimate(graph: tf.Graph, fetches: Any, device: str | DevicePreset = "v100-32gb", *,
             unknown_dim: int | None = None, loop_trips: int = 1, strict: bool = False,
             name: str = "tf-step") -> CostGraph:
    """The step's :class:`CostGraph` (as :func:`~pardnn.tf.capture.capture`) with roofline times.

    Parameters
    ----------
    graph, fetches, unknown_dim, strict, name:
        As for :func:`~pardnn.tf.capture.capture`.
    device:
        A preset name (``v100-32gb``, ``a100-80gb``, ``h100-80gb``) or a :class:`DevicePreset`.
    loop_trips:
        Iterations assumed for a ``While`` whose trip count is not static (its time and its
        accumulators' bytes).

    Notes
    -----
    O(|V| + |E|) plus the ops of each function body once.
    """
    return estimate_parts(graph, fetches, device, unknown_dim=unknown_dim, loop_trips=loop_trips, strict=strict,
                          name=name).graph


def estimate_with_report(graph: tf.Graph, fetches: Any, device: str | DevicePreset = "v100-32gb", *,
                         unknown_dim: int | None = None, loop_trips: int = 1, strict: bool = False,
                         name: str = "tf-step") -> tuple[CostGraph, SizingReport]:
    """:func:`estimate`, also returning the :class:`~pardnn.tf.sizing.SizingReport` (outputs per sizing rule)."""
    parts = estimate_parts(graph, fetches, device, unknown_dim=unknown_dim, loop_trips=loop_trips, strict=strict,
                           name=name)
    assert parts.sizing is not None
    return parts.graph, parts.sizing


def estimate_parts(graph: tf.Graph, fetches: Any, device: str | DevicePreset = "v100-32gb", *,
                   unknown_dim: int | None = None, loop_trips: int = 1, strict: bool = False,
                   name: str = "tf-step") -> EstimateParts:
    """:func:`estimate`, with each op's FLOPs and bytes moved beside the graph, and ``.sizing``.

    What :class:`pardnn.batch.batchscale.BatchScaling` needs to give the graph at other batch sizes
    without building it again. Arguments as for :func:`estimate`; ``.graph`` is what it returns.
    Tensors sized by rule (not from a static shape) count those sizes in FLOPs and bytes moved too.
    """
    step = trace_step(graph, fetches)
    sizes, sizing = size_step(step, unknown_dim, strict=strict, loop_trips=loop_trips)
    by_rule = {name: size for name, size in sizing.sizes.items() if size is not None}
    spec = preset(device)
    estimator = _Estimator(spec, unknown_dim, loop_trips)
    kernel = np.array([op.type not in FREE_OPS and op.type not in _FUNCTION_ATTRS for op in step.ops], bool)
    terms: list[int] = []
    counts: list[int] = []
    moved: list[int] = []
    other_us: list[float] = []
    for op, launches in zip(step.ops, kernel.tolist(), strict=True):
        if launches:
            own = op_flop_terms(op, unknown_dim=unknown_dim, sizes=by_rule)
            terms.extend(own)
            counts.append(len(own))
            moved.append(op_bytes(op, unknown_dim=unknown_dim, sizes=by_rule))
            other_us.append(0.0)
        else:
            counts.append(0)
            moved.append(0)
            other_us.append(estimator.cost(op, by_rule).us)
    flop_ptr = np.concatenate(([0], np.cumsum(counts))).astype(np.int64)
    flop_terms = np.array(terms, np.float64)
    moved_bytes = np.array(moved, np.float64)
    comp_us = np.where(kernel, spec.kernel_us(largest_term(flop_terms, flop_ptr), moved_bytes), other_us)
    return EstimateParts(cost_graph(step, sizes, comp_us, name=name), flop_ptr, flop_terms, moved_bytes, kernel,
                         sizing=sizing)
