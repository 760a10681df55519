"""Reading the reference-ParDNN file set into a :class:`~pardnn.costs.graph.CostGraph` (see the package doc).

Each file is parsed on its own (line by line, messages start with ``file:line:``); the graph's
construction then validates the whole once, like every reader's.
"""

from __future__ import annotations

import logging
import math
import os
from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np

from pardnn.costs.graph import CostGraph, Kind
from pardnn.errors import InvalidGraphError
from pardnn.io.files import read_text
from pardnn.io.reference.dot import parse_dot

__all__ = ["PathLike", "read_reference", "reference_colocation"]

logger = logging.getLogger(__name__)

PathLike = str | os.PathLike[str]

_MAX_LISTED = 8


def read_reference(
    graph_path: PathLike,
    times_path: PathLike,
    sizes_path: PathLike,
    *,
    variables: PathLike | None = None,
    references: PathLike | None = None,
    noops: PathLike | None = None,
    name: str | None = None,
    strict: bool = True,
) -> CostGraph:
    """Read a reference-ParDNN file set into a :class:`~pardnn.costs.graph.CostGraph`.

    Parameters
    ----------
    graph_path:
        DOT edge list; its ops are the graph's ops.
    times_path:
        ``name::microseconds`` lines.
    sizes_path:
        ``name::bytes`` lines (output size of the op; also the bytes of each of its out-edges).
    variables, references, noops:
        Optional files of op names, one per line: residual ops, reference ops, no-ops.
    name:
        Graph name; default the DOT graph ID, else the DOT file name without suffix.
    strict:
        If true (default), an entry naming an op not in the DOT file is an error; if false it is
        skipped, with one logged warning per file.

    Returns
    -------
    CostGraph
        Ops in order of first appearance in the DOT file; edges deduplicated.

    Raises
    ------
    InvalidGraphError
        A file is missing; a malformed line (no ``name::value``, a value that is not a number, a
        negative or non-finite value, a DOT line that is not an edge, op or header); an op listed
        twice in one file, or as both variable and reference; an unknown op (when ``strict``); a
        self-loop or cycle. Messages start with ``file:line:``.

    Notes
    -----
    Missing timings (0 µs) and sizes (0 bytes) are logged as warnings, not raised. O(|V| + |E|)
    plus the graph's construction.
    """
    graph_source = str(graph_path)
    dot = parse_dot(_read_lines(graph_path, "DOT graph"), graph_source)
    index = {op_name: i for i, op_name in enumerate(dot.names)}
    times = _parse_values(_read_lines(times_path, "timings"), str(times_path), index, graph_source, strict, whole=False)
    sizes = _parse_values(
        _read_lines(sizes_path, "tensor sizes"), str(sizes_path), index, graph_source, strict, whole=True
    )
    _warn_missing(times, dot.names, str(times_path), "timing", "0 µs")
    _warn_missing(sizes, dot.names, str(sizes_path), "size", "0 bytes")

    kind, is_noop = _listed_kinds(variables, references, noops, dot.names, index, graph_source, strict)
    src = np.array(dot.src, dtype=np.int64)
    dst = np.array(dot.dst, dtype=np.int64)
    comp_us, out_bytes, edge_bytes = _costs(times, sizes, is_noop, src, dst)
    try:
        return CostGraph(
            dot.names,
            comp_us,
            out_bytes,
            src,
            dst,
            edge_bytes,
            kind=kind,
            colocation=reference_colocation(dot.names, kind, src, dst),
            name=name if name is not None else dot.name if dot.name is not None else Path(graph_path).stem,
        )
    except InvalidGraphError as exc:
        raise InvalidGraphError(f"{graph_source}: {exc}") from exc


def _listed_kinds(
    variables: PathLike | None,
    references: PathLike | None,
    noops: PathLike | None,
    names: Sequence[str],
    index: dict[str, int],
    graph_source: str,
    strict: bool,
) -> tuple[np.ndarray, np.ndarray]:
    """Each op's kind (residual if the variables file lists it, reference if the references file
    does) and whether the no-ops file lists it; raises for an op in both the first two files."""
    kind = np.zeros(len(names), np.int8)
    listed: dict[int, tuple[str, int]] = {}
    for path, code, what in ((variables, Kind.RESIDUAL, "variables"), (references, Kind.REFERENCE, "reference ops")):
        if path is None:
            continue
        for v, number in _parse_names(_read_lines(path, what), str(path), index, graph_source, strict).items():
            if v in listed:
                other, other_number = listed[v]
                raise InvalidGraphError(
                    f"{path}:{number}: op {names[v]!r} is also listed in {other}:{other_number};"
                    " an op is either a variable or a reference op"
                )
            listed[v] = (str(path), number)
            kind[v] = code
    is_noop = np.zeros(len(names), bool)
    if noops is not None:
        is_noop[list(_parse_names(_read_lines(noops, "no-ops"), str(noops), index, graph_source, strict))] = True
    return kind, is_noop


