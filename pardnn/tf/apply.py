"""Apply a placement to a TensorFlow graph, and the session configuration that runs it.

:func:`apply` sets the device of every op of ``graph`` before its first ``Session.run`` (ops the
placement does not name follow rules 1-4 of docs/notes-partitioner.md), and with ``order`` chains each
device's ops by control dependencies (not sources, TF1 frame members, or values Grappler folds before the
run: :func:`_known_before_the_run`). :func:`session_config` turns soft placement off;
:func:`device_names` names K devices.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt
import tensorflow as tf
from tensorflow.core.protobuf import rewriter_config_pb2
from tensorflow.python.framework import kernels

from pardnn.errors import InvalidPlacementError
from pardnn.tf.capture import colocation_groups

__all__ = ["ApplyReport", "apply", "device_names", "session_config"]

_KINDS = {"cpu": "CPU", "gpu": "GPU"}
HOST_DEVICE = "/device:CPU:0"


def _device_type(kind: str) -> str:
    if kind.lower() not in _KINDS:
        raise ValueError(f"kind={kind!r}: expected 'cpu' or 'gpu'")
    return _KINDS[kind.lower()]


def device_names(count: int, kind: str = "cpu") -> list[str]:
    """``["/device:CPU:0", ..., "/device:CPU:{count-1}"]`` (or ``GPU``)."""
    if count < 1:
        raise ValueError(f"count={count}: need at least one device")
    device_type = _device_type(kind)
    return [f"/device:{device_type}:{i}" for i in range(count)]


def session_config(devices: int, kind: str = "cpu", *, soft_placement: bool = False, optimize: bool = True,
                   log_device_placement: bool = False) -> tf.compat.v1.ConfigProto:
    """A ``ConfigProto`` for ``devices`` logical CPU devices (``kind="cpu"``) or GPUs of the node.

    Parameters
    ----------
    devices:
        K. For CPUs this many logical devices share the host's cores (``device_count={"CPU": K}``);
        for GPUs the session uses at most K of the visible GPUs.
    soft_placement:
        ``allow_soft_placement``; off by default so a placement TensorFlow cannot honour raises.
    optimize:
        Off disables Grappler and the classic graph optimizer's constant folding, so the
        ops that run are the graph's ops with their names (what :mod:`pardnn.tf.profile` needs).
    """
    device_type = _device_type(kind)
    if devices < 1:
        raise ValueError(f"devices={devices}: need at least one device")
    count = {"CPU": devices} if device_type == "CPU" else {"CPU": 1, "GPU": devices}
    config = tf.compat.v1.ConfigProto(device_count=count, allow_soft_placement=soft_placement,
                                      log_device_placement=log_device_placement)
    if not optimize:
        config.graph_options.rewrite_options.CopyFrom(rewriter_config_pb2.RewriterConfig(disable_meta_optimizer=True))
        config.graph_options.optimizer_options.opt_level = tf.compat.v1.OptimizerOptions.L0
        config.graph_options.optimizer_options.do_constant_folding = False
    return config


@dataclass(frozen=True)
class ApplyReport:
    """How each op got its device: from the placement, or by rules 1-4 of the module docstring."""

    placed: int
    by_group: int
    by_input: int
    by_consumer: int
    by_default: int
    on_host: int
    ops_per_device: dict[str, int] = field(default_factory=dict)
    ordered: int = 0  # control dependencies added to enforce the run order


def _placement_map(placement: Mapping[str, int] | npt.ArrayLike, names: Sequence[str] | None) -> dict[str, int]:
    if isinstance(placement, Mapping):
        return {str(k): int(v) for k, v in placement.items()}
    indices = np.asarray(placement)
    if names is None:
        raise InvalidPlacementError("a placement array needs names=cost_graph.names (or pass a mapping name → device)")
    if indices.shape != (len(names),):
        raise InvalidPlacementError(f"placement has {indices.size} entries for {len(names)} names")
    return dict(zip(names, indices.astype(np.int64).tolist()))


def _has_kernel(op_type: str, device_type: str, cache: dict[str, bool]) -> bool:
    if op_type not in cache:
        registered = kernels.get_registered_kernels_for_op(op_type).kernel
        # Ops without kernels (function calls, control flow) are placed by the runtime.
        cache[op_type] = not registered or any(k.device_type == device_type for k in registered)
    return cache[op_type]


def apply(graph: tf.Graph, placement: Mapping[str, int] | npt.ArrayLike, device_names: Sequence[str], *,
          names: Sequence[str] | None = None, order: Mapping[str, int] | npt.ArrayLike | None = None) -> ApplyReport:
    """Set the device of every op of ``graph``: the placement's, else by the rules of the module docstring.

    Parameters
    ----------
    graph:
        The graph the placement was computed for; no session may have run it yet.
    placement:
        ``{op name: device index}``, or an array of device indices aligned with ``names``.
    device_names:
        Device string of each index (:func:`device_names`).
    names:
        Op names when ``placement`` is an array (``cost_graph.names``).
    order:
        Optional run order: ``{op name: position on its device}``, or an array aligned with ``names``
        (``result.order``); enforced with control dependencies (module docstring). Ops of the
        placement it does not name are not sequenced.

    Raises
    ------
    InvalidPlacementError
        An op name not in the graph, a device index outside ``0..len(device_names)-1``, two ops of
        one colocation group on different devices, or an order naming an op the placement does not,
        or whose sequences would close a cycle in the graph.

    Notes
    -----
    O(|V| + |E|) over the whole graph.
    """
    wanted = _placement_map(placement, names)
    positions = None if order is None else _order_map(order, names)
    ops = graph.get_operations()
    by_name = {op.name: op for op in ops}
    device = _placed_devices(wanted, by_name, len(device_names))
    groups = colocation_groups(graph)
    group_device = _group_devices(device, groups)
    counts = _decide_the_rest(ops, device, groups, group_device)
    targets, on_host = _targets(ops, device, groups, device_names)
    # The order is checked in full before the graph is touched.
    links = [] if positions is None else _links(graph, by_name, wanted, targets, positions)
    per_device: dict[str, int] = {}
    for op in ops:
        op._set_device(targets[op.name])
        per_device[targets[op.name]] = per_device.get(targets[op.name], 0) + 1
    for first, then in links:
        then._add_control_input(first)
    return ApplyReport(len(wanted), counts["group"], counts["input"], counts["consumer"], counts["default"],
                       on_host, per_device, len(links))


def _placed_devices(wanted: dict[str, int], by_name: Mapping[str, tf.Operation], count: int) -> dict[str, int]:
    """The placement's ``{op name: device index}``, checked against the graph and the ``count`` devices."""
    device: dict[str, int] = {}
    for name, index in wanted.items():
        if name not in by_name:
            raise InvalidPlacementError(f"placement names op {name!r}, which is not in the graph")
        if not 0 <= index < count:
            raise InvalidPlacementError(f"op {name!r} is placed on device {index}, outside 0..{count - 1}")
        device[name] = index
    return device


