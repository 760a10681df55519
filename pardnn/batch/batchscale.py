"""A job's costed graph at any batch size, from graphs built at two consecutive sizes.

:class:`BatchScaling` takes the graphs' :class:`CostParts` at batches ``b`` and ``b + 1``; its
:meth:`~BatchScaling.graph_at` extends every op's FLOPs and bytes along the line through them and times
it by the roofline, and :meth:`~BatchScaling.mismatch` checks the result against a built graph. Why lines
are exact: docs/notes-partitioner.md. O(|V| + |E|) per graph.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from pardnn.costs.graph import CostGraph, segment_reduce
from pardnn.costs.presets import DevicePreset
from pardnn.errors import ScalingError

__all__ = ["BatchScaling", "CostParts", "largest_term"]

TIME_RTOL = 1e-9  # relative tolerance on op times (sums of floats); bytes and FLOPs compare exactly


@dataclass(frozen=True)
class CostParts:
    """A costed graph and what its op times are made of (arrays in graph order).

    ``kernel[v]``: op ``v`` launches a kernel and its time is ``device.kernel_us(flops[v],
    moved_bytes[v])``; other ops' time is ``graph.comp_us[v]`` as given (0 for metadata ops, the
    bodies' time for functional ops).
    """

    graph: CostGraph
    flop_ptr: np.ndarray  # int64, |V| + 1: op v's FLOP candidates are flop_terms[flop_ptr[v]:flop_ptr[v + 1]]
    flop_terms: np.ndarray  # float64, whole numbers; an op's FLOPs are its largest candidate
    moved_bytes: np.ndarray  # float64, whole numbers
    kernel: np.ndarray  # bool
    # bool or None: the ops every micro-batch of a micro-batched step repeats, when this is a plain step
    # that knows them (:func:`pardnn.plan.microbound.repeated_ops`)
    repeated: np.ndarray | None = None

    @property
    def flops(self) -> np.ndarray:
        """FLOPs of every op (0 for an op without candidates)."""
        return largest_term(self.flop_terms, self.flop_ptr)


def largest_term(terms: np.ndarray, ptr: np.ndarray) -> np.ndarray:
    """Per segment ``terms[ptr[i]:ptr[i + 1]]`` its largest value; 0 for an empty one. O(len(terms))."""
    return segment_reduce(np.maximum, terms, ptr, 0.0)


class BatchScaling:
    """Graphs at any batch size from :class:`CostParts` built at ``batch`` and ``batch + 1``.

    Parameters
    ----------
    low, high:
        The step costed at ``batch`` and at ``batch + 1`` on ``device``.
    batch:
        The smaller of the two batch sizes (>= 1).
    device:
        The device preset both were costed for.

    Raises
    ------
    ScalingError
        The two graphs differ in structure (op names, types, kinds, colocation, edges, which ops
        launch kernels), or a quantity shrinks as the batch grows; the message names the op.
    """

    def __init__(self, low: CostParts, high: CostParts, batch: int, device: DevicePreset) -> None:
        if batch < 1:
            raise ValueError(f"batch must be >= 1, got {batch}")
        problem = _structure_difference(low, high)
        if problem:
            raise ScalingError(f"the graphs at batch {batch} and {batch + 1} differ: {problem}")
        self.low, self.batch, self.device = low, batch, device
        g0, g1 = low.graph, high.graph
        self._int = {field: (getattr(g0, field), getattr(g1, field) - getattr(g0, field))
                     for field in ("out_bytes", "param_bytes", "edge_bytes")}
        self._float = {"flop_terms": (low.flop_terms, high.flop_terms - low.flop_terms),
                       "moved_bytes": (low.moved_bytes, high.moved_bytes - low.moved_bytes),
                       "comp_us": (g0.comp_us, g1.comp_us - g0.comp_us)}
        self._labels = [g0.group_names[c] if c >= 0 else None for c in g0.colocation.tolist()]
        for field, (base, slope) in [*self._int.items(), *self._float.items()]:
            shrinking = np.flatnonzero(slope < 0)
            if shrinking.size:
                v = int(shrinking[0])
                raise ScalingError(f"{self._label(field, v)}: {field} {base[v]} at batch {batch}, "
                                   f"{base[v] + slope[v]} at batch {batch + 1}: it shrinks as the batch grows")

    def graph_at(self, batch: int, *, name: str | None = None) -> CostGraph:
        """The costed graph at ``batch`` (>= 1), named ``name`` (default: the fitted graph's name).

        O(|V| + |E|).
        """
        if batch < 1:
            raise ValueError(f"batch must be >= 1, got {batch}")
        steps = batch - self.batch
        whole = {field: base + slope * steps for field, (base, slope) in self._int.items()}
        terms, moved, other_us = (base + slope * steps for base, slope in self._float.values())
        flops = largest_term(terms, self.low.flop_ptr)
        comp_us = np.where(self.low.kernel, self.device.kernel_us(flops, moved), other_us)
        g = self.low.graph
        return CostGraph(
            g.names, comp_us, whole["out_bytes"], g.edge_src, g.edge_dst, whole["edge_bytes"],
            kind=g.kind, colocation=self._labels, ops=g.ops, param_bytes=whole["param_bytes"],
            name=g.name if name is None else name, memory_limit_bytes=g.memory_limit_bytes,
            micro_batch=g.micro_batch, copy_of=g.copy_of,
        )

    def mismatch(self, built: CostParts, batch: int) -> str | None:
        """None if the graph built at ``batch`` is the one :meth:`graph_at` gives; else what differs.

        By the convexity argument of the module docstring, a match at ``batch`` proves every batch
        between the two fitted sizes and ``batch`` exact.
        """
        problem = _structure_difference(self.low, built)
        if problem:
            return f"the graph at batch {batch} differs from the graph at batch {self.batch}: {problem}"
        scaled = self.graph_at(batch)
        steps = batch - self.batch
        pairs = [(field, getattr(scaled, field), getattr(built.graph, field))
                 for field in ("out_bytes", "param_bytes", "edge_bytes")]
        pairs += [(field, self._float[field][0] + self._float[field][1] * steps, actual)
                  for field, actual in (("flop_terms", built.flop_terms), ("moved_bytes", built.moved_bytes))]
        for field, expected, actual in pairs:
            differs = np.flatnonzero(expected != actual)
            if differs.size:
                return self._off(field, int(differs[0]), expected, actual, batch)
        close = np.isclose(scaled.comp_us, built.graph.comp_us, rtol=TIME_RTOL, atol=1e-9)
        if not close.all():
            return self._off("comp_us", int(np.flatnonzero(~close)[0]), scaled.comp_us, built.graph.comp_us, batch)
        return None

    def _label(self, field: str, index: int) -> str:
        g = self.low.graph
        if field == "edge_bytes":
            return f"edge {g.names[g.edge_src[index]]!r} -> {g.names[g.edge_dst[index]]!r}"
        if field == "flop_terms":  # the op whose candidate this is
            index = int(np.searchsorted(self.low.flop_ptr, index, side="right")) - 1
        return f"op {g.names[index]!r} ({g.ops[index]})"

    def _off(self, field: str, index: int, expected: np.ndarray, actual: np.ndarray, batch: int) -> str:
        return (f"{self._label(field, index)}: {field} {actual[index]} at batch {batch}, {expected[index]} on the "
                f"line through batches {self.batch} and {self.batch + 1}: it does not grow linearly with the batch")


def _structure_difference(a: CostParts, b: CostParts) -> str:
    """What differs between the two graphs' structure, or '' when nothing does."""
    ga, gb = a.graph, b.graph
    if ga.names != gb.names:
        extra = sorted(set(gb.names) ^ set(ga.names))
        if extra:
            return f"{len(extra)} ops are in one graph only (e.g. {extra[0]!r})"
        return "the ops come in a different order"
    if ga.ops != gb.ops:
        v = next(i for i, (x, y) in enumerate(zip(ga.ops, gb.ops, strict=True)) if x != y)
        return f"op {ga.names[v]!r} is a {ga.ops[v]} in one and a {gb.ops[v]} in the other"
    for field, label in (("kind", "kind"), ("colocation", "colocation group")):
        differs = np.flatnonzero(getattr(ga, field) != getattr(gb, field))
        if differs.size:
            return f"op {ga.names[int(differs[0])]!r} has another {label}"
    if ga.group_names != gb.group_names:
        return "the colocation groups differ"
    if ga.m != gb.m or not (np.array_equal(ga.edge_src, gb.edge_src) and np.array_equal(ga.edge_dst, gb.edge_dst)):
        return f"the edges differ ({ga.m} and {gb.m} edges)"
    differs = np.flatnonzero(a.kernel != b.kernel)
    if differs.size:
        return f"op {ga.names[int(differs[0])]!r} launches a kernel in one and not in the other"
    differs = np.flatnonzero(a.flop_ptr != b.flop_ptr)
    if differs.size:
        return f"op {ga.names[max(int(differs[0]) - 1, 0)]!r} has another number of inputs and outputs"
    return ""
