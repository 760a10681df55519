"""The file set of the reference ParDNN implementation (ParCoreLab/pardnn), read and written.

The set, one op name per entry, names exactly as in the graph:

- graph (``.dot``): a DOT edge list, ``"a" -> "b"`` or ``"a"->"b"`` per line (chains ``a -> b -> c``,
  a trailing ``;``, ``[attributes]`` and bare IDs too). A lone ``"x"`` line declares an op, so isolated ops
  can be listed. ``digraph NAME {`` and ``}`` lines, blank lines, ``//`` or ``#`` comment lines and
  attribute-only lines (``node [shape=box]``, ``rankdir=LR``) are skipped.
- timings: ``name::microseconds`` lines, the op's compute time (blank lines are skipped here and
  in the files below).
- tensor sizes: ``name::bytes`` lines, the size of the op's output: its ``out_bytes`` and the bytes
  of each of its out-edges.
- optional lists, one name per line: variables (kind residual), reference ops (kind reference, e.g.
  ``Assign``/``ApplyAdam``), no-ops (control only: ``out_bytes`` 0 and 0 bytes on their in- and
  out-edges, as the reference treats them).

Choices where the reference is silent or lenient (it skips whatever it cannot match):

- The ops are those of the DOT file, in order of first appearance; a timing, size or list entry
  naming an op not in it is an error (``strict=False`` skips such entries with one warning).
- An op without a timing costs 0 µs, and one without a size holds 0 bytes: profiles often miss ops
  that did not run in the profiled step. Each reader logs one warning with the count and the first
  names, so a name mismatch (say, lower-cased profile names) does not pass unnoticed.
- A repeated edge is one edge (the reference keeps one per pair); a self-loop is an error.
- Colocation follows the reference's ``collocate()``: a reference op joins the group of every
  variable that feeds it directly, transitively (``ApplyAdam`` pulls its variable and both slots
  into one group). A group is labelled with the name of its first variable in graph order.
- The graph's name is ``name=`` if given, else the DOT graph ID (``digraph "trn-2" {``), else the DOT
  file's name without suffix.

Op types, parameter bytes and a memory limit have no place in the set: they read as ``""``, 0 and
None, and :func:`write_reference` warns when it drops them. Round trips are exact for graphs the set
can express: every edge carries its producer's ``out_bytes``, colocation is as derived above.
"""

from __future__ import annotations

import logging
import math
import os
import re
from collections.abc import Iterable, Sequence
from itertools import pairwise
from pathlib import Path
from typing import NamedTuple

import numpy as np

from pardnn.errors import InvalidGraphError
from pardnn.graph import CostGraph, Kind

__all__ = ["read_reference", "reference_colocation", "write_reference"]

logger = logging.getLogger(__name__)

PathLike = str | os.PathLike[str]

_MAX_LISTED = 8
_QUOTED = r'"(?:[^"\\]|\\.)*"'
_BARE = r"(?:[^\s\"\[\]{};=,-]|-(?!>))+"  # a bare ID may hold '-' but not '->'
_ID = f"(?:{_QUOTED}|{_BARE})"
_ATTRIBUTES = r"(?:\s*\[[^\]]*\])?"
_FIRST_ID = re.compile(_ID)
_NEXT_ID = re.compile(rf"\s*->\s*({_ID})")
_EDGE_TAIL = re.compile(_ATTRIBUTES)
_NODE_LINE = re.compile(rf"({_ID}){_ATTRIBUTES}")
_HEADER_LINE = re.compile(rf"(?:strict\s+)?digraph(?:\s+({_ID}))?\s*\{{", re.IGNORECASE)
_SETTING_LINE = re.compile(rf"(?:graph|node|edge)\s*\[[^\]]*\]|{_ID}\s*=\s*{_ID}", re.IGNORECASE)
_KEYWORDS = frozenset({"graph", "node", "edge", "digraph", "subgraph", "strict"})
_ESCAPE = re.compile(r"\\([\"\\])")


class _Dot(NamedTuple):
    name: str | None
    names: list[str]
    src: list[int]
    dst: list[int]