def _group_devices(device: Mapping[str, int], groups: Mapping[str, str]) -> dict[str, tuple[int, str]]:
    """``{group label: (device, first placed member by name)}`` of the groups the placement settles;
    raises if it splits one."""
    group_device: dict[str, tuple[int, str]] = {}
    for name in sorted(device):
        label = groups.get(name)
        if label is None:
            continue
        if label in group_device and group_device[label][0] != device[name]:
            other, first = group_device[label][1], group_device[label][0]
            raise InvalidPlacementError(
                f"colocation group {label!r} is split: {other!r} on device {first}, {name!r} on device {device[name]}")
        group_device.setdefault(label, (device[name], name))
    return group_device


def _decide_the_rest(ops: Sequence[tf.Operation], device: dict[str, int], groups: Mapping[str, str],
                     group_device: dict[str, tuple[int, str]]) -> dict[str, int]:
    """Give every op the placement does not name a device by rules 1-4 of the module docstring (in
    ``device``, settling its group in ``group_device``); returns how many ops each rule decided."""
    counts = {"group": 0, "input": 0, "consumer": 0, "default": 0}

    def decide(op: tf.Operation, candidates: list[tf.Operation], rule: str) -> None:
        label = groups.get(op.name)
        if label is not None and label in group_device:
            device[op.name] = group_device[label][0]
            counts["group"] += 1
            return
        for other in candidates:
            if other.name in device:
                device[op.name] = device[other.name]
                counts[rule] += 1
                if label is not None:
                    group_device[label] = (device[op.name], op.name)
                return

    for op in ops:  # graph order is topological but for v1 loop back edges
        if op.name not in device:
            decide(op, [t.op for t in op.inputs] + list(op.control_inputs), "input")
    for op in reversed(ops):
        if op.name not in device:
            consumers = [c for t in op.outputs for c in t.consumers()] + list(op._control_outputs)
            decide(op, consumers, "consumer")
    for op in ops:
        if op.name not in device:
            decide(op, [], "default")
            if op.name not in device:
                device[op.name] = 0
                counts["default"] += 1
                label = groups.get(op.name)
                if label is not None:
                    group_device[label] = (0, op.name)
    return counts


