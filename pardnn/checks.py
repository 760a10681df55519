"""Placement validity: every op on a device of the machine, colocation groups whole.

The one checker every placer's output goes through (STYLE.md: networkx's ``validate_flows``). It
sits below the emulator, the memory tracker and the evaluation, which all call it.

Complexity: O(|V|).
"""

from __future__ import annotations

import numpy as np

from pardnn.errors import InvalidPlacementError
from pardnn.graph import CostGraph
from pardnn.machine import Machine

__all__ = ["check_placement", "colocation_violations"]


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
