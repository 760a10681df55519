"""The DOT dialect of the reference-ParDNN graph file: an edge list, read and written.

:func:`parse_dot` reads ``"a" -> "b"`` lines (chains, attributes, bare IDs, lone ``"x"`` declarations;
``digraph`` and comment lines skipped) and names any other line as an error; a repeated edge is one
edge, a self-loop an error. :func:`quote` writes IDs quoted and escaped.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from itertools import pairwise
from typing import NamedTuple

from pardnn.errors import InvalidGraphError

__all__ = ["Dot", "parse_dot", "quote"]

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


class Dot(NamedTuple):
    name: str | None
    names: list[str]
    src: list[int]
    dst: list[int]


def parse_dot(lines: Iterable[str], source: str) -> Dot:
    """The graph name (if the header gives one), ops in order of first appearance, and edges."""
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
    return Dot(graph_name, list(index), src, dst)


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


def quote(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'
