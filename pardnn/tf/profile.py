"""Profile: measured per-op times and output sizes of a training step, from TensorFlow's own trace.

:func:`profile` (:func:`profile_with_report`) runs ``warmup + steps`` steps with Grappler off, traces the
last ``steps`` and takes a trimmed mean of each op's time and its runtime output sizes; ops the trace
never shows keep 0 µs and are listed. Rules: docs/notes-partitioner.md.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable, Container, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import tensorflow as tf

from pardnn.costs.graph import CostGraph
from pardnn.tf.apply import session_config
from pardnn.tf.capture import VARIABLE_OPS, cost_graph, trace_step
from pardnn.tf.sizing import SizingReport, size_step

__all__ = ["ProfileReport", "StepTrace", "owner_op", "parse_step_stats", "profile", "profile_with_report",
           "trimmed_mean"]

logger = logging.getLogger(__name__)

FeedFn = Callable[[int], Mapping[Any, Any] | None]

_SKIPPED_NODES = frozenset({"_SOURCE", "_SINK"})
_SKIPPED_TYPES = frozenset({"_Send", "_Recv", "_HostSend", "_HostRecv", "_Retval", "_DeviceRetval"})
_ARG = re.compile(r"^_arg_(.+)_(\d+)_(\d+)$")


def owner_op(node_name: str, op_names: Container[str]) -> tuple[str, int | None] | None:
    """The op a trace node belongs to, and the output slot it stands for when it is the op itself.

    Returns ``(op name, None)`` for a node that is part of an op (lowered loop, folded constant),
    ``(op name, slot)`` for a fed placeholder's ``_arg`` node, ``(op name, -1)`` for the op's own
    node, and ``None`` for nodes of no op.
    """
    if node_name in _SKIPPED_NODES:
        return None
    if node_name in op_names:
        return node_name, -1
    match = _ARG.match(node_name)
    if match and match.group(1) in op_names:
        return match.group(1), int(match.group(2))
    name = node_name.removeprefix("Func/")
    while "/" in name:
        name = name.rsplit("/", 1)[0]
        if name in op_names:
            return name, None
    return None


def _node_type(timeline_label: str) -> str:
    _, _, call = timeline_label.partition(" = ")
    return call.partition("(")[0]


def _node_us(node: Any) -> float:
    if node.op_end_rel_nanos or node.op_start_rel_nanos:
        return max(node.op_end_rel_nanos - node.op_start_rel_nanos, 0) / 1000.0
    return float(max(node.op_end_rel_micros - node.op_start_rel_micros, 0))


def _output_bytes(output: Any) -> int | None:
    description = output.tensor_description
    size = tf.as_dtype(description.dtype).size if description.dtype else 0
    if size == 0:
        return None
    dims = [d.size for d in description.shape.dim]
    if description.shape.unknown_rank or any(d < 0 for d in dims):
        return None
    return size * int(np.prod(dims, dtype=np.int64))


@dataclass(frozen=True)
class StepTrace:
    """One traced step: time per op (µs), measured output sizes per op and slot, unmatched nodes."""

    time_us: dict[str, float]
    sizes: dict[str, dict[int, int]]
    unmatched: int


def parse_step_stats(step_stats: Any, op_names: Container[str]) -> StepTrace:
    """Per-op time and output sizes of one ``RunMetadata.step_stats``. O(trace nodes × name depth)."""
    per_view: dict[tuple[str, str], float] = {}
    sizes: dict[str, dict[int, int]] = {}
    unmatched = 0
    for device in step_stats.dev_stats:
        if "memcpy" in device.device.lower():
            continue
        for node in device.node_stats:
            if node.node_name in _SKIPPED_NODES or _node_type(node.timeline_label) in _SKIPPED_TYPES:
                continue
            owner = owner_op(node.node_name, op_names)
            if owner is None:
                unmatched += 1
                continue
            name, slot = owner
            key = (name, device.device)
            per_view[key] = per_view.get(key, 0.0) + _node_us(node)
            if slot is None:
                continue
            for output in node.output:
                nbytes = _output_bytes(output)
                if nbytes is not None:
                    index = output.slot if slot < 0 else slot
                    sizes.setdefault(name, {})[index] = nbytes
    time_us: dict[str, float] = {}
    for (name, _), us in per_view.items():
        time_us[name] = max(time_us.get(name, 0.0), us)
    return StepTrace(time_us, sizes, unmatched)


def trimmed_mean(values: np.ndarray, trim: float) -> float:
    """Mean of ``values`` without the ``floor(trim × n)`` smallest and largest."""
    ordered = np.sort(np.asarray(values, dtype=np.float64))
    cut = int(trim * ordered.size)
    kept = ordered[cut: ordered.size - cut] if ordered.size > 2 * cut else ordered
    return float(kept.mean()) if kept.size else 0.0


@dataclass(frozen=True)
class ProfileReport:
    """What profiling saw: ops timed from the trace, ops it never showed, sizes left unknown.

    ``missing`` are op names (they kept 0 µs), ``unsized`` tensor or variable names (0 bytes),
    ``unmatched_trace_nodes`` the last traced step's nodes that belong to no op of the graph,
    ``sizing`` the outputs per sizing rule (``trace`` for those the trace sized).
    """

    steps: int
    warmup: int
    ops: int
    timed: int
    missing: tuple[str, ...]
    sized_from_trace: int
    unsized: tuple[str, ...]
    unmatched_trace_nodes: int
    seconds: float
    sizing: SizingReport | None = None

    def summary(self) -> str:
        rules = f" ({self.sizing.summary()})" if self.sizing is not None else ""
        return (f"profiled {self.steps} steps after {self.warmup} warm-up: {self.timed} of {self.ops} ops timed, "
                f"{len(self.missing)} not in the trace, {self.sized_from_trace} outputs sized from the trace, "
                f"{len(self.unsized)} left unsized{rules}, {self.seconds:.1f} s")


def _default_init_ops(graph: tf.Graph) -> list[tf.Operation]:
    variables = (graph.get_collection(tf.compat.v1.GraphKeys.GLOBAL_VARIABLES)
                 + graph.get_collection(tf.compat.v1.GraphKeys.LOCAL_VARIABLES))
    return [v.initializer for v in variables]


def profile_with_report(graph: tf.Graph, fetches: Any, feed_fn: FeedFn | None = None, *, steps: int = 10,
                        warmup: int = 2, devices: int = 1, kind: str = "cpu", trim: float = 0.2,
                        unknown_dim: int | None = None, loop_trips: int = 1, init_ops: Any = None,
                        name: str = "tf-step") -> tuple[CostGraph, ProfileReport]:
    """:func:`profile`, also returning its :class:`ProfileReport`."""
    if steps < 1 or warmup < 0:
        raise ValueError(f"steps={steps}, warmup={warmup}: need steps >= 1 and warmup >= 0")
    if not 0 <= trim < 0.5:
        raise ValueError(f"trim={trim}: need 0 <= trim < 0.5")
    started = time.perf_counter()
    step = trace_step(graph, fetches)
    op_names = frozenset(op.name for op in graph.get_operations())
    traces: list[StepTrace] = []
    options = tf.compat.v1.RunOptions(trace_level=tf.compat.v1.RunOptions.FULL_TRACE)
    config = session_config(devices, kind, soft_placement=True, optimize=False)
    with tf.compat.v1.Session(graph=graph, config=config) as session:
        initializers = _default_init_ops(graph) if init_ops is None else init_ops
        if tf.nest.flatten(initializers):
            session.run(initializers)
        for index in range(warmup + steps):
            feed = feed_fn(index) if feed_fn is not None else None
            if index < warmup:
                session.run(fetches, feed_dict=feed)
                continue
            metadata = tf.compat.v1.RunMetadata()
            session.run(fetches, feed_dict=feed, options=options, run_metadata=metadata)
            traces.append(parse_step_stats(metadata.step_stats, op_names))

    comp = np.zeros(len(step.ops))
    missing: list[str] = []
    for i, op in enumerate(step.ops):
        samples = np.array([trace.time_us.get(op.name, 0.0) for trace in traces])
        if any(op.name in trace.time_us for trace in traces):
            comp[i] = trimmed_mean(samples, trim)
        else:
            missing.append(op.name)
    measured: dict[str, dict[int, int]] = {}
    for trace in traces:
        for op_name, slots in trace.sizes.items():
            measured.setdefault(op_name, {}).update(slots)
    sizes, sizing = size_step(step, unknown_dim, loop_trips=loop_trips, measured=measured, raise_unresolved=False)
    unsized: list[str] = []
    for i, op in enumerate(step.ops):
        if op.type in VARIABLE_OPS:
            unsized.extend([op.name] if sizes[i][0] is None else [])
        else:
            unsized.extend(t.name for t, size in zip(op.outputs, sizes[i], strict=True) if size is None)
    report = ProfileReport(steps, warmup, len(step.ops), len(step.ops) - len(missing), tuple(missing),
                           sizing.counts["trace"], tuple(unsized), traces[-1].unmatched,
                           time.perf_counter() - started, sizing)
    logger.info("%s", report.summary())
    if unsized:
        logger.warning("%d tensors have no static or traced size and count 0 bytes, e.g. %r",
                       len(unsized), unsized[0])
    return cost_graph(step, sizes, comp, name=name), report


def profile(graph: tf.Graph, fetches: Any, feed_fn: FeedFn | None = None, *, steps: int = 10, warmup: int = 2,
            devices: int = 1, kind: str = "cpu", trim: float = 0.2, unknown_dim: int | None = None,
            loop_trips: int = 1, init_ops: Any = None, name: str = "tf-step") -> CostGraph:
    """The step's :class:`CostGraph` with measured per-op times and output sizes.

    Parameters
    ----------
    graph, fetches:
        The training graph and what one step runs (as for :func:`~pardnn.tf.capture.capture`).
    feed_fn:
        ``feed_fn(i)`` gives the feed dict of step ``i`` (warm-up steps included); ``None``: no feeds.
    steps, warmup:
        Traced steps, and untraced steps run first (graph setup, allocator and cache warm-up).
    devices, kind:
        The profiling session's devices (one by default: the graph runs as placed, and ops placed
        on devices the session lacks fall back to the first, as soft placement is on here).
    trim:
        Fraction of the traced steps dropped at each end before averaging an op's time.
    unknown_dim, loop_trips:
        For outputs the trace does not size, which are sized by rule as in
        :func:`~pardnn.tf.capture.capture` (a TensorList, a loop's accumulators, an op the trace
        shows only lowered).
    init_ops:
        What to run once before the steps; default the initializers of the graph's global and local
        variables; ``()`` for nothing.

    Notes
    -----
    The session is closed before returning, so the graph can still be placed with
    :func:`~pardnn.tf.apply.apply`. Logs a :class:`ProfileReport` summary at INFO.
    """
    cost, _ = profile_with_report(graph, fetches, feed_fn, steps=steps, warmup=warmup, devices=devices, kind=kind,
                                  trim=trim, unknown_dim=unknown_dim, loop_trips=loop_trips, init_ops=init_ops,
                                  name=name)
    return cost
