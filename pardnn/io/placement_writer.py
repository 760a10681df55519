"""Writing placement files (the formats are :mod:`pardnn.io.placement`'s, which reads them).

:func:`write_placement` and :func:`format_placement` list ops in graph order; TensorFlow-style names go
through one compiled pass over the joined names, others line by line. A name the text form could not
hold is refused, pointing to JSON.
"""

from __future__ import annotations

import operator
import os
import re
from collections.abc import Sequence
from json.encoder import encode_basestring_ascii
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
from numba import njit

from pardnn.costs.graph import CostGraph
from pardnn.emulation.checks import check_order
from pardnn.errors import InvalidPlacementError

__all__ = ["COMMENT", "format_placement", "write_placement"]

PathLike = str | os.PathLike[str]

_FORMATS = ("text", "json")
COMMENT = re.compile(r"(?:^|\s)#")  # starts a comment in a text placement file
_TF_NAME = re.compile(r"[A-Za-z0-9_.\-/>:]+")  # always writable: no whitespace, no '#'
_TF_BYTES = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.-/>:"  # _TF_NAME's characters


def write_placement(path: PathLike, graph: CostGraph, placement: npt.ArrayLike, format: str | None = None, *,
                    order: npt.ArrayLike | None = None) -> None:
    """Write ``placement`` of ``graph`` to ``path``.

    Parameters
    ----------
    path:
        Destination file.
    graph:
        The graph placed.
    placement:
        Device index of every op, in graph order (integers >= 0).
    format:
        ``"text"`` or ``"json"``; default: JSON for a ``.json`` file name, text otherwise.
    order:
        Each op's position in its device's run order (:attr:`pardnn.placement.result.Result.order`), written as
        a third column (JSON: ``[device, position]``); ``None`` writes a plain placement.

    Raises
    ------
    InvalidPlacementError
        The placement does not fit the graph, or (text) an op name cannot be written as a line.
    ValueError
        Unknown ``format``.

    Notes
    -----
    Deterministic: ops in graph order, one per line, ``\\n`` line endings, ASCII-escaped JSON.
    """
    path = Path(path)
    if format is None:
        format = "json" if path.suffix.lower() == ".json" else "text"
    contents = _placement_contents(graph, placement, format, order)
    path.write_bytes(contents.encode("utf-8") if isinstance(contents, str) else contents)


def format_placement(graph: CostGraph, placement: npt.ArrayLike, format: str = "text", *,
                     order: npt.ArrayLike | None = None) -> str:
    """The contents :func:`write_placement` writes, as a string (``format`` is ``"text"`` or ``"json"``)."""
    contents = _placement_contents(graph, placement, format, order)
    return contents if isinstance(contents, str) else str(contents, "ascii")


def _placement_contents(graph: CostGraph, placement: npt.ArrayLike, format: str,
                        order: npt.ArrayLike | None) -> str | memoryview:
    """The file's text, or its ASCII bytes when the compiled writer wrote them."""
    if format not in _FORMATS:
        raise ValueError(f"format must be one of {', '.join(_FORMATS)}, got {format!r}")
    checked = _checked_placement(graph, placement)
    positions = None if order is None else check_order(graph, checked, order, "the order")
    if format == "text" and graph.n:  # the usual case, TensorFlow names: one compiled pass
        joined = np.frombuffer(graph.joined_names.encode("utf-8", "surrogatepass"), np.uint8)
        lines = _text_lines(joined, _TF_TABLE, checked,
                            _NO_POSITIONS if positions is None else positions.astype(np.int64))
        if lines is not None:
            return lines.data
    devices = checked.tolist()
    values: list[Any] = devices if positions is None else positions.tolist()
    if format == "json":
        if not devices:
            return "{}\n"
        if order is not None:
            values = [f"[{d}, {p}]" for d, p in zip(devices, values, strict=True)]
        body = ",\n".join(
            f" {encode_basestring_ascii(op_name)}: {value}"
            for op_name, value in zip(graph.names, values, strict=True)
        )
        return f"{{\n{body}\n}}\n"
    for op_name in graph.names:
        if not _TF_NAME.fullmatch(op_name) and not _writable_as_text(op_name):
            raise InvalidPlacementError(
                f"op name {op_name!r} cannot be written to a text placement file (line break, surrounding"
                " whitespace or '#' comment marker); write a .json placement instead"
            )
    if order is not None and any(len(op_name.split()) != 1 for op_name in graph.names):
        raise InvalidPlacementError("an op name with whitespace cannot be written to an ordered text placement "
                                    "file; write a .json placement instead")
    return _lines(graph.names, devices, None if order is None else values)


