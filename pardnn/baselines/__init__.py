"""Baseline placers behind ParDNN's signature: ``f(graph, machine, *, memory_heuristic=None, progress=None,
**options) -> Result``.

``BASELINES`` maps a name to its placer (:mod:`pardnn.placers` adds ParDNN itself and looks placers
up by name). Every placer keeps
colocation groups whole, is deterministic (byte-identical placements across runs; LC only when it
finishes within its time budget) and reports through the same
:class:`~pardnn.result.PartitionReport` as ParDNN, with ``stage_seconds`` holding ``placement``
and ``evaluation``. None has a memory heuristic: ``memory_heuristic`` must be ``None`` (``exact`` keeps
residual bytes within the limits as a constraint of its model).

========================  ===========================================================  ====================
name                      placer                                                       complexity
========================  ===========================================================  ====================
``pardnn``                :func:`pardnn.partition` (the paper)                        O(K(|V|+|E|) + |V| log² |V|)
``critical_path``         Mayer et al. 2017: critical path on device 0, greedy rest     O(K|V| + |E|)
``linear_clustering``     Kim and Browne 1988 linear clustering + GLB (time budget)    incremental levels
``metis``                 METIS K-way on the undirected graph (needs ``pymetis``)       multilevel, ~O(|V|+|E|)
``topological``           contiguous blocks of the topological order, equal compute     O(|V|)
``round_robin``           i-th op in topological order to device i mod K               O(|V|)
``single``                everything on device 0                                        O(|V|)
``exact``                 CP-SAT optimum of placement + schedule (<= 60 ops; a bound)  exponential
========================  ===========================================================  ====================
"""

from __future__ import annotations

from collections.abc import Callable

from pardnn.baselines.critical_path import critical_path
from pardnn.baselines.exact import GraphTooLargeError, exact
from pardnn.baselines.linear_clustering import linear_clustering
from pardnn.baselines.metis import MissingDependencyError, metis
from pardnn.baselines.round_robin import round_robin
from pardnn.baselines.single_device import single_device
from pardnn.baselines.topological import topological
from pardnn.result import Result

__all__ = [
    "BASELINES",
    "GraphTooLargeError",
    "MissingDependencyError",
    "critical_path",
    "exact",
    "linear_clustering",
    "metis",
    "round_robin",
    "single_device",
    "topological",
]

BASELINES: dict[str, Callable[..., Result]] = {
    "critical_path": critical_path,
    "linear_clustering": linear_clustering,
    "metis": metis,
    "topological": topological,
    "round_robin": round_robin,
    "single": single_device,
    "exact": exact,
}
