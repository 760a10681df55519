"""Who runs where: one MPI rank per node, each driving all of its node's devices.

:func:`discover` splits ``COMM_WORLD`` by shared memory (``Split_type(COMM_TYPE_SHARED)``): the
ranks in one piece share a node. More than one rank on a node is an error that shows the fix,
because ParDNN places one replica across *all* of a node's devices and Horovod must see one rank
per replica. With ``PARDNN_EMULATE_NODES=1`` (a test knob, see :mod:`launcher.env`) every rank is
a node of its own, so ``mpirun -np 2`` on one machine stands for two nodes.

Without mpi4py, or outside any MPI launcher (an MPI singleton), the run is one node.
:class:`Topology` wraps the few collectives the launcher needs so that one node needs no MPI.
"""

from __future__ import annotations

import logging
import socket
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from launcher.env import EMULATE_NODES, emulate_nodes
from launcher.errors import AgreedError

__all__ = ["Topology", "check_one_rank_per_node", "discover", "single_node"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Topology:
    """This rank's place in the job. ``rank`` is also the node index (one rank per node)."""

    rank: int
    size: int
    nodes: tuple[str, ...]
    emulated: bool = False
    comm: Any = None

    @property
    def node(self) -> str:
        return self.nodes[self.rank]

    @property
    def is_root(self) -> bool:
        return self.rank == 0

    def where(self) -> str:
        return f"rank {self.rank} (node {self.node})"

    def allgather(self, value: Any) -> list[Any]:
        return [value] if self.comm is None else list(self.comm.allgather(value))

    def gather(self, value: Any) -> list[Any] | None:
        return [value] if self.comm is None else self.comm.gather(value, root=0)

    def bcast(self, value: Any) -> Any:
        return value if self.comm is None else self.comm.bcast(value, root=0)

    def allreduce(self, array: np.ndarray, op: str = "sum") -> np.ndarray:
        """Element-wise sum or max of ``array`` over all nodes; every node gets the same bytes."""
        array = np.ascontiguousarray(array)
        if self.comm is None:
            return array.copy()
        from mpi4py import MPI

        result = np.empty_like(array)
        self.comm.Allreduce(array, result, op={"sum": MPI.SUM, "max": MPI.MAX}[op])
        return result

    def check(self) -> None:
        """Raise :class:`AgreedError` (on every rank) unless each node runs exactly one rank."""
        if not self.emulated:
            check_one_rank_per_node(self.nodes)

    def abort(self, code: int) -> None:
        """End every rank of the job now (``MPI_Abort``); returns only without MPI."""
        if self.comm is not None and self.size > 1:
            self.comm.Abort(code)


def single_node() -> Topology:
    return Topology(0, 1, (socket.gethostname(),))


def check_one_rank_per_node(node_of_rank: Sequence[str]) -> None:
    """Raise :class:`AgreedError` if two ranks share a node; the message shows how to launch instead.

    Every rank has the same ``node_of_rank``, so every rank raises: none is left waiting.
    """
    ranks: dict[str, list[int]] = {}
    for rank, node in enumerate(node_of_rank):
        ranks.setdefault(node, []).append(rank)
    crowded = {node: r for node, r in ranks.items() if len(r) > 1}
    if not crowded:
        return
    listed = "; ".join(f"node {node} runs ranks {', '.join(map(str, r))}" for node, r in sorted(crowded.items()))
    raise AgreedError(
        f"pardnn-launch needs exactly one rank per node (it drives all of a node's devices), but {listed}. "
        "Launch one task per node: sbatch/srun --ntasks-per-node=1, or mpirun --map-by ppr:1:node. "
        f"(Testing on one machine? {EMULATE_NODES}=1 lets each rank stand for a node.)")


def discover() -> Topology:
    """This process's :class:`Topology` (collective over ``COMM_WORLD`` when MPI runs the job).

    Nodes are named by host (``host#rank`` when emulated). Call :meth:`Topology.check` next: it
    raises on every rank when ranks share a node.
    """
    try:
        from mpi4py import MPI
    except ImportError:
        logger.info("mpi4py not installed: running as one node")
        return single_node()
    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    host = MPI.Get_processor_name()
    emulated = emulate_nodes()
    local = comm.Split_type(MPI.COMM_TYPE_SHARED, key=rank)
    try:
        # Name each node by its lowest world rank's host, so ranks on one node agree on the name.
        node_leader = local.bcast(host, root=0)
    finally:
        local.Free()
    names = [f"{h}#{r}" if emulated else h for r, h in enumerate(comm.allgather(node_leader))]
    if emulated and size > 1 and rank == 0:
        logger.warning("%s=1: each of the %d ranks stands for a node (testing only)", EMULATE_NODES, size)
    return Topology(rank, size, tuple(names), emulated, comm if size > 1 else None)
