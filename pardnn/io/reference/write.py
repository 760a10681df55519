"""Writing a :class:`~pardnn.costs.graph.CostGraph` as a reference-ParDNN file set (see the package doc)."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from pardnn.costs.graph import CostGraph, Kind
from pardnn.errors import InvalidGraphError
from pardnn.io.reference.dot import quote
from pardnn.io.reference.read import PathLike, reference_colocation

__all__ = ["write_reference"]

logger = logging.getLogger(__name__)


def write_reference(graph: CostGraph, directory: PathLike, stem: str) -> dict[str, Path]:
    """Write ``graph`` as a reference-ParDNN file set in ``directory`` (created if needed).

    Parameters
    ----------
    graph:
        The graph.
    directory:
        Where the files go.
    stem:
        File name stem: ``{stem}.dot``, ``{stem}.times.txt``, ``{stem}.sizes.txt``,
        ``{stem}.variables.txt``, ``{stem}.references.txt``.

    Returns
    -------
    dict
        Path of each file by role: ``graph``, ``times``, ``sizes``, ``variables``, ``references``.
        ``read_reference(f["graph"], f["times"], f["sizes"], variables=f["variables"],
        references=f["references"])`` reads it back.

    Raises
    ------
    InvalidGraphError
        An op name (or the graph name) has a line break or surrounding whitespace, which the
        line-based files cannot hold.

    Notes
    -----
    The DOT file lists every op on its own line first (so ops keep their order and isolated ops
    survive), then the edges as ``"a"->"b"``. Times are written as integers when whole (the
    reference parses them with ``stoi``), else with ``repr``, so they read back exactly. No no-op
    list is written: a no-op is an op with 0 bytes. Whatever the set cannot hold (op types,
    parameter bytes, memory limit, edge bytes other than the producer's, other colocation) is
    dropped with a logged warning. Deterministic; O(|V| + |E|).
    """
    for op_name in (graph.name, *graph.names):
        if op_name != op_name.strip() or len(op_name.splitlines()) > 1:
            raise InvalidGraphError(
                f"graph {graph.name!r}: name {op_name!r} has a line break or surrounding whitespace;"
                " the reference file set cannot hold it"
            )
    _warn_dropped(graph)
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    files = {
        "graph": directory / f"{stem}.dot",
        "times": directory / f"{stem}.times.txt",
        "sizes": directory / f"{stem}.sizes.txt",
        "variables": directory / f"{stem}.variables.txt",
        "references": directory / f"{stem}.references.txt",
    }
    quoted = [quote(op_name) for op_name in graph.names]
    dot = [f"digraph {quote(graph.name)} {{\n", *(f"{q}\n" for q in quoted)]
    dot += [
        f"{quoted[s]}->{quoted[d]}\n" for s, d in zip(graph.edge_src.tolist(), graph.edge_dst.tolist(), strict=True)
    ]
    dot.append("}\n")
    contents = {
        "graph": "".join(dot),
        "times": "".join(
            f"{op_name}::{_number(comp)}\n" for op_name, comp in zip(graph.names, graph.comp_us.tolist(), strict=True)
        ),
        "sizes": "".join(
            f"{op_name}::{out}\n" for op_name, out in zip(graph.names, graph.out_bytes.tolist(), strict=True)
        ),
        "variables": "".join(f"{graph.names[v]}\n" for v in np.flatnonzero(graph.kind == Kind.RESIDUAL).tolist()),
        "references": "".join(f"{graph.names[v]}\n" for v in np.flatnonzero(graph.kind == Kind.REFERENCE).tolist()),
    }
    for role, path in files.items():
        path.write_bytes(contents[role].encode("utf-8"))
    return files


def _number(value: float) -> str:
    return str(int(value)) if value.is_integer() else repr(value)


def _warn_dropped(graph: CostGraph) -> None:
    dropped = []
    if any(graph.ops):
        dropped.append("op types")
    if graph.param_bytes.any():
        dropped.append("parameter bytes")
    if graph.memory_limit_bytes is not None:
        dropped.append("the memory limit")
    if not np.array_equal(graph.edge_bytes, graph.out_bytes[graph.edge_src]):
        dropped.append("edge bytes that differ from the producer's out_bytes")
    derived = reference_colocation(graph.names, graph.kind, graph.edge_src, graph.edge_dst)
    current = [graph.group_names[g] if g >= 0 else None for g in graph.colocation.tolist()]
    if _partition(derived) != _partition(current):
        dropped.append("colocation groups other than reference op + the variables feeding it")
    if dropped:
        logger.warning("graph %r: the reference file set cannot hold %s; dropped", graph.name, ", ".join(dropped))


def _partition(labels: Sequence[str | None]) -> set[frozenset[int]]:
    groups: dict[str, set[int]] = {}
    for v, label in enumerate(labels):
        if label is not None:
            groups.setdefault(label, set()).add(v)
    return {frozenset(members) for members in groups.values()}
