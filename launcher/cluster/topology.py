"""Who runs where: one MPI rank per node, each driving all of its node's devices (or one rank per device).

:func:`discover` (``ranks_per_node=K`` for K ranks per node) returns this rank's :class:`Topology`, which
wraps the few collectives the launcher needs, so one node needs no MPI. :meth:`Topology.leaders` gives the
node leaders, :meth:`Topology.replicas` the replicas of ``--replica-devices k``. With
``PARDNN_EMULATE_NODES=1`` every rank is a node (:mod:`launcher.env`). Rules: docs/notes-launcher.md.
"""

from __future__ import annotations

import dataclasses
import logging
import socket
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from launcher.env import EMULATE_NODES, emulate_nodes
from launcher.errors import AgreedError, LaunchError

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
    ranks_per_node: int = 1

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

    @property
    def node_count(self) -> int:
        return self.size // self.ranks_per_node

    @property
    def local_rank(self) -> int:
        """This rank's index among the ranks of its node (the device it drives with one rank per device)."""
        return [r for r, node in enumerate(self.nodes) if node == self.node].index(self.rank)

    def check(self, why: str | None = None) -> None:
        """Raise :class:`AgreedError` (on every rank) unless each node runs exactly ``ranks_per_node`` ranks.
        ``why``: what asks for them, as the error says it (default: data parallelism, one per device)."""
        if self.ranks_per_node == 1:
            if not self.emulated:
                check_one_rank_per_node(self.nodes)
            return
        counts = {node: self.nodes.count(node) for node in self.nodes}
        wrong = {node: count for node, count in counts.items() if count != self.ranks_per_node}
        if wrong:
            listed = "; ".join(f"node {node} runs {count}" for node, count in sorted(wrong.items()))
            why = why or f"data parallelism runs one rank per device, {self.ranks_per_node} per node"
            raise AgreedError(
                f"{why}, but {listed}. "
                f"Launch {self.ranks_per_node} tasks per node (sbatch/srun --ntasks-per-node={self.ranks_per_node}, "
                f"mpirun --map-by ppr:{self.ranks_per_node}:node), or pass --devices-per-node to match")

    def leaders(self) -> Topology | None:
        """The node leaders as a topology of one rank per node; ``None`` on the other ranks (collective)."""
        return self.replicas(self.ranks_per_node)

    def replicas(self, k: int) -> Topology | None:
        """The ranks that drive replicas of ``k`` devices when each node runs one rank per device: every
        k-th rank of each node (:meth:`replica_ranks`), as a topology of ``ranks_per_node / k`` ranks per
        node; ``None`` on the other ranks, which wait (collective). ``k = 1`` is every rank, ``k =
        ranks_per_node`` the node leaders."""
        if k == 1:
            return self
        ranks = self.replica_ranks(k)
        active = self.rank in ranks
        comm = None
        if self.comm is not None:
            from mpi4py import MPI

            comm = self.comm.Split(0 if active else MPI.UNDEFINED, self.rank)
        if not active:
            return None
        return Topology(ranks.index(self.rank), len(ranks), tuple(self.nodes[r] for r in ranks), self.emulated,
                        comm if len(ranks) > 1 else None, self.ranks_per_node // k)

    def replica_ranks(self, k: int) -> list[int]:
        """The world ranks of every k-th rank of each node (local ranks 0, k, 2k, ...), in rank order."""
        seen: dict[str, int] = {}  # ranks met so far on each node: the next one's local rank
        ranks = []
        for rank, node in enumerate(self.nodes):
            if seen.get(node, 0) % k == 0:
                ranks.append(rank)
            seen[node] = seen.get(node, 0) + 1
        return ranks

    def leader_ranks(self) -> list[int]:
        """The world rank of every node's leader, by node."""
        return [self.nodes.index(node) for node in dict.fromkeys(self.nodes)]

    def wait_for_all(self, poll_seconds: float = 0.05) -> None:
        """A barrier that sleeps while it waits (MPI's spins: ranks left idle would take the workers' cores)."""
        if self.comm is None:
            return
        request = self.comm.Ibarrier()
        while not request.Test():
            time.sleep(poll_seconds)

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


def discover(ranks_per_node: int = 1) -> Topology:
    """This process's :class:`Topology` (collective over ``COMM_WORLD`` when MPI runs the job).

    Nodes are named by host (``host#n`` when emulated, node ``n`` = rank // ``ranks_per_node``). Call
    :meth:`Topology.check` next: it raises on every rank when a node runs another number of ranks.
    """
    try:
        from mpi4py import MPI
    except ImportError:
        logger.info("mpi4py not installed: running as one node")
        return dataclasses.replace(single_node(), ranks_per_node=ranks_per_node)
    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    host = MPI.Get_processor_name()
    try:
        emulated = emulate_nodes()
    except LaunchError:  # a bad value: launcher.core reads it with the settings, and every rank agrees on it
        emulated = False
    local = comm.Split_type(MPI.COMM_TYPE_SHARED, key=rank)
    try:
        # Name each node by its lowest world rank's host, so ranks on one node agree on the name.
        node_leader = local.bcast(host, root=0)
    finally:
        local.Free()
    names = [f"{h}#{r // ranks_per_node}" if emulated else h for r, h in enumerate(comm.allgather(node_leader))]
    if emulated and size > 1 and rank == 0:
        each = "a node" if ranks_per_node == 1 else f"a device ({ranks_per_node} ranks stand for a node)"
        logger.warning("%s=1: each of the %d ranks stands for %s (testing only)", EMULATE_NODES, size, each)
    return Topology(rank, size, tuple(names), emulated, comm if size > 1 else None, ranks_per_node)
