"""Baseline placers behind ParDNN's signature: ``f(graph, machine, *, memory_heuristic=None, progress=None,
**options) -> Result``.

``PLACERS`` maps a name to its placer; ``get_placer(name)`` looks one up. Every placer keeps
colocation groups whole, is deterministic (byte-identical placements across runs; LC only when it
finishes within its time budget) and reports through the same
:class:`~pardnn.partition.PartitionReport` as ParDNN, with ``stage_seconds`` holding ``placement``
and ``evaluation``. None has a memory heuristic: ``memory_heuristic`` must be ``None``.

========================  ===========================================================  ====================
name                      placer                                                       complexity
========================  ===========================================================  ====================
``pardnn``                :func:`pardnn.partition.partition` (the paper)               O(K(|V|+|E|) + |V| log² |V|)
``critical_path``         Mayer et al. 2017: critical path on device 0, greedy rest     O(K|V| + |E|)
``linear_clustering``     Kim and Browne 1988 linear clustering + GLB (time budget)    O(|V|(|V|+|E|))
``metis``                 METIS K-way on the undirected graph (needs ``pymetis``)       multilevel, ~O(|V|+|E|)
``topological``           contiguous blocks of the topological order, equal compute     O(|V|)
``round_robin``           i-th op in topological order to device i mod K               O(|V|)
``single``                everything on device 0                                        O(|V|)
========================  ===========================================================  ====================
"""

from __future__ import annotations

from collections.abc import Callable

from pardnn.baselines.critical_path import critical_path
from pardnn.baselines.linear_clustering import linear_clustering
from pardnn.baselines.metis import MissingDependencyError, metis
from pardnn.baselines.round_robin import round_robin
from pardnn.baselines.single_device import single_device
from pardnn.baselines.topological import topological
from pardnn.partition import Result, partition

__all__ = [
    "PLACERS",
    "MissingDependencyError",
    "Placer",
    "critical_path",
    "get_placer",
    "linear_clustering",
    "metis",
    "round_robin",
    "single_device",
    "topological",
]

Placer = Callable[..., Result]

PLACERS: dict[str, Placer] = {
    "pardnn": partition,
    "critical_path": critical_path,
    "linear_clustering": linear_clustering,
    "metis": metis,
    "topological": topological,
    "round_robin": round_robin,
    "single": single_device,
}


def get_placer(name: str) -> Placer:
    """The placer called ``name``; raises ``ValueError`` listing the valid names."""
    try:
        return PLACERS[name]
    except KeyError:
        raise ValueError(f"unknown placer {name!r}; expected one of {', '.join(PLACERS)}") from None