# ---------------------------------------------------------------------------------------- reading
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
    """Read a reference-ParDNN file set into a :class:`~pardnn.graph.CostGraph`.

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
    dot = _parse_dot(_read_lines(graph_path, "DOT graph"), graph_source)
    index = {op_name: i for i, op_name in enumerate(dot.names)}
    n = len(dot.names)
    times = _parse_values(_read_lines(times_path, "timings"), str(times_path), index, graph_source, strict, whole=False)
    sizes = _parse_values(
        _read_lines(sizes_path, "tensor sizes"), str(sizes_path), index, graph_source, strict, whole=True
    )
    _warn_missing(times, dot.names, str(times_path), "timing", "0 µs")
    _warn_missing(sizes, dot.names, str(sizes_path), "size", "0 bytes")

    kind = np.zeros(n, np.int8)
    listed: dict[int, tuple[str, int]] = {}
    for path, code, what in ((variables, Kind.RESIDUAL, "variables"), (references, Kind.REFERENCE, "reference ops")):
        if path is None:
            continue
        for v, number in _parse_names(_read_lines(path, what), str(path), index, graph_source, strict).items():
            if v in listed:
                other, other_number = listed[v]
                raise InvalidGraphError(
                    f"{path}:{number}: op {dot.names[v]!r} is also listed in {other}:{other_number};"
                    " an op is either a variable or a reference op"
                )
            listed[v] = (str(path), number)
            kind[v] = code
    is_noop = np.zeros(n, bool)
    if noops is not None:
        is_noop[list(_parse_names(_read_lines(noops, "no-ops"), str(noops), index, graph_source, strict))] = True

    comp_us = np.zeros(n, np.float64)
    comp_us[list(times)] = list(times.values())
    out_bytes = np.zeros(n, np.int64)
    out_bytes[list(sizes)] = list(sizes.values())
    out_bytes[is_noop] = 0
    src = np.array(dot.src, dtype=np.int64)
    dst = np.array(dot.dst, dtype=np.int64)
    edge_bytes = np.where(is_noop[src] | is_noop[dst], 0, out_bytes[src])
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
    try:
        return Path(path).read_text(encoding="utf-8-sig").splitlines()
    except FileNotFoundError as exc:
        raise InvalidGraphError(f"{path}: no such file (the {what} file)") from exc
    except IsADirectoryError as exc:
        raise InvalidGraphError(f"{path}: is a directory, expected the {what} file") from exc
    except UnicodeDecodeError as exc:
        raise InvalidGraphError(f"{path}: not UTF-8 text (byte {exc.start}: {exc.reason})") from exc
    except OSError as exc:
        raise InvalidGraphError(f"{path}: cannot read ({exc.strerror or exc})") from exc


def _parse_dot(lines: Iterable[str], source: str) -> _Dot:
    graph_name: str | None = None
    index: dict[str, int] = {}
    edges: dict[tuple[int, int], None] = {}  # ordered set: a repeated edge is one edge

    def add_edge(tail: str, head: str, number: int) -> None:
        s = index.setdefault(tail, len(index))
        d = index.setdefault(head, len(index))
        if s == d:
            raise InvalidGraphError(f"{source}:{number}: edge {tail!r} -> {head!r} is a self-loop")
        edges.setdefault((s, d))

    for number, raw in enumerate(lines, start=1):
        line = raw.strip()
        if line.endswith(";"):
            line = line[:-1].rstrip()
        if not line or line.startswith(("//", "#")) or line == "}":
            continue
        if line[0] == '"' and line[-1] == '"' and "\\" not in line:
            # Fast path for the reference's own lines, '"a"->"b"' and '"a"': without backslashes a
            # quoted ID holds no '"', so splitting on quotes is exact.
            parts = line.split('"')
            if len(parts) == 5 and parts[2].strip() == "->":
                add_edge(parts[1], parts[3], number)
                continue
            if len(parts) == 3:
                index.setdefault(parts[1], len(index))
                continue
        chain = _edge_chain(line)
        if chain is not None:
            for tail, head in pairwise(chain):
                add_edge(_unquote(tail), _unquote(head), number)
            continue
        header = _HEADER_LINE.fullmatch(line)
        if header is not None:
            if header.group(1) is not None:
                graph_name = _unquote(header.group(1))
            continue
        if _SETTING_LINE.fullmatch(line):
            continue
        node = _NODE_LINE.fullmatch(line)
        if node is not None and node.group(1).lower() not in _KEYWORDS:
            index.setdefault(_unquote(node.group(1)), len(index))
            continue
        raise InvalidGraphError(
            f'{source}:{number}: cannot read {raw.strip()!r}; expected an edge "a" -> "b", an op "a",'
            " or a 'digraph {' / '}' line"
        )
    src = [s for s, _ in edges]
    dst = [d for _, d in edges]
    return _Dot(graph_name, list(index), src, dst)


def _edge_chain(line: str) -> list[str] | None:
    """The IDs of an edge statement ``a -> b [-> c ...] [attributes] [;]``, or None."""
    first = _FIRST_ID.match(line)
    if first is None:
        return None
    chain = [first.group(0)]
    position = first.end()
    while (step := _NEXT_ID.match(line, position)) is not None:
        chain.append(step.group(1))
        position = step.end()
    if len(chain) < 2 or _EDGE_TAIL.fullmatch(line, position) is None:
        return None
    return chain


def _unquote(identifier: str) -> str:
    if not identifier.startswith('"'):
        return identifier
    text = identifier[1:-1]
    return _ESCAPE.sub(r"\1", text) if "\\" in text else text


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
        v = index.get(op_name)
        if v is None:
            if strict:
                raise InvalidGraphError(f"{source}:{number}: unknown op {op_name!r} (not in {graph_source})")
            skipped.append(op_name)
            continue
        if v in line_of:
            raise InvalidGraphError(f"{source}:{number}: op {op_name!r} listed twice (first on line {line_of[v]})")
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
        v = index.get(op_name)
        if v is None:
            if strict:
                raise InvalidGraphError(f"{source}:{number}: unknown op {op_name!r} (not in {graph_source})")
            skipped.append(op_name)
            continue
        if v in line_of:
            raise InvalidGraphError(f"{source}:{number}: op {op_name!r} listed twice (first on line {line_of[v]})")
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


# ---------------------------------------------------------------------------------------- writing
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
    quoted = [_quote(op_name) for op_name in graph.names]
    dot = [f"digraph {_quote(graph.name)} {{\n", *(f"{q}\n" for q in quoted)]
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


def _quote(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


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
