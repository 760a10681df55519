"""pardnn: the ParDNN partitioner (paper in ``shared/paper``) and its tools.

NumPy in, NumPy out: nothing under ``pardnn/`` except ``pardnn/tf/`` imports TensorFlow.
"""

from pardnn.errors import (
    InfeasibleError,
    InvalidGraphError,
    InvalidMachineError,
    InvalidPlacementError,
    PardnnError,
)
from pardnn.graph import CostGraph, Kind
from pardnn.machine import Machine

__version__ = "0.1.0"

__all__ = [
    "CostGraph",
    "InfeasibleError",
    "InvalidGraphError",
    "InvalidMachineError",
    "InvalidPlacementError",
    "Kind",
    "Machine",
    "PardnnError",
    "__version__",
]
