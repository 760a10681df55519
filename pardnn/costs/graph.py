"""CostGraph: the computational graph of one training step, as immutable NumPy arrays.

Per node ``names``, ``ops``, ``comp_us`` (µs), ``out_bytes``, ``kind`` (:class:`Kind`), ``colocation``,
``param_bytes`` and optionally the copy metadata (:mod:`pardnn.costs.copies`); edges as CSR successors and
predecessors. Built by ``CostGraph(names, comp_us, out_bytes, src=, dst=, ...)`` or
:meth:`CostGraph.from_named_edges`, validated (:mod:`pardnn.costs.validation`). Choices:
docs/notes-partitioner.md.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from pardnn.costs import copies, csr, validation
from pardnn.costs.csr import segment_reduce
from pardnn.costs.validation import KIND_NAMES
from pardnn.errors import InvalidGraphError

__all__ = ["KIND_NAMES", "CostGraph", "Kind", "segment_reduce"]


class Kind(enum.IntEnum):
    """Memory category of an op (paper, Section 3.2, "Memory Consumption Tracker")."""

    NORMAL = 0  # output allocated at start, freed after its last consumer
    RESIDUAL = 1  # survives across iterations: variables, optimizer slots
    REFERENCE = 2  # mutates a residual, holds no memory of its own, sits on the residual's device


_MAX_LISTED = 8


def _listing(names: Sequence[str]) -> str:
    shown = ", ".join(repr(s) for s in names[:_MAX_LISTED])
    return shown + (f", ... ({len(names)} in all)" if len(names) > _MAX_LISTED else "")


def _same(a: np.ndarray | None, b: np.ndarray | None) -> bool:
    return a is b if a is None or b is None else bool(np.array_equal(a, b))


def _readonly(array: np.ndarray) -> np.ndarray:
    array.flags.writeable = False
    return array


class _LazyNames:
    """A graph's names for its error labels, split only when a message needs one."""

    def __init__(self, graph: CostGraph) -> None:
        self._graph = graph

    def __len__(self) -> int:
        return self._graph.n

    def __getitem__(self, i: int) -> str:
        return self._graph.names[i]


