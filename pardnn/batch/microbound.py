"""A lower bound on a micro-batched step's time from the plain step of one micro-batch, before the
micro-batched step is built.

A plan search (:mod:`pardnn.batch.plan`) prunes a plan whose step is provably longer than a fitting
plan's. Its first bound needs the plan's own graph: for M >= 2 micro-batches that is a step built in
TensorFlow at M = 2, a minute each for the paper's largest models, and most such plans are pruned
after it is built. This bound needs only the plain step (M = 1) built at the micro-batch's size m,
which the search usually has already (the plan of M times fewer devices per replica trains it), and
otherwise costs about half an M = 2 build.

**The ops every micro-batch repeats.** In the plain step at batch m, an op that (a) depends on the
samples (reachable from an input the batch is fed through) and (b) feeds a gradient (the gradient
tensors are reachable from it, itself included) is the model's forward or backward work on those
samples. A step of M micro-batches of m samples runs the same model function on M slices of m
samples (:mod:`jobs.microbatch`): each slice has its own copy of every such op, at the same shapes,
so at the same cost (the estimator's cost of an op is a function of its type and shapes), and every
copy runs, because the summed gradient that the update reads depends on each of them. (a) leaves out
what the copies share (variables, their reads before the samples) and (b) what only the last copy
runs or no copy repeats (batch norm's moving-average updates, the optimizer's update, clipping).

**The bound.** The step of M micro-batches holds every op of the plain step at least once, at the
same cost: the last micro-batch's copy is the plain step's forward and backward whole (batch norm's
updates included), and what no copy repeats (variables, the update, clipping) works on the
variables' shapes, which M does not change. The M - 1 other copies add the repeated ops again (a
``Split`` of a Keras model's full-batch input, the gradients' sums, only add more). So its compute
is at least ``T + (M - 1) × C``, T the plain step's compute and C its repeated ops', and its
emulated step on k devices at least that over k (a device runs one op at a time:
:func:`pardnn.emulation.simulate.lower_bound_us`' first term), whatever the placement. It is also
at least the plain step's critical path without communication (the last copy's path through its
forward, backward and the update, with the sum of the gradients between, is as long or longer).
The tests check it against the steps built at M for the zoo's models and a Keras model.

Complexity: two reachability sweeps over the plain step, O(|V| + |E|).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np
from numba import njit

from pardnn.costs.graph import CostGraph
from pardnn.costs.levels import critical_path_us

__all__ = ["PlainTerms", "micro_bound_us", "repeated_ops"]


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
    """What the bound needs of a plain step, in µs: its compute, its repeated ops' compute and its
    critical path without communication."""

    total_us: float
    repeated_us: float
    critical_us: float

    @classmethod
    def of(cls, graph: CostGraph, repeated: np.ndarray) -> PlainTerms:
        return cls(graph.total_work_us, float(np.asarray(graph.comp_us, np.float64)[repeated].sum()),
                   critical_path_us(graph))


def micro_bound_us(terms: PlainTerms, micro: int, devices: int) -> float:
    """A lower bound (µs) on the emulated step of ``micro`` micro-batches of the plain step's batch on
    ``devices`` devices (module docstring): (its compute + (``micro`` - 1) × its repeated ops' compute)
    / ``devices``, and at least its critical path."""
    return max((terms.total_us + (micro - 1) * terms.repeated_us) / devices, terms.critical_us)