def _targets(ops: Sequence[tf.Operation], device: Mapping[str, int], groups: Mapping[str, str],
             device_names: Sequence[str]) -> tuple[dict[str, str], int]:
    """Each op's device string, and how many ops go to the host instead: on GPUs, a ``tf.data`` op, and
    an op outside every group with no kernel for the devices' type."""
    device_type = tf.DeviceSpec.from_string(device_names[0]).device_type or "CPU"
    kernel_cache: dict[str, bool] = {}
    on_host = 0
    targets: dict[str, str] = {}
    for op in ops:
        target = device_names[device[op.name]]
        if device_type != "CPU" and (_input_pipeline(op.type) or (
                op.name not in groups and not _has_kernel(op.type, device_type, kernel_cache))):
            target = HOST_DEVICE
            on_host += 1
        targets[op.name] = target
    return targets, on_host


_ITERATOR_OPS = frozenset({"Iterator", "IteratorV2", "IteratorGetNext", "IteratorGetNextSync", "MakeIterator",
                           "OneShotIterator", "AnonymousIterator", "AnonymousIteratorV2", "AnonymousIteratorV3",
                           "DeleteIterator", "IteratorToStringHandle", "IteratorFromStringHandleV2"})


def _input_pipeline(op_type: str) -> bool:
    """A ``tf.data`` op (a dataset, or an iterator over one), which runs on the host: some have GPU kernels
    (for datasets copied to a device), but a dataset made on the host is read there."""
    return op_type.endswith("Dataset") or op_type.endswith("DatasetV2") or op_type in _ITERATOR_OPS


def _order_map(order: Mapping[str, int] | npt.ArrayLike, names: Sequence[str] | None) -> dict[str, int]:
    """``order`` as ``{op name: position}``, every position an integer >= 0."""
    if isinstance(order, Mapping):
        items = list(order.items())
    else:
        positions = np.asarray(order)
        if names is None:
            raise InvalidPlacementError("an order array needs names=cost_graph.names "
                                        "(or pass a mapping name → position)")
        if positions.shape != (len(names),):
            raise InvalidPlacementError(f"the order has {positions.size} positions for {len(names)} names")
        if positions.size and positions.dtype.kind not in "iu":
            raise InvalidPlacementError(f"the order's positions must be integers, got {positions.dtype}")
        items = list(zip(names, positions.tolist()))
    out: dict[str, int] = {}
    for name, position in items:
        if isinstance(position, bool) or not isinstance(position, (int, np.integer)) or position < 0:
            raise InvalidPlacementError(f"the order gives op {name!r} position {position!r}; expected an integer >= 0")
        out[str(name)] = int(position)
    return out