class CostGraph:
    """An immutable, validated DAG with per-op costs.

    Parameters
    ----------
    names:
        Unique, non-empty op names.
    comp_us:
        Compute time of each op in microseconds (finite, >= 0).
    out_bytes:
        Bytes held by each op's outputs (whole number, >= 0; ``4096.0`` is whole).
    src, dst:
        Edge endpoints as node indices.
    edge_bytes:
        Bytes carried by each edge; ``None`` (for all edges, or in place of one edge's count): the
        producer's ``out_bytes``. Use 0 for control edges.
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
        Optional per-device memory limit carried by the graph file (whole number > 0).
    micro_batch, copy_of:
        Optional micro-batch copy metadata (:mod:`pardnn.costs.copies`): each op's micro-batch (-1 or
        ``None``: none) and the index of the op of micro-batch 0 it copies (itself, or ``None``, for
        ops of micro-batch 0 and shared ops). ``None`` (the default): a graph without metadata.
    _name_index:
        Private, for readers that built ``validation.name_index(names)`` already (to resolve edges
        given by name): taken as the graph's own index instead of building it again.
    _joined_names:
        Private, for the binary reader: the names joined by NUL into one string, given instead of
        ``names`` (which must then be empty); checked without splitting them.
    _group_names:
        Private, for the binary reader: ``colocation`` holds ids into these labels (-1: none); kept as
        they are when numbered by first appearance (the graph's own form), else looked up as labels.

    Raises
    ------
    InvalidGraphError
        Any rule of :mod:`pardnn.costs.validation` broken (duplicate or empty name, a negative/NaN/inf
        cost, a fractional or negative byte count, an unknown kind, a memory limit <= 0; the message
        names the node or edge, the field, the value and what was expected), an edge endpoint out of
        range, or a cycle (naming ops on it).

    Notes
    -----
    Construction is O(|V| + |E| log |E|) (edges are sorted once).

    Examples
    --------
    Edges by index (``src``, ``dst``), each carrying its producer's ``out_bytes``:

    >>> g = CostGraph(["a", "b", "c"], comp_us=[1.0, 2.0, 3.0], out_bytes=[100, 200, 0], src=[0, 1], dst=[1, 2])
    >>> g
    CostGraph(name='graph', ops=3, edges=2)
    >>> g.successors(0).tolist(), g.total_work_us, g.index["c"]
    ([1], 6.0, 2)

    By name, with a cycle refused in one line naming its ops:

    >>> CostGraph.from_named_edges(["x", "y"], [1, 1], [8, 8], [("x", "y"), ("y", "x")])
    Traceback (most recent call last):
    ...
    pardnn.errors.InvalidGraphError: ...cycle...
    """

    def __init__(
        self,
        names: Sequence[str],
        comp_us: npt.ArrayLike,
        out_bytes: npt.ArrayLike,
        src: npt.ArrayLike,
        dst: npt.ArrayLike,
        edge_bytes: npt.ArrayLike | Sequence[int | None] | None = None,
        *,
        kind: npt.ArrayLike | Sequence[str] | None = None,
        colocation: Sequence[Any] | npt.ArrayLike | None = None,
        ops: Sequence[str] | None = None,
        param_bytes: npt.ArrayLike | None = None,
        name: str = "graph",
        memory_limit_bytes: int | None = None,
        micro_batch: npt.ArrayLike | Sequence[int | None] | None = None,
        copy_of: npt.ArrayLike | Sequence[int | None] | None = None,
        _name_index: dict[str, int] | None = None,
        _group_names: Sequence[str] | None = None,
        _joined_names: str | None = None,
    ) -> None:
        self.name = graph = str(name)
        self._index: dict[str, int] | None = None  # built on first use (a 1M-op dict: 0.5 s, 70 MB)
        self._joined = _joined_names
        self._names: tuple[str, ...] | None = None
        if _joined_names is not None:  # split on first use of ``names``
            if len(names) or _name_index is not None:
                raise TypeError("CostGraph: _joined_names replaces names (give names=()) and _name_index")
            n = self.n = _joined_names.count("\0") + 1
            validation.check_joined_names(_joined_names)
        else:
            self._names = tuple(names)
            n = self.n = len(self._names)
            if _name_index is not None and len(_name_index) == n:
                self._index = _name_index
            else:
                validation.check_names(self._names)
        self.ops: tuple[str, ...] = tuple(ops) if ops is not None else ("",) * n
        if len(self.ops) != n:
            raise InvalidGraphError(f"graph {graph!r}: {len(self.ops)} op types for {n} ops")
        label = validation.node_label(_LazyNames(self))
        self.comp_us = _readonly(validation.cost_column(comp_us, "comp_us", n, label, graph))
        self.out_bytes = _readonly(validation.byte_column(out_bytes, "out_bytes", n, label, graph))
        self.param_bytes = _readonly(
            np.zeros(n, np.int64) if param_bytes is None
            else validation.byte_column(param_bytes, "param_bytes", n, label, graph)
        )
        self.kind = _readonly(validation.kind_column(kind, n, label, graph))
        colocation_ids, self.group_names = validation.group_column(colocation, n, label, graph, _group_names)
        self.colocation = _readonly(colocation_ids)
        self.memory_limit_bytes = validation.memory_limit(memory_limit_bytes, graph)
        batch, source = copies.copy_columns(micro_batch, copy_of, n, label, self.ops, graph)
        self.micro_batch = None if batch is None else _readonly(batch)
        self.copy_of = None if source is None else _readonly(source)
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
        names = tuple(names)
        index = validation.name_index(names)
        edges = list(edges)
        src, dst = validation.edge_indices(index, [e[0] for e in edges], [e[1] for e in edges])
        nbytes = [e[2] if len(e) > 2 else None for e in edges]  # type: ignore[misc]
        return cls(names, comp_us, out_bytes, src, dst, nbytes, _name_index=index, **kwargs)

    def _build_edges(
        self, src: npt.ArrayLike, dst: npt.ArrayLike, edge_bytes: npt.ArrayLike | Sequence[int | None] | None
    ) -> None:
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
        bytes_a = validation.edge_bytes_column(
            edge_bytes, src_a, self.out_bytes, validation.edge_label(_LazyNames(self), src_a, dst_a), self.name
        )
        loops = src_a == dst_a
        if loops.any():
            v = int(src_a[np.flatnonzero(loops)[0]])
            raise InvalidGraphError(f"graph {self.name!r} has a cycle: op {self.names[v]!r} feeds itself")
        src_a, dst_a, bytes_a = csr.merge_parallel_edges(src_a, dst_a, bytes_a)
        self.m = src_a.size
        self.edge_src = _readonly(src_a)
        self.edge_dst = _readonly(dst_a)
        self.edge_bytes = _readonly(bytes_a)
        self.succ_ptr = _readonly(csr.pointers(src_a, n))
        self.succ = self.edge_dst
        self.succ_bytes = self.edge_bytes
        self.pred_ptr = _readonly(csr.pointers(dst_a, n))
        by_dst = csr.stable_buckets(dst_a, self.pred_ptr)  # (destination, source) order: edges are by source
        self.pred_edge = _readonly(by_dst)
        self.pred = _readonly(src_a[by_dst])
        self.pred_bytes = _readonly(bytes_a[by_dst])

    def _topological_order(self) -> np.ndarray:
        order = csr.topological_order(self.succ_ptr, self.succ, self.pred_ptr)
        if order.size == self.n:
            return order
        remaining = np.ones(self.n, bool)
        remaining[order] = False
        cycle = csr.find_cycle(remaining, self.pred_ptr, self.pred)
        raise InvalidGraphError(f"graph {self.name!r} has a cycle: {_listing([self.names[v] for v in cycle])}")

    _REPLACEABLE = ("names", "comp_us", "out_bytes", "edge_src", "edge_dst", "edge_bytes", "kind", "colocation",
                    "ops", "param_bytes", "name", "memory_limit_bytes", "micro_batch", "copy_of")

    def replace(self, **fields: Any) -> CostGraph:
        """A new graph equal to this one but for ``fields`` (validated again, like any construction).

        Fields: ``names``, ``comp_us``, ``out_bytes``, ``edge_src``, ``edge_dst``, ``edge_bytes``,
        ``kind``, ``colocation`` (labels, or ids with -1 for none), ``ops``, ``param_bytes``, ``name``,
        ``memory_limit_bytes``, ``micro_batch``, ``copy_of``. Every field not given is kept,
        ``memory_limit_bytes``, the copy metadata and the group labels included; edge bytes stay as
        they are when only ``out_bytes`` changes.
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
                         memory_limit_bytes=value["memory_limit_bytes"], micro_batch=value["micro_batch"],
                         copy_of=value["copy_of"] if value["micro_batch"] is not None else None,
                         _name_index=self._index if same_names else None)

    def __setstate__(self, state: dict[str, Any]) -> None:
        """An unpickled graph (sent back by a build worker of ``pardnn plan``, read from a cache) has its
        arrays read-only again, as built: pickle writes arrays writable, and numba compiles each kernel once
        per array type, so a writable copy would compile every kernel a second time (a minute on 2 cores)
        where the cache of ``pardnn warmup`` holds the read-only one."""
        for value in state.values():
            if isinstance(value, np.ndarray):
                value.flags.writeable = False
        self.__dict__.update(state)

    # ------------------------------------------------------------------ queries
    @property
    def names(self) -> tuple[str, ...]:
        """The op names, in node order."""
        if self._names is None:
            assert self._joined is not None
            self._names = tuple(self._joined.split("\0"))
        return self._names

    @property
    def joined_names(self) -> str:
        """The op names joined by NUL characters into one string (how a binary graph file holds them:
        such a graph splits them only when ``names`` is first asked for). Not split back when a name
        holds a NUL; ``""`` for a graph without ops. Joined anew on each call for a graph built from a
        name list (kept, it would be a second copy of every name for the graph's life)."""
        return self._joined if self._joined is not None else "\0".join(self.names)

    @property
    def index(self) -> dict[str, int]:
        """Map from op name to node index (built on first use: placing a graph never needs it)."""
        if self._index is None:
            self._index = dict(zip(self.names, range(self.n)))
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
    def has_copies(self) -> bool:
        """The graph carries micro-batch copy metadata (``micro_batch``, ``copy_of``)."""
        return self.micro_batch is not None

    @property
    def micro_batches(self) -> int:
        """M, the micro-batches its metadata names (1 without metadata)."""
        return copies.micro_batches(self.micro_batch)

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
            and all(_same(getattr(self, f), getattr(other, f)) for f in ("micro_batch", "copy_of"))
            and all(
                np.array_equal(getattr(self, f), getattr(other, f))
                for f in ("comp_us", "out_bytes", "param_bytes", "kind", "colocation",
                          "edge_src", "edge_dst", "edge_bytes")
            )
        )

    __hash__ = None  # type: ignore[assignment]

