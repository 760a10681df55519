"""pardnn: the ParDNN partitioner (docs/algorithm.md) and its tools; NumPy in, NumPy out.

>>> from pardnn import CostGraph, Machine, partition
>>> graph = CostGraph.from_named_edges(["a", "b", "c", "d"], comp_us=[10, 40, 40, 10], out_bytes=[1000, 1000, 1000, 0],
...     edges=[("a", "b"), ("a", "c"), ("b", "d"), ("c", "d")], name="diamond")
>>> result = partition(graph, Machine(2, memory="1MiB", bandwidth="1GB/s", latency="1us"))
>>> result.placement.tolist(), result.report.evaluation.makespan_us  # a branch per device; 10 + 2 + 40 + 10
([0, 0, 1, 1], 62.0)
"""

from pardnn import kernelcache

kernelcache.install()  # before any kernel is defined: numba's cache per source tree, shared (pardnn.kernelcache)

from pardnn.costs.graph import CostGraph, Kind  # noqa: E402
from pardnn.costs.machine import Machine  # noqa: E402
from pardnn.errors import (  # noqa: E402
    InfeasibleError,
    InvalidGraphError,
    InvalidMachineError,
    InvalidPlacementError,
    NoPlacementFoundError,
    PardnnError,
)
from pardnn.partitioner import partition  # noqa: E402
from pardnn.placement.result import PartitionReport, Result  # noqa: E402

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
