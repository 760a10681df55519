"""CostGraph: the computational graph of one training step, as immutable NumPy arrays.

Nodes are ``0..n-1``. Per node: ``names``, ``ops`` (op type, informational), ``comp_us`` (float64,
microseconds), ``out_bytes`` (int64, memory its outputs hold), ``kind`` (:class:`Kind`),
``colocation`` (group id or -1; ``group_names[id]`` is the group's label) and ``param_bytes``.
Edges are stored twice, as CSR successors (``succ_ptr``/``succ``/``succ_bytes``, sorted by source
then destination; this is also the edge order of ``edge_src``/``edge_dst``/``edge_bytes``) and CSR
predecessors (``pred_ptr``/``pred``/``pred_bytes``, with ``pred_edge`` giving each slot's edge id).

Choices where the contract is silent:

- Two edges with the same ends (an op reading two outputs of one producer) are merged into one edge
  whose bytes are their sum: one transfer, one buffer.
- ``topo_order`` is Kahn's algorithm with a FIFO queue seeded by node index (all sources first, in
  index order), so it is deterministic.
- Construction validates everything and copies its inputs; every array is read-only afterwards.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Iterable, Sequence
from itertools import repeat
from typing import Any

import numpy as np
import numpy.typing as npt
from numba import njit

from pardnn.errors import InvalidGraphError

__all__ = ["KIND_NAMES", "CostGraph", "Kind", "segment_reduce"]


class Kind(enum.IntEnum):
    """Memory category of an op (paper, Section 3.2, "Memory Consumption Tracker")."""

    NORMAL = 0  # output allocated at start, freed after its last consumer
    RESIDUAL = 1  # survives across iterations: variables, optimizer slots
    REFERENCE = 2  # mutates a residual, holds no memory of its own, sits on the residual's device


KIND_NAMES: tuple[str, ...] = ("normal", "residual", "reference")

_MAX_LISTED = 8


def _listing(names: Sequence[str]) -> str:
    shown = ", ".join(repr(s) for s in names[:_MAX_LISTED])
    return shown + (f", ... ({len(names)} in all)" if len(names) > _MAX_LISTED else "")


@njit(cache=True)
def _kahn(n: int, succ_ptr: np.ndarray, succ: np.ndarray, pred_ptr: np.ndarray) -> np.ndarray:
    indegree = np.empty(n, np.int64)
    for v in range(n):
        indegree[v] = pred_ptr[v + 1] - pred_ptr[v]
    order = np.empty(n, np.int64)
    head = 0
    tail = 0
    for v in range(n):
        if indegree[v] == 0:
            order[tail] = v
            tail += 1
    while head < tail:
        v = order[head]
        head += 1
        for k in range(succ_ptr[v], succ_ptr[v + 1]):
            w = succ[k]
            indegree[w] -= 1
            if indegree[w] == 0:
                order[tail] = w
                tail += 1
    return order[:tail]


def segment_reduce(ufunc: np.ufunc, values: np.ndarray, ptr: np.ndarray, empty: float) -> np.ndarray:
    """``ufunc`` over each CSR segment ``values[ptr[i]:ptr[i + 1]]``; ``empty`` for an empty one.

    O(len(values)). ``values`` must have ``ptr[-1]`` entries (as ``pred`` has for ``pred_ptr``).
    """
    out = np.full(ptr.size - 1, empty, dtype=np.float64)
    starts = np.flatnonzero(np.diff(ptr) > 0)
    if starts.size:  # consecutive non-empty starts bound each segment: empty ones have no length
        out[starts] = ufunc.reduceat(values, ptr[starts])
    return out


def _readonly(array: np.ndarray) -> np.ndarray:
    array.flags.writeable = False
    return array


class CostGraph:
    """An immutable, validated DAG with per-op costs.

    Parameters
    ----------
    names:
        Unique, non-empty op names.
    comp_us:
        Compute time of each op in microseconds (finite, >= 0).
    out_bytes:
        Bytes held by each op's outputs (integer, >= 0).
    src, dst:
        Edge endpoints as node indices.
    edge_bytes:
        Bytes carried by each edge; default: the producer's ``out_bytes``. Use 0 for control edges.
    kind:
        Per-op :class:`Kind` (ints or the names ``normal``/``residual``/``reference``); default normal.
    colocation:
        Per-op group label (any hashable, ``None`` for no group) or integer ids with -1 for none.
    ops:
        Per-op type strings (``MatMul``...), informational.
    param_bytes:
        Per-op parameter bytes (informational; variables), default 0.
    name:
        Graph name.
    memory_limit_bytes:
        Optional per-device memory limit carried by the graph file.
    _name_index:
        Private, for readers that have checked the names already (unique, non-empty strings):
        ``{name: index}``, taken as the graph's own index instead of building it again.

    Raises
    ------
    InvalidGraphError
        Duplicate or empty name, a negative/NaN/inf cost (naming op and field), an edge endpoint out
        of range, or a cycle (naming ops on it).

    Notes
    -----
    Construction is O(|V| + |E| log |E|) (edges are sorted once).
    """

    def __init__(
        self,
        names: Sequence[str],
        comp_us: npt.ArrayLike,
        out_bytes: npt.ArrayLike,
        src: npt.ArrayLike,
        dst: npt.ArrayLike,
        edge_bytes: npt.ArrayLike | None = None,
        *,
        kind: npt.ArrayLike | Sequence[str] | None = None,
        colocation: Sequence[Any] | npt.ArrayLike | None = None,
        ops: Sequence[str] | None = None,
        param_bytes: npt.ArrayLike | None = None,
        name: str = "graph",
        memory_limit_bytes: int | None = None,
        _name_index: dict[str, int] | None = None,
    ) -> None:
        self.name = str(name)
        self.names: tuple[str, ...] = tuple(names)
        n = len(self.names)
        self.n = n
        self._index: dict[str, int] | None = None
        if _name_index is not None and len(_name_index) == n:  # a reader checked the names already
            self._index = _name_index
        else:
            self._check_names()
        self.ops: tuple[str, ...] = tuple(ops) if ops is not None else ("",) * n
        if len(self.ops) != n:
            raise InvalidGraphError(f"graph {self.name!r}: {len(self.ops)} op types for {n} ops")
        self.comp_us = _readonly(self._float_field(comp_us, "comp_us"))
        self.out_bytes = _readonly(self._int_field(out_bytes, "out_bytes"))
        self.param_bytes = _readonly(
            np.zeros(n, np.int64) if param_bytes is None else self._int_field(param_bytes, "param_bytes")
        )
        self.kind = _readonly(self._kinds(kind))
        self.colocation, self.group_names = self._groups(colocation)
        _readonly(self.colocation)
        self.memory_limit_bytes = None if memory_limit_bytes is None else int(memory_limit_bytes)
        if self.memory_limit_bytes is not None and self.memory_limit_bytes <= 0:
            raise InvalidGraphError(
                f"graph {self.name!r}: memory_limit_bytes must be > 0, got {self.memory_limit_bytes}"
            )
        self._build_edges(src, dst, edge_bytes)
        self.topo_order = _readonly(self._topological_order())
        self.topo_rank = np.empty(n, np.int64)
        self.topo_rank[self.topo_order] = np.arange(n, dtype=np.int64)
        _readonly(self.topo_rank)

    # ------------------------------------------------------------------ construction helpers
    @classmethod
    def from_named_edges(
        cls,
        names: Sequence[str],
        comp_us: npt.ArrayLike,
        out_bytes: npt.ArrayLike,
        edges: Iterable[tuple[str, str] | tuple[str, str, int]],
        **kwargs: Any,
    ) -> CostGraph:
        """Build from edges given as ``(src_name, dst_name[, bytes])``; unknown names raise."""
        index = {name: i for i, name in enumerate(names)}
        src: list[int] = []
        dst: list[int] = []
        nbytes: list[int] = []
        out = np.asarray(out_bytes)
        for edge in edges:
            for end in edge[:2]:
                if end not in index:
                    raise InvalidGraphError(
                        f"edge {edge[0]!r} -> {edge[1]!r}: unknown op {end!r} (not among the {len(index)} ops)"
                    )
            s, d = index[edge[0]], index[edge[1]]
            src.append(s)
            dst.append(d)
            nbytes.append(int(edge[2]) if len(edge) > 2 else int(out[s]))  # type: ignore[misc]
        return cls(names, comp_us, out_bytes, src, dst, nbytes, **kwargs)

    def _check_names(self) -> None:
        names = self.names
        if set(map(type, names)) <= {str}:
            index = dict(zip(names, range(self.n), strict=True))
            if len(index) == self.n and "" not in index:
                self._index = index
                return
        seen: dict[str, int] = {}  # something is wrong: find the first culprit and name it
        for i, op_name in enumerate(names):
            if not isinstance(op_name, str) or not op_name:
                raise InvalidGraphError(f"graph {self.name!r}: op #{i} has an empty or non-string name {op_name!r}")
            if op_name in seen:
                raise InvalidGraphError(
                    f"graph {self.name!r}: duplicate op name {op_name!r} (ops #{seen[op_name]} and #{i})"
                )
            seen[op_name] = i
        self._index = seen

    def _float_field(self, values: npt.ArrayLike, field: str) -> np.ndarray:
        array = np.array(values, dtype=np.float64).reshape(-1)
        if array.shape != (self.n,):
            raise InvalidGraphError(f"graph {self.name!r}: {field} has {array.size} values for {self.n} ops")
        bad = ~np.isfinite(array) | (array < 0)
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise InvalidGraphError(
                f"op {self.names[i]!r}: {field} = {array[i]!r} must be a finite number >= 0"
            )
        return array

    def _int_field(self, values: npt.ArrayLike, field: str) -> np.ndarray:
        array = np.asarray(values).reshape(-1)
        if array.shape != (self.n,):
            raise InvalidGraphError(f"graph {self.name!r}: {field} has {array.size} values for {self.n} ops")
        if array.dtype.kind not in "iu":
            try:
                as_float = array.astype(np.float64)
            except (TypeError, ValueError):
                as_float = np.array([_number(v) for v in array.tolist()])
            bad = ~np.isfinite(as_float) | (as_float != np.floor(as_float))
            if bad.any():
                i = int(np.flatnonzero(bad)[0])
                raise InvalidGraphError(f"op {self.names[i]!r}: {field} = {array[i]!r} must be a whole number >= 0")
            array = as_float
        array = array.astype(np.int64)
        negative = array < 0
        if negative.any():
            i = int(np.flatnonzero(negative)[0])
            raise InvalidGraphError(f"op {self.names[i]!r}: {field} = {int(array[i])} must be >= 0")
        return array

    def _kinds(self, kind: npt.ArrayLike | Sequence[str] | None) -> np.ndarray:
        if kind is None:
            return np.zeros(self.n, np.int8)
        array = np.asarray(kind)
        if array.shape != (self.n,):
            raise InvalidGraphError(f"graph {self.name!r}: kind has {array.size} values for {self.n} ops")
        if array.dtype.kind in "iu":
            bad = (array < 0) | (array > 2)
            if bad.any():
                i = int(np.flatnonzero(bad)[0])
                raise InvalidGraphError(f"op {self.names[i]!r}: kind = {array[i]!r}; expected 0, 1 or 2")
            return array.astype(np.int8)
        # Names (or a mix): map through a dict, one lookup per op.
        codes: dict[str | int, int] = {name: code for code, name in enumerate(KIND_NAMES)}
        codes.update({0: 0, 1: 1, 2: 2})
        out = np.fromiter((codes.get(v, -1) if isinstance(v, (str, int)) else -1 for v in array.tolist()),
                          np.int8, count=self.n)
        if (out < 0).any():
            i = int(np.flatnonzero(out < 0)[0])
            raise InvalidGraphError(
                f"op {self.names[i]!r}: kind = {array.tolist()[i]!r}; expected one of {', '.join(KIND_NAMES)}")
        return out

    def _groups(self, colocation: Sequence[Any] | npt.ArrayLike | None) -> tuple[np.ndarray, tuple[str, ...]]:
        if colocation is None:
            return np.full(self.n, -1, np.int64), ()
        array = np.asarray(colocation, dtype=object if not isinstance(colocation, np.ndarray) else None)
        if array.shape != (self.n,):
            raise InvalidGraphError(f"graph {self.name!r}: colocation has {array.size} values for {self.n} ops")
        values = array.tolist()
        if array.dtype.kind in "iu" or all(isinstance(v, int) for v in values):
            ids = np.array(values, dtype=np.int64)
            if (ids < -1).any():
                i = int(np.flatnonzero(ids < -1)[0])
                raise InvalidGraphError(
                    f"op {self.names[i]!r}: colocation = {int(ids[i])}; expected a group id >= 0 or -1")
            # Renumber groups by first appearance so equal graphs have equal ids.
            grouped = np.flatnonzero(ids >= 0)
            labels, first = np.unique(ids[grouped], return_index=True)
            by_appearance = labels[np.argsort(first, kind="stable")]
            renumber = np.empty(by_appearance.size, np.int64)
            renumber[np.searchsorted(labels, by_appearance)] = np.arange(by_appearance.size)
            out = np.full(self.n, -1, np.int64)
            out[grouped] = renumber[np.searchsorted(labels, ids[grouped])]
            return out, tuple(str(g) for g in by_appearance.tolist())
        if set(map(type, values)) <= {str, type(None)}:  # labels and None: all C-level passes
            labels = [label for label in dict.fromkeys(values) if label is not None]  # by first appearance
            ids = np.fromiter(map(dict(zip(labels, range(len(labels)))).get, values, repeat(-1)), np.int64, self.n)
            return ids, tuple(labels)
        group_ids: dict[str, int] = {}
        out = np.full(self.n, -1, np.int64)
        for i, value in enumerate(values):
            if value is None or value == -1:
                continue
            out[i] = group_ids.setdefault(str(value), len(group_ids))
        return out, tuple(group_ids)

    def _build_edges(self, src: npt.ArrayLike, dst: npt.ArrayLike, edge_bytes: npt.ArrayLike | None) -> None:
        n = self.n
        src_a = np.asarray(src, dtype=np.int64).reshape(-1)
        dst_a = np.asarray(dst, dtype=np.int64).reshape(-1)
        if src_a.shape != dst_a.shape:
            raise InvalidGraphError(f"graph {self.name!r}: {src_a.size} edge sources for {dst_a.size} destinations")
        for ends, label in ((src_a, "source"), (dst_a, "destination")):
            bad = (ends < 0) | (ends >= n)
            if bad.any():
                k = int(np.flatnonzero(bad)[0])
                raise InvalidGraphError(
                    f"graph {self.name!r}: edge #{k} has {label} index {int(ends[k])}, outside 0..{n - 1}"
                )
        if edge_bytes is None:
            bytes_a = self.out_bytes[src_a].copy() if src_a.size else np.zeros(0, np.int64)
        else:
            bytes_a = np.asarray(edge_bytes).reshape(-1)
            if bytes_a.shape != src_a.shape:
                raise InvalidGraphError(f"graph {self.name!r}: {bytes_a.size} edge byte counts for {src_a.size} edges")
            if bytes_a.dtype.kind == "O":
                as_float = np.array([_number(v) for v in bytes_a.tolist()])
            else:
                as_float = bytes_a.astype(np.float64)
            bad = ~np.isfinite(as_float) | (as_float < 0) | (as_float != np.floor(as_float))
            if bad.any():
                k = int(np.flatnonzero(bad)[0])
                raise InvalidGraphError(
                    f"edge {self.names[src_a[k]]!r} -> {self.names[dst_a[k]]!r}: bytes = {bytes_a[k]!r}"
                    " must be a whole number >= 0"
                )
            bytes_a = bytes_a.astype(np.int64)
        loops = src_a == dst_a
        if loops.any():
            v = int(src_a[np.flatnonzero(loops)[0]])
            raise InvalidGraphError(f"graph {self.name!r} has a cycle: op {self.names[v]!r} feeds itself")
        # Sort by (src, dst) and merge parallel edges (sum of bytes).
        order = np.lexsort((dst_a, src_a))
        src_a, dst_a, bytes_a = src_a[order], dst_a[order], bytes_a[order]
        if src_a.size:
            first = np.ones(src_a.size, bool)
            first[1:] = (src_a[1:] != src_a[:-1]) | (dst_a[1:] != dst_a[:-1])
            if not first.all():
                starts = np.flatnonzero(first)
                bytes_a = np.add.reduceat(bytes_a, starts)
                src_a, dst_a = src_a[starts], dst_a[starts]
        m = src_a.size
        self.m = m
        self.edge_src = _readonly(src_a)
        self.edge_dst = _readonly(dst_a)
        self.edge_bytes = _readonly(bytes_a)
        self.succ_ptr = _readonly(np.concatenate(([0], np.cumsum(np.bincount(src_a, minlength=n)))).astype(np.int64))
        self.succ = self.edge_dst
        self.succ_bytes = self.edge_bytes
        by_dst = np.lexsort((src_a, dst_a))
        self.pred_edge = _readonly(by_dst.astype(np.int64))
        self.pred = _readonly(src_a[by_dst])
        self.pred_bytes = _readonly(bytes_a[by_dst])
        self.pred_ptr = _readonly(np.concatenate(([0], np.cumsum(np.bincount(dst_a, minlength=n)))).astype(np.int64))

    def _topological_order(self) -> np.ndarray:
        order = _kahn(self.n, self.succ_ptr, self.succ, self.pred_ptr)
        if order.size == self.n:
            return order
        remaining = np.ones(self.n, bool)
        remaining[order] = False
        raise InvalidGraphError(f"graph {self.name!r} has a cycle: {_listing(self._find_cycle(remaining))}")

    def _find_cycle(self, remaining: np.ndarray) -> list[str]:
        # Every op left after Kahn's algorithm has a predecessor that is also left: walking
        # predecessors from any of them must revisit an op, which closes a cycle.
        start = int(np.flatnonzero(remaining)[0])
        position: dict[int, int] = {}
        walk: list[int] = []
        v = start
        while v not in position:
            position[v] = len(walk)
            walk.append(v)
            preds = self.pred[self.pred_ptr[v] : self.pred_ptr[v + 1]]
            v = int(preds[remaining[preds]][0])
        cycle = walk[position[v] :][::-1]
        return [self.names[u] for u in cycle] + [self.names[cycle[0]]]

    _REPLACEABLE = ("names", "comp_us", "out_bytes", "edge_src", "edge_dst", "edge_bytes", "kind", "colocation",
                    "ops", "param_bytes", "name", "memory_limit_bytes")

    def replace(self, **fields: Any) -> CostGraph:
        """A new graph equal to this one but for ``fields`` (validated again, like any construction).

        Fields: ``names``, ``comp_us``, ``out_bytes``, ``edge_src``, ``edge_dst``, ``edge_bytes``,
        ``kind``, ``colocation`` (labels, or ids with -1 for none), ``ops``, ``param_bytes``, ``name``,
        ``memory_limit_bytes``. Every field not given is kept, ``memory_limit_bytes`` and the group
        labels included; edge bytes stay as they are when only ``out_bytes`` changes.
        """
        unknown = sorted(set(fields) - set(self._REPLACEABLE))
        if unknown:
            raise TypeError(f"CostGraph.replace: unknown field(s) {', '.join(unknown)}; "
                            f"expected some of {', '.join(self._REPLACEABLE)}")
        value = {field: fields.get(field, getattr(self, field)) for field in self._REPLACEABLE}
        if "colocation" not in fields and self.group_names:
            labels = np.array((*self.group_names, None), dtype=object)
            value["colocation"] = labels[self.colocation].tolist()  # -1 picks the trailing None
        same_names = "names" not in fields
        return CostGraph(value["names"], value["comp_us"], value["out_bytes"], value["edge_src"], value["edge_dst"],
                         value["edge_bytes"], kind=value["kind"], colocation=value["colocation"], ops=value["ops"],
                         param_bytes=value["param_bytes"], name=value["name"],
                         memory_limit_bytes=value["memory_limit_bytes"],
                         _name_index=self._index if same_names else None)

    # ------------------------------------------------------------------ queries
    @property
    def index(self) -> dict[str, int]:
        """Map from op name to node index."""
        assert self._index is not None
        return self._index

    def successors(self, v: int) -> np.ndarray:
        return self.succ[self.succ_ptr[v] : self.succ_ptr[v + 1]]

    def predecessors(self, v: int) -> np.ndarray:
        return self.pred[self.pred_ptr[v] : self.pred_ptr[v + 1]]

    @property
    def in_degree(self) -> np.ndarray:
        return np.diff(self.pred_ptr)

    @property
    def out_degree(self) -> np.ndarray:
        return np.diff(self.succ_ptr)

    @property
    def total_work_us(self) -> float:
        return float(self.comp_us.sum())

    def group_members(self) -> list[np.ndarray]:
        """Node indices of each colocation group, by group id, each in ascending order."""
        members = np.flatnonzero(self.colocation >= 0)
        order = members[np.argsort(self.colocation[members], kind="stable")]
        bounds = np.searchsorted(self.colocation[order], np.arange(len(self.group_names) + 1))
        return [order[bounds[g] : bounds[g + 1]] for g in range(len(self.group_names))]

    def __len__(self) -> int:
        return self.n

    def __repr__(self) -> str:
        return f"CostGraph(name={self.name!r}, ops={self.n}, edges={self.m})"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, CostGraph):
            return NotImplemented
        return (
            self.name == other.name
            and self.names == other.names
            and self.ops == other.ops
            and self.group_names == other.group_names
            and self.memory_limit_bytes == other.memory_limit_bytes
            and all(
                np.array_equal(getattr(self, f), getattr(other, f))
                for f in ("comp_us", "out_bytes", "param_bytes", "kind", "colocation",
                          "edge_src", "edge_dst", "edge_bytes")
            )
        )

    __hash__ = None  # type: ignore[assignment]


def _number(value: Any) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        return math.nan
