"""Placement validity: every op on a device of the machine, colocation groups whole; run orders.

:func:`check_placement` is the one checker every placer's output goes through; :func:`check_order`
checks a run order (:mod:`pardnn.polish.order`) and :func:`chain_next` turns it into the chains the
emulator and :func:`pardnn.tf.apply` enforce. O(|V|); O(|V| log |V| + |E|) for an order.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numba import njit

from pardnn.costs.graph import CostGraph
from pardnn.costs.machine import Machine
from pardnn.errors import InvalidPlacementError

__all__ = ["chain_next", "check_order", "check_placement", "colocation_violations", "dense_positions"]

_MAX_NAMED = 8


def check_placement(graph: CostGraph, machine: Machine, placement: np.ndarray, *,
                    colocation: bool = False) -> np.ndarray:
    """Validate ``placement`` and return it as a read-only int64 array.

    Raises :class:`InvalidPlacementError` when its length is not |V|, a device is outside
    ``0..K-1``, or (with ``colocation=True``) a colocation group is split.
    """
    place = np.asarray(placement)
    if place.shape != (graph.n,):
        raise InvalidPlacementError(f"placement has {place.size} entries for the {graph.n} ops of {graph.name!r}")
    if place.size and place.dtype.kind not in "iu":
        if place.dtype.kind != "f" or not np.all(place == np.floor(place)):
            raise InvalidPlacementError("placement must hold integer device indices")
    place = place.astype(np.int64)
    bad = (place < 0) | (place >= machine.devices)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise InvalidPlacementError(
            f"op {graph.names[i]!r} is placed on device {int(place[i])}, outside 0..{machine.devices - 1}")
    if colocation:
        split = colocation_violations(graph, place)
        if split:
            raise InvalidPlacementError(f"placement splits {len(split)} colocation group(s), e.g. {split[0]!r}")
    place.flags.writeable = False
    return place


def colocation_violations(graph: CostGraph, placement: np.ndarray) -> list[str]:
    """Labels of the colocation groups whose members sit on more than one device."""
    members = graph.colocation >= 0
    if not members.any():
        return []
    groups = graph.colocation[members]
    devices = np.asarray(placement)[members]
    low = np.full(len(graph.group_names), np.iinfo(np.int64).max)
    high = np.full(len(graph.group_names), -1)
    np.minimum.at(low, groups, devices)
    np.maximum.at(high, groups, devices)
    return [graph.group_names[g] for g in np.flatnonzero((high >= 0) & (low != high))]


def dense_positions(place: np.ndarray, key: np.ndarray) -> np.ndarray:
    """Each op's rank by ``key`` among the ops of its device (0 first; ties by op index)."""
    by_device = np.lexsort((key, place))
    first = np.searchsorted(place[by_device], place[by_device], side="left")
    position = np.empty(place.size, np.int64)
    position[by_device] = np.arange(place.size) - first
    return position


def chain_next(placement: np.ndarray, position: np.ndarray) -> np.ndarray:
    """Per op, the op its device runs next under ``position`` (-1 for each device's last)."""
    place = np.asarray(placement, dtype=np.int64)
    by_device = np.lexsort((np.asarray(position), place))
    after = np.full(place.size, -1, np.int64)
    same = place[by_device[1:]] == place[by_device[:-1]]
    after[by_device[:-1][same]] = by_device[1:][same]
    return after


def check_order(graph: CostGraph, placement: np.ndarray, position: Any, source: str = "the order") -> np.ndarray:
    """Validate a run order for ``placement`` and return it dense (0..n_d - 1 on each device).

    Raises
    ------
    InvalidPlacementError
        Naming ``source``: a wrong length, a negative or non-integer position, two ops of one device
        at one position, an op before one of its inputs on its device, or a cycle through the
        devices' sequences and the graph's edges (ops on it named).
    """
    raw = np.asarray(position)
    if raw.shape != (graph.n,):
        raise InvalidPlacementError(f"{source} has {raw.size} positions for the {graph.n} ops of {graph.name!r}")
    if raw.size and not np.issubdtype(raw.dtype, np.integer):
        raise InvalidPlacementError(f"{source}: positions must be integers, got {raw.dtype}")
    raw = raw.astype(np.int64)
    if raw.size and raw.min() < 0:
        v = int(np.argmin(raw))
        raise InvalidPlacementError(f"{source}: op {graph.names[v]!r} has position {raw[v]}; expected >= 0")
    place = np.asarray(placement, dtype=np.int64)
    by_device = np.lexsort((raw, place))
    same = place[by_device[1:]] == place[by_device[:-1]]
    clash = np.flatnonzero(same & (raw[by_device[1:]] == raw[by_device[:-1]]))
    if clash.size:
        a, b = int(by_device[clash[0]]), int(by_device[clash[0] + 1])
        raise InvalidPlacementError(f"{source}: ops {graph.names[a]!r} and {graph.names[b]!r} are both at position "
                                    f"{raw[a]} on device {place[a]}; positions on one device must differ")
    dense = dense_positions(place, raw)
    src, dst = graph.edge_src, graph.edge_dst
    backwards = np.flatnonzero((place[src] == place[dst]) & (dense[src] > dense[dst]))
    if backwards.size:
        e = int(backwards[0])
        u, v = int(src[e]), int(dst[e])
        raise InvalidPlacementError(
            f"{source}: op {graph.names[v]!r} (position {raw[v]}) runs before its input {graph.names[u]!r} "
            f"(position {raw[u]}) on device {place[u]}; an op's inputs on its device come first")
    left = _unordered(graph.n, graph.succ_ptr, graph.succ, graph.pred_ptr, chain_next(place, dense))
    if left.size:
        named = ", ".join(repr(graph.names[v]) for v in left[:_MAX_NAMED].tolist())
        raise InvalidPlacementError(
            f"{source}: the devices' sequences and the graph's edges form a cycle ({left.size} ops on or after it: "
            f"{named}{', ...' if left.size > _MAX_NAMED else ''}): one device runs an op before one that "
            f"another device needs first")
    return dense


@njit(cache=True, nogil=True)
def _unordered(n: int, succ_ptr: np.ndarray, succ: np.ndarray, pred_ptr: np.ndarray, after: np.ndarray) -> np.ndarray:
    # Kahn's algorithm over the graph's edges and the chains; the ops it cannot reach lie on or after a cycle.
    indegree = np.empty(n, np.int64)
    for v in range(n):
        indegree[v] = pred_ptr[v + 1] - pred_ptr[v]
    for v in range(n):
        if after[v] >= 0:
            indegree[after[v]] += 1
    stack = np.empty(n, np.int64)
    top = 0
    for v in range(n):
        if indegree[v] == 0:
            stack[top] = v
            top += 1
    seen = 0
    while top > 0:
        top -= 1
        v = stack[top]
        seen += 1
        for k in range(succ_ptr[v], succ_ptr[v + 1] + 1):
            w = succ[k] if k < succ_ptr[v + 1] else after[v]
            if w < 0:
                continue
            indegree[w] -= 1
            if indegree[w] == 0:
                stack[top] = w
                top += 1
    if seen == n:
        return np.zeros(0, np.int64)
    return np.flatnonzero(indegree > 0)
