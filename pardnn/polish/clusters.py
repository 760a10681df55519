"""Clusters of units joined by heavy edges: the refinement's moves of many units at once.

:func:`linkage_clusters` merges the colocation units single-linkage by edge bytes (Kruskal's order,
heaviest edge first) and lists each merge of three or more units as a cluster. Moving a cluster to
one device cuts only edges lighter than those inside it, so it reaches placements that no move of
one unit or of a linked pair reaches without first cutting a heavy edge (a longer step the search
never keeps). Why, the budget and what it measured: docs/internals.md ("The refinement").
"""

from __future__ import annotations

import numpy as np

from pardnn.costs.graph import CostGraph

__all__ = ["MAX_SHARE", "TOTAL_FACTOR", "linkage_clusters"]

MAX_SHARE = 0.5  # a cluster holds at most this share of the units (moving more is moving the rest)
TOTAL_FACTOR = 8  # the clusters' units together at most this many times the units (chains nest deeply)


def linkage_clusters(graph: CostGraph, unit: np.ndarray) -> list[list[int]]:
    """The clusters of ``unit`` ids (one per op, :func:`~pardnn.steps.units.units_of`) in merge order,
    each its units sorted: every merge of single-linkage clustering by edge bytes (ties in edge order)
    that joins three or more units and at most :data:`MAX_SHARE` of them, while the clusters' sizes sum
    to at most :data:`TOTAL_FACTOR` times the units.

    >>> from pardnn import CostGraph
    >>> g = CostGraph(list("abcdef"), [1.0] * 6, [8] * 6, [0, 1, 2, 0, 4], [1, 2, 3, 4, 5], [9, 7, 5, 1, 1])
    >>> linkage_clusters(g, np.arange(6))   # a-b (9), b-c (7) make {a, b, c}; c-d (5) would pass half
    [[0, 1, 2]]
    """
    a, b = unit[graph.edge_src], unit[graph.edge_dst]
    between = a != b
    ends_a, ends_b = a[between].tolist(), b[between].tolist()
    units = int(np.unique(unit).size)
    most, left = int(units * MAX_SHARE), TOTAL_FACTOR * units
    parent: dict[int, int] = {}
    members: dict[int, list[int]] = {}

    def root(u: int) -> int:
        while parent.get(u, u) != u:
            parent[u] = u = parent.get(parent[u], parent[u])  # path halving
        return u

    clusters: list[list[int]] = []
    for e in np.argsort(-graph.edge_bytes[between], kind="stable").tolist():
        x, y = root(ends_a[e]), root(ends_b[e])
        if x == y:
            continue
        mx, my = members.pop(x, [x]), members.pop(y, [y])
        if len(mx) < len(my):
            x, y, mx, my = y, x, my, mx
        parent[y] = x
        mx.extend(my)
        members[x] = joined = mx
        if 3 <= len(joined) <= most:
            if len(joined) > left:
                break
            left -= len(joined)
            clusters.append(sorted(joined))
    return clusters
