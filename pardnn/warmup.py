"""Compile (or load) every numba kernel now, not inside the first placement or the first job.

:func:`warm_up` runs every placer on a small synthetic graph, without and under both memory heuristics,
so every kernel a placement can reach is in numba's cache (one folder per source tree under
``~/.cache/pardnn/numba``: :mod:`pardnn.kernelcache`; or ``NUMBA_CACHE_DIR``). ``pardnn warmup`` runs
it, ``scripts/setup.sh`` at install time, and the launcher, for the placer it runs, as its own
``compile`` phase before ``partition``. A fresh install
compiles for about 45-50 s on 2 cores; later processes, and later installs of the same sources, load
the cache in a second or two.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable

import numpy as np

from pardnn.costs.machine import Machine
from pardnn.costs.synthetic import dnn_graph
from pardnn.emulation.checks import check_order, dense_positions
from pardnn.emulation.peaks import sweep_peaks
from pardnn.errors import InfeasibleError, MissingDependencyError
from pardnn.partitioner import MEMORY_HEURISTICS, partition
from pardnn.registry import PLACERS, get_placer

__all__ = ["warm_up"]

# Placers that compile nothing worth caching (CP-SAT is not numba, and exponential on 150 ops).
_SKIP = frozenset({"exact"})


def warm_up(progress: Callable[[str], None] | None = None, placers: Iterable[str] | None = None) -> float:
    """Compile or load every numba kernel, or only those ``placers`` reach (the launcher's ``compile``
    phase warms the placer it runs: about 0.5 s less per rank with a warm cache than all twelve);
    returns the seconds it took (placements included)."""
    started = time.perf_counter()
    # The memory tracker's sweep for graphs with more buffers than the one below (pardnn.emulation.peaks).
    none = np.zeros(0, np.int64)
    sweep_peaks(2, none, np.zeros(0), none, none, none)
    graph = dnn_graph(150, seed=1)
    names = list(PLACERS) if placers is None else [get_placer(name).name for name in placers]
    placed = None
    for name in names:
        if name in _SKIP:
            continue
        if progress is not None:
            progress(name)
        try:
            result = PLACERS[name](graph, Machine(2), memory_heuristic=None)
        except MissingDependencyError:
            continue
        placed = result if name == "pardnn" else placed
    if placers is not None and not any(PLACERS[name].memory_heuristics for name in names):
        return time.perf_counter() - started
    placed = placed or partition(graph, Machine(2), memory_heuristic=None)
    check_order(graph, placed.placement, dense_positions(placed.placement, graph.topo_rank))  # as files are read
    peaks = placed.report.evaluation.peak_memory_bytes
    for heuristic in MEMORY_HEURISTICS:
        if progress is not None:
            progress(f"memory heuristic {heuristic}")
        try:
            partition(graph, Machine(2, memory=int(0.9 * sum(peaks) / 2), reserve=0.0), memory_heuristic=heuristic)
        except InfeasibleError:
            pass
    return time.perf_counter() - started
