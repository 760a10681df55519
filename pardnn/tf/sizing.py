"""Sizing: the bytes of every output of a training step, from its static shape or, failing that, by rule.

:func:`size_step` gives every output exactly one rule of :data:`RULES`, tried in order, and the
:class:`SizingReport` counts them; where a size depends on the data it is an upper bound. With
``strict=True`` only ``static``, ``unknown_dim``, ``unused`` and ``loop_accumulator`` apply, else it
raises. The rules: docs/notes-partitioner.md.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import tensorflow as tf

from pardnn.errors import InvalidGraphError
from pardnn.tf.loops import LoopTrips, accumulated_element, static_int

__all__ = ["RULES", "SizingReport", "shape_bytes", "size_step", "variable_bytes"]

RULES = ("trace", "loop_accumulator", "static", "reserve", "data_dependent", "reshape", "propagated", "unknown_dim",
         "unused", "largest_input", "unsized")
VARIABLE_OPS = frozenset({"VarHandleOp", "VariableV2", "Variable"})


@dataclass(frozen=True)
class SizingReport:
    """How the step's outputs were sized: ``counts`` per rule (every rule of :data:`RULES`, zeros
    included; every output counted once), and for each output not sized ``static`` its rule
    (``rules``, tensor name → rule) and its bytes (``sizes``, tensor name → bytes or ``None``)."""

    counts: dict[str, int]
    rules: dict[str, str]
    sizes: dict[str, int | None]

    def tensors(self, rule: str) -> list[str]:
        """Names of the outputs sized by ``rule``, in graph order."""
        return [name for name, used in self.rules.items() if used == rule]

    def summary(self) -> str:
        sized = ", ".join(f"{count} {rule}" for rule, count in self.counts.items() if count and rule != "static")
        static = f"{self.counts.get('static', 0)} outputs sized from static shapes"
        return static + (f", by rule: {sized}" if sized else "")


def shape_bytes(dims: Any, item_size: int, unknown_dim: int | None) -> int | None:
    """Bytes of a tensor of shape ``dims`` (``None`` = unknown rank); ``None`` when unknown remains."""
    if item_size == 0:
        return 0
    if dims is None:
        return None
    if any(d is None for d in dims) and unknown_dim is None:
        return None
    return item_size * math.prod(int(unknown_dim if d is None else d) for d in dims)


def variable_bytes(op: tf.Operation, unknown_dim: int | None) -> int | None:
    """Bytes of a variable op's ``shape`` × ``dtype`` attributes (``None`` if not fully known)."""
    shape = tf.TensorShape(op.get_attr("shape"))
    size = tf.as_dtype(op.get_attr("dtype")).size
    return shape_bytes(shape.as_list() if shape.rank is not None else None, size, unknown_dim)


def _item(tensor: tf.Tensor) -> int:
    return int(tensor.dtype.base_dtype.size)


def _dims(tensor: tf.Tensor) -> list[int | None] | None:
    return tensor.shape.as_list() if tensor.shape.rank is not None else None


