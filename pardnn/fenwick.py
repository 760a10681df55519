"""Binary indexed (Fenwick) trees over levels (Fenwick 1994), as LFLAM uses them (Section 3.1).

A tree stores one weight per level index ``0..L-1`` and answers prefix and range sums; both point
update and query are O(log L). LFLAM keeps one tree per device plus one for unmapped work, so the
trees live as rows of one 2-D array and the kernels are numba functions usable from compiled loops;
:class:`FenwickTree` wraps one row for Python callers and tests.
"""

from __future__ import annotations

import numpy as np
from numba import njit

__all__ = ["FenwickTree", "fenwick_add", "fenwick_build", "fenwick_prefix", "fenwick_range"]


@njit(cache=True, nogil=True)
def fenwick_add(tree: np.ndarray, row: int, index: int, delta: float) -> None:
    """Add ``delta`` at level ``index`` of tree ``row``. O(log L)."""
    size = tree.shape[1] - 1
    i = index + 1
    while i <= size:
        tree[row, i] += delta
        i += i & (-i)


@njit(cache=True, nogil=True)
def fenwick_prefix(tree: np.ndarray, row: int, end: int) -> float:
    """Sum of levels ``[0, end)`` of tree ``row``. O(log L)."""
    total = 0.0
    i = end
    while i > 0:
        total += tree[row, i]
        i -= i & (-i)
    return total


@njit(cache=True, nogil=True)
def fenwick_range(tree: np.ndarray, row: int, start: int, end: int) -> float:
    """Sum of levels ``[start, end)`` of tree ``row`` (0 when empty). O(log L)."""
    if end <= start:
        return 0.0
    return fenwick_prefix(tree, row, end) - fenwick_prefix(tree, row, start)


@njit(cache=True, nogil=True)
def fenwick_build(tree: np.ndarray, row: int, values: np.ndarray) -> None:
    """Fill tree ``row`` from per-level ``values`` in O(L) (the row must be zero)."""
    size = tree.shape[1] - 1
    for i in range(1, size + 1):
        tree[row, i] += values[i - 1]
        parent = i + (i & (-i))
        if parent <= size:
            tree[row, parent] += tree[row, i]


class FenwickTree:
    """One tree over ``levels`` levels, for Python callers.

    >>> tree = FenwickTree(5)
    >>> tree.add(1, 2.0); tree.add(3, 5.0)
    >>> tree.range_sum(1, 4), tree.range_sum(2, 3)
    (7.0, 0.0)
    """

    def __init__(self, levels: int, values: np.ndarray | None = None) -> None:
        if levels < 0:
            raise ValueError(f"a Fenwick tree needs levels >= 0, got {levels}")
        self.levels = levels
        self._tree = np.zeros((1, levels + 1))
        if values is not None:
            values = np.asarray(values, dtype=np.float64)
            if values.shape != (levels,):
                raise ValueError(f"{values.size} values for {levels} levels")
            fenwick_build(self._tree, 0, values)

    def _check(self, index: int) -> None:
        if not 0 <= index < self.levels:
            raise IndexError(f"level {index} outside 0..{self.levels - 1}")

    def add(self, index: int, delta: float) -> None:
        self._check(index)
        fenwick_add(self._tree, 0, index, float(delta))

    def prefix_sum(self, end: int) -> float:
        return float(fenwick_prefix(self._tree, 0, min(max(end, 0), self.levels)))

    def range_sum(self, start: int, end: int) -> float:
        start, end = max(start, 0), min(end, self.levels)
        return float(fenwick_range(self._tree, 0, start, end))
