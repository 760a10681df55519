"""The native graph file: ``pardnn-graph`` JSON (``.json``, or gzip-compressed ``.json.gz``).

:func:`read_graph` and :func:`write_graph` (:func:`graph_from_dict`, :func:`graph_to_dict` for parsed
JSON); the format is docs/formats.md ("Native graph"), versions 1 and 2. msgspec decodes into
:mod:`pardnn.io.schema`'s records and the graph validates; errors name the file, node or edge, and field.
The writer is deterministic and round-trips exactly (docs/notes-partitioner.md).
"""

from __future__ import annotations

import gc
import gzip
import os
import zlib
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from json.encoder import encode_basestring_ascii
from operator import attrgetter
from pathlib import Path
from typing import Any

import msgspec
import numpy as np

from pardnn.costs import validation
from pardnn.costs.graph import KIND_NAMES, CostGraph
from pardnn.errors import InvalidGraphError
from pardnn.io import schema
from pardnn.io.files import read_bytes
from pardnn.io.schema import FORMAT, VERSION

__all__ = ["FORMAT", "VERSION", "graph_from_dict", "graph_to_dict", "read_graph", "write_graph"]

_GZIP_LEVEL = 6  # level 9 is several times slower for a few percent smaller files

PathLike = str | os.PathLike[str]


# ---------------------------------------------------------------------------------------- reading
def read_graph(path: PathLike) -> CostGraph:
    """Read a native graph file (``.json``; ``.json.gz`` is decompressed).

    Parameters
    ----------
    path:
        The file. A name ending in ``.gz`` is read as gzip.

    Returns
    -------
    CostGraph
        The graph; its name is the file's ``name`` field, else the file name without suffixes.

    Raises
    ------
    InvalidGraphError
        The file is missing or unreadable, is not JSON (line and column given), is not a
        ``pardnn-graph`` version 1 or 2 file, or a node or edge breaks a rule. The message starts with
        the file name and names the node or edge (index and name), the field, the value and what
        was expected.

    Examples
    --------
    >>> import json, tempfile, pathlib
    >>> path = pathlib.Path(tempfile.mkdtemp()) / "pair.json"
    >>> _ = path.write_text(json.dumps({"format": "pardnn-graph", "version": 1, "name": "pair",
    ...     "nodes": [{"name": "a", "comp_us": 3.0, "out_bytes": 64}, {"name": "b", "comp_us": 1.0, "out_bytes": 0}],
    ...     "edges": [{"src": "a", "dst": "b"}]}))
    >>> graph = read_graph(path)
    >>> graph.n, graph.m, graph.names
    (2, 1, ('a', 'b'))
    >>> _ = path.write_text('{"format": "pardnn-graph", "version": 1, "nodes": [{"name": "a", "comp_us": 1}]}')
    >>> read_graph(path)
    Traceback (most recent call last):
    ...
    pardnn.errors.InvalidGraphError: .../pair.json: node #0 'a': missing required field 'out_bytes'


    Notes
    -----
    O(|V| + |E| log |E|): one msgspec decode, one gathering pass per column, one validation per
    column (in the graph's construction); a broken file is looked into only along the error's path.
    """
    path = Path(path)
    source = str(path)
    raw = read_bytes(path, InvalidGraphError, "a graph file", source=source)
    if path.suffix.lower() == ".gz":
        try:
            raw = gzip.decompress(raw)
        except (OSError, EOFError, zlib.error) as exc:
            raise InvalidGraphError(f"{source}: not a valid gzip file ({exc})") from exc
    with _no_cyclic_gc():
        document = schema.decode(raw, source)
        del raw
        return _graph(document, source, _file_stem(path))


def graph_from_dict(data: Any, source: str = "<dict>", *, default_name: str = "graph") -> CostGraph:
    """Build a graph from the parsed JSON of a native graph file.

    Parameters
    ----------
    data:
        The decoded JSON document (a dict, as from :func:`json.load`).
    source:
        What to call the input in error messages (usually the file name).
    default_name:
        Graph name when the document has no ``name`` field.

    Returns
    -------
    CostGraph

    Raises
    ------
    InvalidGraphError
        Any rule of the format broken; see :func:`read_graph` (the same schema and messages).
    """
    return _graph(schema.convert(data, source), source, default_name)


