"""File formats: the native graph (JSON, or the compact binary form), placement files, and the
reference-ParDNN file set.

``read_any_graph`` is the one entry for "a graph file given on the command line": it reads the
native format (``.json``, ``.json.gz`` or binary ``.pardnn``) and tells the user how to convert
anything else. ``read_graph`` and ``write_graph`` choose the JSON or the binary form by the name.

May import: :mod:`pardnn.costs`, :mod:`pardnn.emulation` (a placement's checks), :mod:`pardnn.errors`.
"""

from __future__ import annotations

from pathlib import Path

from pardnn.costs.graph import CostGraph
from pardnn.errors import InvalidGraphError
from pardnn.io import native
from pardnn.io.binary import BINARY_SUFFIX, is_binary_graph, read_binary_graph, write_binary_graph
from pardnn.io.native import PathLike, graph_from_dict, graph_to_dict
from pardnn.io.placement import (
    format_placement,
    parse_placement_lines,
    read_ordered_placement,
    read_placement,
    write_placement,
)
from pardnn.io.reference import read_reference, write_reference

__all__ = [
    "BINARY_SUFFIX",
    "GRAPH_SUFFIXES",
    "format_placement",
    "graph_from_dict",
    "graph_to_dict",
    "parse_placement_lines",
    "read_any_graph",
    "read_binary_graph",
    "read_graph",
    "read_ordered_placement",
    "read_placement",
    "read_reference",
    "write_binary_graph",
    "write_graph",
    "write_placement",
    "write_reference",
]

NATIVE_SUFFIXES = (".json", ".json.gz")
GRAPH_SUFFIXES = (*NATIVE_SUFFIXES, BINARY_SUFFIX)


def read_graph(path: PathLike) -> CostGraph:
    """Read a graph file: the binary form for a name ending in ``.pardnn``
    (:func:`~pardnn.io.binary.read_binary_graph`), JSON otherwise (:func:`pardnn.io.native.read_graph`)."""
    return read_binary_graph(path) if is_binary_graph(path) else native.read_graph(path)


def write_graph(graph: CostGraph, path: PathLike) -> None:
    """Write a graph file: the binary form for a name ending in ``.pardnn``
    (:func:`~pardnn.io.binary.write_binary_graph`), JSON otherwise (:func:`pardnn.io.native.write_graph`).

    A graph and a placement, written and read back:

    >>> import tempfile, pathlib
    >>> from pardnn import CostGraph
    >>> folder = pathlib.Path(tempfile.mkdtemp())
    >>> g = CostGraph(["a", "b"], [1.0, 2.0], [64, 0], src=[0], dst=[1], name="pair")
    >>> for name in ("pair.json", "pair.json.gz", "pair.pardnn"):
    ...     write_graph(g, folder / name)
    ...     assert read_graph(folder / name) == g
    >>> write_placement(folder / "placement.txt", g, [1, 0])
    >>> print((folder / "placement.txt").read_text(), end="")
    a 1
    b 0
    >>> read_placement(folder / "placement.txt", g, devices=2).tolist()
    [1, 0]
    """
    if is_binary_graph(path):
        write_binary_graph(graph, path)
    else:
        native.write_graph(graph, path)


def read_any_graph(path: PathLike) -> CostGraph:
    """Read a graph file, choosing the reader by the file name.

    Parameters
    ----------
    path:
        A native graph file (``.json``, ``.json.gz``, or the binary ``.pardnn``).

    Returns
    -------
    CostGraph

    Raises
    ------
    InvalidGraphError
        The name has another suffix (a reference-ParDNN ``.dot`` is one file of a set: convert the
        set with ``pardnn convert``), or the file is invalid (see :func:`read_graph`).
    """
    name = Path(path).name.lower()
    if name.endswith(GRAPH_SUFFIXES):
        return read_graph(path)
    hint = (
        "a reference-ParDNN DOT file is one file of a set (graph, timings, tensor sizes); convert the set"
        " with `pardnn convert`"
        if name.endswith((".dot", ".gv", ".txt"))
        else "convert other formats with `pardnn convert`"
    )
    raise InvalidGraphError(
        f"{path}: not a native graph file (expected a name ending in {', '.join(GRAPH_SUFFIXES)}); {hint}"
    )