def _links(graph: tf.Graph, by_name: dict[str, tf.Operation], device: Mapping[str, int], target: Mapping[str, str],
           position: Mapping[str, int]) -> list[tuple[tf.Operation, tf.Operation]]:
    """The control dependencies that chain each device's ops in ``position`` order (by the device each op
    really gets: an op sent to the host leaves its GPU's sequence); raises before anything changes."""
    sequences: dict[str, list[tuple[int, str]]] = {}
    known = _known_before_the_run(graph)
    for name, index in position.items():
        if name not in device:
            raise InvalidPlacementError(f"the order names op {name!r}, which the placement does not place")
        op = by_name[name]
        # Sources, v1 frame members and values known before the run float free.
        if op.inputs and op._get_control_flow_context() is None and op not in known:
            sequences.setdefault(target[name], []).append((index, name))
    links: list[tuple[tf.Operation, tf.Operation]] = []
    for where, sequence in sequences.items():
        sequence.sort()
        for (at, before), (next_at, after) in itertools.pairwise(sequence):
            if at == next_at:
                raise InvalidPlacementError(f"the order puts ops {before!r} and {after!r} both at position {at} "
                                            f"on {where}; positions on one device must differ")
            first, then = by_name[before], by_name[after]
            if first not in then.control_inputs and all(t.op is not first for t in then.inputs):
                links.append((first, then))
    _refuse_cycles(graph, links)
    return links


_OF_SHAPES = frozenset({"Shape", "ShapeN", "Size"})  # known when every input's shape is


def _known_before_the_run(graph: tf.Graph) -> set[tf.Operation]:
    """Ops with inputs whose value TensorFlow can compute before the run: a ``Shape``/``ShapeN``/``Size``
    of tensors of fully known static shape, a ``Rank`` of known rank, and any stateless op outside a TF1
    frame whose data inputs are all constants or such ops (the ``strided_slice`` of a static shape, a
    ``Fill`` of it). Grappler folds them into input-less constants and drops the control dependencies
    through them, so a chain that ran through one would fall apart there (seen: the two ops on either side
    of a folded ``lstm/strided_slice_1`` ran in either order); :func:`_links` chains the ops around them
    directly instead. Their order never matters: their values exist before the step."""
    known: set[tf.Operation] = set()
    for op in graph.get_operations():  # creation order: every input first (a loop's back edge is in a frame)
        if not op.inputs or op._get_control_flow_context() is not None:
            continue
        if op.type in _OF_SHAPES:
            static = all(t.shape.is_fully_defined() for t in op.inputs)
        elif op.type == "Rank":
            static = all(t.shape.rank is not None for t in op.inputs)
        else:
            static = not op._is_stateful and all(t.op in known or t.op.type == "Const" for t in op.inputs)
        if static:
            known.add(op)
    return known


def _refuse_cycles(graph: tf.Graph, links: list[tuple[tf.Operation, tf.Operation]]) -> None:
    """Raise InvalidPlacementError if the graph's edges and ``links`` form a cycle (Kahn's algorithm;
    a TF1 loop's back edges, into ``Merge`` from ``NextIteration``, are not followed)."""
    ops = graph.get_operations()
    index = {op: i for i, op in enumerate(ops)}
    successors: list[list[int]] = [[] for _ in ops]
    indegree = [0] * len(ops)

    def edge(a: tf.Operation, b: tf.Operation) -> None:
        successors[index[a]].append(index[b])
        indegree[index[b]] += 1

    for op in ops:
        for tensor in op.inputs:
            if not (op.type in ("Merge", "RefMerge") and tensor.op.type in ("NextIteration", "RefNextIteration")):
                edge(tensor.op, op)
        for control in op.control_inputs:
            edge(control, op)
    for first, then in links:
        edge(first, then)
    stack = [i for i, d in enumerate(indegree) if d == 0]
    while stack:
        for j in successors[stack.pop()]:
            indegree[j] -= 1
            if indegree[j] == 0:
                stack.append(j)
    left = {ops[i] for i, d in enumerate(indegree) if d > 0}
    stuck = [then.name for first, then in links if first in left and then in left]
    if stuck:
        named = ", ".join(repr(name) for name in stuck[:8])
        raise InvalidPlacementError(
            f"the run order would close a cycle in the graph ({len(left)} ops on or after it; ordered ops there: "
            f"{named}"
            f"{', ...' if len(stuck) > 8 else ''}): TensorFlow's graph has dependencies the cost graph lacks "
            "(was it changed after capture?); place it again from this graph, or apply without the order")