def _costs(
    times: dict[int, float | int], sizes: dict[int, float | int], is_noop: np.ndarray, src: np.ndarray, dst: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``comp_us``, ``out_bytes`` and ``edge_bytes`` from the parsed files (0 where a file has no entry):
    a no-op's output, and every edge into or out of a no-op, carry no bytes."""
    comp_us = np.zeros(is_noop.size, np.float64)
    comp_us[list(times)] = list(times.values())
    out_bytes = np.zeros(is_noop.size, np.int64)
    out_bytes[list(sizes)] = list(sizes.values())
    out_bytes[is_noop] = 0
    return comp_us, out_bytes, np.where(is_noop[src] | is_noop[dst], 0, out_bytes[src])


def reference_colocation(names: Sequence[str], kind: np.ndarray, src: np.ndarray, dst: np.ndarray) -> list[str | None]:
    """Colocation labels the reference implementation implies (its ``collocate()``).

    Every reference op joins each residual op with an edge into it; groups are the connected
    components of those edges, labelled by their first residual in index order; other ops get None.

    Notes
    -----
    O(|V| + |E| α(|V|)) with union-find.
    """
    parent = list(range(len(names)))

    def root(v: int) -> int:
        while parent[v] != v:
            parent[v] = parent[parent[v]]
            v = parent[v]
        return v

    joins = (kind[src] == Kind.RESIDUAL) & (kind[dst] == Kind.REFERENCE)
    for s, d in zip(src[joins].tolist(), dst[joins].tolist(), strict=True):
        a, b = root(s), root(d)
        if a != b:
            parent[max(a, b)] = min(a, b)  # the smaller index leads, so roots are first members
    members = np.zeros(len(names), bool)
    members[src[joins]] = True
    members[dst[joins]] = True
    labels: dict[int, str] = {}
    for v in np.flatnonzero(members & (kind == Kind.RESIDUAL)).tolist():
        labels.setdefault(root(v), names[v])
    return [labels[root(v)] if members[v] else None for v in range(len(names))]


def _read_lines(path: PathLike, what: str) -> list[str]:
    return read_text(path, InvalidGraphError, f"the {what} file", missing=f" (the {what} file)").splitlines()


def _listed_op(op_name: str, where: str, index: dict[str, int], line_of: dict[int, int], graph_source: str,
               strict: bool, skipped: list[str]) -> int:
    """The index of the op a line names; -1 (and the name noted in ``skipped``) for an op the graph
    lacks when not ``strict``. Raises for an unknown op when ``strict`` and for an op listed twice."""
    v = index.get(op_name)
    if v is None:
        if strict:
            raise InvalidGraphError(f"{where}: unknown op {op_name!r} (not in {graph_source})")
        skipped.append(op_name)
        return -1
    if v in line_of:
        raise InvalidGraphError(f"{where}: op {op_name!r} listed twice (first on line {line_of[v]})")
    return v


def _parse_values(
    lines: Iterable[str], source: str, index: dict[str, int], graph_source: str, strict: bool, *, whole: bool
) -> dict[int, float | int]:
    values: dict[int, float | int] = {}
    line_of: dict[int, int] = {}
    skipped: list[str] = []
    unit = "bytes" if whole else "microseconds"
    for number, raw in enumerate(lines, start=1):
        line = raw.strip()
        if not line:
            continue
        op_name, separator, text = line.rpartition("::")
        op_name, text = op_name.strip(), text.strip()
        if not separator or not op_name or not text:
            raise InvalidGraphError(f"{source}:{number}: expected 'name::{unit}', got {line!r}")
        v = _listed_op(op_name, f"{source}:{number}", index, line_of, graph_source, strict, skipped)
        if v < 0:
            continue
        value = _whole_bytes(text) if whole else _microseconds(text)
        if isinstance(value, str):
            raise InvalidGraphError(f"{source}:{number}: op {op_name!r}: {value}")
        values[v] = value
        line_of[v] = number
    _warn_skipped(skipped, source, graph_source)
    return values


def _microseconds(text: str) -> float | str:
    """The time in ``text``, or what is wrong with it."""
    try:
        value = float(text)
    except ValueError:
        return f"time {text!r} is not a number (microseconds)"
    if not math.isfinite(value) or value < 0:
        return f"time {text!r}; expected a finite number >= 0"
    return value


def _whole_bytes(text: str) -> int | str:
    """The byte count in ``text`` (``4096``, also ``4096.0``), or what is wrong with it."""
    try:
        value = int(text)
    except ValueError:
        try:
            as_float = float(text)
        except ValueError:
            return f"size {text!r} is not a number (bytes)"
        if not as_float.is_integer():
            return f"size {text!r}; expected a whole number of bytes"
        value = int(as_float)
    if not 0 <= value < 2**63:
        return f"size {text!r}; expected a whole number of bytes >= 0"
    return value


def _parse_names(
    lines: Iterable[str], source: str, index: dict[str, int], graph_source: str, strict: bool
) -> dict[int, int]:
    """Map from op index to the line that names it."""
    line_of: dict[int, int] = {}
    skipped: list[str] = []
    for number, raw in enumerate(lines, start=1):
        op_name = raw.strip()
        if not op_name:
            continue
        v = _listed_op(op_name, f"{source}:{number}", index, line_of, graph_source, strict, skipped)
        if v < 0:
            continue
        line_of[v] = number
    _warn_skipped(skipped, source, graph_source)
    return line_of


def _warn_missing(values: dict[int, float | int], names: Sequence[str], source: str, what: str, default: str) -> None:
    if len(values) < len(names):
        missing = [op_name for v, op_name in enumerate(names) if v not in values]
        logger.warning(
            "%s: no %s for %d of %d ops (%s); they get %s",
            source,
            what,
            len(missing),
            len(names),
            _listing(missing),
            default,
        )


def _warn_skipped(skipped: list[str], source: str, graph_source: str) -> None:
    if skipped:
        logger.warning(
            "%s: skipped %d entries for ops not in %s (%s)", source, len(skipped), graph_source, _listing(skipped)
        )


def _listing(names: Sequence[str]) -> str:
    shown = ", ".join(repr(op_name) for op_name in names[:_MAX_LISTED])
    return shown + (", ..." if len(names) > _MAX_LISTED else "")
