"""A micro-batched step's costed graph at any M, from the graph built at M = 2.

:func:`replicate` writes the step of M micro-batches down from the M = 2 step costed at the same
micro-batch size (its copies repeated, the shared sums widened), refusing graphs whose shared ops grow
otherwise; :func:`difference` compares it with a step built at M. Rules: docs/notes-partitioner.md.
O(M (|V| + |E|)).
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np

from pardnn.batch.batchscale import TIME_RTOL, CostParts
from pardnn.costs.graph import CostGraph
from pardnn.costs.presets import DevicePreset
from pardnn.errors import ScalingError

__all__ = ["SUMS", "difference", "replicate"]

SUMS = frozenset({"AddN", "AccumulateNV2"})  # shared ops that may read the copies: the sum's size is M-free
SPLITS = frozenset({"Split", "SplitV", "Unpack"})  # shared ops that cut a full batch among the copies


def _scope(index: int) -> re.Pattern[str]:
    return re.compile(rf"(?<![^/])micro_{index}(?=/|$)")


def replicate(parts: CostParts, micro: int, device: DevicePreset, *, name: str | None = None) -> CostGraph:
    """The step of ``micro`` micro-batches (>= 2) from ``parts``, the same step built at M = 2.

    Raises :class:`~pardnn.errors.ScalingError` naming the op when the graph is not a two-copy step
    of the shape the module docstring describes.
    """
    g = parts.graph
    if micro < 2:
        raise ValueError(f"micro must be >= 2, got {micro}")
    if g.micro_batch is None or g.micro_batches != 2:
        raise ScalingError(f"graph {g.name!r}: replication starts from a step of 2 micro-batches; this one has "
                           f"{g.micro_batches} (build it with micro_batches = 2)")
    layout = _Layout(g, micro)
    _check_shared(g, g.micro_batch)
    src, dst, nbytes = layout.edges()
    # shared sums read M inputs where the template read 2: (M - 2) more of copy 0's
    read_from_first = np.zeros(g.n, np.float64)
    into_shared = (layout.role[g.edge_src] == 0) & (layout.role[g.edge_dst] == 2)
    np.add.at(read_from_first, g.edge_dst[into_shared], g.edge_bytes[into_shared].astype(np.float64))
    moved = parts.moved_bytes + (micro - 2) * read_from_first
    comp_us = np.array(g.comp_us, np.float64)
    grown = np.flatnonzero(parts.kernel & (read_from_first > 0))
    comp_us[grown] = device.kernel_us(parts.flops[grown], moved[grown])
    column = layout.column
    return CostGraph(
        layout.names(), column(comp_us), column(g.out_bytes), src, dst, nbytes, kind=column(g.kind),
        colocation=layout.groups(), ops=column(np.array(g.ops, dtype=object)).tolist(),
        param_bytes=column(g.param_bytes), name=g.name if name is None else name,
        memory_limit_bytes=g.memory_limit_bytes, micro_batch=layout.micro_column(), copy_of=layout.copy_column(),
    )


class _Layout:
    """Where each op of the M = 2 graph goes in the graph of ``micro`` copies: the shared ops first
    (in their order), then copy 0, 1, ..., M-1, each in its template's order."""

    def __init__(self, g: CostGraph, micro: int) -> None:
        assert g.micro_batch is not None and g.copy_of is not None
        batch = g.micro_batch
        self.g, self.micro = g, micro
        self.first, self.last = np.flatnonzero(batch == 0), np.flatnonzero(batch == 1)
        self.shared = np.flatnonzero(batch < 0)
        counterparts = np.bincount(g.copy_of[self.last], minlength=g.n)
        if self.first.size != self.last.size or (counterparts[self.first] != 1).any():
            lone = self.first[counterparts[self.first] != 1]
            what = (f"op {g.names[int(lone[0])]!r} of micro-batch 0 has {int(counterparts[lone[0]])} copies in "
                    "micro-batch 1") if lone.size else \
                f"{self.first.size} ops in micro-batch 0 and {self.last.size} in micro-batch 1"
            raise ScalingError(f"graph {g.name!r}: the two copies differ: {what}")
        self.role = np.where(batch < 0, 2, batch)  # 0 first, 1 last, 2 shared
        self.position = np.empty(g.n, np.int64)
        for ops in (self.first, self.last, self.shared):
            self.position[ops] = np.arange(ops.size)
        self.size = self.first.size
        self.base = self.shared.size + self.size * np.arange(micro, dtype=np.int64)  # copy j's first new index
        # per copy j: (j, its template's ops, the template's scope pattern, ``micro_j``)
        self.templates = [(j, *((self.first, _scope(0)) if j < micro - 1 else (self.last, _scope(1))), f"micro_{j}")
                          for j in range(micro)]

    def column(self, values: np.ndarray) -> np.ndarray:
        return np.concatenate([values[self.shared], *(values[ops] for _, ops, _, _ in self.templates)])

    def _renamed(self, labels: np.ndarray, what: str) -> list[Any]:
        """``labels`` (one per op of the M = 2 graph; None stays None) in the new graph's op order,
        each copy's with its scope renamed. A shared label in the last copy's scope (batch norm's
        updates, which only the last copy runs) stays with the last copy. A copy's label without
        its scope is refused when ``what`` names the labels (op names must stay unique)."""
        last, renamed_last = _scope(1), f"micro_{self.micro - 1}"
        out = [last.sub(renamed_last, label) if isinstance(label, str) else label for label in labels[self.shared]]
        for _, ops, pattern, replacement in self.templates:
            for v, label in zip(ops.tolist(), labels[ops].tolist(), strict=True):
                if not isinstance(label, str):
                    out.append(label)
                    continue
                renamed, count = pattern.subn(replacement, label)
                if what and not count:
                    scope = int(self.role[v])
                    raise ScalingError(f"graph {self.g.name!r}: op {label!r} of micro-batch {scope} has no "
                                       f"'micro_{scope}' in its {what}, so its copies cannot be named")
                out.append(renamed)
        return out

    def names(self) -> list[str]:
        return self._renamed(np.array(self.g.names, dtype=object), "name")

    def groups(self) -> list[str | None]:
        return self._renamed(np.array((*self.g.group_names, None), dtype=object)[self.g.colocation], "")

    def micro_column(self) -> np.ndarray:
        return np.concatenate([np.full(self.shared.size, -1, np.int64),
                               np.repeat(np.arange(self.micro, dtype=np.int64), self.size)])

    def copy_column(self) -> np.ndarray:
        """Copy j's op copies copy 0's op at the same position (a last-copy op: its original's)."""
        assert self.g.copy_of is not None
        original = self.position[self.g.copy_of[self.last]]
        return np.concatenate([np.arange(self.shared.size, dtype=np.int64),
                               *(self.base[0] + (np.arange(self.size) if ops is self.first else original)
                                 for _, ops, _, _ in self.templates)])

    def edges(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        g = self.g
        src, dst, nbytes = g.edge_src, g.edge_dst, g.edge_bytes
        rs, rd = self.role[src], self.role[dst]
        cross = np.flatnonzero(((rs == 0) & (rd == 1)) | ((rs == 1) & (rd == 0)))
        if cross.size:
            e = int(cross[0])
            raise ScalingError(f"graph {g.name!r}: edge {g.names[src[e]]!r} -> {g.names[dst[e]]!r} joins two "
                               "micro-batches")
        kept = (rs == 2) & (rd == 2)
        out = [(self.position[src[kept]], self.position[dst[kept]], nbytes[kept])]
        for j, ops, _, _ in self.templates:
            touching = (rs == 0) | (rd == 0) if ops is self.first else (rs == 1) | (rd == 1)
            out.append((self._new(src[touching], j), self._new(dst[touching], j), nbytes[touching]))
        return tuple(np.concatenate([part[i] for part in out]) for i in range(3))  # type: ignore[return-value]

    def _new(self, ops: np.ndarray, copy: int) -> np.ndarray:
        return np.where(self.role[ops] == 2, self.position[ops], self.base[copy] + self.position[ops])


def _check_shared(g: CostGraph, batch: np.ndarray) -> None:
    """Refuse shared ops whose cost or size would grow with M in a way replication cannot follow."""
    src, dst = g.edge_src, g.edge_dst
    reads = np.unique(dst[(batch[src] == 0) & (batch[dst] < 0) & (g.edge_bytes > 0)])
    for v in reads.tolist():
        if g.ops[v] not in SUMS:
            raise ScalingError(f"graph {g.name!r}: op {g.names[v]!r} ({g.ops[v]}) of no micro-batch reads the "
                               f"copies' outputs and is not a sum ({', '.join(sorted(SUMS))}): its size may grow "
                               "with M; build this step at M directly")
    feeds = np.unique(src[(batch[src] < 0) & (batch[dst] >= 0)])
    for v in feeds.tolist():
        if g.ops[v] in SPLITS:
            raise ScalingError(f"graph {g.name!r}: op {g.names[v]!r} ({g.ops[v]}) of no micro-batch splits a "
                               "batch among the copies: the batch grows with M; build this step at M directly")


def _plain(value: Any) -> Any:
    """A NumPy scalar as the Python number it holds (NumPy 2 writes ``np.float64(7.0)`` for its repr)."""
    return value.item() if isinstance(value, np.generic) else value


def difference(built: CostGraph, made: CostGraph) -> str | None:
    """None if ``made`` is ``built`` up to the order of ops and edges; else the first difference.

    Ops are matched by name; structure, types, kinds, groups, bytes and copy metadata must be equal,
    times equal to a relative 1e-9. O((|V| + |E|) log |E|).
    """
    if built.n != made.n or set(built.names) != set(made.names):
        extra = sorted(set(made.names) - set(built.names))[:1] or sorted(set(built.names) - set(made.names))[:1]
        return f"{built.n:,} ops built, {made.n:,} made; first op in only one: {extra[0] if extra else '?'!r}"
    index = built.index
    to_built = np.fromiter((index[name] for name in made.names), np.int64, made.n)
    order = np.empty(made.n, np.int64)
    order[to_built] = np.arange(made.n)  # built op -> made op
    b_groups = np.array((*built.group_names, None), dtype=object)[built.colocation]
    m_groups = np.array((*made.group_names, None), dtype=object)[made.colocation]
    checks = [("type", np.array(built.ops, dtype=object), np.array(made.ops, dtype=object)),
              ("kind", built.kind, made.kind), ("group", b_groups, m_groups),
              ("out_bytes", built.out_bytes, made.out_bytes), ("param_bytes", built.param_bytes, made.param_bytes)]
    if built.micro_batch is not None and made.micro_batch is not None:
        assert built.copy_of is not None and made.copy_of is not None
        checks += [("micro_batch", built.micro_batch, made.micro_batch),
                   ("copy_of", built.copy_of, to_built[made.copy_of])]
    elif (built.micro_batch is None) != (made.micro_batch is None):
        return "one graph has micro-batch metadata, the other not"
    for field, ours, theirs in checks:
        aligned = theirs[order]
        off = np.flatnonzero(ours != aligned)
        if off.size:
            v = int(off[0])
            return f"op {built.names[v]!r}: {field} {_plain(ours[v])!r} built, {_plain(aligned[v])!r} made"
    close = np.isclose(built.comp_us, made.comp_us[order], rtol=TIME_RTOL, atol=1e-9)
    if not close.all():
        v = int(np.flatnonzero(~close)[0])
        ours, theirs = _plain(built.comp_us[v]), _plain(made.comp_us[order][v])
        return f"op {built.names[v]!r}: comp_us {ours!r} built, {theirs!r} made"
    mine = np.stack([built.edge_src, built.edge_dst, built.edge_bytes])
    theirs = np.stack([to_built[made.edge_src], to_built[made.edge_dst], made.edge_bytes])
    mine = mine[:, np.lexsort(mine[::-1])]
    theirs = theirs[:, np.lexsort(theirs[::-1])]
    if mine.shape != theirs.shape:
        return f"{built.m:,} edges built, {made.m:,} made"
    off = np.flatnonzero((mine != theirs).any(axis=0))
    if off.size:
        e = int(off[0])
        return (f"edge #{e} in name order: built {built.names[mine[0, e]]!r} -> {built.names[mine[1, e]]!r} "
                f"({mine[2, e]} bytes), made {built.names[theirs[0, e]]!r} -> {built.names[theirs[1, e]]!r} "
                f"({theirs[2, e]} bytes)")
    return None
