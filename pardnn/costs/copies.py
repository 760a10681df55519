"""Micro-batch copy metadata of a graph: which micro-batch an op belongs to, and which op it copies.

Two optional columns of a :class:`~pardnn.costs.graph.CostGraph`: ``micro_batch`` (``0..M-1``, -1 for
an op of no micro-batch) and ``copy_of`` (the micro-batch-0 op copied). :func:`copy_columns` checks them
on every construction; :func:`single_copy` and :func:`micro_batches` read them. Rules:
docs/notes-partitioner.md. O(n).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from pardnn.costs.validation import Label, shown
from pardnn.errors import InvalidGraphError

__all__ = ["MICRO_BATCH", "copy_columns", "micro_batches", "single_copy"]

MICRO_BATCH = "a whole number >= 0 (the micro-batch), or null for an op of no micro-batch"


def _int_column(values: Any, field: str, n: int, label: Label, graph: str, *, none: int) -> np.ndarray:
    if isinstance(values, np.ndarray) and values.dtype.kind in "iu":
        array = values.astype(np.int64).reshape(-1)
    else:
        listed = list(values)
        for i, value in enumerate(listed):
            if value is not None and (isinstance(value, bool) or not isinstance(value, (int, np.integer))):
                raise InvalidGraphError(f"graph {graph!r}: {label(i)}: {field} = {shown(value)}; expected "
                                        f"{MICRO_BATCH if field == 'micro_batch' else 'an op index or None'}")
        array = np.fromiter((none if v is None else int(v) for v in listed), np.int64, len(listed))
    if array.size != n:
        raise InvalidGraphError(f"graph {graph!r}: {array.size} {field} values for {n} ops")
    return array


def copy_columns(micro_batch: npt.ArrayLike | Sequence[int | None] | None,
                 copy_of: npt.ArrayLike | Sequence[int | None] | None, n: int, label: Label,
                 ops: Sequence[str], graph: str) -> tuple[np.ndarray | None, np.ndarray | None]:
    """The ``micro_batch`` and ``copy_of`` columns as the graph stores them (int64), or ``(None, None)``.

    ``None`` entries mean -1 (``micro_batch``) and "itself" (``copy_of``); a ``copy_of`` without
    ``micro_batch`` is an error. Raises :class:`InvalidGraphError` naming the op, the field, the
    value and what was expected (module docstring).
    """
    if micro_batch is None:
        if copy_of is not None:
            raise InvalidGraphError(f"graph {graph!r}: copy_of given without micro_batch")
        return None, None
    batch = _int_column(micro_batch, "micro_batch", n, label, graph, none=-1)
    bad = np.flatnonzero(batch < -1)
    if bad.size:
        v = int(bad[0])
        raise InvalidGraphError(f"graph {graph!r}: {label(v)}: micro_batch = {int(batch[v])}; expected {MICRO_BATCH}")
    own = np.arange(n, dtype=np.int64)
    source = own.copy() if copy_of is None else _int_column(copy_of, "copy_of", n, label, graph, none=-1)
    source = np.where(source == -1, own, source)
    outside = np.flatnonzero((source < 0) | (source >= n))
    if outside.size:
        v = int(outside[0])
        raise InvalidGraphError(f"graph {graph!r}: {label(v)}: copy_of = {int(source[v])}; expected an op index "
                                f"in 0..{n - 1}")
    _check_copies(batch, source, label, ops, graph)
    return batch, source


def _check_copies(batch: np.ndarray, source: np.ndarray, label: Label, ops: Sequence[str], graph: str) -> None:
    own = np.arange(batch.size)
    first = batch <= 0
    wrong = np.flatnonzero(first & (source != own))
    if wrong.size:
        v = int(wrong[0])
        where = "of micro-batch 0" if batch[v] == 0 else "of no micro-batch"
        raise InvalidGraphError(f"graph {graph!r}: {label(v)}: copy_of = {label(int(source[v]))}; an op {where} "
                                "copies itself (expected null)")
    later = np.flatnonzero(~first)
    not_first = later[batch[source[later]] != 0]
    if not_first.size:
        v = int(not_first[0])
        c = int(source[v])
        raise InvalidGraphError(f"graph {graph!r}: {label(v)}: copy_of = {label(c)}, which is in "
                                f"{'no micro-batch' if batch[c] < 0 else f'micro-batch {int(batch[c])}'}; expected "
                                "an op of micro-batch 0")
    types = np.asarray(ops, dtype=object)
    differ = later[types[later] != types[source[later]]] if later.size else later
    if differ.size:
        v = int(differ[0])
        c = int(source[v])
        raise InvalidGraphError(f"graph {graph!r}: {label(v)}: copy_of = {label(c)}, an op of type {ops[c]!r}; "
                                f"expected an op of this op's type {ops[v]!r}")


def micro_batches(micro_batch: np.ndarray | None) -> int:
    """M: the number of micro-batches the metadata names (1 without metadata or without copies)."""
    if micro_batch is None or micro_batch.size == 0:
        return 1
    return max(1, int(micro_batch.max()) + 1)


def single_copy(micro_batch: np.ndarray | None, n: int) -> np.ndarray:
    """Mask of the single-copy graph: the ops of micro-batch 0 and the shared ops (every op without
    metadata)."""
    if micro_batch is None:
        return np.ones(n, bool)
    return micro_batch <= 0
