"""Memory heuristic II: residual balancing (Eq. 6) and critical-path chunk splitting (Section 3.2).

:func:`balance_residuals` moves residual units from the device of highest memory share to the lowest
until Eq. 6 holds (:func:`memory_shares`); :func:`split_critical_path` gives chunks of the heaviest
primary to the lightest when primaries are very unbalanced. No emulation, no guarantee.
Paper choice: which unit moves, and chunk sizes (docs/notes-partitioner.md).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from pardnn.costs.graph import CostGraph, Kind
from pardnn.costs.machine import Machine
from pardnn.emulation.checks import colocation_violations
from pardnn.errors import InvalidPlacementError
from pardnn.steps.slicing import Clusters
from pardnn.steps.units import units_of

__all__ = ["SPLIT_FACTOR", "BalanceResult", "balance_residuals", "memory_shares", "split_critical_path"]

SPLIT_FACTOR = 2.0


@dataclass(frozen=True)
class BalanceResult:
    placement: np.ndarray
    moved_ops: int
    moved_units: int
    shares_before: np.ndarray
    shares_after: np.ndarray


def _unit_bytes(graph: CostGraph) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    unit = units_of(graph)
    residual = np.where(graph.kind == Kind.RESIDUAL, graph.out_bytes, 0).astype(np.float64)
    normal = np.where(graph.kind == Kind.NORMAL, graph.out_bytes, 0).astype(np.float64)
    return unit, residual, normal


def memory_shares(graph: CostGraph, machine: Machine, placement: np.ndarray) -> np.ndarray:
    """Per device: its share of the residual bytes plus its share of the normal bytes (sums to 2,
    or 1 when one kind is absent)."""
    _, residual, normal = _unit_bytes(graph)
    place = np.asarray(placement)
    shares = np.zeros(machine.devices)
    for values in (residual, normal):
        total = values.sum()
        if total > 0:
            shares += np.bincount(place, weights=values, minlength=machine.devices) / total
    return shares


def balance_residuals(graph: CostGraph, machine: Machine, placement: np.ndarray) -> BalanceResult:
    """Move residual units from the device of highest share to the lowest until Eq. 6 holds.

    ``placement`` must keep colocation groups whole (a group is moved as one unit).
    """
    split = colocation_violations(graph, placement)
    if split:
        raise InvalidPlacementError(f"balance_residuals needs whole colocation groups; {len(split)} are split, "
                                    f"e.g. {split[0]!r}")
    place = np.array(placement, dtype=np.int64)
    k = machine.devices
    unit, residual, normal = _unit_bytes(graph)
    before = memory_shares(graph, machine, place)
    shares = before.copy()
    residual_total, normal_total = residual.sum(), normal.sum()
    if k == 1 or residual_total == 0:
        return BalanceResult(place, 0, 0, before, shares)
    # Each unit's share (what moving it shifts), for units holding residual bytes.
    unit_residual = np.bincount(unit, weights=residual)
    unit_normal = np.bincount(unit, weights=normal, minlength=unit_residual.size)
    unit_share = unit_residual / residual_total + (unit_normal / normal_total if normal_total > 0 else 0.0)
    first_op = np.full(unit_residual.size, graph.n, np.int64)
    np.minimum.at(first_op, unit, np.arange(graph.n))
    unit_device = np.full(unit_residual.size, -1, np.int64)
    unit_device[unit] = place
    movable = np.flatnonzero(unit_residual > 0)
    moved = np.zeros(unit_residual.size, bool)
    total_share = shares.sum()
    moved_units = 0
    while np.any(shares * k < total_share * (1.0 - 1e-12)):  # Eq. 6 fails somewhere
        source = int(np.argmax(shares))
        sink = int(np.argmin(shares))
        gap = shares[source] - shares[sink]
        pool = movable[(unit_device[movable] == source) & ~moved[movable]]
        pool = pool[unit_share[pool] <= gap]  # never swap the two devices' order
        if pool.size == 0:
            break
        # The unit that brings the two devices closest; ties to the lowest op index.
        distance = np.abs(gap - 2 * unit_share[pool])
        chosen = int(pool[np.lexsort((first_op[pool], distance))[0]])
        place[unit == chosen] = sink
        unit_device[chosen] = sink
        moved[chosen] = True
        shares[source] -= unit_share[chosen]
        shares[sink] += unit_share[chosen]
        moved_units += 1
    moved_ops = int(np.isin(unit, np.flatnonzero(moved)).sum())
    return BalanceResult(place, moved_ops, moved_units, before, memory_shares(graph, machine, place))


def split_critical_path(graph: CostGraph, clusters: Clusters, *,
                        split_factor: float = SPLIT_FACTOR) -> tuple[Clusters, int]:
    """Give contiguous chunks of the heaviest primary to the lightest ones when primaries are highly
    unbalanced in memory. Returns the new clusters and the number of ops moved."""
    k = clusters.primaries
    memory = np.where(graph.kind == Kind.REFERENCE, 0, graph.out_bytes).astype(np.float64)
    primary_bytes = np.array([memory[clusters.cluster(j)].sum() for j in range(k)])
    if k < 2 or primary_bytes.sum() == 0:
        return clusters, 0
    mean = primary_bytes.mean()
    heaviest = int(np.argmax(primary_bytes))
    if primary_bytes[heaviest] <= split_factor * mean:
        return clusters, 0
    cluster_of = clusters.cluster_of.copy()
    path = clusters.cluster(heaviest)
    receivers = [int(j) for j in np.argsort(primary_bytes, kind="stable") if primary_bytes[j] < mean]
    position = 0
    excess = primary_bytes[heaviest] - mean
    moved = 0
    for receiver in receivers:
        want = min(mean - primary_bytes[receiver], excess)
        taken = 0.0
        start = position
        while position < path.size and taken < want:
            taken += memory[path[position]]
            position += 1
        cluster_of[path[start:position]] = receiver
        moved += position - start
        excess -= taken
        if excess <= 0 or position >= path.size:
            break
    # Keep each cluster's members in path (topological) order: sort by cluster, then by old position.
    old_position = np.empty(graph.n, np.int64)
    old_position[clusters.members] = np.arange(graph.n)
    order = np.lexsort((old_position, cluster_of))
    ptr = np.searchsorted(cluster_of[order], np.arange(clusters.count + 1)).astype(np.int64)
    return Clusters(k, cluster_of, ptr, order.astype(np.int64)), moved
