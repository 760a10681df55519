"""A lower bound on a micro-batched step's time, before that step is built.

:func:`micro_bound_us` bounds a step of M micro-batches on k devices from the plain step of one
micro-batch (its compute, its :func:`repeated_ops` and its critical path); :func:`launch_bound_us` from
kernel launch counts of plain steps at other batches. Why they hold: docs/notes-partitioner.md.
O(|V| + |E|).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np
from numba import njit

from pardnn.costs.graph import CostGraph
from pardnn.costs.levels import critical_path_us

__all__ = ["MicroBound", "PlainTerms", "launch_bound_us", "micro_bound_us", "repeated_ops"]


@njit(cache=True)
def _reach(ptr: np.ndarray, targets: np.ndarray, starts: np.ndarray, n: int) -> np.ndarray:  # pragma: no cover
    """Nodes reachable from ``starts`` (themselves included) along the CSR adjacency."""
    seen = np.zeros(n, np.bool_)
    stack = np.empty(n, np.int64)
    top = 0
    for s in starts:
        if not seen[s]:
            seen[s] = True
            stack[top] = s
            top += 1
    while top:
        top -= 1
        v = stack[top]
        for e in range(ptr[v], ptr[v + 1]):
            w = targets[e]
            if not seen[w]:
                seen[w] = True
                stack[top] = w
                top += 1
    return seen


def repeated_ops(graph: CostGraph, inputs: Iterable[str], gradients: Iterable[str]) -> np.ndarray:
    """Which ops of the plain step ``graph`` every micro-batch repeats (module docstring): reachable from
    an op named in ``inputs`` and reaching one named in ``gradients``. Names not in the graph are
    ignored (none found: no op, and the bound is 0)."""
    index = graph.index
    sources = np.array([index[name] for name in inputs if name in index], np.int64)
    sinks = np.array([index[name] for name in gradients if name in index], np.int64)
    after = _reach(np.asarray(graph.succ_ptr, np.int64), np.asarray(graph.succ, np.int64), sources, graph.n)
    before = _reach(np.asarray(graph.pred_ptr, np.int64), np.asarray(graph.pred, np.int64), sinks, graph.n)
    return after & before


@dataclass(frozen=True)
class PlainTerms:
    """What the bounds need of a plain step: in µs its compute, its repeated ops' compute and its
    critical path without communication; ``ops``, ``kernels`` (the ops that launch one),
    ``repeated_kernels`` and ``path_kernels`` (the most kernels on one path), each 0 when the kernels
    are not known."""

    total_us: float
    repeated_us: float
    critical_us: float
    ops: int = 0
    kernels: int = 0
    repeated_kernels: int = 0
    path_kernels: int = 0

    @classmethod
    def of(cls, graph: CostGraph, repeated: np.ndarray, kernel: np.ndarray | None = None) -> PlainTerms:
        """The terms of ``graph`` with its ``repeated`` ops, and with its ops that launch a ``kernel``."""
        counts = (0, 0, 0)
        if kernel is not None:
            kernel = np.asarray(kernel, np.bool_)
            launches = graph.replace(comp_us=kernel.astype(np.float64))
            counts = (int(kernel.sum()), int((kernel & repeated).sum()), round(critical_path_us(launches)))
        return cls(graph.total_work_us, float(np.asarray(graph.comp_us, np.float64)[repeated].sum()),
                   critical_path_us(graph), graph.n, *counts)

    @property
    def shape(self) -> tuple[int, int, int, int]:
        """The counts that must agree across batches for :func:`launch_bound_us` (module docstring)."""
        return self.ops, self.kernels, self.repeated_kernels, self.path_kernels


@dataclass(frozen=True)
class MicroBound:
    """A lower bound (µs) on a plan's step without its graph, and what it was found from (``basis``,
    a phrase for a pruned plan's reason)."""

    us: float
    basis: str


def micro_bound_us(terms: PlainTerms, micro: int, devices: int) -> float:
    """A lower bound (µs) on the emulated step of ``micro`` micro-batches of the plain step's batch on
    ``devices`` devices (module docstring): (its compute + (``micro`` - 1) × its repeated ops' compute)
    / ``devices``, and at least its critical path."""
    return max((terms.total_us + (micro - 1) * terms.repeated_us) / devices, terms.critical_us)


def launch_bound_us(terms: PlainTerms, micro: int, devices: int, launch_us: float) -> float:
    """A lower bound (µs) on the emulated step of ``micro`` micro-batches on ``devices`` devices from a
    plain step with the same ops at any batch (module docstring): ``launch_us`` for each of its
    kernels and ``micro`` - 1 more of each repeated kernel, over ``devices``, and at least the launches
    of the path with the most kernels."""
    return launch_us * max((terms.kernels + (micro - 1) * terms.repeated_kernels) / devices, terms.path_kernels)
