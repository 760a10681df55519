"""pardnn: the ParDNN partitioner (docs/algorithm.md describes the paper's algorithm) and its tools.

NumPy in, NumPy out: nothing under ``pardnn/`` except ``pardnn/tf/`` imports TensorFlow, and
nothing imports the model zoo (``jobs``), the launcher or the benchmarks.

A step of four ops, ``a`` feeding two 40 µs branches that join in ``d``, placed on two devices
joined by a 1 GB/s link with 1 µs per transfer:

    >>> from pardnn import CostGraph, Machine, partition
    >>> graph = CostGraph.from_named_edges(
    ...     ["a", "b", "c", "d"], comp_us=[10, 40, 40, 10], out_bytes=[1000, 1000, 1000, 0],
    ...     edges=[("a", "b"), ("a", "c"), ("b", "d"), ("c", "d")], name="diamond")
    >>> machine = Machine(2, memory="1MiB", bandwidth="1GB/s", latency="1us")
    >>> result = partition(graph, machine)
    >>> result.placement.tolist()   # one branch on each device
    [0, 0, 1, 1]
    >>> result.report.evaluation.makespan_us   # 10 + 2 (a -> c) + 40 + 10, the sends 2 µs each
    62.0
    >>> result.report.evaluation.memory_fits
    True

``partition`` is the function (the pipeline lives in :mod:`pardnn.partitioner`); ``__version__`` is the
package's one version (``pyproject.toml`` reads it from here).
"""

from pardnn.costs.graph import CostGraph, Kind
from pardnn.costs.machine import Machine
from pardnn.errors import (
    InfeasibleError,
    InvalidGraphError,
    InvalidMachineError,
    InvalidPlacementError,
    NoPlacementFoundError,
    PardnnError,
)
from pardnn.partitioner import partition
from pardnn.placement.result import PartitionReport, Result

__version__ = "0.1.0"

__all__ = [
    "CostGraph",
    "InfeasibleError",
    "InvalidGraphError",
    "InvalidMachineError",
    "InvalidPlacementError",
    "Kind",
    "Machine",
    "NoPlacementFoundError",
    "PardnnError",
    "PartitionReport",
    "Result",
    "__version__",
    "partition",
]
