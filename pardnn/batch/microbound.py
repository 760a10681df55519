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

**A bound from a plain step at another batch** (:func:`launch_bound_us`). The bound above needs the
plain step at the micro-batch's own size m; for a plan of many micro-batches of 1, 2 or 4 samples
that step is built for no other plan, and building it (up to half a minute for the paper's largest
models) is most of what pruning such a plan costs. But every op that launches a kernel costs at
least the device's launch time (the estimator's roofline is ``max(flops / peak, bytes / bandwidth) +
launch``, :meth:`pardnn.costs.presets.DevicePreset.kernel_us`), whatever its shapes. So if the plain
step at m has the same ops as one built at another batch, its M copies launch at least
``K + (M - 1) × K_r`` kernels, K the plain step's kernels and K_r its repeated ones, and the step is
at least that many launches over k, and at least the launches of the path with the most kernels.
The one assumption, that a model's step has the same ops at every batch, holds for a model whose
batch only sets its tensors' shapes (every Keras layer, every zoo model: char-crn-2 has 59,769 ops at
each batch from 1 to 128); it is checked, not taken on trust: the bound is given only when at least
two plain steps are built at different batches and all of them have the same op, kernel and
repeated-kernel counts. It is weaker than the bound above (each kernel at its launch time alone),
so it is tried first, from the steps already built, and the plain step at m is built only when it
does not prune.

Complexity: two reachability sweeps over the plain step, O(|V| + |E|).
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
