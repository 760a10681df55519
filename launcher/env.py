"""Names of the environment variables the launcher reads; nothing else reads the environment.

:func:`emulate_nodes` reads ``PARDNN_EMULATE_NODES`` (``1``: every MPI rank stands for a node, a test knob;
unset or ``0`` on a real cluster; any other value is an error). :func:`launch_rank` and :func:`launch_size`
read what ``mpirun``, ``srun``, PMIx or PMI put in the environment, so the rank and size are known before
MPI starts: the console filter and the errors every rank finds need them that early.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, MutableMapping

from launcher.errors import LaunchError

__all__ = ["EMULATE_NODES", "SLURM_VARIABLES", "emulate_nodes", "launch_rank", "launch_size", "share_cores",
           "slurm_context"]

EMULATE_NODES = "PARDNN_EMULATE_NODES"
# Recorded in the summary so a result can be traced back to its allocation.
SLURM_VARIABLES = ("SLURM_JOB_ID", "SLURM_JOB_NAME", "SLURM_JOB_NODELIST", "SLURM_NNODES", "SLURM_CLUSTER_NAME")

# Rank and size variables of Open MPI, PMIx (srun --mpi=pmix), PMI (MPICH, Intel MPI) and Slurm, in that order.
RANK_VARIABLES = ("OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK", "SLURM_PROCID")
SIZE_VARIABLES = ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "SLURM_NTASKS")


def emulate_nodes(environ: Mapping[str, str] | None = None) -> bool:
    """Whether ``PARDNN_EMULATE_NODES`` asks for one emulated node per rank: ``1`` yes, ``0`` or unset
    no; any other value raises :class:`LaunchError` naming it."""
    environ = os.environ if environ is None else environ
    value = environ.get(EMULATE_NODES, "").strip()
    if value not in ("", "0", "1"):
        raise LaunchError(f"{EMULATE_NODES}={value!r}: expected 0 or 1 (1: every rank stands for a node of its "
                          "own, for testing on one machine; 0 or unset on a cluster)")
    return value == "1"


def share_cores(environ: MutableMapping[str, str] | None = None, cores: int | None = None) -> None:
    """With ``PARDNN_EMULATE_NODES=1`` (the ranks share one machine's cores), make each rank a fair sharer;
    call before MPI and TensorFlow start. Settings already in ``environ`` are kept.

    - ``OMPI_MCA_mpi_yield_when_idle=1``: a rank waiting in a collective yields its core instead of
      busy-polling it, which starves the rank it waits for.
    - ``TF_NUM_INTEROP_THREADS`` and ``TF_NUM_INTRAOP_THREADS``: ``cores`` (this process's CPUs) divided by
      the ranks on the machine (Open MPI's local size, else the launch's size), at least 1; in a rank only.
      Each session's thread pools otherwise take every core, and their idle threads spin beside the other
      ranks.
    """
    environ = os.environ if environ is None else environ
    if environ.get(EMULATE_NODES, "").strip() != "1":
        return
    environ.setdefault("OMPI_MCA_mpi_yield_when_idle", "1")
    local = _first_int(("OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS"), environ) or launch_size(environ)
    if local is None:  # not a rank (pardnn-launch --hosts, before its mpirun): its ranks divide the cores
        return
    cores = len(os.sched_getaffinity(0)) if cores is None else cores
    threads = str(max(1, cores // local))
    environ.setdefault("TF_NUM_INTEROP_THREADS", threads)
    environ.setdefault("TF_NUM_INTRAOP_THREADS", threads)


def slurm_context(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The Slurm variables of this allocation that are set (empty outside Slurm)."""
    environ = os.environ if environ is None else environ
    return {name: environ[name] for name in SLURM_VARIABLES if name in environ}


def _first_int(names: tuple[str, ...], environ: Mapping[str, str] | None) -> int | None:
    environ = os.environ if environ is None else environ
    for name in names:
        value = environ.get(name, "").strip()
        if value.isdigit():
            return int(value)
    return None


def launch_rank(environ: Mapping[str, str] | None = None) -> int | None:
    """This process's rank as its launcher set it (``None`` outside ``mpirun``/``srun``)."""
    return _first_int(RANK_VARIABLES, environ)


def launch_size(environ: Mapping[str, str] | None = None) -> int | None:
    """The number of processes the launcher started (``None`` outside ``mpirun``/``srun``)."""
    return _first_int(SIZE_VARIABLES, environ)