_NO_POSITIONS = np.zeros(0, np.int64)


_TF_TABLE = np.zeros(256, np.bool_)
_TF_TABLE[np.frombuffer(_TF_BYTES, np.uint8)] = True


@njit(cache=True, nogil=True)
def _text_lines(joined: np.ndarray, allowed: np.ndarray, devices: np.ndarray,
                positions: np.ndarray) -> np.ndarray | None:
    """``name device\\n`` (or ``name device position\\n``) lines, the bytes :func:`_lines` gives, from
    the names joined by NUL (UTF-8) and each op's device (and position) in one pass; ``None`` unless
    every name is non-empty and made of ``allowed`` bytes only (:data:`_TF_NAME`'s) and every number
    is >= 0 (the caller checked them: this only keeps the kernel's writes inside its buffer)."""
    ordered = positions.size > 0
    if devices.size == 0 or devices.min() < 0 or (ordered and positions.min() < 0):
        return None
    out = np.empty(joined.size + 1 + devices.size * (42 if ordered else 21), np.uint8)
    at = 0
    v = 0
    size = 0  # of the current name
    for b in joined:
        if b != 0:
            if not allowed[b]:
                return None
            out[at] = b
            at += 1
            size += 1
            continue
        if size == 0 or v + 1 >= devices.size:
            return None
        at = _line_end(out, at, devices[v], positions[v] if ordered else -1)
        v += 1
        size = 0
    if size == 0 or v + 1 != devices.size:
        return None
    at = _line_end(out, at, devices[v], positions[v] if ordered else -1)
    return out[:at]


@njit(cache=True, nogil=True, inline="always")
def _line_end(out: np.ndarray, at: int, device: int, position: int) -> int:
    # `` device\\n`` (or `` device position\\n``, position >= 0) at ``out[at]``; returns the next line's start.
    at = _decimal(out, at, device)
    if position >= 0:
        at = _decimal(out, at, position)
    out[at] = 10
    return at + 1


@njit(cache=True, nogil=True)
def _decimal(out: np.ndarray, at: int, value: int) -> int:
    # A space, then the digits of ``value`` (>= 0), at ``out[at]``; returns the index after them.
    out[at] = 32
    end = at + 2
    rest = value // 10
    while rest > 0:
        end += 1
        rest //= 10
    i = end - 1
    while True:
        out[i] = 48 + value % 10
        value //= 10
        i -= 1
        if value == 0:
            return end


def _lines(names: Sequence[str], devices: list[int], positions: list[int] | None) -> str:
    """``name device`` (or ``name device position``) lines: string additions, twice as fast as a format per line."""
    ends = {d: f" {d}\n" if positions is None else f" {d} " for d in set(devices)}  # not a range: 2**62 is legal
    heads = map(operator.add, names, map(ends.__getitem__, devices))
    return "".join(heads if positions is None else map(operator.add, heads, map("{}\n".format, positions)))


def _checked_placement(graph: CostGraph, placement: npt.ArrayLike) -> np.ndarray:
    array = np.asarray(placement)
    if array.shape != (graph.n,):
        raise InvalidPlacementError(f"placement has shape {array.shape}; expected ({graph.n},), one device per op")
    if array.size and array.dtype.kind not in "iu":
        raise InvalidPlacementError(f"placement has dtype {array.dtype}; expected integer device indices")
    array = array.astype(np.int64)
    if array.size and array.min() < 0:
        v = int(np.flatnonzero(array < 0)[0])
        raise InvalidPlacementError(f"op {graph.names[v]!r}: device {int(array[v])} out of range; expected >= 0")
    return array


def _writable_as_text(op_name: str) -> bool:
    return op_name == op_name.strip() and len(op_name.splitlines()) == 1 and COMMENT.search(op_name) is None
