"""File formats: the native JSON graph, placement files, and the reference-ParDNN file set.

``read_any_graph`` is the one entry for "a graph file given on the command line": it reads the
native format and tells the user how to convert anything else.
"""

from __future__ import annotations

from pathlib import Path

from pardnn.errors import InvalidGraphError
from pardnn.graph import CostGraph
from pardnn.io.native import PathLike, graph_from_dict, graph_to_dict, read_graph, write_graph
from pardnn.io.placement import (
    format_placement,
    parse_placement_lines,
    read_ordered_placement,
    read_placement,
    write_placement,
)
from pardnn.io.reference import read_reference, write_reference

__all__ = [
    "format_placement",
    "graph_from_dict",
    "graph_to_dict",
    "parse_placement_lines",
    "read_any_graph",
    "read_graph",
    "read_ordered_placement",
    "read_placement",
    "read_reference",
    "write_graph",
    "write_placement",
    "write_reference",
]

NATIVE_SUFFIXES = (".json", ".json.gz")


def read_any_graph(path: PathLike) -> CostGraph:
    """Read a graph file, choosing the reader by the file name.

    Parameters
    ----------
    path:
        A native graph file (``.json`` or ``.json.gz``).

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
    if name.endswith(NATIVE_SUFFIXES):
        return read_graph(path)
    hint = (
        "a reference-ParDNN DOT file is one file of a set (graph, timings, tensor sizes); convert the set"
        " with `pardnn convert`"
        if name.endswith((".dot", ".gv", ".txt"))
        else "convert other formats with `pardnn convert`"
    )
    raise InvalidGraphError(
        f"{path}: not a native graph file (expected a name ending in {' or '.join(NATIVE_SUFFIXES)}); {hint}"
    )