class _Column(Sequence[Any]):
    """One field of every record, read on demand: iterating costs one C-level pass and no list."""

    def __init__(self, records: list[Any], field: str) -> None:
        self._records, self._get = records, attrgetter(field)

    def __len__(self) -> int:
        return len(self._records)

    def __getitem__(self, i: int) -> Any:  # type: ignore[override]
        return self._get(self._records[i])

    def __iter__(self) -> Iterator[Any]:
        return map(self._get, self._records)


def _graph(document: schema.Document, source: str, default_name: str) -> CostGraph:
    """The graph of a decoded document: columns gathered, the graph's construction checks them.

    Columns read once are left as :class:`_Column` (no list: a list of 330,000 strings costs two
    extra passes over scattered objects, ~30 ms each); ``comp_us`` is a float by the schema, so it
    goes straight into an array; byte counts may be whole floats, so the graph converts them.
    """
    nodes, edges = document.nodes, document.edges
    names = tuple(_Column(nodes, "name"))
    try:
        index = validation.name_index(names, typed=True)  # the schema made them strings
        src, dst = validation.edge_indices(index, _Column(edges, "src"), _Column(edges, "dst"))
        return CostGraph(
            names,
            np.fromiter(_Column(nodes, "comp_us"), np.float64, len(nodes)),
            list(_Column(nodes, "out_bytes")),
            src,
            dst,
            list(_Column(edges, "bytes")),
            kind=_Column(nodes, "kind"),
            colocation=list(_Column(nodes, "colocate")),
            ops=tuple(_Column(nodes, "op")),
            param_bytes=list(_Column(nodes, "param_bytes")),
            name=default_name if document.name is msgspec.UNSET else document.name,
            memory_limit_bytes=document.memory_limit_bytes,
            **(_copies(nodes, index) if document.version >= 2 else {}),
            _name_index=index,
        )
    except InvalidGraphError as exc:  # a rule of the graph: name the file too
        raise InvalidGraphError(f"{source}: {exc}") from exc


def _copies(nodes: list[schema.Node], index: dict[str, int]) -> dict[str, Any]:
    """The copy metadata of a version 2 document (``copy_of`` names resolved; the graph checks the rest)."""
    sources = []
    for k, node in enumerate(nodes):
        name = node.copy_of
        if name is not None and name not in index:
            raise InvalidGraphError(f"node #{k} {node.name!r}: copy_of = {name!r}; expected the name of an op of "
                                    "micro-batch 0 of this graph (not among its ops)")
        sources.append(None if name is None else index[name])
    return {"micro_batch": list(_Column(nodes, "micro_batch")), "copy_of": sources}


# ---------------------------------------------------------------------------------------- writing
def write_graph(graph: CostGraph, path: PathLike) -> None:
    """Write ``graph`` as a native graph file; a name ending in ``.gz`` is gzip-compressed.

    Parameters
    ----------
    graph:
        The graph to write.
    path:
        Destination (``.json`` or ``.json.gz``); parent directories must exist.

    Notes
    -----
    Deterministic: the same graph gives the same bytes (gzip header with mtime 0 and no file
    name). One node or edge per line; edges in the graph's edge order. O(|V| + |E|).
    """
    path = Path(path)
    data = _encode(graph).encode("ascii")
    if path.suffix.lower() == ".gz":
        data = gzip.compress(data, compresslevel=_GZIP_LEVEL, mtime=0)
    path.write_bytes(data)


def graph_to_dict(graph: CostGraph) -> dict[str, Any]:
    """The native-format document of ``graph`` as plain Python objects (what :func:`write_graph` writes).

    ``graph_from_dict(graph_to_dict(g)) == g``.
    """
    document: dict[str, Any] = {"format": FORMAT, "version": _version(graph), "name": graph.name}
    if graph.memory_limit_bytes is not None:
        document["memory_limit_bytes"] = graph.memory_limit_bytes
    document["nodes"] = [
        {
            "name": op_name,
            "op": op_type,
            "comp_us": comp,
            "out_bytes": out,
            "kind": KIND_NAMES[kind],
            "colocate": None if group < 0 else graph.group_names[group],
            **({"param_bytes": param} if param else {}),
        }
        for op_name, op_type, comp, out, param, kind, group in _node_rows(graph)
    ]
    for node, (batch, source) in zip(document["nodes"], _copy_rows(graph), strict=False):
        node["micro_batch"], node["copy_of"] = batch, source
    document["edges"] = [
        {"src": graph.names[s], "dst": graph.names[d], "bytes": nbytes} for s, d, nbytes in _edge_rows(graph)
    ]
    return document


