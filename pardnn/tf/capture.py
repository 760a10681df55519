"""Capture: the ops one training step runs, as a :class:`~pardnn.costs.graph.CostGraph` (no costs yet).

:func:`capture` (:func:`capture_with_report`) walks back from the fetches' ops: one node per op, edges
sized by :mod:`pardnn.tf.sizing`, variables residual, their mutators reference, colocation groups by
union-find, copy marks (:func:`mark_copies`) as copy metadata. Rules: docs/notes-partitioner.md.
O(|V| + |E|).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import tensorflow as tf

from pardnn.costs.graph import CostGraph, Kind
from pardnn.errors import InvalidGraphError
from pardnn.tf.sizing import VARIABLE_OPS, SizingReport, shape_bytes, size_step

__all__ = ["COPIES", "VARIABLE_OPS", "Step", "capture", "capture_with_report", "colocation_groups", "copy_columns",
           "cost_graph", "fetch_ops", "mark_copies", "op_kind", "shape_bytes", "static_sizes", "trace_step"]

_MUTATING_OPS = frozenset({
    "Assign", "AssignAdd", "AssignSub", "AssignVariableOp", "AssignAddVariableOp", "AssignSubVariableOp",
    "StridedSliceAssign", "ResourceStridedSliceAssign", "CountUpTo", "ResourceCountUpTo",
})
_MUTATING_PREFIXES = ("Apply", "ResourceApply", "SparseApply", "ResourceSparseApply", "Scatter", "ResourceScatter")
_NOT_MUTATING = frozenset({"ScatterNd", "ScatterNdNonAliasingAdd"})
_BACK_EDGE = (frozenset({"NextIteration", "RefNextIteration"}), frozenset({"Merge", "RefMerge"}))
COPIES = "pardnn_micro_batch_copies"  # graph collection of {op name: (micro-batch, original's name)}


def mark_copies(graph: tf.Graph, marks: dict[str, tuple[int, str]]) -> None:
    """Record in ``graph`` which micro-batch each op of ``marks`` belongs to and which op of micro-batch
    0 it copies (op name → ``(micro-batch, original name)``; an op of micro-batch 0 names itself)."""
    graph.add_to_collection(COPIES, dict(marks))


def copy_columns(step: Step) -> tuple[list[int] | None, list[int] | None]:
    """The ``micro_batch`` and ``copy_of`` columns of ``step`` from its graph's :data:`COPIES` marks,
    or ``(None, None)`` when it has none (module docstring). O(|V|)."""
    marks: dict[str, tuple[int, str]] = {}
    for part in step.graph.get_collection(COPIES):
        marks.update(part)
    if not marks:
        return None, None
    batch, source = [-1] * len(step.ops), list(range(len(step.ops)))
    for i, op in enumerate(step.ops):
        index, name = marks.get(op.name, (-1, op.name))
        j = step.index.get(name)
        if index < 0 or j is None or step.ops[j].type != op.type or marks.get(name, (-1, ""))[0] != 0:
            continue
        batch[i], source[i] = index, j
    return batch, source


def op_kind(op_type: str) -> Kind:
    """The memory kind of an op type: residual for variables, reference for variable updates."""
    if op_type in VARIABLE_OPS:
        return Kind.RESIDUAL
    if op_type in _MUTATING_OPS or (op_type.startswith(_MUTATING_PREFIXES) and op_type not in _NOT_MUTATING):
        return Kind.REFERENCE
    return Kind.NORMAL


def _is_resource_edge(op: tf.Operation, index: int) -> bool:
    tensor = op.inputs[index]
    if tensor.dtype == tf.resource:
        return True
    return tensor.dtype._is_ref_dtype and op._input_types[index]._is_ref_dtype


def colocation_groups(graph: tf.Graph) -> dict[str, str]:
    """Op name → group label for every op that shares a colocation group with another op.

    Union-find over resource-handle and reference edges and ``_class`` ``loc:@`` attributes of all
    ops of ``graph`` (see the module docstring). O(|V| + |E|) amortised.
    """
    ops = graph.get_operations()
    parent: dict[str, str] = {op.name: op.name for op in ops}

    def find(name: str) -> str:
        root = name
        while parent[root] != root:
            root = parent[root]
        while parent[name] != root:
            parent[name], name = root, parent[name]
        return root

    def union(a: str, b: str) -> None:
        parent.setdefault(a, a)
        parent.setdefault(b, b)
        ra, rb = find(a), find(b)
        if ra != rb:
            parent[rb] = ra

    for op in ops:
        for i in range(len(op.inputs)):
            if _is_resource_edge(op, i):
                union(op.inputs[i].op.name, op.name)
        for target in _class_targets(op):
            # A target missing from the graph still groups the ops that name it.
            union(target if target in parent else f"loc:@{target}", op.name)
    members: dict[str, list[tf.Operation]] = {}
    for op in ops:
        members.setdefault(find(op.name), []).append(op)
    labels: dict[str, str] = {}
    for group in members.values():
        if len(group) < 2:
            continue
        label = next((op.name for op in group if op.type in VARIABLE_OPS), group[0].name)
        for op in group:
            labels[op.name] = label
    return labels


def _class_targets(op: tf.Operation) -> list[str]:
    if "_class" not in op.node_def.attr:
        return []
    values = [v.decode() if isinstance(v, bytes) else str(v) for v in op.get_attr("_class")]
    return [v[len("loc:@"):] for v in values if v.startswith("loc:@")]


@dataclass(frozen=True)
class Step:
    """The ops one training step runs, in graph (creation) order, with their dependencies.

    ``data_edges`` are ``(src, output slot, dst)`` index triples, ``control_edges`` ``(src, dst)``;
    both between ops of the step. ``groups`` maps op names of the whole graph to group labels.
    ``fetched`` names the tensors fetched (the client reads them, so they are not unused).
    """

    graph: tf.Graph
    ops: tuple[tf.Operation, ...]
    index: dict[str, int]
    data_edges: tuple[tuple[int, int, int], ...]
    control_edges: tuple[tuple[int, int], ...]
    groups: dict[str, str]
    fetched: frozenset[str] = frozenset()

    @property
    def names(self) -> list[str]:
        return [op.name for op in self.ops]

    def kinds(self) -> list[Kind]:
        return [op_kind(op.type) for op in self.ops]


def fetch_ops(graph: tf.Graph, fetches: Any) -> list[tf.Operation]:
    """The ops behind ``fetches``: tensors, ops, variables or their names, in any nested structure."""
    ops: list[tf.Operation] = []
    for fetch in tf.nest.flatten(fetches):
        try:
            element = graph.as_graph_element(fetch, allow_tensor=True, allow_operation=True)
        except (KeyError, TypeError, ValueError) as error:
            raise InvalidGraphError(f"fetch {fetch!r} is not an op or tensor of the graph: {error}") from None
        ops.append(element if isinstance(element, tf.Operation) else element.op)
    if not ops:
        raise InvalidGraphError("no fetches: give the training step's ops or tensors (e.g. [train_op, loss])")
    return ops


def trace_step(graph: tf.Graph, fetches: Any) -> Step:
    """The ops ``Session.run(fetches)`` executes and the edges between them. O(|V| + |E|)."""
    reached: set[str] = set()
    stack = fetch_ops(graph, fetches)
    while stack:
        op = stack.pop()
        if op.name in reached:
            continue
        reached.add(op.name)
        stack.extend(tensor.op for tensor in op.inputs)
        stack.extend(op.control_inputs)
    ops = tuple(op for op in graph.get_operations() if op.name in reached)
    index = {op.name: i for i, op in enumerate(ops)}
    data: list[tuple[int, int, int]] = []
    control: list[tuple[int, int]] = []
    for dst, op in enumerate(ops):
        for tensor in op.inputs:
            if tensor.op.type in _BACK_EDGE[0] and op.type in _BACK_EDGE[1]:
                continue
            data.append((index[tensor.op.name], tensor.value_index, dst))
        control.extend((index[src.name], dst) for src in op.control_inputs)
    fetched = frozenset(f.name for f in tf.nest.flatten(fetches) if isinstance(f, tf.Tensor)) | frozenset(
        f for f in tf.nest.flatten(fetches) if isinstance(f, str) and ":" in f)
    return Step(graph, ops, index, tuple(data), tuple(control), colocation_groups(graph), fetched)


# Ops whose output aliases a buffer that is already counted: a resource variable's read returns
# the variable's own tensor (copy-on-write), so it holds no memory of its own on its device; its
# edges still carry the bytes, which a read on another device must receive.
ALIASING_OPS = frozenset({"ReadVariableOp"})


def static_sizes(step: Step, unknown_dim: int | None = None, *, strict: bool = True,
                 loop_trips: int = 1) -> list[list[int | None]]:
    """Bytes of every output of every op of ``step`` (:func:`pardnn.tf.sizing.size_step`).

    With ``strict`` only static shapes and ``unknown_dim`` size an output, and an unresolved size
    raises :class:`InvalidGraphError`; otherwise the sizing rules apply and a size no rule finds is
    ``None``. A variable op's entry is a one-element list: the variable's size.
    """
    sizes, _ = size_step(step, unknown_dim, strict=strict, loop_trips=loop_trips, raise_unresolved=strict)
    return sizes


def cost_graph(step: Step, sizes: Sequence[Sequence[int | None]], comp_us: Iterable[float] | None = None, *,
               name: str = "tf-step") -> CostGraph:
    """Build the :class:`CostGraph` of ``step`` from per-output sizes (``None`` counts 0) and times."""
    kinds = step.kinds()
    out_bytes = np.zeros(len(step.ops), np.int64)
    param_bytes = np.zeros(len(step.ops), np.int64)
    for i, row in enumerate(sizes):
        if kinds[i] == Kind.RESIDUAL:
            param_bytes[i] = out_bytes[i] = row[0] or 0
        elif kinds[i] == Kind.NORMAL and step.ops[i].type not in ALIASING_OPS:
            out_bytes[i] = sum(size or 0 for size in row)
    src: list[int] = []
    dst: list[int] = []
    edge_bytes: list[int] = []
    for producer, slot, consumer in step.data_edges:
        src.append(producer)
        dst.append(consumer)
        # A variable's handle carries no data; its own entry is the variable's size.
        edge_bytes.append(0 if kinds[producer] == Kind.RESIDUAL and step.ops[producer].type == "VarHandleOp"
                          else sizes[producer][slot] or 0)
    for producer, consumer in step.control_edges:
        src.append(producer)
        dst.append(consumer)
        edge_bytes.append(0)
    comp = np.zeros(len(step.ops)) if comp_us is None else np.fromiter(comp_us, np.float64, len(step.ops))
    micro_batch, copy_of = copy_columns(step)
    return CostGraph(
        step.names, comp, out_bytes, src, dst, edge_bytes,
        kind=[int(k) for k in kinds],
        colocation=[step.groups.get(op.name) for op in step.ops],
        ops=[op.type for op in step.ops],
        param_bytes=param_bytes,
        name=name,
        micro_batch=micro_batch,
        copy_of=copy_of,
    )


def capture_with_report(graph: tf.Graph, fetches: Any, *, unknown_dim: int | None = None, loop_trips: int = 1,
                        strict: bool = False, name: str = "tf-step") -> tuple[CostGraph, SizingReport]:
    """:func:`capture`, also returning the :class:`~pardnn.tf.sizing.SizingReport` (outputs per sizing rule)."""
    step = trace_step(graph, fetches)
    sizes, report = size_step(step, unknown_dim, strict=strict, loop_trips=loop_trips)
    return cost_graph(step, sizes, name=name), report


def capture(graph: tf.Graph, fetches: Any, *, unknown_dim: int | None = None, loop_trips: int = 1,
            strict: bool = False, name: str = "tf-step") -> CostGraph:
    """The :class:`CostGraph` of the training step that runs ``fetches`` (``comp_us`` all 0).

    Parameters
    ----------
    graph:
        A ``tf.compat.v1`` graph holding the forward pass, gradients and optimizer update.
    fetches:
        What one step runs, as for ``Session.run`` (e.g. ``[train_op, loss]``, or names).
    unknown_dim:
        Size to assume for an unknown dimension no sizing rule resolves (the batch size); default:
        such a dimension is bounded by the op's largest input, and raises where there is none (a
        placeholder of unknown batch).
    loop_trips:
        Iterations assumed for a ``While`` whose trip count is not static (sizes its accumulators).
    strict:
        Size from static shapes and ``unknown_dim`` only, and raise on anything else (no sizing rules).
    name:
        The cost graph's name.

    Raises
    ------
    InvalidGraphError
        A fetch not in the graph; an output no rule can size (with ``strict``: an unknown dimension
        without ``unknown_dim``, an unknown rank that something reads); a cycle other than a v1 while
        loop's back edge.

    Examples
    --------
    >>> import tensorflow as tf
    >>> graph = tf.Graph()
    >>> with graph.as_default():
    ...     x = tf.compat.v1.placeholder(tf.float32, [8, 4], name="x")
    ...     w = tf.compat.v1.get_variable("w", [4, 2])
    ...     loss = tf.reduce_sum(tf.matmul(x, w), name="loss")
    ...     train_op = tf.compat.v1.train.GradientDescentOptimizer(0.1).minimize(loss)
    >>> cost = capture(graph, [train_op, loss])
    >>> cost.n > 10, "w" in cost.index, float(cost.comp_us.sum())   # structure only: no costs yet
    (True, True, 0.0)
    >>> cost, sizing = capture_with_report(graph, [train_op, loss])
    >>> sizing.summary()
    '17 outputs sized from static shapes'
    """
    return capture_with_report(graph, fetches, unknown_dim=unknown_dim, loop_trips=loop_trips, strict=strict,
                               name=name)[0]
