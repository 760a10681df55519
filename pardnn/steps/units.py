"""Movable units, shared by both memory heuristics (Section 3.2).

A colocation group (a variable, its optimizer slots, the ops that read or mutate them) must sit on
one device, so the memory heuristics move it as one *unit*; an op outside every group is a unit of
its own. :func:`units_of` numbers them; :class:`Units` lays them out as CSR with the edges that
cross each unit's boundary, for heuristic I's move costs (Eq. 5) and target choice.

Complexity: O(|V| + |E| log |E|) to build.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from pardnn.costs.graph import CostGraph
from pardnn.costs.machine import Machine

__all__ = ["Units", "units_of"]


def units_of(graph: CostGraph) -> np.ndarray:
    """Unit id of every op: its colocation group id, or ``groups + op index`` for an ungrouped op."""
    groups = len(graph.group_names)
    return np.where(graph.colocation >= 0, graph.colocation, groups + np.arange(graph.n))


@dataclass(frozen=True)
class Units:
    """Colocation units as CSR: members, and the edges that cross each unit's boundary."""

    of: np.ndarray  # unit id per op
    ptr: np.ndarray
    members: np.ndarray
    edge_ptr: np.ndarray
    edge_other: np.ndarray  # the op at the other end of each crossing edge
    edge_comm: np.ndarray  # its cost if cut (µs)
    first_op: np.ndarray
    edge_owner: np.ndarray  # the unit each crossing edge belongs to (``edge_ptr`` spelled out)
    compute: np.ndarray  # each unit's compute (µs), summed in op order

    @classmethod
    def build(cls, graph: CostGraph, machine: Machine) -> Units:
        of = units_of(graph)
        count = int(of.max(initial=-1)) + 1
        members = np.argsort(of, kind="stable")
        ptr = np.searchsorted(of[members], np.arange(count + 1))
        src, dst = graph.edge_src, graph.edge_dst
        crossing = of[src] != of[dst]
        comm = machine.edge_comm_us(graph.edge_bytes[crossing])
        owner = np.concatenate((of[src[crossing]], of[dst[crossing]]))
        other = np.concatenate((dst[crossing], src[crossing]))
        order = np.argsort(owner, kind="stable")
        edge_ptr = np.searchsorted(owner[order], np.arange(count + 1))
        first_op = np.full(count, graph.n, np.int64)
        np.minimum.at(first_op, of, np.arange(graph.n))
        return cls(of, ptr, members, edge_ptr, other[order], np.concatenate((comm, comm))[order], first_op,
                   owner[order], np.bincount(of, weights=graph.comp_us, minlength=count))

    @property
    def count(self) -> int:
        return int(self.ptr.size - 1)

    def members_of(self, u: int) -> np.ndarray:
        return self.members[self.ptr[u] : self.ptr[u + 1]]
