"""pardnn: the ParDNN partitioner (docs/algorithm.md describes the paper's algorithm) and its tools.

NumPy in, NumPy out: nothing under ``pardnn/`` except ``pardnn/tf/`` imports TensorFlow, and
nothing imports the model zoo (``jobs``), the launcher or the benchmarks.

    >>> from pardnn import CostGraph, Machine, partition
    >>> result = partition(graph, Machine(4, memory="32GiB"))   # doctest: +SKIP

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