def _resolved(dims: list[int | None] | None, elements: int) -> int | None:
    """The value each unknown dimension of ``dims`` takes for the tensor to hold ``elements`` (rounded up)."""
    if dims is None or None not in dims:
        return None
    known = math.prod(d for d in dims if d is not None)
    unknown = dims.count(None)
    per = -(-elements // known) if known else 0
    value = max(round(per ** (1.0 / unknown)), 0)
    while value**unknown < per:
        value += 1
    return value


class _Sizes:
    """Sizes (bytes) and resolved unknown-dimension values of the step's outputs, filled in graph order."""

    def __init__(self, step: Any) -> None:
        self.index = step.index
        self.bytes: list[list[int | None]] = [[] for _ in step.ops]
        self.dim: list[list[int | None]] = [[] for _ in step.ops]

    def nbytes(self, tensor: tf.Tensor) -> int | None:
        row = self.bytes[self.index[tensor.op.name]]
        return row[tensor.value_index] if tensor.value_index < len(row) else None

    def elements(self, tensor: tf.Tensor) -> int | None:
        size = self.nbytes(tensor)
        return None if size is None or _item(tensor) == 0 else size // _item(tensor)

    def dim_of(self, tensor: tf.Tensor) -> int | None:
        row = self.dim[self.index[tensor.op.name]]
        return row[tensor.value_index] if tensor.value_index < len(row) else None


# Rules by op type: (rule name, function(op, slot, sizes) → elements of the output, or None to fall through).
_Rule = Callable[[tf.Operation, int, _Sizes], "int | None"]


def _first_input(op: tf.Operation, slot: int, s: _Sizes) -> int | None:
    return s.elements(op.inputs[0])


def _reduction(op: tf.Operation, slot: int, s: _Sizes) -> int | None:
    return None if tf.get_static_value(op.inputs[1]) is not None else s.elements(op.inputs[0])


def _where(op: tf.Operation, slot: int, s: _Sizes) -> int | None:
    count, rank = s.elements(op.inputs[0]), op.inputs[0].shape.rank
    return None if count is None or rank is None else count * rank


def _stitch(op: tf.Operation, slot: int, s: _Sizes) -> int | None:
    n = op.get_attr("N")
    counts = [s.elements(t) for t in op.inputs[n:]]
    return None if None in counts else sum(counts)  # type: ignore[arg-type]


def _rows_times_row(rows: int | None, dims: list[int | None] | None, first: int) -> int | None:
    if rows is None or dims is None or None in dims[first:]:
        return None
    return rows * math.prod(dims[first:])  # type: ignore[arg-type]


def _sparse_segment(op: tf.Operation, slot: int, s: _Sizes) -> int | None:
    return _rows_times_row(s.elements(op.inputs[1]), _dims(op.outputs[0]), 1)


def _gather(op: tf.Operation, slot: int, s: _Sizes) -> int | None:
    indices, out = op.inputs[1], _dims(op.outputs[0])
    count, rank = s.elements(indices), indices.shape.rank
    batch = op.get_attr("batch_dims") if "batch_dims" in op.node_def.attr else 0
    axis = static_int(op.inputs[2]) if op.type == "GatherV2" else 0
    if count is None or rank is None or out is None or axis is None:
        return None
    axis = axis + len(out) - rank + batch + 1 if axis < 0 else axis  # params rank = out rank - rank + batch + 1
    skipped = set(range(batch)) | set(range(axis, axis + rank - batch))
    outside = [d for k, d in enumerate(out) if k not in skipped]
    return None if None in outside else count * math.prod(outside)  # type: ignore[arg-type]


def _gather_nd(op: tf.Operation, slot: int, s: _Sizes) -> int | None:
    indices, count = op.inputs[1], s.elements(op.inputs[1])
    dims = _dims(indices)
    if count is None or not dims or dims[-1] is None or dims[-1] == 0:
        return None
    return _rows_times_row(count // dims[-1], _dims(op.outputs[0]), len(dims) - 1)


def _shape_args(op: tf.Operation, slot: int, s: _Sizes) -> int | None:
    counts = [s.elements(t) for t in op.inputs]
    return None if None in counts else max(counts)  # type: ignore[type-var]


def _list_content(op: tf.Operation, slot: int, s: _Sizes) -> int | None:
    size = s.nbytes(op.inputs[0])
    return None if not size else size // _item(op.outputs[slot])


def _batch_norm(op: tf.Operation, slot: int, s: _Sizes) -> int | None:
    return 0 if slot == 5 else (s.elements(op.inputs[1]) if slot else None)


def _batch_norm_grad(op: tf.Operation, slot: int, s: _Sizes) -> int | None:
    return 0 if slot in (3, 4) else (s.elements(op.inputs[2]) if slot in (1, 2) else None)


_GATES = {b"lstm": 4, b"gru": 3, b"rnn_relu": 1, b"rnn_tanh": 1}


def _cudnn_rnn(op: tf.Operation, slot: int, s: _Sizes) -> int | None:
    if slot == 4:
        return 0
    if slot != 3:
        return None
    output = s.elements(op.outputs[0])
    return None if output is None else output * _GATES.get(op.get_attr("rnn_mode"), 4)


def _table(rule: str, types: tuple[str, ...], function: _Rule) -> dict[str, tuple[str, _Rule]]:
    return {t: (rule, function) for t in types}


OP_RULES: dict[str, tuple[str, _Rule]] = {
    **_table("reserve", ("FusedBatchNorm", "FusedBatchNormV2", "FusedBatchNormV3", "_FusedBatchNormEx"), _batch_norm),
    **_table("reserve", ("FusedBatchNormGrad", "FusedBatchNormGradV2", "FusedBatchNormGradV3"), _batch_norm_grad),
    **_table("reserve", ("CudnnRNN", "CudnnRNNV2", "CudnnRNNV3"), _cudnn_rnn),
    **_table("data_dependent", ("Unique", "UniqueV2", "UniqueWithCounts", "UniqueWithCountsV2", "ListDiff",
                                "DynamicPartition", "SegmentSum", "SegmentMean", "SegmentProd", "SegmentMin",
                                "SegmentMax", "SegmentSumV2", "SegmentProdV2", "SegmentMinV2", "SegmentMaxV2",
                                "UnsortedSegmentSum", "UnsortedSegmentProd", "UnsortedSegmentMin",
                                "UnsortedSegmentMax"), _first_input),
    **_table("data_dependent", ("Sum", "Mean", "Max", "Min", "Prod", "All", "Any", "EuclideanNorm", "ArgMax",
                                "ArgMin"), _reduction),
    "Reshape": ("reshape", _first_input),
    "Where": ("data_dependent", _where),
    **_table("data_dependent", ("DynamicStitch", "ParallelDynamicStitch"), _stitch),
    **_table("data_dependent", ("SparseSegmentSum", "SparseSegmentMean", "SparseSegmentSqrtN",
                                "SparseSegmentSumWithNumSegments", "SparseSegmentMeanWithNumSegments",
                                "SparseSegmentSqrtNWithNumSegments"), _sparse_segment),
    **_table("data_dependent", ("Gather", "GatherV2", "ResourceGather"), _gather),
    **_table("data_dependent", ("GatherNd", "ResourceGatherNd"), _gather_nd),
    "BroadcastGradientArgs": ("data_dependent", _shape_args),
    **_table("data_dependent", ("TensorListStack", "TensorListConcatV2"), _list_content),
}


def _unresolved_error(op: tf.Operation, tensor: tf.Tensor, strict: bool) -> InvalidGraphError:
    if _dims(tensor) is None:
        hint = "unknown rank; set a static shape (tensor.set_shape)"
    else:
        hint = "pass unknown_dim=<batch size> or give the placeholder a static shape"
    if not strict:
        hint += "; no sizing rule applies and the op has no sized input to bound it"
    return InvalidGraphError(f"op {op.name!r} ({op.type}): output {tensor.name!r} has shape {tensor.shape}, {hint}")


def size_step(step: Any, unknown_dim: int | None = None, *, strict: bool = False, loop_trips: int = 1,
              measured: Mapping[str, Mapping[int, int]] | None = None,
              raise_unresolved: bool = True) -> tuple[list[list[int | None]], SizingReport]:
    """Bytes of every output of every op of ``step`` (a :class:`pardnn.tf.capture.Step`), and the report.

    A variable op's row is one entry: the variable's size. ``measured`` (op name → slot → bytes)
    takes precedence over every rule (the ``trace`` rule). An output no rule sizes raises
    :class:`InvalidGraphError`, or is ``None`` with ``raise_unresolved=False``.
    """
    sizes = _Sizes(step)
    fetched = getattr(step, "fetched", frozenset())
    trips = LoopTrips(loop_trips)
    read = {(src, slot) for src, slot, _ in step.data_edges}
    counts = dict.fromkeys(RULES, 0)
    rules: dict[str, str] = {}
    by_rule: dict[str, int | None] = {}
    measured = measured or {}
    for i, op in enumerate(step.ops):
        if op.type in VARIABLE_OPS:
            size = variable_bytes(op, unknown_dim)
            if size is None and raise_unresolved:
                raise InvalidGraphError(
                    f"op {op.name!r} ({op.type}): variable shape {tf.TensorShape(op.get_attr('shape'))} is not fully"
                    " known; give the variable a static shape or pass unknown_dim=<batch size>")
            rule = "static" if tf.TensorShape(op.get_attr("shape")).is_fully_defined() else (
                "unknown_dim" if size is not None else "unsized")
            sizes.bytes[i], sizes.dim[i] = [size], [None]
            counts[rule] += 1
            if rule != "static":
                rules[op.outputs[0].name], by_rule[op.outputs[0].name] = rule, size
            continue
        own = measured.get(op.name, {})
        for slot, tensor in enumerate(op.outputs):
            read_here = (i, slot) in read or tensor.name in fetched
            size, rule = _size_output(op, slot, tensor, sizes, own, read_here, trips, unknown_dim, strict)
            if size is None and raise_unresolved:
                raise _unresolved_error(op, tensor, strict)
            if rule == "unknown_dim" or size is None or not _item(tensor):
                value = unknown_dim if rule == "unknown_dim" else None
            else:
                value = _resolved(_dims(tensor), size // _item(tensor))
            sizes.bytes[i].append(size)
            sizes.dim[i].append(value)
            counts[rule] += 1
            if rule != "static":
                rules[tensor.name], by_rule[tensor.name] = rule, size
    return sizes.bytes, SizingReport(counts, rules, by_rule)


def _from_inputs(op: tf.Operation, dims: list[int | None], item: int, sizes: _Sizes) -> int | None:
    """Bytes of an output of partial shape ``dims`` from the op's inputs (the ``propagated`` rule)."""
    # An input read through ``Shape`` (the shape a Tile, Fill or BroadcastTo in a gradient takes) counts.
    candidates = list(op.inputs) + [t.op.inputs[0] for t in op.inputs if t.op.type == "Shape"]
    same = [sizes.elements(t) for t in candidates if t.shape.rank is not None and t.shape.as_list() == dims]
    known = [n for n in same if n is not None]
    if known:
        return max(known) * item
    values = [v for v in (sizes.dim_of(t) for t in op.inputs) if v is not None]
    return item * math.prod(max(values) if d is None else d for d in dims) if values else None


def _size_output(op: tf.Operation, slot: int, tensor: tf.Tensor, sizes: _Sizes, measured: Mapping[int, int],
                 read: bool, trips: LoopTrips, unknown_dim: int | None, strict: bool) -> tuple[int | None, str]:
    item = _item(tensor)
    if slot in measured and item > 0:
        return measured[slot], "trace"
    element = accumulated_element(op, slot) if read else None
    if element is not None:
        per_step = shape_bytes(_dims(element), _item(element), unknown_dim)
        if per_step:
            return per_step * trips(op), "loop_accumulator"
    dims = _dims(tensor)
    if item == 0 or (dims is not None and None not in dims):
        return shape_bytes(dims, item, None), "static"
    guess = shape_bytes(dims, item, unknown_dim)
    if strict:
        if guess is not None:
            return guess, "unknown_dim"
        return (0, "unused") if not tensor.consumers() else (None, "unsized")  # as before the rules
    if op.type in OP_RULES:
        rule, function = OP_RULES[op.type]
        elements = function(op, slot, sizes)
        if elements is not None:
            return elements * item, rule
    if dims is not None:
        size = _from_inputs(op, dims, item, sizes)
        size = guess if size is None else size
        if size is not None:
            return size, "unknown_dim" if size == guess else "propagated"
    if not (tensor.consumers() or read):
        return 0, "unused"
    inputs = [sizes.elements(t) for t in op.inputs]
    largest = max((n for n in inputs if n is not None), default=None)
    return (None, "unsized") if largest is None else (largest * item, "largest_input")
