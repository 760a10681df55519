"""Names of the environment variables the launcher reads; nothing else reads the environment.

``EMULATE_NODES`` is a test and emulation knob, not for production: with it set to ``1`` every MPI
rank stands for a node of its own, so ``mpirun -np 2`` on one machine runs two "nodes" (each with
its own K logical CPU devices). On a real cluster leave it unset: ranks sharing a node are then an
error, because one rank must drive all of a node's devices.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

__all__ = ["EMULATE_NODES", "SLURM_VARIABLES", "emulate_nodes", "slurm_context"]

EMULATE_NODES = "PARDNN_EMULATE_NODES"
# Recorded in the summary so a result can be traced back to its allocation.
SLURM_VARIABLES = ("SLURM_JOB_ID", "SLURM_JOB_NAME", "SLURM_JOB_NODELIST", "SLURM_NNODES", "SLURM_CLUSTER_NAME")

_TRUE = frozenset({"1", "true", "yes", "on"})


def emulate_nodes(environ: Mapping[str, str] | None = None) -> bool:
    """Whether ``PARDNN_EMULATE_NODES`` asks for one emulated node per rank."""
    environ = os.environ if environ is None else environ
    return environ.get(EMULATE_NODES, "").strip().lower() in _TRUE


def slurm_context(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The Slurm variables of this allocation that are set (empty outside Slurm)."""
    environ = os.environ if environ is None else environ
    return {name: environ[name] for name in SLURM_VARIABLES if name in environ}