def _node_rows(graph: CostGraph) -> Iterator[tuple[str, str, float, int, int, int, int]]:
    return zip(
        graph.names,
        graph.ops,
        graph.comp_us.tolist(),
        graph.out_bytes.tolist(),
        graph.param_bytes.tolist(),
        graph.kind.tolist(),
        graph.colocation.tolist(),
        strict=True,
    )


def _version(graph: CostGraph) -> int:
    """1 for a graph without copy metadata (its file stays what it always was), else 2."""
    return VERSION if graph.has_copies else 1


def _copy_rows(graph: CostGraph) -> list[tuple[int | None, str | None]]:
    """Each node's ``micro_batch`` and ``copy_of`` as written (null: none, itself); empty without metadata."""
    if graph.micro_batch is None or graph.copy_of is None:
        return []
    return [(None if batch < 0 else batch, None if source == v else graph.names[source])
            for v, (batch, source) in enumerate(zip(graph.micro_batch.tolist(), graph.copy_of.tolist(), strict=True))]


def _edge_rows(graph: CostGraph) -> Iterator[tuple[int, int, int]]:
    return zip(graph.edge_src.tolist(), graph.edge_dst.tolist(), graph.edge_bytes.tolist(), strict=True)


def _encode(graph: CostGraph) -> str:
    # Hand-assembled rather than json.dumps(indent=...) (pure Python, several times slower) so each
    # record sits on its own line; strings go through json's own C escaper.
    quoted_names = list(map(encode_basestring_ascii, graph.names))
    quoted_groups = list(map(encode_basestring_ascii, graph.group_names))
    header = f'{{"format": "{FORMAT}", "version": {_version(graph)}, "name": {encode_basestring_ascii(graph.name)}'
    if graph.memory_limit_bytes is not None:
        header += f', "memory_limit_bytes": {graph.memory_limit_bytes}'
    node_lines = [
        f'{{"name": {quoted}, "op": {encode_basestring_ascii(op_type)}, "comp_us": {comp!r}, "out_bytes": {out}, '
        f'"kind": "{KIND_NAMES[kind]}", "colocate": {"null" if group < 0 else quoted_groups[group]}'
        + (f', "param_bytes": {param}}}' if param else "}")
        for quoted, (_, op_type, comp, out, param, kind, group) in zip(quoted_names, _node_rows(graph), strict=True)
    ]
    if graph.has_copies:
        node_lines = [
            f'{line[:-1]}, "micro_batch": {"null" if batch is None else batch}, '
            f'"copy_of": {"null" if source is None else encode_basestring_ascii(source)}}}'
            for line, (batch, source) in zip(node_lines, _copy_rows(graph), strict=True)
        ]
    edge_lines = [
        f'{{"src": {quoted_names[s]}, "dst": {quoted_names[d]}, "bytes": {nbytes}}}'
        for s, d, nbytes in _edge_rows(graph)
    ]
    return f"{header},\n{_json_list('nodes', node_lines)},\n{_json_list('edges', edge_lines)}}}\n"


def _json_list(key: str, lines: list[str]) -> str:
    if not lines:
        return f' "{key}": []'
    body = ",\n  ".join(lines)
    return f' "{key}": [\n  {body}\n ]'


# ---------------------------------------------------------------------------------------- helpers
@contextmanager
def _no_cyclic_gc() -> Iterator[None]:
    # Parsing a large graph allocates ~10^6 dicts and lists, none of them garbage; the cyclic
    # collector would traverse them all again and again while the document is alive.
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def _file_stem(path: Path) -> str:
    name = path.name
    for suffix in (".gz", ".json"):
        if name.lower().endswith(suffix):
            name = name[: -len(suffix)]
    return name or path.name
